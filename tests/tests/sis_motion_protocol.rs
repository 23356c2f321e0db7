//! `evaluate run --protocol official` against the official evaluator itself: every dump under
//! `tests/fixtures/sis_motion/` (made by tools/fixtures/sis_motion.py, which runs
//! `motion/src/eval/eval.py` of IntelliSensing/Self-in-Space at b123237 unchanged on a tiny
//! model, SIS-Bench rows and clips) must give, through motionvl's official protocol:
//! - the same questions left out (missing media, header frame counts in 1..7);
//! - for every asked question the same prompt `input_ids`, `video_grid_thw`,
//!   `second_per_grid_ts` and vision-tower pixels (the visual part; motion is tested beside
//!   the motion branch);
//! - the same extracted letter for every response, and `uav_accuracy.json` to the byte.

use std::collections::{BTreeMap, HashMap};

use motionvl_data::samples::ReadOptions;
use motionvl_eval::bench;
use motionvl_eval::config::{ProtocolKind, RunConfig};
use motionvl_eval::extract::{Extracted, extract_official, official_correct};
use motionvl_eval::infer::{Prepare, load_qwen};
use motionvl_eval::official::{Admission, OfficialRows, UavAccuracy, leave_out};
use motionvl_tests::fixtures::{Dump, dumps};

/// Tolerance on the vision tower's normalised pixels: both sides resize the same uint8 frames
/// with the same kernel and normalise in f32, so only the last bits of the arithmetic differ.
const PIXEL_TOLERANCE: f32 = 1e-5;

fn predictions(dump: &Dump) -> Vec<serde_json::Value> {
    dump.text("predictions.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", dump.label)))
        .collect()
}

#[test]
fn answers_and_uav_accuracy_equal_the_official_evaluators() {
    for dump in dumps("sis_motion") {
        let meta = dump.json("meta.json");
        let rows = OfficialRows::read(&dump.path("SIS-Bench/SIS-Bench.jsonl")).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let mut scored = Vec::new();
        for (line, p) in predictions(&dump).iter().enumerate() {
            let id = p["id"].as_str().unwrap_or_else(|| panic!("{}: predictions line {} has no id", dump.label, line + 1));
            let response = p["response"].as_str().unwrap_or_default();
            let e = extract_official(response);
            let letter = match &e.answer {
                Some(Extracted::Choice(c)) => serde_json::json!(c.to_string()),
                _ => serde_json::Value::Null,
            };
            assert_eq!(letter, meta["questions"][id]["extracted"], "{}: {id}: {response:?}", dump.label);
            let row = rows.row_by_id(id, line + 1).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
            scored.push((row.clone(), official_correct(&e, &row.answer)));
        }
        let acc = UavAccuracy::count(scored.iter().map(|(row, correct)| (row, *correct)));
        assert_eq!(acc.to_text(), dump.text("uav_accuracy.json"), "{}: uav_accuracy.json", dump.label);
    }
}

