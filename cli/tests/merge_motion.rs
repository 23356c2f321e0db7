//! `train merge` of a motion-aware run: the connector cannot be folded into the language
//! model, so it travels beside the merged weights. The merged folder must answer exactly as the
//! base model with the adapter and the run's connector do.
//!
//! The run is the committed tiny recipe (`configs/sft/tiny.toml`, its eight 64×64 clips) with
//! `--motion dis` for 3 steps; the answers are compared as `evaluate run --answer likelihood`'s
//! per-option log-likelihoods, which are sums of the model's log-softmaxed logits over each
//! option's tokens, computed through the motion branch.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use common::repo_root;

/// Runs a binary from the repository root (the tiny recipe's paths are relative to it).
fn run(bin: &str, args: &[&str]) -> String {
    common::output(bin, args, &repo_root()).0
}

/// Each question's option scores from a run's predictions.
fn option_scores(run_dir: &Path) -> BTreeMap<String, BTreeMap<String, f64>> {
    let text = std::fs::read_to_string(run_dir.join("predictions.jsonl")).expect("predictions");
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a JSON line");
            let scores = serde_json::from_value(v["option_scores"].clone()).unwrap_or_else(|e| panic!("option_scores in {l}: {e}"));
            (v["question_id"].as_str().expect("question_id").to_string(), scores)
        })
        .collect()
}

fn max_difference(a: &BTreeMap<String, BTreeMap<String, f64>>, b: &BTreeMap<String, BTreeMap<String, f64>>) -> f64 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "the same questions");
    a.iter().flat_map(|(id, scores)| scores.iter().map(move |(letter, s)| (s - b[id][letter]).abs())).fold(0.0, f64::max)
}

#[test]
fn a_merged_motion_run_answers_as_its_adapter_and_connector_do() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let (train, evaluate) = (env!("CARGO_BIN_EXE_train"), env!("CARGO_BIN_EXE_evaluate"));
    let path = |p: &str| d.join(p).display().to_string();

    run(
        train,
        &[
            "sft",
            "--config",
            "configs/sft/tiny.toml",
            "--motion",
            "dis",
            "--max-steps",
            "3",
            "--output-dir",
            &path("run"),
            "--logging.progress_bar",
            "false",
        ],
    );
    // 1 MiB shards: the tiny model's 1.9 MB of weights are written in the sharded hub layout.
    run(train, &["merge", "--base", &path("run/base-model"), "--adapter", &path("run/checkpoint-3"), "--out", &path("merged"), "--shard-mib", "1"]);
    for file in ["motion.json", "motion.safetensors", "model.safetensors.index.json", "tokenizer.json"] {
        assert!(d.join("merged").join(file).is_file(), "the merged folder lacks {file}");
    }
    let connector = |dir: &str| std::fs::read(d.join(dir).join("motion.safetensors")).expect("connector");
    assert_eq!(connector("merged"), connector("run/checkpoint-3"), "the run's connector, byte for byte");

    let clips = repo_root().join("tests/data/tiny-sft");
    let options = json!({"A": "left", "B": "right", "C": "up", "D": "down"});
    let rows: String = [("q1", "right-red", "red", "B"), ("q2", "up-blue", "blue", "C"), ("q3", "left-blue", "blue", "A")]
        .iter()
        .map(|(id, clip, colour, answer)| {
            let row = json!({"question_id": id, "task_type": "Action Recognition", "video_path": clips.join(format!("{clip}.mp4")),
                             "question": format!("In which direction does the {colour} square move?"), "options": options, "answer": answer});
            format!("{row}\n")
        })
        .collect();
    std::fs::write(d.join("sis.jsonl"), rows).expect("manifest");
    // The recipe's frames: 4 of 56×56.
    let protocol = [
        "--manifest",
        &path("sis.jsonl"),
        "--bench",
        "sisbench",
        "--protocol",
        "paper",
        "--answer",
        "likelihood",
        "--max-frames",
        "4",
        "--min-pixels",
        "3136",
        "--max-pixels",
        "3136",
        "--quiet",
    ];
    let evaluate_with = |out: &str, model: &[&str]| {
        let mut args = vec!["run", "--out", out];
        args.extend(model);
        args.extend(protocol);
        run(evaluate, &args);
        option_scores(Path::new(out))
    };
    let adapter = evaluate_with(&path("eval-adapter"), &["--checkpoint", &path("run/base-model"), "--adapter", &path("run/checkpoint-3")]);
    let merged = evaluate_with(&path("eval-merged"), &["--checkpoint", &path("merged")]);
    let without_motion = evaluate_with(&path("eval-merged-no-motion"), &["--checkpoint", &path("merged"), "--motion", "none", "--force-motion"]);

    // Both found the connector (run.json records its digest) ...
    for run_dir in ["eval-adapter", "eval-merged"] {
        let record: Value = serde_json::from_str(&std::fs::read_to_string(d.join(run_dir).join("run.json")).expect("run.json")).expect("JSON");
        assert!(record["weights"]["motion"].is_string(), "{run_dir} ran without the motion branch: {record}");
    }
    // ... and agree to f32 rounding (W + s·BA folded once, against x·W + s·(x·A)·B): measured
    // 2.6e-6 nats at most, on sums of -11 to -26. Dropping the motion branch moves the same
    // scores by 1.3e-3 (3 steps have barely trained the connector), over ten times the bound, so
    // the agreement is not blind to the connector.
    const TOLERANCE: f64 = 2e-5;
    let merged_gap = max_difference(&adapter, &merged);
    let motion_gap = max_difference(&merged, &without_motion);
    assert!(merged_gap < TOLERANCE, "merged and unmerged scores differ by {merged_gap}: {adapter:?} vs {merged:?}");
    assert!(motion_gap > 10.0 * TOLERANCE, "the connector moves the scores by only {motion_gap}; the comparison cannot see it");
}
