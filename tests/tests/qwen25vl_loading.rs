//! Checkpoint loading: both tensor naming schemes, sharded files, the hub cache, dtype
//! conversion, and the errors a user sees when a checkpoint does not fit its config.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use motionvl_models::qwen25vl::{PixelInput, PromptBatch, Qwen25Vl, VisionFeatures, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_models::{CheckpointFiles, HubOptions, ModelError};
use motionvl_tests::fixtures::{Tensors, assert_close, max_abs, max_rel_diff, tolerance};
use motionvl_tests::qwen_dump::QwenDump;

/// transformers' logits for the dump's video sample, so that every weight — the vision tower's
/// included — is checked by value.
fn assert_reproduces_dump(what: &str, model: &Qwen25Vl, fx: &QwenDump) {
    let batch = fx.prompt("");
    let logits = model.forward(&batch, &fx.video_inputs(), Some(&fx.hf_positions("", &batch))).unwrap();
    assert_close(&format!("{}: {what}", fx.dump.label), &logits, fx.expected.get("logits"), tolerance::F32_ACTIVATIONS);
}

/// Copies a fixture's config and writes its tensors under the transformers-5 names, split
/// over two shards with an index, as `save_pretrained` does for large models.
fn write_sharded_transformers5(fixture: &Path, out: &Path) {
    std::fs::copy(fixture.join("config.json"), out.join("config.json")).unwrap();
    let names: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(fixture.join("weight_names.json")).unwrap()).unwrap();
    let tensors = Tensors::load(&fixture.join("model.safetensors"));
    let mut shards: [HashMap<String, Tensor>; 2] = Default::default();
    let mut weight_map = serde_json::Map::new();
    let saved: Vec<&String> = tensors.names();
    for (i, saved_name) in saved.into_iter().enumerate() {
        let new_name = names["saved_key_to_transformers5_state_dict_key"][saved_name.as_str()]
            .as_str()
            .unwrap_or_else(|| panic!("weight_names.json has no transformers-5 name for {saved_name}"));
        let shard = i % 2;
        shards[shard].insert(new_name.to_owned(), tensors.get(saved_name).clone());
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
    for fx in QwenDump::all() {
        let dir = tempfile::tempdir().unwrap();
        write_sharded_transformers5(&fx.dump.dir, dir.path());
        let files = CheckpointFiles::from_dir(dir.path()).unwrap();
        assert_eq!(files.weights.len(), 2);
        let model = Qwen25Vl::load(&files, DType::F32, &Device::Cpu).unwrap();
        assert_reproduces_dump("sharded transformers-5 checkpoint", &model, &fx);
    }
}

