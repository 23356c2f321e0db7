//! What the binaries' end-to-end tests share: running a binary, the tiny SFT recipe, and a tiny
//! Qwen2.5-VL-shaped checkpoint to evaluate with.

// Each test binary compiles this module and uses only part of it (re-exports included).
#![allow(dead_code, unused_imports)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The training tests' helpers: the repository root and the tiny SFT recipe.
#[path = "../../../train/tests/common/mod.rs"]
mod train_common;
pub use train_common::{repo_root, tiny};

fn run(bin: &str, args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(bin).args(args).current_dir(dir).env("RUST_BACKTRACE", "0").output().unwrap_or_else(|e| panic!("running {bin}: {e}"));
    (out.status.success(), String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string())
}

/// Runs `bin` in `dir`; panics with its output unless it succeeds; returns its stdout and its
/// stderr (where the training binaries report).
pub fn output(bin: &str, args: &[&str], dir: &Path) -> (String, String) {
    let (ok, stdout, stderr) = run(bin, args, dir);
    assert!(ok, "{bin} {args:?} failed:\n{stdout}{stderr}");
    (stdout, stderr)
}

/// Runs `bin` in `dir`, expecting it to fail; returns what it printed.
pub fn failure(bin: &str, args: &[&str], dir: &Path) -> String {
    let (ok, stdout, stderr) = run(bin, args, dir);
    let text = format!("{stdout}{stderr}");
    assert!(!ok, "{bin} {args:?} succeeded:\n{text}");
    text
}

/// The evaluator's test helpers: its tiny checkpoint and clips serve these tests too.
#[path = "../../../eval/tests/common/mod.rs"]
mod eval_common;

/// A tiny Qwen2.5-VL-shaped checkpoint in `dir/tiny-model` with random weights and a byte-level
/// tokenizer trained on `corpus` (the config's token ids come from it).
pub fn tiny_qwen(dir: &Path, corpus: &[&str]) -> PathBuf {
    let corpus: Vec<String> = corpus.iter().map(|s| s.to_string()).collect();
    eval_common::tiny_checkpoint(dir, &corpus, 320, 11)
}

/// The official SIS-Motion dumps (`tests/fixtures/sis_motion/<name>/`, made by
/// `tools/fixtures/sis_motion.py`): each holds `base/`, `package/`, `SIS-Bench/` and the official
/// evaluation's `expected/`, `predictions.jsonl` and `uav_accuracy.json`.
pub fn sis_motion_dumps() -> Vec<PathBuf> {
    let family = repo_root().join("tests/fixtures/sis_motion");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&family)
        .unwrap_or_else(|e| panic!("{}: {e}", family.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("package").is_dir())
        .collect();
    dirs.sort();
    assert!(!dirs.is_empty(), "no dump under {}", family.display());
    dirs
}

pub fn jsonl(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).collect()
}

pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `evaluate run` of `adapter` on a dump's base and SIS-Bench as the official evaluation ran
/// (`--protocol official`, f32 on the CPU, 16 new tokens), from the dump folder, into `out`.
pub fn evaluate_official(dump: &Path, adapter: &Path, out: &Path) {
    let arg = |p: &Path| p.display().to_string();
    output(
        env!("CARGO_BIN_EXE_evaluate"),
        &[
            "run",
            "--checkpoint",
            &arg(&dump.join("base")),
            "--adapter",
            &arg(adapter),
            "--manifest",
            &arg(&dump.join("SIS-Bench/SIS-Bench.jsonl")),
            "--bench",
            "sisbench",
            "--protocol",
            "official",
            "--device",
            "cpu",
            "--dtype",
            "f32",
            "--max-new-tokens",
            "16",
            "--out",
            &arg(out),
            "--quiet",
        ],
        dump,
    );
}

/// The official run's generated ids, by question id (`expected/<id>.safetensors`).
pub fn official_output_ids(dump: &Path) -> std::collections::BTreeMap<String, Vec<i64>> {
    let dir = dump.join("expected");
    let mut out = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        let Some(id) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".safetensors")) else { continue };
        let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let ids = tensors["output_ids"]
            .to_dtype(candle_core::DType::I64)
            .and_then(|t| t.flatten_all())
            .and_then(|t| t.to_vec1::<i64>())
            .expect("output_ids");
        out.insert(id.to_string(), ids);
    }
    out
}

/// Our generated ids, by question id, from an evaluation's `predictions.jsonl`.
pub fn predicted_output_ids(out: &Path) -> std::collections::BTreeMap<String, Vec<i64>> {
    jsonl(&out.join("predictions.jsonl"))
        .into_iter()
        .map(|p| {
            let id = p["question_id"].as_str().expect("question_id").to_string();
            let ids = p["output_ids"].as_array().unwrap_or_else(|| panic!("{id}: no output_ids")).iter().map(|v| v.as_i64().expect("id")).collect();
            (id, ids)
        })
        .collect()
}

/// Asserts that `out`'s generations are the dump's official ones: the same questions asked (the
/// rest left out as officially) and the same generated ids on each.
pub fn assert_official_generations(dump: &Path, out: &Path, what: &str) {
    let expected = official_output_ids(dump);
    let ours = predicted_output_ids(out);
    assert_eq!(ours.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "{what}: the questions asked (the rest left out as officially)");
    for (id, ids) in &expected {
        assert_eq!(&ours[id], ids, "{what}/{id}: generated ids");
    }
}
