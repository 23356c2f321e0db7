//! What the binaries' end-to-end tests share: running a binary, and a tiny Qwen2.5-VL-shaped
//! checkpoint to evaluate with.

// Each test binary compiles this module and uses only part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::Device;
use motionvl_data::text::train_tokenizer;
use motionvl_models::Qwen25VlConfig;
use motionvl_models::init::{random_model, save_checkpoint};
use serde_json::json;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `bin` in `dir`; panics with its output unless it succeeds; returns its stdout and its
/// stderr (where the training binaries report).
pub fn output(bin: &str, args: &[&str], dir: &Path) -> (String, String) {
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string());
    assert!(out.status.success(), "{bin} {args:?} failed:\n{stdout}{stderr}");
    (stdout, stderr)
}

/// Runs `bin` in `dir`, expecting it to fail; returns what it printed.
pub fn failure(bin: &str, args: &[&str], dir: &Path) -> String {
    let out = Command::new(bin)
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{bin} {args:?} succeeded:\n{text}");
    text
}

/// A tiny Qwen2.5-VL-shaped checkpoint in `dir/tiny-qwen` with random weights and a byte-level
/// tokenizer trained on `corpus` (the config's token ids come from it).
pub fn tiny_qwen(dir: &Path, corpus: &[&str]) -> PathBuf {
    let tokenizer = train_tokenizer(corpus.iter().copied(), 320).expect("tokenizer trains");
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
    let (_, tensors) = random_model(&cfg, 0.5, 11, &Device::Cpu).expect("random weights");
    let out = dir.join("tiny-qwen");
    save_checkpoint(&out, &cfg, &tensors).expect("checkpoint saved");
    tokenizer.save(out.join("tokenizer.json")).expect("tokenizer saved");
    out
}
