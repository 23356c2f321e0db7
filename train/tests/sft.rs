//! End-to-end training on the tiny recipe (`configs/sft/tiny.toml`, eight 64×64 clips shipped
//! in `tests/data/tiny-sft`): it learns, resumes exactly, leaves frozen weights alone, writes
//! readable TensorBoard events, stops cleanly on non-finite values, and merges.

use candle_core::{DType, Device};
use motionvl_models::lora::LoraWeights;
use motionvl_models::qwen25vl::Qwen25Vl;
use motionvl_models::{CheckpointFiles, CheckpointWeights};
use motionvl_train::sft::{StepLog, TrainError, Trainer};

mod common;
use common::tiny;

fn losses(logs: &[StepLog]) -> Vec<f64> {
    logs.iter().map(|l| l.loss).collect()
}

#[test]
fn tiny_model_overfits_a_handful_of_samples() {
    let dir = tempfile::tempdir().unwrap();
    let logs = Trainer::new(&tiny(dir.path(), &[]), None).unwrap().run().unwrap();
    let first = logs[0].loss;
    let last: f64 = logs[logs.len() - 5..].iter().map(|l| l.loss).sum::<f64>() / 5.0;
    assert!(last <= 0.2 * first, "loss fell from {first:.3} to {last:.3}, less than 80%");
    let written: Vec<StepLog> =
        std::fs::read_to_string(dir.path().join("trainer_log.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(written.len(), logs.len(), "trainer_log.jsonl holds one line per optimiser step");
    for (w, l) in written.iter().zip(&logs) {
        assert_eq!(w.step, l.step);
        assert!((w.loss - l.loss).abs() <= 1e-12 * l.loss.abs(), "step {}: logged {} vs {}", l.step, w.loss, l.loss);
    }
}

#[test]
fn resuming_reproduces_the_uninterrupted_loss_sequence() {
    let settings = [("checkpoint.every", "3"), ("optim.max_steps", "6")];
    let whole = tempfile::tempdir().unwrap();
    let uninterrupted = losses(&Trainer::new(&tiny(whole.path(), &settings), None).unwrap().run().unwrap());
    assert_eq!(uninterrupted.len(), 6);

    // The same run killed after its checkpoint at step 3, then resumed.
    let split = tempfile::tempdir().unwrap();
    let mut killed = Trainer::new(&tiny(split.path(), &settings), None).unwrap();
    let first: Vec<StepLog> = (0..3).map(|_| killed.train_step().unwrap()).collect();
    drop(killed);
    let second = Trainer::new(&tiny(split.path(), &settings), Some("auto")).unwrap().run().unwrap();
    let mut resumed = losses(&first);
    resumed.extend(losses(&second));
    assert_eq!(resumed, uninterrupted, "3 steps + resume + 3 steps must equal 6 steps exactly");
    let log = std::fs::read_to_string(split.path().join("trainer_log.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 6);
}

#[test]
fn frozen_weights_stay_bit_identical_and_adapters_learn() {
    let dir = tempfile::tempdir().unwrap();
    let mut trainer = Trainer::new(&tiny(dir.path(), &[("optim.max_steps", "3")]), None).unwrap();
    for _ in 0..3 {
        trainer.train_step().unwrap();
    }
    let base = CheckpointWeights::open(&CheckpointFiles::from_dir(&dir.path().join("base-model")).unwrap().weights).unwrap();
    let mut model = trainer.model().clone();
    let linears = model.linears_mut();
    assert!(!linears.is_empty());
    for (name, linear) in linears {
        if name == "lm_head" {
            continue; // tied to the embedding
        }
        let stored = base.load(&format!("{name}.weight"), DType::F32, &Device::Cpu).unwrap();
        let now = linear.weight().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(now, stored.flatten_all().unwrap().to_vec1::<f32>().unwrap(), "{name} changed");
    }
    let moved = trainer.lora().modules.values().any(|p| p.b.as_tensor().abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0);
    assert!(moved, "LoRA B left zero after three steps");
}

#[test]
fn tensorboard_events_match_the_step_log() {
    let dir = tempfile::tempdir().unwrap();
    let logs = Trainer::new(&tiny(dir.path(), &[("optim.max_steps", "4")]), None).unwrap().run().unwrap();
    let scalars = motionvl_train::tensorboard::read_scalars(dir.path().join("tensorboard")).unwrap();
    let loss: Vec<(i64, f32)> = scalars.iter().filter(|s| s.tag == "train/loss").map(|s| (s.step, s.value)).collect();
    assert_eq!(loss, logs.iter().map(|l| (l.step as i64, l.loss as f32)).collect::<Vec<_>>());
    for tag in ["train/learning_rate", "train/epoch", "train/grad_norm", "train/tokens_per_s", "train/samples_per_s"] {
        assert_eq!(scalars.iter().filter(|s| s.tag == tag).count(), 4, "{tag}");
    }
}

#[test]
fn non_finite_loss_stops_with_step_and_samples_and_keeps_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    // The first step's loss is computed before any update, so it is finite and checkpointed.
    let absurd = [("optim.lr", "1e30"), ("optim.max_grad_norm", "0.0"), ("optim.warmup_ratio", "0.0"), ("checkpoint.every", "1")];
    let mut trainer = Trainer::new(&tiny(dir.path(), &absurd), None).unwrap();
    let err = (0..20).find_map(|_| trainer.train_step().err()).expect("an absurd learning rate must blow up");
    let failed_at = match &err {
        TrainError::NonFinite { step, samples, .. } => {
            assert!(*step > 1, "{err}");
            assert!(!samples.is_empty(), "{err}");
            *step
        }
        other => panic!("expected a non-finite error, got {other}"),
    };
    let last_good = dir.path().join(format!("checkpoint-{}/COMPLETE", failed_at - 1));
    assert!(last_good.is_file(), "the last good checkpoint stays");
}

#[test]
fn merged_checkpoint_loads_and_equals_base_plus_adapter() {
    let dir = tempfile::tempdir().unwrap();
    Trainer::new(&tiny(dir.path(), &[("optim.max_steps", "2"), ("checkpoint.every", "2")]), None).unwrap().run().unwrap();
    let base = CheckpointFiles::from_dir(&dir.path().join("base-model")).unwrap();
    let adapter = dir.path().join("checkpoint-2");
    let out = dir.path().join("merged");
    let summary = motionvl_train::merge::merge(&base, &adapter, &out, 64 << 10).unwrap();
    assert!(summary.shards > 1, "a 64 KiB limit must shard the tiny model");
    assert!(out.join("model.safetensors.index.json").is_file() && out.join("tokenizer.json").is_file());

    let merged = Qwen25Vl::load(&CheckpointFiles::from_dir(&out).unwrap(), DType::F32, &Device::Cpu).unwrap();
    let mut adapted = Qwen25Vl::load(&base, DType::F32, &Device::Cpu).unwrap();
    LoraWeights::load_peft(&adapter, &Device::Cpu).unwrap().attach(adapted.linears_mut()).unwrap();
    let ids: Vec<u32> = vec![1, 20, 30, 40, 2];
    let batch = motionvl_models::qwen25vl::PromptBatch::single(ids.clone(), vec![motionvl_models::rope::TokenKind::Text; ids.len()]);
    let a = merged.forward(&batch, &Default::default(), None).unwrap();
    let b = adapted.forward(&batch, &Default::default(), None).unwrap();
    let diff = (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
    assert!(diff < 1e-4, "merged vs adapted logits differ by {diff}");

    // A previous merge is replaced; a folder the merge did not make (here the run itself) is
    // refused before anything is written, and left as it was.
    motionvl_train::merge::merge(&base, &adapter, &out, 64 << 10).expect("a previous merge is replaced");
    let before: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    let err = motionvl_train::merge::merge(&base, &adapter, dir.path(), 64 << 10).expect_err("the run folder is refused").to_string();
    assert!(err.contains("not a previous merge") && err.contains("choose another --out"), "{err}");
    let after: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(before, after, "the run is untouched");
}
