//! LoRA: PEFT adapters load under either module naming and reproduce PEFT's logits; fresh
//! adapters leave the model unchanged; saved adapters round-trip; merging folds them in.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use motionvl_models::CheckpointWeights;
use motionvl_models::lora::{LoraConfig, LoraWeights};
use motionvl_models::qwen25vl::{GenerateOptions, Qwen25Vl};
use motionvl_models::seeded;
use motionvl_tests::fixtures::{Tensors, assert_close, max_abs_diff, tolerance};
use motionvl_tests::qwen_dump::QwenDump;

fn lora_dumps() -> Vec<QwenDump> {
    let dumps: Vec<QwenDump> = QwenDump::all().into_iter().filter(|fx| fx.dump.has("lora")).collect();
    assert!(!dumps.is_empty(), "no Qwen2.5-VL dump carries a PEFT adapter");
    dumps
}

/// Rewrites an adapter's keys into the transformers-4 module paths older PEFT versions wrote.
fn write_transformers4_adapter(src: &Path, dst: &Path) {
    std::fs::copy(src.join("adapter_config.json"), dst.join("adapter_config.json")).unwrap();
    let tensors = Tensors::load(&src.join("adapter_model.safetensors"));
    let renamed: HashMap<String, Tensor> = tensors
        .names()
        .into_iter()
        .map(|k| {
            let old = k
                .replace("base_model.model.model.language_model.", "base_model.model.model.")
                .replace("base_model.model.model.visual.", "base_model.model.visual.");
            (old, tensors.get(k).clone())
        })
        .collect();
    candle_core::safetensors::save(&renamed, dst.join("adapter_model.safetensors")).unwrap();
}

#[test]
fn peft_adapter_reproduces_peft_logits_under_both_namings() {
    for fx in lora_dumps() {
        let expected = fx.dump.tensors("lora/lora_expected.safetensors");
        let old_names = tempfile::tempdir().unwrap();
        write_transformers4_adapter(&fx.dump.path("lora"), old_names.path());
        // PEFT ran the model with transformers' positions: feed those, whatever our default.
        let batch = fx.prompt("");
        let positions = fx.hf_positions("", &batch);
        let prompt = fx.prompt("prompt_");
        let prompt_positions = fx.hf_generation_positions("", &prompt, expected.i64_flat("lora.decode_start"));
        for adapter_dir in [fx.dump.path("lora"), old_names.path().to_path_buf()] {
            let lora = LoraWeights::load_peft(&adapter_dir, &Device::Cpu).unwrap();
            assert!(lora.config.adapt_vision, "{}: the fixture adapter also targets the vision MLP", fx.dump.label);
            let mut model = fx.model();
            lora.attach(model.linears_mut()).unwrap();
            let logits = model.forward(&batch, &fx.video_inputs(), Some(&positions)).unwrap();
            assert_close(&format!("{}: LoRA logits", adapter_dir.display()), &logits, expected.get("lora.logits"), tolerance::F32_ACTIVATIONS);

            let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: true };
            let generated = model.generate(&prompt, &fx.video_inputs(), Some(&prompt_positions), &options).unwrap();
            let want: Vec<u32> = expected.i64_flat("lora.generated_ids")[prompt.len()..].iter().map(|&t| t as u32).collect();
            assert_eq!(generated.tokens[0], want, "{}: LoRA generation", fx.dump.label);
            let steps = Tensor::stack(&generated.step_logits, 1).unwrap();
            assert_close(
                &format!("{}: LoRA generation logits", fx.dump.label),
                &steps,
                expected.get("lora.generated_logits"),
                tolerance::F32_ACTIVATIONS,
            );
        }
    }
}

#[test]
fn fresh_adapters_leave_logits_unchanged_and_round_trip() {
    for fx in QwenDump::all() {
        let batch = fx.prompt("");
        let video = fx.video_inputs();
        let mut model = fx.model();
        let before = model.forward(&batch, &video, None).unwrap();

        let config = LoraConfig { rank: 4, alpha: 8.0, ..LoraConfig::default() };
        let lora = LoraWeights::init(&model.linear_shapes(), &config, 7, &Device::Cpu).unwrap();
        assert!(lora.modules.keys().all(|m| m.starts_with("model.layers.")), "vision is not adapted unless asked");
        assert_eq!(lora.modules.len(), model.config().text.num_hidden_layers * 7);
        lora.attach(model.linears_mut()).unwrap();
        lora.runtime().set_training(true);
        let after = model.forward(&batch, &video, None).unwrap();
        assert_close(&format!("{}: zero-initialised LoRA", fx.dump.label), &after, &before, 0.0);

        // Non-zero B, saved and loaded back, gives the same logits.
        for (k, pair) in lora.modules.values().enumerate() {
            pair.b.set(&seeded::randn(pair.b.shape(), 0.1, k as u64, &Device::Cpu).unwrap()).unwrap();
        }
        lora.runtime().set_training(false);
        let trained = model.forward(&batch, &video, None).unwrap();
        assert!(max_abs_diff(&trained, &before) > 1e-3, "{}: a non-zero adapter must change the logits", fx.dump.label);
        let saved = tempfile::tempdir().unwrap();
        lora.save_peft(saved.path(), Some("tiny")).unwrap();
        let reloaded = LoraWeights::load_peft(saved.path(), &Device::Cpu).unwrap();
        assert_eq!(reloaded.config.rank, 4);
        assert!(!reloaded.config.adapt_vision);
        let mut fresh = fx.model();
        reloaded.attach(fresh.linears_mut()).unwrap();
        assert_close(&format!("{}: reloaded adapter", fx.dump.label), &fresh.forward(&batch, &video, None).unwrap(), &trained, 0.0);

        // Merged weights give the adapted model's logits.
        let weights = CheckpointWeights::open(&[fx.dump.path("model.safetensors")]).unwrap();
        let mut tensors: HashMap<String, Tensor> =
            weights.names().map(|n| (n.to_owned(), weights.load(n, DType::F32, &Device::Cpu).unwrap())).collect();
        reloaded.merge_into(&mut tensors).unwrap();
        let merged = Qwen25Vl::new(model.config(), candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu)).unwrap();
        assert_close(
            &format!("{}: merged adapter", fx.dump.label),
            &merged.forward(&batch, &video, None).unwrap(),
            &trained,
            tolerance::F32_ACTIVATIONS,
        );
    }
}
