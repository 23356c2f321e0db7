//! `train sft --show-samples N` with the official recipe prints, for rows in the released
//! SIS-Motion-54K schema, what the official training code feeds its model: every dump under
//! `tests/fixtures/sis_motion_samples/` (see tests/tests/sis_motion_samples.rs), its tokenizer
//! standing in for the checkpoint's. Nothing is trained and no run folder is made.

mod common;

use common::{output, repo_root};
use serde_json::Value;

#[test]
fn show_samples_prints_the_official_inputs_and_trains_nothing() {
    let root = repo_root();
    let family = root.join("tests/fixtures/sis_motion_samples");
    let mut dumps: Vec<_> = std::fs::read_dir(&family)
        .expect("the dumps")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("expected.jsonl").is_file())
        .collect();
    dumps.sort();
    // Sample dumps only: the family also holds other findings (d6) in their own layout.
    assert!(!dumps.is_empty(), "no dump with expected.jsonl under {}", family.display());
    for dump in dumps {
        let expected: Vec<Value> = std::fs::read_to_string(dump.join("expected.jsonl"))
            .expect("expected.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        // Fewer than all rows: N is honoured.
        let n = expected.len() - 1;
        let run = tempfile::tempdir().expect("tempdir");
        let out = run.path().join("run");
        let (stdout, _) = output(
            env!("CARGO_BIN_EXE_train"),
            &[
                "sft",
                "--config",
                "configs/sft/sis-motion-7b.toml",
                "--model.checkpoint",
                &dump.join("processor").display().to_string(),
                "--model.device",
                "cpu",
                "--model.dtype",
                "f32",
                "--data.train",
                &dump.join("SIS-Motion-54K.jsonl").display().to_string(),
                "--output-dir",
                &out.display().to_string(),
                "--show-samples",
                &n.to_string(),
            ],
            &root,
        );
        assert!(!out.exists(), "{}: --show-samples made the run folder", dump.display());
        let shown: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("one JSON object a line")).collect();
        assert_eq!(shown.len(), n, "{}: lines", dump.display());
        for (got, want) in shown.iter().zip(&expected) {
            let what = format!("{} row {}", dump.display(), want["row"]);
            for key in ["input_ids", "labels", "video_grid_thw", "second_per_grid_ts", "pixel_values_shape"] {
                assert_eq!(got[key], want[key], "{what}: {key}");
            }
            assert_eq!(got["frame_indices"], Value::Array(vec![want["frame_indices"].clone()]), "{what}: frame_indices");
            assert_eq!(got["with_motion"], want["has_video_tchw"], "{what}: motion");
        }
    }
}
