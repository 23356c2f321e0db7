//! `evaluate run --protocol official` on a Qwen3-VL with a LoRA adapter against the official
//! LoRA evaluation itself: every dump under `tests/fixtures/sis_lora/` (made by
//! tools/fixtures/sis_lora.py, which runs `lora/src/eval/eval.py` of IntelliSensing/Self-in-Space
//! at b123237 unchanged under its pinned transformers 4.57.1 on a tiny Qwen3-VL, SIS-Bench rows
//! and frame folders) must give, through motionvl's official protocol, the same prompt ids
//! (timestamps and all), the same video grids and the same generated token ids.

use motionvl_eval::bench;
use motionvl_eval::config::{ProtocolKind, RunConfig};
use motionvl_eval::infer::{Prepare, load_qwen};
use motionvl_eval::run;
use motionvl_tests::fixtures::{Dump, dumps};

fn config(dump: &Dump, out: &std::path::Path) -> RunConfig {
    let mut cfg = RunConfig {
        bench: "sisbench".into(),
        manifest: dump.path("SIS-Bench/SIS-Bench.jsonl"),
        media_root: Some(dump.path("SIS-Bench/video")),
        out: out.to_path_buf(),
        protocol_kind: Some(ProtocolKind::Official),
        ..RunConfig::default()
    };
    cfg.model.checkpoint = dump.path("base").display().to_string();
    cfg.model.adapter = Some(dump.path("package"));
    cfg.model.dtype = Some(motionvl_models::device::DTypeName::F32);
    cfg.motion.no_motion = true;
    cfg.generation.max_new_tokens = dump.json("meta.json")["max_new_tokens"].as_u64().expect("max_new_tokens") as usize;
    cfg
}

fn all() -> Vec<Dump> {
    let all = dumps("sis_lora");
    assert!(!all.is_empty(), "expected the official LoRA evaluation dumps");
    all
}

#[test]
fn prompts_and_grids_equal_the_official_lora_evaluations() {
    for dump in all() {
        let out = tempfile::tempdir().expect("tempdir");
        let cfg = config(&dump, out.path());
        let sis = bench::find("sisbench").unwrap_or_else(|e| panic!("{e}"));
        let read = sis.read(&cfg.manifest, &motionvl_data::samples::ReadOptions { media_root: cfg.media_root.clone(), ..Default::default() });
        let items = read.unwrap_or_else(|e| panic!("{}: {e}", dump.label)).items;
        let (preparer, _) = load_qwen(&cfg, sis).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        for expected in dump.json("expected.json").as_array().expect("expected.json is a list") {
            let id = expected["question_id"].as_str().expect("question_id");
            let item = items.iter().find(|i| i.id == id).unwrap_or_else(|| panic!("{}: {id} not read", dump.label));
            let batch = preparer.prepare(&[item]).unwrap_or_else(|e| panic!("{}: {id}: {e}", dump.label));
            let q = &batch.questions[0];
            let ids: Vec<u64> = q.prompt.as_ref().expect("tokenised").input_ids.iter().map(|&i| u64::from(i)).collect();
            let want: Vec<u64> = expected["prompt_ids"].as_array().expect("prompt_ids").iter().map(|v| v.as_u64().expect("id")).collect();
            assert_eq!(ids, want, "{}: {id}: prompt ids", dump.label);
            let grid: Vec<u64> = q.videos[0].grid_thw.iter().map(|&g| g as u64).collect();
            let want: Vec<u64> = expected["video_grid_thw"].as_array().expect("grid").iter().map(|v| v.as_u64().expect("g")).collect();
            assert_eq!(grid, want, "{}: {id}: video grid", dump.label);
        }
    }
}

#[test]
fn evaluate_run_generates_the_official_lora_evaluations_ids() {
    for dump in all() {
        let out = tempfile::tempdir().expect("tempdir");
        let cfg = config(&dump, out.path());
        run(&cfg, false).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let predictions = std::fs::read_to_string(out.path().join("predictions.jsonl")).expect("predictions");
        let ours: Vec<serde_json::Value> = predictions.lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
        for expected in dump.json("expected.json").as_array().expect("expected.json is a list") {
            let id = expected["question_id"].as_str().expect("question_id");
            let row = ours.iter().find(|p| p["question_id"] == id).unwrap_or_else(|| panic!("{}: no prediction for {id}", dump.label));
            assert_eq!(row["output_ids"], expected["generated_ids"], "{}: {id}: generated ids", dump.label);
        }
    }
}
