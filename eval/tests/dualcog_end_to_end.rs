//! `evaluate run --bench dualcog` end to end on a tiny synthetic UAV-DualCog set built here
//! (`construct synth --dccs`'s pipeline): Stage 3 videos and Stage 4 images through a tiny random
//! Qwen2.5-VL checkpoint, then scoring and the reports.

use std::path::{Path, PathBuf};

use candle_core::Device;
use motionvl_data::dccs::pipeline::{SynthDccsConfig, synthetic};
use motionvl_data::dccs::world::Sampling;
use motionvl_data::text::train_tokenizer;
use motionvl_eval::config::RunConfig;
use motionvl_eval::{Results, run};
use motionvl_models::Qwen25VlConfig;
use motionvl_models::init::{random_model, save_checkpoint};
use serde_json::json;

/// A tiny Qwen2.5-VL-shaped checkpoint whose tokenizer is trained on the manifests' prompts.
fn tiny_checkpoint(dir: &Path, prompts: &[String]) -> PathBuf {
    let tokenizer = train_tokenizer(prompts.iter().map(String::as_str), 400).expect("tokenizer trains");
    let special = tokenizer.special();
    let config = json!({
        "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [2, 2, 4]}, "hidden_act": "silu",
        "tie_word_embeddings": true, "vocab_size": tokenizer.vocab_size(),
        "image_token_id": special.image_pad, "video_token_id": special.video_pad,
        "vision_start_token_id": special.vision_start, "vision_end_token_id": special.vision_end,
        "eos_token_id": [special.im_end, special.endoftext],
        "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "in_chans": 3,
                          "out_hidden_size": 64, "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2,
                          "window_size": 56, "fullatt_block_indexes": [1], "tokens_per_second": 2, "hidden_act": "silu"}
    });
    let cfg = Qwen25VlConfig::from_json(&config.to_string()).expect("tiny config parses");
    let (_, tensors) = random_model(&cfg, 0.5, 7, &Device::Cpu).expect("random weights");
    let out = dir.join("tiny-model");
    save_checkpoint(&out, &cfg, &tensors).expect("checkpoint saved");
    tokenizer.save(out.join("tokenizer.json")).expect("tokenizer saved");
    out
}

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
    let prompts: Vec<String> =
        manifests.iter().flat_map(|m| rows(m)).map(|r| r["user_prompt"].as_str().unwrap().to_string()).collect();
    let checkpoint = tiny_checkpoint(dir.path(), &prompts);

    for (manifest, expected, tasks) in [
        (
            &manifests[0],
            built.stage3.rows,
            vec!["self_set_instance_recognition", "self_element_instance_recognition", "env_visibility_reasoning"],
        ),
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
