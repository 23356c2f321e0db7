//! The `evaluate` binary's wiring: flags reach the library, errors reach the user.

use std::path::Path;
use std::process::Command;

use serde_json::json;

fn evaluate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_evaluate")).args(args).output().expect("evaluate runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn write(path: &Path, rows: &[serde_json::Value]) {
    std::fs::write(path, rows.iter().map(|r| format!("{r}\n")).collect::<String>()).expect("write");
}

#[test]
fn score_detects_the_benchmark_and_compare_reads_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.jsonl");
    let row = |id: &str, answer: &str| {
        json!({"question_id": id, "task_type": "Path Planning", "video_path": "absent.mp4", "question": "Which path?",
               "options": {"A": "left", "B": "right", "C": "up", "D": "down"}, "answer": answer})
    };
    write(&manifest, &[row("a", "A"), row("b", "B")]);
    let predictions = dir.path().join("p.jsonl");
    write(&predictions, &[json!({"question_id": "a", "prediction": "A"}), json!({"question_id": "b", "prediction": "up"})]);
    let out = dir.path().join("scored");
    let (ok, stdout, stderr) = evaluate(&[
        "score",
        "--predictions",
        predictions.to_str().expect("utf-8"),
        "--manifest",
        manifest.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("| p | 50.0 | 50.0 |"), "Table 2 row printed:\n{stdout}");
    let results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).expect("results.json")).expect("json");
    assert_eq!(results["benchmark"], "sisbench", "detected from the rows");

    let out_str = out.to_str().expect("utf-8");
    let (ok, stdout, stderr) = evaluate(&["compare", out_str, out_str]);
    assert!(ok, "{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("overall") && l.trim_end().ends_with("+0.0")), "{stdout}");
}

#[test]
fn run_without_an_output_folder_says_which_flag_is_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.jsonl");
    std::fs::write(&manifest, "").expect("write");
    let (ok, _, stderr) = evaluate(&["run", "--bench", "sisbench", "--checkpoint", "x", "--manifest", manifest.to_str().expect("utf-8")]);
    assert!(!ok);
    assert!(stderr.contains("--out"), "{stderr}");
    let (ok, stdout, _) = evaluate(&["benches"]);
    assert!(ok && stdout.contains("sisbench") && stdout.contains("nav"), "{stdout}");
}

#[test]
fn score_with_the_official_extraction_writes_uav_accuracy_and_run_refuses_an_unknown_protocol() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("m.jsonl");
    let row = |id: &str, task: &str, split: &str, answer: &str| {
        json!({"question_id": id, "task_type": task, "split": split, "video_path": "absent.mp4", "question": "Which path?",
               "options": {"A": "left", "B": "right", "C": "up", "D": "down"}, "answer": answer})
    };
    write(&manifest, &[row("a", "Path Planning", "val", "A"), row("b", "Action Recognition", "val", "B"), row("c", "Path Planning", "test", "C")]);
    let predictions = dir.path().join("p.jsonl");
    // "A drone …" is A to the official cascade and no answer to motionvl's extractor.
    write(
        &predictions,
        &[
            json!({"question_id": "a", "prediction": "A drone flies left"}),
            json!({"question_id": "b", "prediction": "答案是B"}),
            json!({"question_id": "c", "prediction": "It goes up, so D"}),
        ],
    );
    let out = dir.path().join("official");
    let (ok, _, stderr) = evaluate(&[
        "score",
        "--extract",
        "official",
        "--predictions",
        predictions.to_str().expect("utf-8"),
        "--manifest",
        manifest.to_str().expect("utf-8"),
        "--out",
        out.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{stderr}");
    let acc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("uav_accuracy.json")).expect("uav_accuracy.json")).expect("json");
    assert_eq!(acc["overall"], json!({"correct": 2, "total": 3, "accuracy": 100.0 * 2.0 / 3.0}));
    assert_eq!(acc["per_category"]["Path Planning"], json!({"correct": 1, "total": 2, "accuracy": 50.0}));
    assert_eq!(acc["per_split"]["val"], json!({"correct": 2, "total": 2, "accuracy": 100.0}));

    let (ok, _, stderr) =
        evaluate(&["run", "--protocol", "vllm", "--bench", "sisbench", "--checkpoint", "x", "--manifest", manifest.to_str().expect("utf-8")]);
    assert!(!ok && stderr.contains("--protocol vllm is not known"), "{stderr}");
}
