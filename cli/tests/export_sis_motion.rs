//! `train export --format sis-motion` and the package as `evaluate run --adapter`: a tiny MOFNet
//! run (the reduced MOFNet fixture, the released connector width) exported, evaluated through
//! the package, and its bare LoRA refused without `--no-motion`.

mod common;

use serde_json::{Value, json};

use common::repo_root;

#[test]
fn an_exported_package_evaluates_and_a_bare_adapter_needs_no_motion() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let root = repo_root();
    let (train, evaluate) = (env!("CARGO_BIN_EXE_train"), env!("CARGO_BIN_EXE_evaluate"));
    let path = |p: &str| d.join(p).display().to_string();
    let mofnet = root.join("tests/fixtures/flow/mofnet/tiny/model.safetensors").display().to_string();

    common::output(
        train,
        &[
            "sft",
            "--config",
            "configs/sft/tiny.toml",
            "--motion",
            "mofnet",
            "--flow-weights",
            &mofnet,
            "--max-steps",
            "1",
            "--output-dir",
            &path("run"),
            "--logging.progress_bar",
            "false",
            "--motion.connector_hidden",
            "2048",
            "--motion.connector_init",
            "\"truncated-normal\"",
            "--motion.pseudo_images.pipeline",
            "\"official\"",
        ],
        &root,
    );
    let (_, said) = common::output(train, &["export", "--format", "sis-motion", &path("run"), "--out", &path("package")], &root);
    assert!(said.contains("connector hidden 2048") && said.contains("safetensors conversion"), "{said}");
    for file in ["adapter_config.json", "adapter_model.safetensors", "connector_weights.pt", "sis_motion_config.json", "MOF_kitti.pth"] {
        assert!(d.join("package").join(file).is_file(), "the package lacks {file}");
    }
    let clip = root.join("tests/data/tiny-sft/right-red.mp4");
    let row = json!({"question_id": "q1", "task_type": "Action Recognition", "video_path": clip, "question": "In which direction does the red square move?",
                     "options": {"A": "left", "B": "right", "C": "up", "D": "down"}, "answer": "B"});
    std::fs::write(d.join("sis.jsonl"), format!("{row}\n")).expect("manifest");
    let evaluate_with = |out: &str, adapter: &str, extra: &[&str]| -> Vec<String> {
        let (base, adapter, manifest) = (path("run/base-model"), path(adapter), path("sis.jsonl"));
        let mut args = vec![
            "run",
            "--out",
            out,
            "--checkpoint",
            &base,
            "--adapter",
            &adapter,
            "--manifest",
            &manifest,
            "--bench",
            "sisbench",
            "--protocol",
            "paper",
            "--answer",
            "likelihood",
        ];
        args.extend(["--max-frames", "4", "--min-pixels", "3136", "--max-pixels", "3136", "--quiet"]);
        args.extend(extra);
        args.into_iter().map(str::to_owned).collect()
    };
    let record =
        |out: &str| -> Value { serde_json::from_str(&std::fs::read_to_string(d.join(out).join("run.json")).expect("run.json")).expect("JSON") };
    let run_ok = |args: Vec<String>| common::output(evaluate, &args.iter().map(String::as_str).collect::<Vec<_>>(), &root);
    let run_failing = |args: Vec<String>| common::failure(evaluate, &args.iter().map(String::as_str).collect::<Vec<_>>(), &root);

    run_ok(evaluate_with(&path("eval-package"), "package", &[]));
    let connector_digest = motionvl_data::digest::sha256_file(&d.join("package/connector_weights.pt")).expect("digest");
    assert_eq!(record("eval-package")["weights"]["motion"].as_str(), Some(connector_digest.as_str()), "the package's connector is recorded");

    std::fs::create_dir_all(d.join("bare")).expect("bare adapter");
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(d.join("package").join(file), d.join("bare").join(file)).expect("copy");
    }
    let refused = run_failing(evaluate_with(&path("eval-bare"), "bare", &[]));
    assert!(refused.contains("no motion branch") && refused.contains("--no-motion"), "{refused}");
    run_ok(evaluate_with(&path("eval-bare"), "bare", &["--no-motion"]));
    assert!(record("eval-bare")["weights"].get("motion").is_none(), "evaluated visual-only");
}
