//! What the evaluator's end-to-end tests share: tiny Qwen2.5-VL- and Qwen3-VL-shaped checkpoints
//! and clips.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::Device;
use motionvl_data::text::train_tokenizer;
use motionvl_data::video::{EncodeSettings, VideoWriter};
use motionvl_models::Qwen25VlConfig;
use motionvl_models::backbone::Backbone;
use motionvl_models::checkpoint::transformers5_name;
use motionvl_models::init::{random_model, random_qwen3, save_checkpoint};
use motionvl_models::lora::{LoraConfig, LoraWeights};
use motionvl_models::qwen3vl::Qwen3VlConfig;
use serde_json::json;

/// A tiny Qwen2.5-VL-shaped checkpoint in `dir/tiny-model`, with a tokenizer of at most `vocab`
/// tokens trained on `corpus` (the config's token ids come from it) and weights N(0, 0.5²) drawn
/// from `seed`.
pub fn tiny_checkpoint(dir: &Path, corpus: &[String], vocab: usize, seed: u64) -> PathBuf {
    let tokenizer = train_tokenizer(corpus.iter().map(String::as_str), vocab).expect("tokenizer trains");
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
    let (_, tensors) = random_model(&cfg, 0.5, seed, &Device::Cpu).expect("random weights");
    let out = dir.join("tiny-model");
    save_checkpoint(&out, &cfg.to_hub_json(), &tensors).expect("checkpoint saved");
    tokenizer.save(out.join("tokenizer.json")).expect("tokenizer saved");
    out
}

/// A tiny Qwen3-VL-shaped checkpoint in `dir/tiny-qwen3vl` (DeepStack from its first vision
/// block, interleaved M-RoPE, patch 16), as [`tiny_checkpoint`] makes its Qwen2.5-VL one;
/// stored under transformers' module paths, as Qwen3-VL checkpoints are.
pub fn tiny_qwen3_checkpoint(dir: &Path, corpus: &[String], vocab: usize, seed: u64) -> PathBuf {
    let tokenizer = train_tokenizer(corpus.iter().map(String::as_str), vocab).expect("tokenizer trains");
    let special = tokenizer.special();
    let config = json!({
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl", "tie_word_embeddings": true,
        "image_token_id": special.image_pad, "video_token_id": special.video_pad,
        "vision_start_token_id": special.vision_start, "vision_end_token_id": special.vision_end,
        "text_config": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 5000000.0,
                        "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": true},
                        "hidden_act": "silu", "vocab_size": tokenizer.vocab_size(), "eos_token_id": [special.im_end, special.endoftext]},
        "vision_config": {"depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "in_channels": 3,
                          "out_hidden_size": 64, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                          "num_position_embeddings": 16, "deepstack_visual_indexes": [0], "hidden_act": "gelu_pytorch_tanh"}
    });
    let cfg = Qwen3VlConfig::from_json(&config.to_string()).expect("tiny config parses");
    let (_, tensors) = random_qwen3(&cfg, 0.5, seed, &Device::Cpu).expect("random weights");
    let tensors = tensors.into_iter().map(|(name, t)| (transformers5_name(&name), t)).collect();
    let out = dir.join("tiny-qwen3vl");
    save_checkpoint(&out, &cfg.to_hub_json(), &tensors).expect("checkpoint saved");
    tokenizer.save(out.join("tokenizer.json")).expect("tokenizer saved");
    out
}

/// The words of an MCQ prompt besides its question and options.
pub fn mcq_prompt_words() -> Vec<String> {
    ["Options:", "Answer with the option's letter from the given choices directly.", "A. B. C. D."].map(String::from).to_vec()
}

/// A 2 s, 10 FPS, 64×64 clip of grey `shade` with a green bar sliding sideways.
pub fn write_clip(path: &Path, shade: u8) {
    let settings = EncodeSettings { frame_rate: (10, 1), ..EncodeSettings::default() };
    let mut writer = VideoWriter::create(path, 64, 64, &settings).expect("video writer");
    for t in 0..20 {
        let mut frame = ndarray::Array3::<u8>::from_elem((64, 64, 3), shade);
        for y in 0..64 {
            for x in (t * 2)..(t * 2 + 8) {
                frame[[y, x, 1]] = 220;
            }
        }
        writer.push(frame.view()).expect("push frame");
    }
    writer.finish().expect("finish clip");
}

/// Writes a `train sft --motion`-style checkpoint folder of the model at `base` (either family): `adapter/` (a LoRA with B = 0),
/// `motion.json` for the DIS estimator, and `motion.safetensors` with a connector whose last
/// layer is zero (step 0) or filled in.
pub fn motion_checkpoint(dir: &Path, base: &Path, name: &str, trained_connector: bool) -> PathBuf {
    let files = motionvl_models::CheckpointFiles::from_dir(base).expect("files");
    let model = Backbone::load(&files, candle_core::DType::F32, &Device::Cpu).expect("model loads");
    let out = dir.join(name);
    let lora =
        LoraWeights::init(&model.linear_shapes(), &LoraConfig { rank: 4, alpha: 8.0, ..LoraConfig::default() }, 3, &Device::Cpu).expect("lora");
    lora.save_peft(&out.join("adapter"), None).expect("adapter saved");
    let estimator = motionvl_flow::estimator_by_name("dis", None, &Device::Cpu).expect("dis estimator");
    let meta = motionvl_models::motion::MotionMeta {
        estimator: estimator.name().to_string(),
        estimator_settings: estimator.settings(),
        pseudo_images: serde_json::to_value(motionvl_flow::PseudoImageConfig::default()).expect("json"),
        own_encoder: false,
        connector: None,
    };
    meta.write(&out).expect("motion.json");
    let width = model.hidden_size();
    let vars = motionvl_models::motion::Connector::init_vars(width, 11, &Device::Cpu).expect("connector");
    let mut tensors = std::collections::HashMap::new();
    for (name, var) in vars {
        let t = var.as_tensor().clone();
        let t = if trained_connector && name.starts_with("connector.fc2") {
            let values: Vec<f32> = (0..t.elem_count()).map(|i| 0.8 * (i as f32 * 0.61).cos()).collect();
            candle_core::Tensor::from_vec(values, t.shape(), &Device::Cpu).expect("tensor")
        } else {
            t
        };
        tensors.insert(name, t);
    }
    candle_core::safetensors::save(&tensors, out.join(motionvl_models::motion::MOTION_WEIGHTS_FILE)).expect("save");
    out
}
