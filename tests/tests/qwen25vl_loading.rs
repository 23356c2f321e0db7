//! Checkpoint loading: both tensor naming schemes, sharded files, the hub cache, dtype
//! conversion, and the errors a user sees when a checkpoint does not fit its config.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use motionvl_models::qwen25vl::{PromptBatch, Qwen25Vl, VisionFeatures};
use motionvl_models::rope::TokenKind;
use motionvl_models::{CheckpointFiles, HubOptions, ModelError};
use motionvl_tests::{assert_close, fixture_dirs, Tensors};

/// Logits of a text-only prompt, enough to tell two loads apart.
fn text_logits(model: &Qwen25Vl) -> Tensor {
    let ids = vec![1u32, 7, 42, 99, 3];
    let batch = PromptBatch::single(ids.clone(), vec![TokenKind::Text; ids.len()]);
    model.forward(&batch, &Default::default(), None).unwrap()
}

fn reference_model(dir: &Path) -> Qwen25Vl {
    Qwen25Vl::load(&CheckpointFiles::from_dir(dir).unwrap(), DType::F32, &Device::Cpu).unwrap()
}

/// Copies a fixture's config and writes its tensors under the transformers-5 names, split
/// over two shards with an index, as `save_pretrained` does for large models.
fn write_sharded_transformers5(fixture: &Path, out: &Path) {
    std::fs::copy(fixture.join("config.json"), out.join("config.json")).unwrap();
    let names: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture.join("weight_names.json")).unwrap()).unwrap();
    let tensors = Tensors::load(&fixture.join("model.safetensors")).unwrap();
    let mut shards: [HashMap<String, Tensor>; 2] = Default::default();
    let mut weight_map = serde_json::Map::new();
    let mut saved: Vec<&String> = tensors.names().collect();
    saved.sort();
    for (i, saved_name) in saved.into_iter().enumerate() {
        let new_name = names["saved_key_to_transformers5_state_dict_key"][saved_name.as_str()]
            .as_str()
            .unwrap_or_else(|| panic!("weight_names.json has no transformers-5 name for {saved_name}"));
        let shard = i % 2;
        shards[shard].insert(new_name.to_owned(), tensors.get(saved_name).unwrap().clone());
        weight_map.insert(new_name.to_owned(), format!("model-0000{}-of-00002.safetensors", shard + 1).into());
    }
    for (i, shard) in shards.iter().enumerate() {
        candle_core::safetensors::save(shard, out.join(format!("model-0000{}-of-00002.safetensors", i + 1))).unwrap();
    }
    let index = serde_json::json!({ "metadata": {}, "weight_map": weight_map });
    std::fs::write(out.join("model.safetensors.index.json"), index.to_string()).unwrap();
}

#[test]
fn sharded_checkpoint_with_transformers5_names_loads_identically() {
    for fixture in fixture_dirs("qwen2_5_vl") {
        let dir = tempfile::tempdir().unwrap();
        write_sharded_transformers5(&fixture, dir.path());
        let files = CheckpointFiles::from_dir(dir.path()).unwrap();
        assert_eq!(files.weights.len(), 2);
        let model = Qwen25Vl::load(&files, DType::F32, &Device::Cpu).unwrap();
        assert_close("sharded transformers-5 checkpoint", &text_logits(&model), &text_logits(&reference_model(&fixture)), 0.0);
    }
}

