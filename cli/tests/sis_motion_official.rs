//! Issue 28's proof, as a user runs it: a package written by the official Self-in-Space code on
//! a tiny base (`tests/fixtures/sis_motion/<name>/`, made by `tools/fixtures/sis_motion.py`),
//! evaluated by
//!
//! ```text
//! evaluate run --checkpoint BASE --adapter PACKAGE --manifest SIS-Bench/SIS-Bench.jsonl \
//!   --bench sisbench --protocol official --device cpu --dtype f32 --max-new-tokens 16 --out DIR
//! ```
//!
//! gives the official evaluation's generated token ids on every question it asked, leaves out
//! the questions it left out, and writes its `uav_accuracy.json`.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use common::repo_root;

fn dumps() -> Vec<PathBuf> {
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

fn jsonl(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).collect()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).expect("JSON")
}

/// The official run's generated ids, by question id (`expected/<id>.safetensors`).
fn official_output_ids(dump: &Path) -> BTreeMap<String, Vec<i64>> {
    let dir = dump.join("expected");
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("expected/") {
        let path = entry.expect("entry").path();
        let Some(id) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".safetensors")) else { continue };
        let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu).expect("expected tensors");
        let ids = tensors["output_ids"].to_dtype(candle_core::DType::I64).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<i64>()).expect("output_ids");
        out.insert(id.to_string(), ids);
    }
    out
}

/// MOFNet's twelve iterations at 320×480 over clips of up to 32 frames take over an hour in a debug
/// build, so CI runs this in release (`.ci/run`): `cargo test --release -p motionvl-cli --test
/// sis_motion_official -- --ignored`.
#[test]
#[ignore = "minutes of MOFNet at 320x480 in release, over an hour in debug: run in release with --ignored"]
fn an_official_package_evaluates_to_the_official_generations() {
    let evaluate = env!("CARGO_BIN_EXE_evaluate");
    for dump in dumps() {
        let name = dump.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let tmp = tempfile::tempdir().expect("temp dir");
        let out = tmp.path().join("eval");
        let arg = |p: &Path| p.display().to_string();
        let run = |adapter: &Path, out: &Path| {
            common::output(
                evaluate,
                &[
                    "run", "--checkpoint", &arg(&dump.join("base")), "--adapter", &arg(adapter),
                    "--manifest", &arg(&dump.join("SIS-Bench/SIS-Bench.jsonl")), "--bench", "sisbench", "--protocol", "official",
                    "--device", "cpu", "--dtype", "f32", "--max-new-tokens", "16", "--out", &arg(out), "--quiet",
                ],
                &dump,
            )
        };
        run(&dump.join("package"), &out);

        let expected = official_output_ids(&dump);
        let ours: BTreeMap<String, Vec<i64>> = jsonl(&out.join("predictions.jsonl"))
            .into_iter()
            .map(|p| {
                let id = p["question_id"].as_str().expect("question_id").to_string();
                let ids = p["output_ids"].as_array().unwrap_or_else(|| panic!("{name}/{id}: no output_ids")).iter().map(|v| v.as_i64().expect("id")).collect();
                (id, ids)
            })
            .collect();
        assert_eq!(ours.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "{name}: the questions asked (the rest left out as officially)");
        for (id, ids) in &expected {
            assert_eq!(&ours[id], ids, "{name}/{id}: generated ids");
        }
        // The official texts, extracted answers and accuracies, in the official file.
        let official: BTreeMap<String, String> =
            jsonl(&dump.join("predictions.jsonl")).into_iter().map(|p| (p["id"].as_str().expect("id").to_string(), p["response"].as_str().expect("response").to_string())).collect();
        for p in jsonl(&out.join("predictions.jsonl")) {
            let id = p["question_id"].as_str().expect("question_id");
            assert_eq!(p["prediction"].as_str(), official.get(id).map(String::as_str), "{name}/{id}: the decoded text");
        }
        assert_eq!(json(&out.join("uav_accuracy.json")), json(&dump.join("uav_accuracy.json")), "{name}: uav_accuracy.json");
    }
}
