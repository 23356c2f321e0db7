//! The run-directory contract under the mistakes users make: two writers, a restart without
//! `--resume`, a resume from another run, an adapter of another shape, a merge with the wrong
//! adapter, damaged media.

use std::path::{Path, PathBuf};

use motionvl_models::CheckpointFiles;
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{Start, Trainer};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn tiny(out: &Path, extra: &[(&str, &str)]) -> Recipe {
    let root = repo_root();
    let quoted = |p: &Path| format!("{:?}", p.display().to_string());
    let mut overrides: Vec<(String, String)> = vec![
        ("output_dir".into(), quoted(out)),
        ("model.init_config".into(), quoted(&root.join("configs/models/tiny.json"))),
        ("data.train".into(), quoted(&root.join("tests/data/tiny-sft/train.jsonl"))),
        ("logging.progress_bar".into(), "false".into()),
        ("optim.max_steps".into(), "2".into()),
        ("checkpoint.every".into(), "1".into()),
    ];
    overrides.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Recipe::load(&root.join("configs/sft/tiny.toml"), &overrides).expect("tiny recipe loads")
}

fn err_text<T>(r: Result<T, motionvl_train::sft::TrainError>) -> String {
    r.err().map(|e| e.to_string()).unwrap_or_default()
}

#[test]
fn a_second_writer_is_refused_naming_the_lock_holder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let first = Trainer::new(&tiny(dir.path(), &[]), None).expect("first writer");
    let err = err_text(Trainer::new(&tiny(dir.path(), &[]), Some("auto")));
    assert!(err.contains(&format!("PID {}", std::process::id())) && err.contains(".lock"), "{err}");
    drop(first);
    assert!(Trainer::new(&tiny(dir.path(), &[]), Some("auto")).is_ok(), "the lock goes with its holder");

    // Another process: the train binary on the same folder while this one holds it.
    let holder = Trainer::new(&tiny(dir.path(), &[]), Some("auto")).expect("holder");
    let config = dir.path().join("recipe.toml");
    std::fs::write(&config, tiny(dir.path(), &[]).to_toml()).expect("recipe");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_train")).args(["sft", "--config"]).arg(&config).arg("--resume").output().expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("being written by another process") && stderr.contains(&format!("PID {}", std::process::id())), "{stderr}");
    drop(holder);
}

#[test]
fn restarting_without_resume_is_refused_and_overwrite_starts_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut killed = Trainer::new(&tiny(dir.path(), &[]), None).expect("setup");
    killed.train_step().expect("a step");
    drop(killed);
    let err = err_text(Trainer::new(&tiny(dir.path(), &[]), None));
    assert!(err.contains("already holds a run") && err.contains("--resume auto") && err.contains("--overwrite"), "{err}");

    let logs = Trainer::start(&tiny(dir.path(), &[]), Start::Overwrite).expect("overwrite").run().expect("trains");
    assert_eq!(logs.len(), 2);
    let log = std::fs::read_to_string(dir.path().join("trainer_log.jsonl")).expect("log");
    assert_eq!(log.lines().count(), 2, "the old run's lines are gone: {log}");
}

#[test]
fn resume_auto_without_a_checkpoint_starts_fresh_and_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Killed before its first checkpoint: a step logged, nothing saved.
    let mut killed = Trainer::new(&tiny(dir.path(), &[("checkpoint.every", "10")]), None).expect("setup");
    killed.train_step().expect("a step");
    drop(killed);
    let trainer = Trainer::new(&tiny(dir.path(), &[("checkpoint.every", "10")]), Some("auto")).expect("starts fresh");
    assert!(trainer.note().is_some_and(|n| n.contains("no complete checkpoint")), "{:?}", trainer.note());
    assert_eq!(trainer.run().expect("trains").len(), 2);
    let log = std::fs::read_to_string(dir.path().join("trainer_log.jsonl")).expect("log");
    assert_eq!(log.lines().count(), 2, "{log}");
}

#[test]
fn another_runs_checkpoint_is_refused() {
    let (a, b) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    Trainer::new(&tiny(a.path(), &[("optim.lr", "0.02")]), None).expect("run a").run().expect("a trains");
    let checkpoint = a.path().join("checkpoint-2");
    let err = err_text(Trainer::new(&tiny(b.path(), &[]), Some(&checkpoint.display().to_string())));
    assert!(err.contains("another recipe") && err.contains("optim.lr"), "{err}");
}

#[test]
fn an_adapter_of_another_shape_names_tensor_and_file_and_merge_blames_the_adapter() {
    let (dir, other) = (tempfile::tempdir().expect("tempdir"), tempfile::tempdir().expect("tempdir"));
    Trainer::new(&tiny(dir.path(), &[]), None).expect("run").run().expect("trains");
    Trainer::new(&tiny(other.path(), &[("lora.rank", "4")]), None).expect("run").run().expect("trains");
    // The rank-4 adapter put where the rank-8 run keeps its own.
    let adapter = dir.path().join("checkpoint-2/adapter/adapter_model.safetensors");
    std::fs::copy(other.path().join("checkpoint-2/adapter/adapter_model.safetensors"), &adapter).expect("swap");
    let err = err_text(Trainer::new(&tiny(dir.path(), &[("optim.max_steps", "3")]), Some("auto")));
    assert!(err.contains("adapter_model.safetensors") && err.contains("lora_A") && err.contains("[4,") && err.contains("[8,"), "{err}");

    // A merge of an adapter trained on another model says the adapter is the wrong side.
    let wide = tempfile::tempdir().expect("tempdir");
    let config = wide.path().join("wide.json");
    let json = std::fs::read_to_string(repo_root().join("configs/models/tiny.json")).expect("config").replace("\"intermediate_size\": 192", "\"intermediate_size\": 256");
    std::fs::write(&config, json).expect("wide config");
    let run = wide.path().join("run");
    Trainer::new(&tiny(&run, &[("model.init_config", &format!("{:?}", config.display().to_string()))]), None).expect("wide run").run().expect("trains");
    let base = CheckpointFiles::from_dir(&other.path().join("base-model")).expect("base");
    let err = motionvl_train::merge::merge(&base, &run.join("checkpoint-2/adapter"), &wide.path().join("merged"), 1 << 30).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("the adapter does not fit the base model") && err.contains("trained on another model"), "{err}");
}