#[test]
fn left_out_questions_and_prompt_ids_equal_the_official_evaluators() {
    for dump in dumps("sis_motion") {
        let meta = dump.json("meta.json");
        let manifest = dump.path("SIS-Bench/SIS-Bench.jsonl");
        let mut cfg = RunConfig {
            bench: "sisbench".into(),
            manifest: manifest.clone(),
            media_root: Some(dump.path("SIS-Bench/video")),
            out: std::env::temp_dir(),
            protocol_kind: Some(ProtocolKind::Official),
            ..RunConfig::default()
        };
        cfg.model.checkpoint = dump.path("base").display().to_string();
        let sis = bench::find("sisbench").unwrap_or_else(|e| panic!("{e}"));
        // Rows motionvl cannot read are reported with everything else that differs.
        let opts = ReadOptions { media_root: cfg.media_root.clone(), check_media: false, skip_bad: true };
        let read = sis.read(&manifest, &opts).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let items = read.items;
        let mut problems: Vec<String> = read.skipped.iter().map(|e| format!("row refused: {e}")).collect();

        let official_left: BTreeMap<String, String> = meta["left_out"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: meta.json left_out", dump.label))
            .iter()
            .map(|l| (l["id"].as_str().unwrap_or_default().to_string(), l["reason"].as_str().unwrap_or_default().to_string()))
            .collect();
        let mut ours = BTreeMap::new();
        for item in &items {
            if let Some(reason) = leave_out(item, Admission::MinFrames(8)).unwrap_or_else(|e| panic!("{}: {e}", dump.label)) {
                ours.insert(item.id.clone(), reason);
            }
        }
        if ours.keys().collect::<Vec<_>>() != official_left.keys().collect::<Vec<_>>() {
            problems.push(format!("left out: ours {ours:?}, official {official_left:?}"));
        }

        let (preparer, _) = load_qwen(&cfg, sis).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let by_id: HashMap<&str, &motionvl_eval::Item> = items.iter().map(|i| (i.id.as_str(), i)).collect();
        let asked = predictions(&dump);
        for p in &asked {
            let id = p["id"].as_str().unwrap_or_default();
            let Some(item) = by_id.get(id) else {
                problems.push(format!("{id}: asked officially, not read by motionvl"));
                continue;
            };
            let expected = dump.tensors(&format!("expected/{id}.safetensors"));
            let batch = match preparer.prepare(&[item]) {
                Ok(b) if b.questions.len() == 1 => b,
                Ok(b) => {
                    problems.push(format!("{id}: not prepared: {:?}", b.failed));
                    continue;
                }
                Err(e) => {
                    problems.push(format!("{id}: {e}"));
                    continue;
                }
            };
            let q = &batch.questions[0];
            let ids: Vec<i64> = q.prompt.as_ref().map(|p| p.input_ids.iter().map(|&i| i64::from(i)).collect()).unwrap_or_default();
            if ids != expected.i64_flat("input_ids") {
                problems.push(format!("{id}: input_ids differ ({} vs {} tokens)", ids.len(), expected.i64_flat("input_ids").len()));
            }
            let grid: Vec<i64> = q.videos.iter().flat_map(|v| v.grid_thw.iter().map(|&g| g as i64)).collect();
            if grid != expected.i64_flat("video_grid_thw") {
                problems.push(format!("{id}: video_grid_thw {grid:?} vs {:?}", expected.i64_flat("video_grid_thw")));
                continue;
            }
            let seconds: Vec<f32> = q.videos.iter().map(|v| v.second_per_grid.unwrap_or(f64::NAN) as f32).collect();
            let want =
                expected.get("second_per_grid_ts").to_dtype(candle_core::DType::F32).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>());
            if want.as_ref().ok() != Some(&seconds) {
                problems.push(format!("{id}: second_per_grid_ts {seconds:?} vs {want:?}"));
            }
            let pixels: Vec<f32> = q.videos.iter().flat_map(|v| v.pixel_values.iter().copied()).collect();
            let name = if expected.has("pixel_values_videos") { "pixel_values_videos" } else { "pixel_values_videos.head" };
            let reference: Vec<f32> = expected
                .get(name)
                .to_dtype(candle_core::DType::F32)
                .and_then(|t| t.flatten_all())
                .and_then(|t| t.to_vec1())
                .unwrap_or_else(|e| panic!("{}: {id}: {name}: {e}", dump.label));
            let worst = pixels.iter().zip(&reference).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            if reference.len() > pixels.len() || worst > PIXEL_TOLERANCE {
                problems.push(format!("{id}: {name}: {} of {} values compared, worst |Δ| {worst}", reference.len().min(pixels.len()), pixels.len()));
            }
            // A tensor stored as head + row sums: every row's sum too (1176 values each).
            if expected.has("pixel_values_videos.sum_last") {
                let sums: Vec<f32> = expected
                    .get("pixel_values_videos.sum_last")
                    .flatten_all()
                    .and_then(|t| t.to_vec1())
                    .unwrap_or_else(|e| panic!("{}: {id}: {e}", dump.label));
                let ours: Vec<f64> = pixels.chunks(1176).map(|row| row.iter().map(|&v| f64::from(v)).sum()).collect();
                let worst = ours.iter().zip(&sums).map(|(a, b)| (a - f64::from(*b)).abs()).fold(0.0f64, f64::max);
                if ours.len() != sums.len() || worst > 1176.0 * f64::from(PIXEL_TOLERANCE) {
                    problems.push(format!("{id}: pixel row sums: {} vs {} rows, worst |Δ| {worst}", ours.len(), sums.len()));
                }
            }
        }
        assert!(problems.is_empty(), "{}:\n{}", dump.label, problems.join("\n"));
    }
}
