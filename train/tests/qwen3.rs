//! Training a Qwen3-VL: the tiny recipe on a fresh tiny Qwen3-VL (`configs/models/tiny-qwen3vl.json`,
//! DeepStack from its first vision block), with Qwen3-VL's processor (patch 16, a pixel bound
//! over the whole clip, a `<t seconds>` block per temporal step). It learns, gradients reach
//! every adapter (the trainer checks each step), frozen weights stay as they were, and the saved
//! adapter reloads onto the base model with the trained model's logits. A motion recipe trains
//! the SIS-Motion branch on it.

use candle_core::{DType, Device};
use motionvl_data::text::QwenTokenizer;
use motionvl_models::backbone::{Backbone, Family};
use motionvl_models::lora::LoraWeights;
use motionvl_models::motion::{Connector, MotionBranch, MotionMeta, qwen3_features};
use motionvl_models::prompt::{PixelInput, VisionInputs};
use motionvl_models::{CheckpointFiles, CheckpointWeights};
use motionvl_train::sft::Trainer;

mod common;
use common::{repo_root, tiny};

fn tiny_qwen3(out: &std::path::Path, extra: &[(&str, &str)]) -> motionvl_train::recipe::Recipe {
    let init = format!("{:?}", repo_root().join("configs/models/tiny-qwen3vl.json").display().to_string());
    // Four 64×64 frames: a clip bound of 4 × 64 × 64 keeps them at full size (grid [2, 4, 4]).
    let mut overrides = vec![("model.init_config", init.as_str()), ("data.min_pixels", "4096"), ("data.max_pixels", "16384")];
    overrides.extend_from_slice(extra);
    tiny(out, &overrides)
}

#[test]
fn a_fresh_qwen3_vl_learns_and_its_adapter_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = tiny_qwen3(dir.path(), &[("optim.max_steps", "12"), ("checkpoint.every", "12")]);
    let mut trainer = Trainer::new(&recipe, None).unwrap();
    assert_eq!(trainer.model().family(), Family::Qwen3Vl);
    let logs: Vec<_> = (0..12).map(|_| trainer.train_step().unwrap()).collect();
    let (first, last) = (logs[0].loss, logs[logs.len() - 3..].iter().map(|l| l.loss).sum::<f64>() / 3.0);
    assert!(last < 0.5 * first, "loss fell from {first:.3} to {last:.3}, less than half");

    let files = CheckpointFiles::from_dir(&dir.path().join("base-model")).unwrap();
    let base = CheckpointWeights::open(&files.weights).unwrap();
    let mut trained = trainer.model().clone();
    for (name, linear) in trained.linears_mut() {
        if name == "lm_head" {
            continue; // tied to the embedding
        }
        let stored = base.load(&format!("{name}.weight"), DType::F32, &Device::Cpu).unwrap();
        assert_eq!(
            linear.weight().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            stored.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            "{name} changed"
        );
    }
    let moved = trainer.lora().modules.values().all(|p| p.b.as_tensor().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0);
    assert!(moved, "a LoRA B stayed zero");

    // The checkpoint's PEFT adapter on the base model gives the trained model's logits.
    let checkpoint = dir.path().join("checkpoint-12");
    let lora = LoraWeights::load_peft(&checkpoint, &Device::Cpu).unwrap();
    let mut reloaded = Backbone::load(&files, DType::F32, &Device::Cpu).unwrap();
    lora.attach(reloaded.linears_mut()).unwrap();
    trainer.lora().runtime().set_training(false);
    let tokenizer = QwenTokenizer::from_model_dir(&files.dir).unwrap();
    let ids = tokenizer.encode_text("In which direction does the red square move?").unwrap();
    let batch = motionvl_models::prompt::PromptBatch::single(ids.clone(), vec![motionvl_models::rope::TokenKind::Text; ids.len()]);
    let inputs = motionvl_models::prompt::VisionInputs::default();
    let logits = |m: &Backbone| match m {
        Backbone::Qwen3(m) => m.forward(&batch, &inputs, None).unwrap(),
        Backbone::Qwen25(_) => unreachable!("a Qwen3-VL run"),
    };
    let diff = logits(trainer.model()).sub(&logits(&reloaded)).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff <= 1e-5, "reloaded adapter: logits differ by {diff:e}");

    // `train merge` folds it into the base (stored under transformers' names): the merged
    // checkpoint, loaded alone, gives the same logits.
    let merged_dir = dir.path().join("merged");
    let summary = motionvl_train::merge::merge(&files, &checkpoint, &merged_dir, usize::MAX).unwrap();
    assert_eq!(summary.merged_modules, trainer.lora().modules.len());
    let merged = Backbone::load(&CheckpointFiles::from_dir(&merged_dir).unwrap(), DType::F32, &Device::Cpu).unwrap();
    assert_eq!(merged.family(), Family::Qwen3Vl);
    let diff = logits(trainer.model()).sub(&logits(&merged)).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff <= 1e-5, "merged checkpoint: logits differ by {diff:e}");
    let base = Backbone::load(&files, DType::F32, &Device::Cpu).unwrap();
    let moved = logits(&merged).sub(&logits(&base)).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(moved > 1e-4, "the merged weights answer as the base model (max |Δ| {moved:e})");
}

