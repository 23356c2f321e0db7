//! What the binaries' end-to-end tests share: running a binary, and a tiny Qwen2.5-VL-shaped
//! checkpoint to evaluate with.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn run(bin: &str, args: &[&str], dir: &Path) -> (bool, String, String) {
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
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