#[test]
fn hub_id_resolves_from_the_cache_and_offline_misses_are_explained() {
    for fx in QwenDump::all() {
        let fixture = &fx.dump.dir;
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
        assert_reproduces_dump("hub-cached checkpoint", &model, &fx);

        let err = CheckpointFiles::resolve("motionvl/absent", &hub).unwrap_err();
        assert!(matches!(err, ModelError::NotCached { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains("motionvl/absent") && message.contains("offline"), "{message}");
    }
}

#[test]
fn missing_and_misshaped_tensors_are_named() {
    for fx in QwenDump::all() {
        let fixture = &fx.dump.dir;
        let tensors = Tensors::load(&fixture.join("model.safetensors"));
        for victim in ["model.layers.0.self_attn.q_proj.weight", "visual.blocks.0.mlp.up_proj.weight"] {
            let write_variant = |replacement: Option<Tensor>| -> String {
                let dir = tempfile::tempdir().unwrap();
                std::fs::copy(fixture.join("config.json"), dir.path().join("config.json")).unwrap();
                let mut map: HashMap<String, Tensor> = tensors.names().into_iter().map(|n| (n.clone(), tensors.get(n).clone())).collect();
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
            let shape = tensors.get(victim).dims().to_vec();
            let wrong = Tensor::zeros((shape[0], shape[1] + 1), DType::F32, &Device::Cpu).unwrap();
            let misshaped = write_variant(Some(wrong));
            assert!(misshaped.contains(victim), "{misshaped}");
            assert!(misshaped.contains(&format!("{:?}", [shape[0], shape[1] + 1])) && misshaped.contains(&format!("{shape:?}")), "{misshaped}");
        }
    }
}

#[test]
fn placeholder_count_mismatch_names_both_counts() {
    let model = QwenDump::all().remove(0).model();
    let cfg = model.config();
    let ids = vec![1, cfg.vision_start_token_id, cfg.video_token_id, cfg.video_token_id, cfg.vision_end_token_id, 9];
    let kinds = ids.iter().map(|&t| if t == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }).collect();
    let batch = PromptBatch::single(ids, kinds);
    let features = VisionFeatures { images: None, videos: Some(Tensor::zeros((3, cfg.text.hidden_size), DType::F32, &Device::Cpu).unwrap()) };
    let err = model.embed(&batch, &features).unwrap_err();
    assert!(matches!(err, ModelError::PlaceholderMismatch { tokens: 2, features: 3, .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("video") && message.contains('2') && message.contains('3'), "{message}");
}

/// A bf16 load against transformers' own bf16 load of the same checkpoint (`bf16.logits`: eager
/// attention, the pixels cast to bfloat16): the largest and the mean difference, and the
/// predicted token wherever transformers' choice is not within bf16 noise of a tie.
#[test]
fn bf16_load_matches_transformers_bf16() {
    for fx in QwenDump::all() {
        let model = Qwen25Vl::load(&CheckpointFiles::from_dir(&fx.dump.dir).unwrap(), DType::BF16, &Device::Cpu).unwrap();
        let batch = fx.prompt("");
        let logits = model.forward(&batch, &video_inputs_in(&fx, DType::BF16), Some(&fx.hf_positions("", &batch))).unwrap();
        assert_eq!(logits.dtype(), DType::BF16);
        let reference = fx.expected.get("bf16.logits");
        let rel = max_rel_diff(&logits, reference);
        let mean_rel = mean_rel_diff(&logits, reference);
        eprintln!("{}: bf16 logits against transformers' bf16: max {rel:.2e}, mean {mean_rel:.2e} relative", fx.dump.label);
        assert!(
            rel <= tolerance::BF16_LOGITS_RELATIVE,
            "{}: bf16 logits differ from transformers' bf16 by {rel:e} (bound {:e})",
            fx.dump.label,
            tolerance::BF16_LOGITS_RELATIVE
        );
        assert!(
            mean_rel <= tolerance::BF16_LOGITS_MEAN_RELATIVE,
            "{}: bf16 logits differ from transformers' bf16 by {mean_rel:e} on average (bound {:e})",
            fx.dump.label,
            tolerance::BF16_LOGITS_MEAN_RELATIVE
        );

        let rows = |t: &Tensor| -> Vec<Vec<f32>> { t.to_dtype(DType::F32).unwrap().squeeze(0).unwrap().to_vec2().unwrap() };
        let (ours, theirs) = (rows(&logits), rows(reference));
        let tie = tolerance::BF16_TOP1_TIE * max_abs(reference);
        let argmax = |row: &[f32]| row.iter().enumerate().fold(0, |best, (i, &v)| if v > row[best] { i } else { best });
        let mut compared = 0;
        for (position, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
            let top = argmax(theirs);
            let runner_up = theirs.iter().enumerate().filter(|&(i, _)| i != top).map(|(_, &v)| v).fold(f32::MIN, f32::max);
            if theirs[top] - runner_up > tie {
                compared += 1;
                assert_eq!(argmax(ours), top, "{}: bf16 top-1 token at position {position}", fx.dump.label);
            }
        }
        eprintln!("{}: bf16 top-1 token agrees at all {compared} of {} positions that are not ties", fx.dump.label, theirs.len());
        // The check must cover most positions (measured: 20 of 27, 21 of 32, 21 of 34), or it
        // would pass by skipping them.
        assert!(compared * 5 >= theirs.len() * 3, "{}: only {compared} of {} positions (under 60%) are not ties", fx.dump.label, theirs.len());
    }
}

/// Mean absolute difference relative to the reference's mean magnitude.
fn mean_rel_diff(actual: &Tensor, reference: &Tensor) -> f32 {
    let mean_abs = |t: Tensor| -> f32 { t.abs().unwrap().mean_all().unwrap().to_scalar().unwrap() };
    let (actual, reference) = (actual.to_dtype(DType::F32).unwrap(), reference.to_dtype(DType::F32).unwrap());
    mean_abs((&actual - &reference).unwrap()) / mean_abs(reference)
}

/// f16 has no transformers reference in the dumps; it is held to the f32 logits.
#[test]
fn f16_load_is_close_to_f32() {
    for fx in QwenDump::all() {
        let model = Qwen25Vl::load(&CheckpointFiles::from_dir(&fx.dump.dir).unwrap(), DType::F16, &Device::Cpu).unwrap();
        let batch = fx.prompt("");
        let logits = model.forward(&batch, &video_inputs_in(&fx, DType::F16), Some(&fx.hf_positions("", &batch))).unwrap();
        assert_eq!(logits.dtype(), DType::F16);
        let rel = max_rel_diff(&logits, fx.expected.get("logits"));
        eprintln!("{}: f16 logits drift {rel:.4} relative to transformers' f32", fx.dump.label);
        assert!(
            rel < tolerance::F16_LOGITS_RELATIVE,
            "{}: f16 logits drift by {rel} relative to f32 (bound {})",
            fx.dump.label,
            tolerance::F16_LOGITS_RELATIVE
        );
    }
}

/// The dump's video inputs with the pixels in `dtype`.
fn video_inputs_in(fx: &QwenDump, dtype: DType) -> VisionInputs {
    let video = fx.video_inputs();
    VisionInputs { videos: video.videos.map(|v| PixelInput { pixel_values: v.pixel_values.to_dtype(dtype).unwrap(), ..v }), ..video }
}
