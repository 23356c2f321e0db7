//! Training samples against the official SIS-Motion data path: every dump under
//! `tests/fixtures/sis_motion_samples/` (made by tools/fixtures/sis_motion_samples.py, which runs
//! IntelliSensing/Self-in-Space's `LazySupervisedDataset` and collator over rows in the released
//! SIS-Motion-54K schema) read with motionvl's reader and loader under the official recipe's
//! `[data]` section must give the collated `input_ids`, `labels`, `video_grid_thw`,
//! `second_per_grid_ts`, kept frames, `pixel_values_videos` shape, and which rows get motion.

use std::path::Path;

use motionvl_data::samples::{LlavaRows, ReadOptions, read_training_rows};
use motionvl_tests::fixtures::{Dump, dumps};

/// The family's sample dumps: those with `expected.jsonl` (the family also holds other findings
/// of the official training code, such as `d6`'s loss averaging, in their own layout).
fn sample_dumps() -> Vec<Dump> {
    let found: Vec<Dump> = dumps("sis_motion_samples").into_iter().filter(|d| d.has("expected.jsonl")).collect();
    assert!(!found.is_empty(), "no sis_motion_samples dump holds expected.jsonl");
    found
}
use motionvl_tests::repo_root;
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{ShownSample, show_samples};
use serde_json::Value;

/// configs/sft/sis-motion-7b.toml on the dump: its rows, its tokenizer, on the CPU. The motion
/// section is left out: what a sample holds does not depend on it (the motion pixels are
/// another dump's business).
fn official_recipe(dump: &Dump) -> Recipe {
    let root = repo_root();
    let path = root.join("configs/sft/sis-motion-7b.toml");
    let text = std::fs::read_to_string(&path).expect("the official recipe");
    let mut table: toml::Table = toml::from_str(&text).expect("TOML");
    table.remove("motion");
    let quoted = |p: &Path| format!("{:?}", p.display().to_string());
    let overrides = [
        ("model.checkpoint".to_string(), quoted(&dump.path("processor"))),
        ("model.device".to_string(), "\"cpu\"".to_string()),
        ("model.dtype".to_string(), "\"f32\"".to_string()),
        ("data.train".to_string(), quoted(&dump.path("SIS-Motion-54K.jsonl"))),
        ("data.workers".to_string(), "2".to_string()),
        ("output_dir".to_string(), quoted(&dump.dir.join("never-written"))),
    ];
    Recipe::from_table(table, &path, &overrides).expect("the official recipe loads")
}

fn expected_rows(dump: &Dump) -> Vec<Value> {
    dump.text("expected.jsonl").lines().map(|l| serde_json::from_str(l).expect("expected.jsonl line")).collect()
}

fn field<T: serde::de::DeserializeOwned>(row: &Value, key: &str, what: &str) -> T {
    serde_json::from_value(row.get(key).cloned().unwrap_or_else(|| panic!("{what}: expected.jsonl lacks `{key}`")))
        .unwrap_or_else(|e| panic!("{what}: `{key}`: {e}"))
}

#[test]
fn released_rows_read_as_the_official_loader_reads_them() {
    for dump in sample_dumps() {
        let expected = expected_rows(&dump);
        let read = read_training_rows(&dump.path("SIS-Motion-54K.jsonl"), &ReadOptions::default(), LlavaRows::Official).expect("every row reads");
        assert_eq!(read.items.len(), expected.len(), "{}: rows", dump.label);
        for (sample, row) in read.items.iter().zip(&expected) {
            let what = format!("{} row {}", dump.label, row["row"]);
            assert_eq!(sample.with_motion, field::<bool>(row, "has_video_tchw", &what), "{what}: motion");
            assert_eq!(sample.videos.len(), 1, "{what}: one video");
        }
    }
}

#[test]
fn shown_samples_equal_the_official_collated_batches() {
    for dump in sample_dumps() {
        let recipe = official_recipe(&dump);
        let (mut out, mut notes) = (Vec::new(), Vec::new());
        show_samples(&recipe, usize::MAX, &mut out, &mut notes).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        assert!(notes.is_empty(), "{}: samples left out: {}", dump.label, String::from_utf8_lossy(&notes));
        assert!(!dump.dir.join("never-written").exists(), "{}: showing samples wrote a run folder", dump.label);
        let shown: Vec<ShownSample> =
            String::from_utf8(out).expect("UTF-8").lines().map(|l| serde_json::from_str(l).expect("one JSON object a line")).collect();
        let expected = expected_rows(&dump);
        assert_eq!(shown.len(), expected.len(), "{}: samples", dump.label);
        for (got, row) in shown.iter().zip(&expected) {
            let what = format!("{} row {} ({})", dump.label, row["row"], row["what"].as_str().unwrap_or(""));
            assert_eq!(got.row, field::<usize>(row, "row", &what), "{what}: order");
            assert_eq!(got.input_ids, field::<Vec<u32>>(row, "input_ids", &what), "{what}: input_ids");
            assert_eq!(got.labels, field::<Vec<i64>>(row, "labels", &what), "{what}: labels");
            assert_eq!(got.video_grid_thw, field::<Vec<[usize; 3]>>(row, "video_grid_thw", &what), "{what}: video_grid_thw");
            assert_eq!(got.second_per_grid_ts, field::<Vec<f64>>(row, "second_per_grid_ts", &what), "{what}: second_per_grid_ts");
            assert_eq!(got.frame_indices, vec![field::<Vec<usize>>(row, "frame_indices", &what)], "{what}: frame_indices");
            assert_eq!(got.pixel_values_shape, Some(field::<[usize; 2]>(row, "pixel_values_shape", &what)), "{what}: pixel_values_shape");
            assert_eq!(got.with_motion, field::<bool>(row, "has_video_tchw", &what), "{what}: motion");
        }
    }
}
