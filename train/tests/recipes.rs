//! Every recipe under `configs/sft/` parses, and overrides reach the keys they name.

use std::path::Path;

use motionvl_data::text::LabelMask;
use motionvl_train::recipe::Recipe;

#[test]
fn every_recipe_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sft");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            Recipe::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
            seen += 1;
        }
    }
    assert!(seen >= 2, "expected the tiny and paper recipes");
}

#[test]
fn official_recipes_hold_the_official_scripts_settings() {
    use motionvl_data::frames::FramePolicy;
    use motionvl_data::samples::LlavaRows;
    use motionvl_train::recipe::{LossAverage, MaxSeqLenPolicy};
    // (recipe, --save_steps, motion branch): motion/run_train.sh and lora/run_train.sh.
    for (name, every, motion) in [("sis-motion-7b.toml", 1000, true), ("lora-baseline-7b.toml", 500, false)] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sft").join(name);
        let r = Recipe::load(&path, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.model.checkpoint.as_deref(), Some("Qwen/Qwen2.5-VL-7B-Instruct"), "{name}");
        assert_eq!((r.lora.rank, r.lora.alpha, r.lora.dropout), (32, 64.0, 0.05), "{name}");
        assert_eq!(r.lora.target_modules, ["q_proj", "k_proj", "v_proj", "o_proj"], "{name}");
        assert_eq!((r.optim.lr, r.optim.grad_accum, r.optim.batch_size, r.optim.epochs), (1e-5, 4, 1, 1), "{name}");
        assert_eq!((r.optim.weight_decay, r.optim.warmup_ratio, r.optim.max_grad_norm), (0.01, 0.03, 1.0), "{name}");
        assert_eq!(r.optim.loss_average, LossAverage::MicroBatch, "{name}");
        assert_eq!((r.checkpoint.every, r.checkpoint.keep), (every, 3), "{name}");
        assert_eq!(r.data.frames, Some(FramePolicy::Official { max_frames: 32 }), "{name}");
        assert_eq!((r.data.min_pixels, r.data.max_pixels), (128 * 28 * 28, 512 * 28 * 28), "{name}");
        assert_eq!((r.data.max_seq_len_policy, r.data.length_limit()), (MaxSeqLenPolicy::Unlimited, None), "{name}");
        assert_eq!((r.data.label_mask, r.data.llava_rows), (LabelMask::Official, LlavaRows::Official), "{name}");
        assert_eq!(r.motion.enabled(), motion, "{name}");
        if motion {
            assert_eq!((r.motion.estimator.as_str(), r.motion.connector_lr), ("mofnet", 2e-5), "{name}");
            assert!(r.motion.weights.as_ref().is_some_and(|w| w.ends_with("MOF_kitti.pth")), "{name}");
            // B7: the official bf16 model holds MOFNet's weights rounded to bf16.
            assert_eq!(r.motion.estimator_weights, motionvl_flow::WeightPrecision::Bf16Rounded, "{name}");
        }
    }
}

/// Only the recipe of the official training rounds MOFNet's weights; every other keeps them
/// exact, and the key reads its two spellings.
#[test]
fn mofnet_weight_precision_is_the_official_recipes_alone() {
    use motionvl_flow::WeightPrecision;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sft");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") && !path.ends_with("sis-motion-7b.toml") {
            let r = Recipe::load(&path, &[]).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.motion.estimator_weights, WeightPrecision::F32, "{}", path.display());
        }
    }
    let tiny = dir.join("tiny.toml");
    let r = Recipe::load(&tiny, &[("motion.estimator_weights".into(), "bf16-rounded".into())]).unwrap();
    assert_eq!(r.motion.estimator_weights, WeightPrecision::Bf16Rounded);
    let err = Recipe::load(&tiny, &[("motion.estimator_weights".into(), "bf16".into())]).unwrap_err().to_string();
    assert!(err.contains("bf16-rounded"), "{err}");
}

#[test]
fn length_and_loss_averaging_name_their_choices() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sft/tiny.toml");
    let tiny = Recipe::load(&path, &[]).unwrap();
    assert_eq!(tiny.data.length_limit(), Some(256), "fitting stays the default");
    let err = Recipe::load(&path, &[("data.max_seq_len_policy".into(), "cut".into())]).unwrap_err().to_string();
    assert!(err.contains("max_seq_len_policy") && err.contains("fit") && err.contains("none"), "{err}");
    let err = Recipe::load(&path, &[("optim.loss_average".into(), "sample".into())]).unwrap_err().to_string();
    assert!(err.contains("loss_average") && err.contains("micro-batch") && err.contains("tokens"), "{err}");
}

