//! The SIS-Motion branch in training: at step 0 the motion-aware model equals the visual-only
//! one exactly; only LoRA and the connector learn; a tiny motion model trains, checkpoints and
//! resumes with its connector and flow settings.

use std::path::Path;

use candle_core::{DType, Device};
use motionvl_models::motion::{Connector, MotionBranch, MotionMeta, MotionTower, vision_features};
use motionvl_models::qwen25vl::{PixelInput, PromptBatch, Qwen25Vl, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_models::seeded;
use motionvl_models::{CheckpointFiles, CheckpointWeights};
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::Trainer;

mod common;

use common::repo_root;

/// The tiny recipe with the DIS flow estimator's motion branch, with `extra` overrides.
fn tiny_motion(out: &Path, extra: &[(&str, &str)]) -> Recipe {
    let mut overrides = vec![("motion.estimator", "\"dis\"")];
    overrides.extend_from_slice(extra);
    common::tiny(out, &overrides)
}

#[test]
fn step_zero_motion_model_equals_the_visual_only_model_exactly() {
    let fixture = repo_root().join("tests/fixtures/qwen2_5_vl/tiny-a");
    let model = Qwen25Vl::load(&CheckpointFiles::from_dir(&fixture).unwrap(), DType::F32, &Device::Cpu).unwrap();
    let inputs = candle_core::safetensors::load(fixture.join("inputs.safetensors"), &Device::Cpu).unwrap();
    let ids: Vec<u32> =
        inputs["input_ids"].flatten_all().unwrap().to_dtype(DType::I64).unwrap().to_vec1::<i64>().unwrap().iter().map(|&t| t as u32).collect();
    let kinds =
        inputs["mm_token_type_ids"].flatten_all().unwrap().to_vec1::<i64>().unwrap().iter().map(|&t| TokenKind::from_id(t).unwrap()).collect();
    let batch = PromptBatch::single(ids, kinds);
    let grid: Vec<usize> = inputs["video_grid_thw"].flatten_all().unwrap().to_vec1::<i64>().unwrap().iter().map(|&g| g as usize).collect();
    let grids = vec![[grid[0], grid[1], grid[2]]];
    let pixels = inputs["pixel_values_videos"].clone();
    let vision = VisionInputs {
        images: None,
        videos: Some(PixelInput { pixel_values: pixels.clone(), grids: grids.clone() }),
        video_seconds_per_grid: vec![1.0],
    };
    let motion = PixelInput { pixel_values: seeded::randn(pixels.shape(), 1.0, 1, &Device::Cpu).unwrap(), grids };

    let vars = Connector::init_vars(model.config().text.hidden_size, 3, &Device::Cpu).unwrap();
    let branch = MotionBranch::from_visual(MotionTower::qwen25(model.visual()), &vars).unwrap();
    let fused = vision_features(&model, Some(&branch), &vision, Some(&motion)).unwrap();
    let plain = vision_features(&model, None, &vision, None).unwrap();
    let positions = model.positions(&batch, &vision).unwrap();
    let logits = |f| model.forward_embeds(&model.embed(&batch, f).unwrap(), &batch.mask, &positions).unwrap();
    let (a, b) = (logits(&fused), logits(&plain));
    assert_eq!(a.flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.flatten_all().unwrap().to_vec1::<f32>().unwrap());

    // Once the connector's last layer is non-zero the motion tokens do change the output.
    vars.iter().find(|(n, _)| n == "connector.fc2.weight").unwrap().1.set(&seeded::randn((96, 96), 0.1, 2, &Device::Cpu).unwrap()).unwrap();
    let moved =
        vision_features(&model, Some(&MotionBranch::from_visual(MotionTower::qwen25(model.visual()), &vars).unwrap()), &vision, Some(&motion))
            .unwrap();
    let c = logits(&moved);
    let diff = (c - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    assert!(diff > 1e-4, "a trained connector must reach the logits");
}

#[test]
fn only_lora_and_connector_learn_and_the_checkpoint_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = tiny_motion(dir.path(), &[("optim.max_steps", "3"), ("checkpoint.every", "3")]);
    let mut trainer = Trainer::new(&recipe, None).unwrap();
    for _ in 0..3 {
        trainer.train_step().unwrap();
    }
    let base = CheckpointWeights::open(&CheckpointFiles::from_dir(&dir.path().join("base-model")).unwrap().weights).unwrap();
    let mut model = trainer.model().clone();
    for (name, linear) in model.linears_mut() {
        if name == "lm_head" {
            continue;
        }
        let stored = base.load(&format!("{name}.weight"), DType::F32, &Device::Cpu).unwrap();
        assert_eq!(
            linear.weight().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            stored.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            "{name} changed"
        );
    }
    let connector = trainer.connector_vars().expect("motion run has a connector");
    let fc2 = &connector.iter().find(|(n, _)| n == "connector.fc2.weight").unwrap().1;
    assert!(fc2.as_tensor().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0, "connector's last layer never moved");

    // The checkpoint holds the connector and the estimator it was trained with.
    let checkpoint = dir.path().join("checkpoint-3");
    let meta = MotionMeta::read(&checkpoint).unwrap().expect("motion.json");
    assert_eq!(meta.estimator, "dis");
    assert!(!meta.own_encoder);
    let loaded = MotionBranch::load(&checkpoint, &meta, trainer.model().motion_tower(), &Device::Cpu).unwrap();
    let probe = seeded::randn((5, 96), 1.0, 3, &Device::Cpu).unwrap();
    let live = Connector::from_vars(connector).unwrap();
    assert_eq!(
        loaded.connector.forward(&probe).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        live.forward(&probe).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap()
    );
    assert!(dir.path().join("flow-cache").read_dir().unwrap().next().is_some(), "flows are cached");
}

#[test]
fn motion_runs_resume_exactly_and_refuse_another_estimator() {
    let settings = [("checkpoint.every", "2"), ("optim.max_steps", "4")];
    let whole = tempfile::tempdir().unwrap();
    let uninterrupted: Vec<f64> = Trainer::new(&tiny_motion(whole.path(), &settings), None).unwrap().run().unwrap().iter().map(|l| l.loss).collect();
    let split = tempfile::tempdir().unwrap();
    let mut killed = Trainer::new(&tiny_motion(split.path(), &settings), None).unwrap();
    let mut losses: Vec<f64> = (0..2).map(|_| killed.train_step().unwrap().loss).collect();
    drop(killed);
    losses.extend(Trainer::new(&tiny_motion(split.path(), &settings), Some("auto")).unwrap().run().unwrap().iter().map(|l| l.loss));
    assert_eq!(losses, uninterrupted);

    let err = Trainer::new(&tiny_motion(split.path(), &[("motion.estimator", "\"dis-fast\"")]), Some("auto")).err().expect("estimator mismatch");
    assert!(err.to_string().contains("dis"), "{err}");
    let err = Trainer::new(&tiny_motion(split.path(), &[("motion.estimator", "\"none\"")]), Some("auto")).err().expect("motion mismatch");
    assert!(err.to_string().contains("motion"), "{err}");
}

#[test]
fn motion_encoder_stays_the_frozen_base_tower_when_the_vision_tower_gets_lora() {
    use motionvl_models::lora::{LoraConfig, LoraWeights};
    let fixture = repo_root().join("tests/fixtures/qwen2_5_vl/tiny-a");
    let mut model = Qwen25Vl::load(&CheckpointFiles::from_dir(&fixture).unwrap(), DType::F32, &Device::Cpu).unwrap();
    let inputs = candle_core::safetensors::load(fixture.join("inputs.safetensors"), &Device::Cpu).unwrap();
    let grid: Vec<usize> = inputs["video_grid_thw"].flatten_all().unwrap().to_vec1::<i64>().unwrap().iter().map(|&g| g as usize).collect();
    let grids = [[grid[0], grid[1], grid[2]]];
    let pixels = &inputs["pixel_values_videos"];
    let base = model.visual().forward(pixels, &grids).unwrap();

    let targets = ["gate_proj", "up_proj", "down_proj", "qkv", "proj"].map(String::from).to_vec();
    let lora = LoraWeights::init(
        &model.linear_shapes(),
        &LoraConfig { rank: 4, alpha: 8.0, target_modules: targets, adapt_vision: true, ..LoraConfig::default() },
        1,
        &Device::Cpu,
    )
    .unwrap();
    for (k, pair) in lora.modules.values().enumerate() {
        pair.b.set(&seeded::randn(pair.b.shape(), 0.5, 100 + k as u64, &Device::Cpu).unwrap()).unwrap();
    }
    lora.attach(model.linears_mut()).unwrap();
    let adapted = model.visual().forward(pixels, &grids).unwrap();
    let moved = (&adapted - &base).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    assert!(moved > 1e-3, "the vision LoRA must change the visual path");

    let vars = Connector::init_vars(96, 0, &Device::Cpu).unwrap();
    let branch = MotionBranch::from_visual(MotionTower::qwen25(model.visual()), &vars).unwrap();
    let motion = branch.encoder.forward(pixels, &grids).unwrap();
    assert_eq!(motion.flatten_all().unwrap().to_vec1::<f32>().unwrap(), base.flatten_all().unwrap().to_vec1::<f32>().unwrap());
}

#[test]
fn conversation_rows_read_officially_train_visual_only_in_a_motion_run() {
    // The official loader gives conversation rows no `video_tchw`: the model runs them without
    // motion, so the connector sees no gradient while LoRA learns.
    let dir = tempfile::tempdir().unwrap();
    let recipe = tiny_motion(dir.path(), &[("optim.max_steps", "2"), ("data.llava_rows", "\"official\""), ("checkpoint.every", "100")]);
    let trainer = Trainer::new(&recipe, None).unwrap();
    let values = |vars: &[(String, candle_core::Var)]| {
        vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect::<Vec<_>>()
    };
    let connector = values(trainer.connector_vars().unwrap());
    let lora = trainer.lora().named_vars();
    let lora_before = values(&lora);
    let logs = trainer.run().unwrap();
    assert_eq!(logs.len(), 2);
    assert_ne!(values(&lora), lora_before, "LoRA learns");
    let saved =
        candle_core::safetensors::load(dir.path().join("checkpoint-2").join(motionvl_models::motion::MOTION_WEIGHTS_FILE), &Device::Cpu).unwrap();
    for (name, before) in &connector {
        let after = saved[name].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(&after, before, "{name} moved, so motion reached a conversation row");
    }
}
