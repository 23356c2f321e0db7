//! Mid-size Qwen3-VL benchmark: prefill forward and forward+backward (vision frozen, every
//! language-model weight trained, loss on the last 30 tokens) with random f32 weights, against
//! transformers on the same machine (`tools/bench/qwen3vl_midsize.py`, same config and inputs,
//! SDPA attention unless `ATTN=eager`). The Qwen2.5-VL bench beside it (`qwen25vl_midsize`)
//! has the same shape; this one adds DeepStack and the per-frame video blocks.
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-models --bench qwen3vl_midsize`
//!
//! Every measurement runs in its own process (this binary with `--measure MODE`, the script with
//! `--mode MODE`), so each peak RSS is its own.

use std::process::Command;

use anyhow::Context;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use motionvl_models::machine::{MachineReport, peak_rss_mib};
use motionvl_models::prompt::{PixelInput, PromptBatch, VisionInputs, causal_lm_loss};
use motionvl_models::qwen3vl::{Qwen3Vl, Qwen3VlConfig};
use motionvl_models::rope::TokenKind;
use serde_json::{Value, json};

mod common;
use common::{RandomWeights, as_the_cli_runs, child, median_seconds};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CONFIG: &str = include_str!("../../configs/models/midsize-qwen3vl.json");
/// A 16-frame 256×256 video: grid (t, h, w) in patches of 16 (2,048 patches, as the Qwen2.5-VL
/// bench's 224×224 at patch 14).
const GRID: [usize; 3] = [8, 16, 16];
/// Tokens with a label at the end of the prompt.
const LABELLED: usize = 30;
/// Text ids standing for each step's `<t seconds>` (five tokens, as `<0.2 seconds>` tokenises).
const TIMESTAMP: [u32; 5] = [27, 15, 13, 17, 6];

/// The benchmark's prompt: 20 text tokens, per temporal step a timestamp and its vision block,
/// 40 text tokens; labels on the last 30.
fn prompt(cfg: &Qwen3VlConfig) -> (PromptBatch, Vec<Vec<i64>>) {
    let mut ids = vec![151644u32];
    ids.extend([100; 20]);
    for _ in 0..GRID[0] {
        ids.extend(TIMESTAMP);
        ids.push(cfg.vision_start_token_id);
        ids.extend(std::iter::repeat_n(cfg.video_token_id, GRID[1] * GRID[2] / 4));
        ids.push(cfg.vision_end_token_id);
    }
    ids.extend([200; 40]);
    let kinds = ids.iter().map(|&i| if i == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }).collect();
    let len = ids.len();
    let labels = vec![ids.iter().enumerate().map(|(i, &t)| if i + LABELLED >= len { t as i64 } else { -100 }).collect()];
    (PromptBatch::single(ids, kinds), labels)
}

/// One measurement in this process → its JSON line.
fn measure(mode: &str) -> anyhow::Result<Value> {
    let device = Device::Cpu;
    let cfg = Qwen3VlConfig::from_json(CONFIG).map_err(anyhow::Error::msg)?;
    let weights = RandomWeights::default();
    let model = Qwen3Vl::new(&cfg, VarBuilder::from_backend(Box::new(weights.clone()), DType::F32, device.clone()))?;
    let (batch, labels) = prompt(&cfg);
    let patches = GRID.iter().product::<usize>();
    let inputs = VisionInputs {
        images: None,
        videos: Some(PixelInput { pixel_values: Tensor::randn(0f32, 1.0, (patches, cfg.vision.patch_dim()), &device)?, grids: vec![GRID] }),
        video_seconds_per_grid: Vec::new(),
    };
    let timed = |pass: &dyn Fn() -> anyhow::Result<Option<candle_core::backprop::GradStore>>| -> anyhow::Result<f64> {
        if let Some(grads) = pass()? {
            weights.require_all_reached(&grads, mode)?;
        }
        median_seconds(|| pass().map(drop), 3)
    };
    let seconds = match mode {
        "prefill" => timed(&|| {
            model.forward(&batch, &inputs, None)?;
            Ok(None)
        })?,
        // The trainer's path: the LM head on the labelled rows only (`motionvl_models::training_loss`).
        "train" => timed(&|| {
            let positions = model.positions(&batch, &inputs)?;
            Ok(Some(model.training_loss(&batch, &model.encode_vision(&inputs)?, &positions, &labels)?.backward(1.0)?))
        })?,
        // The same work as transformers: logits of every token, then the loss.
        "train-full-logits" => timed(&|| Ok(Some(causal_lm_loss(&model.forward(&batch, &inputs, None)?, &labels)?.backward()?)))?,
        other => anyhow::bail!("unknown mode `{other}` (prefill, train, train-full-logits)"),
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
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/qwen3vl_midsize.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let cfg = Qwen3VlConfig::from_json(CONFIG).map_err(anyhow::Error::msg)?;
    println!("prompt: {} tokens, video grid {GRID:?}", prompt(&cfg).0.len());
    let before = MachineReport::now();
    println!("machine {}", serde_json::to_string(&before)?);
    let plan = [
        ("prefill forward (logits of every token)", "prefill", "prefill"),
        ("forward + backward (motionvl: LM head on the 30 labelled rows)", "train", "train"),
        ("forward + backward (both: logits of every token)", "train-full-logits", "train"),
    ];
    let mut torch_runs: std::collections::HashMap<&str, Option<Value>> = Default::default();
    let mut rows = Vec::new();
    for (label, mode, torch_mode) in plan {
        let torch = torch_runs
            .entry(torch_mode)
            .or_insert_with(|| child(Command::new(&python).args([script, "--mode", torch_mode]), "pytorch reference"))
            .clone();
        let candle = child(as_the_cli_runs(Command::new(&exe).args(["--measure", mode])), "candle measurement").context(mode)?;
        rows.push((label, candle, torch));
    }
    let after = MachineReport::now();
    if let Some(t) = torch_runs.values().flatten().next() {
        println!(
            "pytorch {}",
            json!({ "torch": t["torch"], "transformers": t["transformers"], "cpu_capability": t["cpu_capability"], "threads": t["threads"], "attention": t["attention"] })
        );
    }
    println!("load average: {:.2} before, {:.2} after", before.load_1m, after.load_1m);
    println!("\n| | motionvl | PyTorch | PyTorch / motionvl time |\n|---|---|---|---|");
    for (label, candle, torch) in &rows {
        let cs = candle["seconds"].as_f64().unwrap_or(f64::NAN);
        let field = |k: &str| torch.as_ref().and_then(|t| t[k].as_f64()).unwrap_or(f64::NAN);
        let (ts, tmem) = (field("seconds"), field("peak_rss_MiB"));
        println!("| {label} | {cs:.3} s | {ts:.3} s | {:.2}× |", ts / cs);
        println!("| … peak RSS | {} MiB | {tmem} MiB | {:.2} |", candle["peak_rss_MiB"], tmem / candle["peak_rss_MiB"].as_f64().unwrap_or(f64::NAN));
    }
    Ok(())
}