/// The motion branch on Qwen3-VL: pseudo-images on the Qwen3-VL processor's grid (patch 16), the
/// connector at the model's width on a frozen copy of its tower; LoRA and connector both learn
/// (the trainer checks every gradient each step), and the checkpoint's branch reloads onto the
/// base model with the trained connector and moves the logits.
#[test]
fn a_motion_recipe_trains_on_qwen3_vl_and_its_branch_reloads() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = tiny_qwen3(dir.path(), &[("motion.estimator", "\"dis\""), ("optim.max_steps", "3"), ("checkpoint.every", "3")]);
    let mut trainer = Trainer::new(&recipe, None).unwrap();
    for _ in 0..3 {
        trainer.train_step().unwrap();
    }
    let connector = trainer.connector_vars().expect("a motion run has a connector");
    let width = trainer.model().hidden_size();
    let fc2 = &connector.iter().find(|(n, _)| n == "connector.fc2.weight").unwrap().1;
    assert_eq!(fc2.dims(), [width, width], "the connector is at the model's width");
    assert!(fc2.as_tensor().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0, "the connector's last layer never moved");
    let moved = trainer.lora().modules.values().all(|p| p.b.as_tensor().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0);
    assert!(moved, "a LoRA B stayed zero");

    let checkpoint = dir.path().join("checkpoint-3");
    let meta = MotionMeta::read(&checkpoint).unwrap().expect("motion.json");
    assert_eq!(meta.estimator, "dis");
    let files = CheckpointFiles::from_dir(&dir.path().join("base-model")).unwrap();
    let base = Backbone::load(&files, DType::F32, &Device::Cpu).unwrap();
    let loaded = MotionBranch::load(&checkpoint, &meta, base.motion_tower(), &Device::Cpu).unwrap();
    let probe = motionvl_models::seeded::randn((5, width), 1.0, 3, &Device::Cpu).unwrap();
    let live = Connector::from_vars(connector).unwrap();
    let values = |c: &Connector| c.forward(&probe).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    assert_eq!(values(&loaded.connector), values(&live));

    // Pseudo-images of a Qwen3-VL grid (16-pixel patches) through the branch move the logits.
    let Backbone::Qwen3(model) = &base else { unreachable!("a Qwen3-VL run") };
    let grids = vec![[2, 4, 4]];
    let patch_dim = model.config().vision.patch_dim();
    assert_eq!(patch_dim, 3 * 2 * 16 * 16);
    let pixels = |seed| motionvl_models::seeded::randn((32, patch_dim), 1.0, seed, &Device::Cpu).unwrap();
    let inputs =
        VisionInputs { images: None, videos: Some(PixelInput { pixel_values: pixels(4), grids: grids.clone() }), video_seconds_per_grid: vec![] };
    let flow = PixelInput { pixel_values: pixels(5), grids };
    let fused = qwen3_features(model, Some(&loaded), &inputs, Some(&flow)).unwrap();
    let plain = qwen3_features(model, None, &inputs, None).unwrap();
    let tokens = |f: &motionvl_models::qwen3vl::Qwen3Features| f.videos.as_ref().unwrap().features.clone();
    let diff = (tokens(&fused) - tokens(&plain)).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
    assert!(diff > 1e-4, "the trained connector does not reach the video tokens ({diff})");
    assert!(dir.path().join("flow-cache").read_dir().unwrap().next().is_some(), "flows are cached");
}
