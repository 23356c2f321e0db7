//! LoRA: PEFT adapters load under either module naming and reproduce PEFT's logits; fresh
//! adapters leave the model unchanged; saved adapters round-trip; merging folds them in.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use motionvl_models::lora::{LoraConfig, LoraWeights};
use motionvl_models::qwen25vl::{GenerateOptions, PixelInput, PromptBatch, Qwen25Vl, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_models::{CheckpointFiles, CheckpointWeights};
use motionvl_tests::{assert_close, fixture_dirs, Tensors};

struct Case {
    dir: PathBuf,
    inputs: Tensors,
}

impl Case {
    fn new(dir: &Path) -> Self {
        Self { dir: dir.to_path_buf(), inputs: Tensors::load(&dir.join("inputs.safetensors")).unwrap() }
    }

    fn model(&self) -> Qwen25Vl {
        Qwen25Vl::load(&CheckpointFiles::from_dir(&self.dir).unwrap(), DType::F32, &Device::Cpu).unwrap()
    }

    fn prompt(&self, ids_name: &str, types_name: &str) -> PromptBatch {
        let ids: Vec<u32> = self.inputs.i64_flat(ids_name).unwrap().into_iter().map(|t| t as u32).collect();
        let kinds = self.inputs.i64_flat(types_name).unwrap().into_iter().map(|t| TokenKind::from_id(t).unwrap()).collect();
        PromptBatch::single(ids, kinds)
    }

    fn video(&self) -> VisionInputs {
        let grid = self.inputs.i64_flat("video_grid_thw").unwrap();
        VisionInputs {
            images: None,
            videos: Some(PixelInput {
                pixel_values: self.inputs.get("pixel_values_videos").unwrap().clone(),
                grids: vec![[grid[0] as usize, grid[1] as usize, grid[2] as usize]],
            }),
            video_seconds_per_grid: self.inputs.get("second_per_grid_ts").unwrap().to_dtype(DType::F64).unwrap().to_vec1().unwrap(),
        }
    }
}

fn lora_fixtures() -> Vec<PathBuf> {
    fixture_dirs("qwen2_5_vl").into_iter().filter(|d| d.join("lora").is_dir()).collect()
}

/// Rewrites an adapter's keys into the transformers-4 module paths older PEFT versions wrote.
fn write_transformers4_adapter(src: &Path, dst: &Path) {
    std::fs::copy(src.join("adapter_config.json"), dst.join("adapter_config.json")).unwrap();
    let tensors = Tensors::load(&src.join("adapter_model.safetensors")).unwrap();
    let renamed: HashMap<String, Tensor> = tensors
        .names()
        .map(|k| {
            let old = k.replace("base_model.model.model.language_model.", "base_model.model.model.").replace("base_model.model.model.visual.", "base_model.model.visual.");
            (old, tensors.get(k).unwrap().clone())
        })
        .collect();
    candle_core::safetensors::save(&renamed, dst.join("adapter_model.safetensors")).unwrap();
}

#[test]
fn peft_adapter_reproduces_peft_logits_under_both_namings() {
    let fixtures = lora_fixtures();
    assert!(!fixtures.is_empty(), "no fixture carries a PEFT adapter");
    for dir in fixtures {
        let case = Case::new(&dir);
        let expected = Tensors::load(&dir.join("lora/lora_expected.safetensors")).unwrap();
        let old_names = tempfile::tempdir().unwrap();
        write_transformers4_adapter(&dir.join("lora"), old_names.path());
        for adapter_dir in [dir.join("lora"), old_names.path().to_path_buf()] {
            let lora = LoraWeights::load_peft(&adapter_dir, &Device::Cpu).unwrap();
            assert!(lora.config.adapt_vision, "the fixture adapter also targets the vision MLP");
            let mut model = case.model();
            lora.attach(&mut model).unwrap();
            let batch = case.prompt("input_ids", "mm_token_type_ids");
            let logits = model.forward(&batch, &case.video(), None).unwrap();
            assert_close(&format!("{}: LoRA logits", adapter_dir.display()), &logits, expected.get("lora.logits").unwrap(), 1e-4);

            let prompt = case.prompt("prompt_input_ids", "prompt_mm_token_type_ids");
            let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: false };
            let generated = model.generate(&prompt, &case.video(), None, &options).unwrap();
            let want: Vec<u32> = expected.i64_flat("lora.generated_ids").unwrap()[prompt.len()..].iter().map(|&t| t as u32).collect();
            assert_eq!(generated.tokens[0], want, "LoRA generation");
        }
    }
}

#[test]
fn fresh_adapters_leave_logits_unchanged_and_round_trip() {
    let dir = &fixture_dirs("qwen2_5_vl")[0];
    let case = Case::new(dir);
    let batch = case.prompt("input_ids", "mm_token_type_ids");
    let mut model = case.model();
    let before = model.forward(&batch, &case.video(), None).unwrap();

    let config = LoraConfig { rank: 4, alpha: 8.0, ..LoraConfig::default() };
    let lora = LoraWeights::init(&model, &config, 7, &Device::Cpu).unwrap();
    assert!(lora.modules.keys().all(|m| m.starts_with("model.layers.")), "vision is not adapted unless asked");
    assert_eq!(lora.modules.len(), model.config().text.num_hidden_layers * 7);
    lora.attach(&mut model).unwrap();
    lora.runtime().set_training(true);
    let after = model.forward(&batch, &case.video(), None).unwrap();
    assert_close("zero-initialised LoRA", &after, &before, 0.0);

    // Non-zero B, saved and loaded back, gives the same logits.
    for pair in lora.modules.values() {
        pair.b.set(&Tensor::randn(0f32, 0.1, pair.b.shape(), &Device::Cpu).unwrap()).unwrap();
    }
    lora.runtime().set_training(false);
    let trained = model.forward(&batch, &case.video(), None).unwrap();
    assert!(motionvl_tests::max_abs_diff(&trained, &before).unwrap() > 1e-3, "a non-zero adapter must change the logits");
    let saved = tempfile::tempdir().unwrap();
    lora.save_peft(saved.path(), Some("tiny")).unwrap();
    let reloaded = LoraWeights::load_peft(saved.path(), &Device::Cpu).unwrap();
    assert_eq!(reloaded.config.rank, 4);
    assert!(!reloaded.config.adapt_vision);
    let mut fresh = case.model();
    reloaded.attach(&mut fresh).unwrap();
    assert_close("reloaded adapter", &fresh.forward(&batch, &case.video(), None).unwrap(), &trained, 0.0);

    // Merged weights give the adapted model's logits.
    let weights = CheckpointWeights::open(&[dir.join("model.safetensors")]).unwrap();
    let mut tensors: HashMap<String, Tensor> = weights.names().map(|n| (n.to_owned(), weights.load(n, DType::F32, &Device::Cpu).unwrap())).collect();
    reloaded.merge_into(&mut tensors).unwrap();
    let merged = Qwen25Vl::new(model.config(), candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu)).unwrap();
    assert_close("merged adapter", &merged.forward(&batch, &case.video(), None).unwrap(), &trained, 1e-4);
}
