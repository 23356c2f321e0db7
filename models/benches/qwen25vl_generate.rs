//! Generation throughput on the SIS-Bench protocol's shape against transformers' `generate`:
//! the mid-size Qwen2.5-VL (random f32 weights), greedy decoding of a left-padded batch of
//! prompts that each hold a 16-frame 224×224 video and a multiple-choice question of
//! 40 + 6·row tokens, every row generating the same number of tokens (no stop token), with
//! the same inputs on both sides (`tools/bench/qwen25vl_generate.py`, SDPA unless `ATTN=eager`).
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-models --bench qwen25vl_generate [-- --rows 4 --new-tokens 32]`
//!
//! Reports whole-call tokens/s (prefill included, as an evaluation sees it) and decode tokens/s
//! (the call with N tokens minus the call with one), each side in its own process, the Candle side
//! with the allocator setting of motionvl's binaries (`MIMALLOC_PURGE_DELAY=-1`).

use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use candle_core::{Device, Tensor};
use motionvl_models::Qwen25VlConfig;
use motionvl_models::init::random_model;
use motionvl_models::machine::{MachineReport, peak_rss_mib};
use motionvl_models::qwen25vl::{GenerateOptions, PixelInput, PromptBatch, VisionInputs};
use motionvl_models::rope::TokenKind;
use serde_json::{Value, json};

mod common;
use common::{as_the_cli_runs, child};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const CONFIG: &str = include_str!("../../configs/models/midsize.json");
const GRID: [usize; 3] = [8, 16, 16];
const PAD: u32 = 151643;

fn flag(args: &[String], name: &str, default: usize) -> anyhow::Result<usize> {
    match args.iter().position(|a| a == name) {
        Some(i) => args.get(i + 1).context("missing value")?.parse().with_context(|| format!("{name} takes a positive integer")),
        None => Ok(default),
    }
}

/// The left-padded batch the Python side builds.
fn prompts(cfg: &Qwen25VlConfig, rows: usize) -> PromptBatch {
    let video = GRID.iter().product::<usize>() / 4;
    let rows: Vec<Vec<u32>> = (0..rows)
        .map(|r| {
            let mut ids = vec![151644u32];
            ids.extend([100; 20]);
            ids.push(cfg.vision_start_token_id);
            ids.extend(std::iter::repeat_n(cfg.video_token_id, video));
            ids.push(cfg.vision_end_token_id);
            ids.extend(std::iter::repeat_n(200 + r as u32, 40 + 6 * r));
            ids
        })
        .collect();
    let width = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut batch = PromptBatch { ids: vec![], mask: vec![], kinds: vec![] };
    for ids in rows {
        let pad = width - ids.len();
        batch.mask.push((0..width).map(|i| i >= pad).collect());
        batch.kinds.push(
            (0..pad)
                .map(|_| TokenKind::Text)
                .chain(ids.iter().map(|&t| if t == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }))
                .collect(),
        );
        batch.ids.push(std::iter::repeat_n(PAD, pad).chain(ids).collect());
    }
    batch
}

fn measure(rows: usize, new_tokens: usize) -> anyhow::Result<Value> {
    let device = Device::Cpu;
    let cfg = Qwen25VlConfig::from_json(CONFIG).map_err(anyhow::Error::msg)?;
    let (model, _) = random_model(&cfg, 0.02, 0, &device)?;
    let batch = prompts(&cfg, rows);
    let patches = GRID.iter().product::<usize>();
    let inputs = VisionInputs {
        images: None,
        videos: Some(PixelInput {
            pixel_values: Tensor::randn(0f32, 1.0, (rows * patches, cfg.vision.patch_dim()), &device)?,
            grids: vec![GRID; rows],
        }),
        video_seconds_per_grid: vec![1.0; rows],
    };
    let median = |new: usize| -> anyhow::Result<f64> {
        let options = GenerateOptions { max_new_tokens: new, stop_ids: vec![], keep_logits: false };
        let out = model.generate(&batch, &inputs, None, &options)?;
        anyhow::ensure!(out.tokens.iter().all(|t| t.len() == new), "every row must generate {new} tokens");
        let mut times = Vec::new();
        for _ in 0..3 {
            let start = Instant::now();
            model.generate(&batch, &inputs, None, &options)?;
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        Ok(times[1])
    };
    let (full, prefill) = (median(new_tokens)?, median(1)?);
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    Ok(json!({
        "rows": rows, "new_tokens": new_tokens, "prompt_tokens": batch.len(),
        "generate_s": round(full), "prefill_s": round(prefill),
        "tokens_per_s": round((rows * new_tokens) as f64 / full),
        "decode_tokens_per_s": round((rows * (new_tokens - 1)) as f64 / (full - prefill)),
        "peak_rss_MiB": peak_rss_mib().map_or(f64::NAN, f64::round),
    }))
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rows = flag(&args, "--rows", 4)?;
    let new_tokens = flag(&args, "--new-tokens", 32)?;
    anyhow::ensure!(rows > 0 && new_tokens > 1, "--rows must be ≥ 1 and --new-tokens ≥ 2");
    if args.iter().any(|a| a == "--measure") {
        println!("{}", measure(rows, new_tokens)?);
        return Ok(());
    }
    let (r, n) = (rows.to_string(), new_tokens.to_string());
    let before = MachineReport::now();
    println!("machine {}", serde_json::to_string(&before)?);
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/qwen25vl_generate.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let torch = child(Command::new(python).args([script, "--rows", &r, "--new-tokens", &n]), "transformers generate");
    let candle =
        child(as_the_cli_runs(Command::new(std::env::current_exe()?).args(["--measure", "--rows", &r, "--new-tokens", &n])), "candle generate")
            .context("candle side")?;
    println!("load average: {:.2} before, {:.2} after", before.load_1m, MachineReport::now().load_1m);
    println!("candle  {candle}");
    if let Some(torch) = torch {
        println!("pytorch {torch}");
        let ratio = |k: &str| candle[k].as_f64().unwrap_or(f64::NAN) / torch[k].as_f64().unwrap_or(f64::NAN);
        println!("tokens/s motionvl / transformers: whole call {:.2}×, decode {:.2}×", ratio("tokens_per_s"), ratio("decode_tokens_per_s"));
    }
    Ok(())
}
