//! Seconds per SFT optimiser step and peak memory, with and without gradient checkpointing,
//! against transformers + PEFT on the same machine: the mid-size Qwen2.5-VL of
//! `models/benches/qwen25vl_midsize.rs`, LoRA r32/α64/dropout 0.05 on the language model,
//! AdamW, one micro-batch (a 16-frame 224×224 video, 575 tokens, loss on the last 30), f32.
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-train --bench sft_step` — each configuration
//! runs in its own process so that each peak RSS is its own.

use std::process::Command;
use std::time::Instant;

use candle_core::{Device, Tensor};
use motionvl_models::init::random_model;
use motionvl_models::lora::{LoraConfig, LoraWeights};
use motionvl_models::qwen25vl::{causal_lm_loss, PixelInput, PromptBatch, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_models::Qwen25VlConfig;
use motionvl_train::optim::{AdamW, AdamWConfig};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The mid-size config shared by the benchmarks (and the PyTorch scripts beside them).
const CONFIG: &str = include_str!("../../configs/models/midsize.json");

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// One configuration, in this process; prints a JSON line.
fn measure(checkpointing: bool) -> anyhow::Result<()> {
    let device = Device::Cpu;
    let cfg = Qwen25VlConfig::from_json(CONFIG).map_err(anyhow::Error::msg)?;
    let (mut model, _) = random_model(&cfg, 0.02, 0, &device)?;
    let recomputed = checkpointing.then(|| model.enable_gradient_checkpointing());
    let lora = LoraWeights::init(&model.linear_shapes(), &LoraConfig::default(), 0, &device)?;
    lora.attach(model.linears_mut())?;
    lora.runtime().set_training(true);
    let adam = AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
    let mut optim = AdamW::new(vec![("lora".into(), 1e-5, lora.named_vars())], adam)?;

    let grid = [8, 16, 16];
    let patches: usize = grid.iter().product();
    let mut ids = vec![151644u32];
    ids.extend([100; 20]);
    ids.push(cfg.vision_start_token_id);
    ids.extend(std::iter::repeat_n(cfg.video_token_id, patches / 4));
    ids.push(cfg.vision_end_token_id);
    ids.extend([200; 40]);
    let kinds = ids.iter().map(|&i| if i == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }).collect();
    let n = ids.len();
    let labels = vec![ids.iter().enumerate().map(|(i, &t)| if i + 30 >= n { t as i64 } else { -100 }).collect::<Vec<_>>()];
    let batch = PromptBatch::single(ids, kinds);
    let inputs = VisionInputs {
        images: None,
        videos: Some(PixelInput { pixel_values: Tensor::randn(0f32, 1.0, (patches, 1176), &device)?, grids: vec![grid] }),
        video_seconds_per_grid: vec![1.0],
    };
    let mut step = || -> anyhow::Result<()> {
        let logits = model.forward(&batch, &inputs, None)?;
        let mut grads = causal_lm_loss(&logits, &labels)?.backward()?;
        if let Some(r) = &recomputed {
            r.merge_into(&mut grads)?;
        }
        optim.accumulate(&grads)?;
        optim.step_with_clip(1.0, 1.0)?;
        Ok(())
    };
    step()?;
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        step()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let trainable: usize = lora.named_vars().iter().map(|(_, v)| v.elem_count()).sum();
    println!(
        "{}",
        serde_json::json!({"checkpointing": checkpointing, "trainable_M": trainable as f64 / 1e6,
            "step_s": (times[1] * 1000.0).round() / 1000.0, "peak_rss_MiB": peak_rss_mib().round()})
    );
    Ok(())
}

fn run_child(program: &str, args: &[&str]) -> Option<serde_json::Value> {
    let out = Command::new(program).args(args).output().ok()?;
    if !out.status.success() {
        eprintln!("{program} {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last()?).ok()
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(mode) = args.iter().position(|a| a == "--measure").and_then(|i| args.get(i + 1)) {
        return measure(mode == "checkpointing");
    }
    let me = std::env::current_exe()?;
    let me = me.to_string_lossy();
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/sft_step_midsize.py");
    for (label, mode, py_flag) in [("without checkpointing", "plain", None), ("with checkpointing", "checkpointing", Some("--checkpointing"))] {
        let candle = run_child(&me, &["--measure", mode]);
        let mut py_args = vec![script];
        py_args.extend(py_flag);
        let torch = run_child(&python, &py_args);
        println!("{label}:\n  candle  {}\n  pytorch {}", candle.clone().unwrap_or_default(), torch.clone().unwrap_or_default());
        if let (Some(c), Some(t)) = (candle, torch) {
            let ratio = |k: &str| t[k].as_f64().unwrap_or(f64::NAN) / c[k].as_f64().unwrap_or(f64::NAN);
            println!("  pytorch/candle: step time {:.2}x, peak memory {:.2}x", ratio("step_s"), ratio("peak_rss_MiB"));
        }
    }
    Ok(())
}