#[test]
fn paper_recipe_holds_the_paper_settings() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sft/visual-3b.toml");
    let r = Recipe::load(&path, &[]).unwrap();
    assert_eq!((r.lora.rank, r.lora.alpha, r.lora.dropout), (32, 64.0, 0.05));
    assert_eq!((r.optim.lr, r.optim.weight_decay, r.optim.warmup_ratio, r.optim.grad_accum), (1e-5, 0.01, 0.03, 8));
    assert_eq!((r.checkpoint.every, r.checkpoint.keep), (500, 3));
    assert_eq!((r.data.min_pixels, r.data.max_pixels, r.data.max_seq_len), (128 * 28 * 28, 512 * 28 * 28, 2048));
    assert!(!r.lora.adapt_vision);
}

#[test]
fn overrides_are_typed_and_typos_are_errors() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sft/tiny.toml");
    let r = Recipe::load(&path, &[("optim.lr".into(), "3e-4".into()), ("data.train".into(), "other.jsonl".into())]).unwrap();
    assert_eq!(r.optim.lr, 3e-4);
    assert_eq!(r.data.train, Path::new("other.jsonl"));
    let err = Recipe::load(&path, &[("optim.learning_rate".into(), "1".into())]).unwrap_err().to_string();
    assert!(err.contains("learning_rate"), "{err}");
}

#[test]
fn nonsense_numbers_are_refused_naming_the_key_and_range() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sft/tiny.toml");
    let cases = [
        ("optim.lr", "-1", "positive"),
        ("optim.lr", "0", "positive"),
        ("motion.connector_lr", "0.0", "positive"),
        ("optim.weight_decay", "-0.1", "≥ 0"),
        ("optim.beta1", "1.0", "[0, 1)"),
        ("optim.beta2", "1.5", "[0, 1)"),
        ("optim.eps", "0", "positive"),
        ("optim.warmup_ratio", "1.5", "[0, 1]"),
        ("optim.schedule", "linear", "cosine"),
        ("optim.grad_accum", "0", "≥ 1"),
        ("optim.batch_size", "0", "≥ 1"),
        ("optim.epochs", "0", "≥ 1"),
        ("optim.max_grad_norm", "-1", "≥ 0"),
        ("optim.max_steps", "0", "≥ 1"),
        ("optim.schedule_steps", "0", "≥ 1"),
        ("checkpoint.every", "0", "≥ 1"),
        ("data.max_seq_len", "0", "≥ 1"),
        ("data.fps", "0", "positive"),
        ("data.min_frames", "0", "≥ 1"),
        ("data.max_frames", "2", "≥ data.min_frames"),
        ("data.max_pixels", "100", "≥ data.min_pixels"),
        ("lora.rank", "0", "≥ 1"),
        ("lora.alpha", "0", "positive"),
        ("lora.dropout", "1.0", "[0, 1)"),
        ("model.init_std", "0", "positive"),
        ("model.dtype", "f8", "bf16"),
        ("model.device", "tpu", "cuda:N"),
    ];
    for (key, value, range) in cases {
        let err = Recipe::load(&path, &[(key.into(), value.into())]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(&format!("`{key}`")) && err.contains(range), "{key} = {value}: {err}");
    }
}

#[test]
fn the_label_mask_defaults_to_qwens_and_names_its_choices() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/sft/tiny.toml");
    assert_eq!(Recipe::load(&path, &[]).unwrap().data.label_mask, LabelMask::Qwen);
    let older = Recipe::load(&path, &[("data.label_mask".into(), "answer-im-end".into())]).unwrap();
    assert_eq!(older.data.label_mask, LabelMask::AnswerImEnd);
    let err = Recipe::load(&path, &[("data.label_mask".into(), "answers".into())]).unwrap_err().to_string();
    assert!(err.contains("label_mask") && err.contains("answer-im-end"), "{err}");
}

#[test]
fn known_flags_may_follow_overrides() {
    use motionvl_train::recipe::overrides_last;
    let args = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
    assert_eq!(
        overrides_last(args("train sft --optim.lr 1e-4 --max-steps 3 --data.workers=2 --resume --lora.rank -1")),
        args("train sft --max-steps 3 --resume --optim.lr 1e-4 --data.workers=2 --lora.rank -1")
    );
}