#[test]
fn hub_id_resolves_from_the_cache_and_offline_misses_are_explained() {
    let fixture = &fixture_dirs("qwen2_5_vl")[0];
    let cache = tempfile::tempdir().unwrap();
    let repo = cache.path().join("models--motionvl--tiny");
    let snapshot = repo.join("snapshots").join("0123abcd");
    std::fs::create_dir_all(&snapshot).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs").join("main"), "0123abcd").unwrap();
    for file in ["config.json", "model.safetensors", "generation_config.json"] {
        std::fs::copy(fixture.join(file), snapshot.join(file)).unwrap();
    }
    let hub = HubOptions { cache_dir: cache.path().to_path_buf(), offline: true };
    let files = CheckpointFiles::resolve("motionvl/tiny", &hub).unwrap();
    assert!(files.dir.join("generation_config.json").is_file(), "side files resolve into the snapshot folder");
    let model = Qwen25Vl::load(&files, DType::F32, &Device::Cpu).unwrap();
    assert_close("hub-cached checkpoint", &text_logits(&model), &text_logits(&reference_model(fixture)), 0.0);

    let err = CheckpointFiles::resolve("motionvl/absent", &hub).unwrap_err();
    assert!(matches!(err, ModelError::NotCached { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("motionvl/absent") && message.contains("offline"), "{message}");
}

#[test]
fn missing_and_misshaped_tensors_are_named() {
    let fixture = &fixture_dirs("qwen2_5_vl")[0];
    let tensors = Tensors::load(&fixture.join("model.safetensors")).unwrap();
    let victim = "model.layers.0.self_attn.q_proj.weight";
    let write_variant = |replacement: Option<Tensor>| -> String {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(fixture.join("config.json"), dir.path().join("config.json")).unwrap();
        let mut map: HashMap<String, Tensor> = tensors.names().map(|n| (n.clone(), tensors.get(n).unwrap().clone())).collect();
        match replacement {
            Some(t) => map.insert(victim.into(), t),
            None => map.remove(victim),
        };
        candle_core::safetensors::save(&map, dir.path().join("model.safetensors")).unwrap();
        let files = CheckpointFiles::from_dir(dir.path()).unwrap();
        Qwen25Vl::load(&files, DType::F32, &Device::Cpu).unwrap_err().to_string()
    };
    let missing = write_variant(None);
    assert!(missing.contains(victim), "{missing}");
    let shape = tensors.get(victim).unwrap().dims().to_vec();
    let wrong = Tensor::zeros((shape[0], shape[1] + 1), DType::F32, &Device::Cpu).unwrap();
    let misshaped = write_variant(Some(wrong));
    assert!(misshaped.contains(victim), "{misshaped}");
    assert!(misshaped.contains(&format!("{:?}", [shape[0], shape[1] + 1])) && misshaped.contains(&format!("{shape:?}")), "{misshaped}");
}

#[test]
fn placeholder_count_mismatch_names_both_counts() {
    let fixture = &fixture_dirs("qwen2_5_vl")[0];
    let model = reference_model(fixture);
    let cfg = model.config();
    let ids = vec![1, cfg.vision_start_token_id, cfg.video_token_id, cfg.video_token_id, cfg.vision_end_token_id, 9];
    let kinds = ids.iter().map(|&t| if t == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }).collect();
    let batch = PromptBatch::single(ids, kinds);
    let features = VisionFeatures {
        images: None,
        videos: Some(Tensor::zeros((3, cfg.text.hidden_size), DType::F32, &Device::Cpu).unwrap()),
    };
    let err = model.embed(&batch, &features).unwrap_err();
    assert!(matches!(err, ModelError::PlaceholderMismatch { tokens: 2, features: 3, .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("video") && message.contains('2') && message.contains('3'), "{message}");
}

#[test]
fn reduced_precision_loads_close_to_f32() {
    let fixture = &fixture_dirs("qwen2_5_vl")[0];
    let files = CheckpointFiles::from_dir(fixture).unwrap();
    let reference = text_logits(&reference_model(fixture));
    for dtype in [DType::BF16, DType::F16] {
        let model = Qwen25Vl::load(&files, dtype, &Device::Cpu).unwrap();
        let logits = text_logits(&model);
        assert_eq!(logits.dtype(), dtype);
        let rel = motionvl_tests::max_rel_diff(&logits, &reference).unwrap();
        assert!(rel < 0.1, "{dtype:?} logits drift by {rel} relative to f32");
    }
}
