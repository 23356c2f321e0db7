//! Mid-size Qwen2.5-VL benchmark: prefill forward and forward+backward (vision frozen, every
//! language-model weight trained, loss on the last 30 tokens) with random f32 weights, against
//! transformers on the same machine (`tools/bench/qwen25vl_midsize.py`, same config and inputs,
//! SDPA attention unless `ATTN=eager`).
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-models --bench qwen25vl_midsize`
//!
//! Every measurement runs in its own process (this binary with `--measure MODE`, the script with
//! `--mode MODE`), so each peak RSS is its own. The report says what ran it: CPU, vector
//! instructions, the matmul kernel each side dispatches to, threads, load before and after, and
//! the achieved GFLOP/s of each pass (matmul FLOPs counted from the config, `motionvl_models::flops`)
//! — the figures that tell two machines, or two kernels, apart.

use std::process::Command;

use anyhow::Context;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use motionvl_models::Qwen25VlConfig;
use motionvl_models::flops::ForwardFlops;
use motionvl_models::machine::{MachineReport, peak_rss_mib};
use motionvl_models::qwen25vl::{PixelInput, PromptBatch, Qwen25Vl, VisionInputs, causal_lm_loss};
use motionvl_models::rope::TokenKind;
use serde_json::{Value, json};

mod common;
use common::{RandomWeights, as_the_cli_runs, child, median_seconds};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The mid-size config shared by the benchmarks (and the PyTorch scripts beside them).
const CONFIG: &str = include_str!("../../configs/models/midsize.json");
/// A 16-frame 224×224 video: grid (t, h, w) in patches.
const GRID: [usize; 3] = [8, 16, 16];
/// Tokens with a label at the end of the prompt.
const LABELLED: usize = 30;
/// `(name, rows, out, in)` of the dominant matmuls: the LM head over the prompt, the decoder's
/// MLP and the vision tower's MLP (x Wᵀ, as a linear layer computes them).
const MATMULS: [(&str, usize, usize, usize); 3] = [("lm_head", 575, 151936, 512), ("decoder_mlp", 575, 1408, 512), ("vision_mlp", 2048, 1024, 256)];

/// The benchmark's prompt: 20 text tokens, the video, 40 text tokens; labels on the last 30.
fn prompt(cfg: &Qwen25VlConfig) -> (PromptBatch, Vec<Vec<i64>>) {
    let mut ids = vec![151644u32];
    ids.extend([100; 20]);
    ids.push(cfg.vision_start_token_id);
    ids.extend(std::iter::repeat_n(cfg.video_token_id, GRID.iter().product::<usize>() / 4));
    ids.push(cfg.vision_end_token_id);
    ids.extend([200; 40]);
    let kinds = ids.iter().map(|&i| if i == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }).collect();
    let len = ids.len();
    let labels = vec![ids.iter().enumerate().map(|(i, &t)| if i + LABELLED >= len { t as i64 } else { -100 }).collect()];
    (PromptBatch::single(ids, kinds), labels)
}

/// One measurement in this process → its JSON line.
fn measure(mode: &str) -> anyhow::Result<Value> {
    let device = Device::Cpu;
    if mode == "matmul" {
        let mut seconds = serde_json::Map::new();
        for (name, rows, out, inner) in MATMULS {
            let x = Tensor::randn(0f32, 1.0, (rows, inner), &device)?;
            let w = Tensor::randn(0f32, 0.02, (out, inner), &device)?;
            let s = median_seconds(
                || {
                    x.matmul(&w.t()?)?;
                    Ok(())
                },
                5,
            )?;
            seconds.insert(name.into(), json!((s * 1e5).round() / 1e5));
        }
        return Ok(json!({ "mode": mode, "matmul_s": seconds, "peak_rss_MiB": peak_rss_mib().map_or(f64::NAN, f64::round) }));
    }
    let cfg = Qwen25VlConfig::from_json(CONFIG).map_err(anyhow::Error::msg)?;
    let weights = RandomWeights::default();
    let model = Qwen25Vl::new(&cfg, VarBuilder::from_backend(Box::new(weights.clone()), DType::F32, device.clone()))?;
    let require_all_reached = |grads: &candle_core::backprop::GradStore| weights.require_all_reached(grads, mode);
    let (batch, labels) = prompt(&cfg);
    let patches = GRID.iter().product::<usize>();
    let inputs = VisionInputs {
        images: None,
        videos: Some(PixelInput { pixel_values: Tensor::randn(0f32, 1.0, (patches, cfg.vision.patch_dim()), &device)?, grids: vec![GRID] }),
        video_seconds_per_grid: vec![1.0],
    };
    let seconds = match mode {
        "prefill" => median_seconds(
            || {
                model.forward(&batch, &inputs, None)?;
                Ok(())
            },
            3,
        )?,
        // The trainer's path: the LM head on the labelled rows only, the head's and the embedding's
        // gradients made directly (`motionvl_models::training_loss`).
        "train" => {
            let pass = || -> anyhow::Result<_> {
                let positions = model.positions(&batch, &inputs)?;
                Ok(model.training_loss(&batch, &model.encode_vision(&inputs)?, &positions, &labels)?.backward(1.0)?)
            };
            require_all_reached(&pass()?)?;
            median_seconds(
                || {
                    pass()?;
                    Ok(())
                },
                3,
            )?
        }
        // The same work as transformers: logits of every token, then the loss.
        "train-full-logits" => {
            let pass = || -> anyhow::Result<_> { Ok(causal_lm_loss(&model.forward(&batch, &inputs, None)?, &labels)?.backward()?) };
            require_all_reached(&pass()?)?;
            median_seconds(
                || {
                    pass()?;
                    Ok(())
                },
                3,
            )?
        }
        other => anyhow::bail!("unknown mode `{other}` (matmul, prefill, train, train-full-logits)"),
    };
    Ok(json!({ "mode": mode, "seconds": (seconds * 1000.0).round() / 1000.0, "peak_rss_MiB": peak_rss_mib().map_or(f64::NAN, f64::round) }))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--measure") {
        let mode = args.get(i + 1).context("--measure needs a mode")?;
        println!("{}", measure(mode)?);
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/qwen25vl_midsize.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let cfg = Qwen25VlConfig::from_json(CONFIG).map_err(anyhow::Error::msg)?;
    let tokens = prompt(&cfg).0.len();
    let flops = ForwardFlops::new(&cfg, &[GRID], tokens)?;

    let before = MachineReport::now();
    println!("machine {}", serde_json::to_string(&before)?);
    let mut rows = Vec::new();
    // (mode, candle mode, FLOPs candle does, FLOPs PyTorch does)
    let plan = [
        ("prefill forward (logits of every token)", "prefill", flops.prefill(tokens), flops.prefill(tokens)),
        (
            "forward + backward (motionvl: LM head on the 30 labelled rows)",
            "train",
            flops.train_language_model(LABELLED),
            flops.train_language_model(tokens),
        ),
        (
            "forward + backward (both: logits of every token)",
            "train-full-logits",
            flops.train_language_model(tokens),
            flops.train_language_model(tokens),
        ),
    ];
    let torch_mode = |candle_mode: &str| if candle_mode == "prefill" { "prefill" } else { "train" };
    let mut torch_runs: std::collections::HashMap<&str, Option<Value>> = Default::default();
    for (label, mode, candle_flops, torch_flops) in plan {
        let torch = torch_runs
            .entry(torch_mode(mode))
            .or_insert_with(|| child(Command::new(&python).args([script, "--mode", torch_mode(mode)]), "pytorch reference"))
            .clone();
        let candle = child(as_the_cli_runs(Command::new(&exe).args(["--measure", mode])), "candle measurement").context(mode)?;
        rows.push((label, candle, candle_flops, torch, torch_flops));
    }
    let candle_mm = child(as_the_cli_runs(Command::new(&exe).args(["--measure", "matmul"])), "candle matmuls").context("matmul")?;
    let torch_mm = child(Command::new(&python).args([script, "--mode", "matmul"]), "pytorch matmuls");
    let after = MachineReport::now();

    if let Some(t) = torch_runs.values().flatten().next() {
        println!(
            "pytorch {}",
            json!({ "torch": t["torch"], "cpu_capability": t["cpu_capability"], "blas": t["blas"], "threads": t["threads"], "attention": t["attention"] })
        );
    }
    println!("load average: {:.2} before, {:.2} after", before.load_1m, after.load_1m);
    println!("\n| | motionvl | PyTorch | PyTorch / motionvl time |\n|---|---|---|---|");
    let gflops = |flops: f64, s: f64| flops / s / 1e9;
    for (label, candle, candle_flops, torch, torch_flops) in &rows {
        let cs = candle["seconds"].as_f64().unwrap_or(f64::NAN);
        let (ts, tmem) = torch
            .as_ref()
            .map_or((f64::NAN, f64::NAN), |t| (t["seconds"].as_f64().unwrap_or(f64::NAN), t["peak_rss_MiB"].as_f64().unwrap_or(f64::NAN)));
        println!(
            "| {label} | {cs:.3} s, {:.0} GFLOP/s | {ts:.3} s, {:.0} GFLOP/s | {:.2}× |",
            gflops(*candle_flops, cs),
            gflops(*torch_flops, ts),
            ts / cs
        );
        println!("| … peak RSS | {} MiB | {tmem} MiB | {:.2} |", candle["peak_rss_MiB"], tmem / candle["peak_rss_MiB"].as_f64().unwrap_or(f64::NAN));
    }
    for (name, m, n, k) in MATMULS {
        let f = 2.0 * (m * n * k) as f64;
        let cs = candle_mm["matmul_s"][name].as_f64().unwrap_or(f64::NAN);
        let ts = torch_mm.as_ref().and_then(|t| t["matmul_s"][name].as_f64()).unwrap_or(f64::NAN);
        println!(
            "| matmul {name} [{m}×{k}]·[{k}×{n}] | {:.4} s, {:.0} GFLOP/s | {ts:.4} s, {:.0} GFLOP/s | {:.2}× |",
            cs,
            gflops(f, cs),
            gflops(f, ts),
            ts / cs
        );
    }
    Ok(())
}
