//! `evaluate run --bench dualcog` end to end on a tiny synthetic UAV-DualCog set built here
//! (`construct synth --dccs`'s pipeline): Stage 3 videos and Stage 4 images through a tiny random
//! Qwen2.5-VL checkpoint, then scoring and the reports.

mod common;

use std::path::Path;

use motionvl_construct::dccs::pipeline::{SynthDccsConfig, synthetic};
use motionvl_construct::dccs::world::Sampling;
use motionvl_eval::config::RunConfig;
use motionvl_eval::{Results, run};

fn rows(manifest: &Path) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    v["samples"].as_array().unwrap().clone()
}

#[test]
fn tiny_synthetic_dccs_set_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let set = SynthDccsConfig {
        seed: 5,
        landmarks: 1,
        extent: 60.0,
        video_size: (64, 48),
        image_size: (64, 48),
        sampling: Sampling { surface_m: 1.0, ground_m: 4.0, ground_margin_m: 100.0 },
        binary_ply: false,
    };
    let built = synthetic(dir.path(), &set, &()).expect("synthetic DCCS set");
    let manifests = [built.dir.join("stage3.json"), built.dir.join("stage4.json")];
    let prompts: Vec<String> = manifests.iter().flat_map(|m| rows(m)).map(|r| r["user_prompt"].as_str().unwrap().to_string()).collect();
    let checkpoint = common::tiny_checkpoint(dir.path(), &prompts, 400, 7);

    for (manifest, expected, tasks) in [
        (&manifests[0], built.stage3.rows, vec!["self_set_instance_recognition", "self_element_instance_recognition", "env_visibility_reasoning"]),
        (&manifests[1], built.stage4.rows, vec!["self_where", "self_what", "env_where", "env_how"]),
    ] {
        let mut cfg = RunConfig {
            bench: "dualcog".into(),
            manifest: manifest.clone(),
            out: dir.path().join(manifest.file_stem().unwrap()),
            ..RunConfig::default()
        };
        cfg.model.checkpoint = checkpoint.display().to_string();
        cfg.generation.batch_size = 4;
        cfg.generation.max_new_tokens = 4;
        cfg.protocol.min_pixels = 56 * 56;
        cfg.protocol.max_pixels = 56 * 56;
        let summary = run(&cfg, false).expect("evaluation runs");
        assert_eq!((summary.generated, summary.failed.len()), (expected, 0), "{}", manifest.display());
        let r = Results::read_run(&cfg.out).expect("results.json");
        assert_eq!((r.benchmark.as_str(), r.questions, r.predicted, r.missing), ("dualcog", expected, expected, 0));
        for task in tasks {
            let scored: Vec<&str> = r.by_task.iter().map(|(t, _)| t.as_str()).collect();
            assert!(scored.contains(&task), "{task} scored in {scored:?}");
        }
        for name in ["predictions.jsonl", "scored.jsonl", "results.md", "by_task.csv"] {
            assert!(cfg.out.join(name).is_file(), "{name}");
        }
    }
}
