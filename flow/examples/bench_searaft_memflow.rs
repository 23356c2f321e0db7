//! SEA-RAFT (S/M/L) and MemFlow speed against the official PyTorch code, on this machine, in
//! one run:
//!
//!     cargo run --release -p motionvl-flow --example bench_searaft_memflow -- \
//!         --sea-raft /tmp/SEA-RAFT --memflow /tmp/MemFlow [--models sea_raft_s,memflow] [--runs 3]
//!
//! Writes a 448×448 clip (3 frames), and per model runs `tools/bench/searaft_memflow_torch.py`
//! (the official network at full size on seeded random weights, which it saves for us), then
//! times ours on the same weights and frames and prints ms per pair (SEA-RAFT) or per step
//! (MemFlow, 15 iterations, memory included) for both, the ratio and the largest flow
//! difference. Needs checkouts of princeton-vl/SEA-RAFT and DQiaole/MemFlow; `PYTHON` picks
//! the interpreter; both sides use `rayon::current_num_threads()` threads (`RAYON_NUM_THREADS`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::{DType, Device, Tensor};
use motionvl_flow::FlowEstimator;
use motionvl_flow::memflow::{MemFlowConfig, MemFlowEstimator};
use motionvl_flow::sea_raft::{SeaRaftEstimator, SeaRaftPreset};
use ndarray::{Array4, s};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIZE: usize = 448;
const FRAMES: usize = 3;

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let runs: usize = arg("--runs").map(|s| s.parse()).transpose()?.unwrap_or(3);
    let models = arg("--models").unwrap_or_else(|| "sea_raft_s,sea_raft_m,sea_raft_l,memflow".into());
    let threads = rayon::current_num_threads();
    let dir = tempfile::tempdir()?;
    let path = |name: &str| -> PathBuf { dir.path().join(name) };

    // Smooth frames moving a few pixels per frame.
    let frames = Array4::from_shape_fn((FRAMES, SIZE, SIZE, 3), |(t, y, x, c)| {
        let (xf, yf) = (x as f32 + 3.0 * t as f32, y as f32 - 2.0 * t as f32);
        (127.5 + 60.0 * (xf / 13.0 + c as f32).sin() + 60.0 * (yf / 17.0 - c as f32).cos()).clamp(0.0, 255.0) as u8
    });
    let tensor = Tensor::from_vec(frames.iter().copied().collect::<Vec<u8>>(), (FRAMES, SIZE, SIZE, 3), &Device::Cpu)?;
    candle_core::safetensors::save(&[("frames".to_string(), tensor)].into_iter().collect(), path("frames.safetensors"))?;

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/searaft_memflow_torch.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let mut rows = Vec::new();
    for model in models.split(',') {
        let (repo_flag, unit) = if model == "memflow" { ("--memflow", "step") } else { ("--sea-raft", "pair") };
        let repo = arg(repo_flag).with_context(|| format!("pass {repo_flag} PATH (a checkout of the official code)"))?;
        eprintln!("{model}: PyTorch at {SIZE}x{SIZE}, {threads} threads…");
        let out = Command::new(&python)
            .arg(script)
            .args(["--model", model, "--repo", &repo, "--runs", &runs.to_string(), "--threads", &threads.to_string()])
            .arg("--frames")
            .arg(path("frames.safetensors"))
            .arg("--weights-out")
            .arg(path("weights.safetensors"))
            .arg("--flows-out")
            .arg(path("torch_flows.safetensors"))
            .output()
            .with_context(|| format!("running {python} {script}"))?;
        if !out.status.success() {
            bail!("the PyTorch reference for {model} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let reference: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap_or("{}"))?;
        let torch_ms: Vec<f64> = reference["ms"].as_array().context("no timings from PyTorch")?.iter().filter_map(|v| v.as_f64()).collect();

        eprintln!("{model}: Candle…");
        let weights = path("weights.safetensors");
        let (ours_ms, flows) = match model {
            "memflow" => {
                // Whole clip, as the reference: ms per step = clip time / steps.
                let est = MemFlowEstimator::from_checkpoint(&weights, MemFlowConfig::default(), &Device::Cpu)?;
                est.estimate(frames.slice(s![0..2, .., .., ..]))?; // warm-up
                let t0 = Instant::now();
                let flows = est.estimate(frames.view())?;
                let per_step = t0.elapsed().as_secs_f64() * 1000.0 / (FRAMES - 1) as f64;
                (vec![per_step], flows)
            }
            _ => {
                let preset = match model {
                    "sea_raft_s" => SeaRaftPreset::S,
                    "sea_raft_m" => SeaRaftPreset::M,
                    "sea_raft_l" => SeaRaftPreset::L,
                    other => bail!("unknown model {other}; use sea_raft_s, sea_raft_m, sea_raft_l or memflow"),
                };
                let est = SeaRaftEstimator::from_checkpoint(&weights, &preset.config(), &Device::Cpu)?;
                let pair = frames.slice(s![0..2, .., .., ..]);
                let mut flows = est.estimate(pair)?; // warm-up
                let mut ms = Vec::with_capacity(runs);
                for _ in 0..runs {
                    let t0 = Instant::now();
                    flows = est.estimate(pair)?;
                    ms.push(t0.elapsed().as_secs_f64() * 1000.0);
                }
                (ms, flows)
            }
        };
        let ours = Tensor::from_vec(flows.iter().copied().collect::<Vec<f32>>(), flows.shape(), &Device::Cpu)?;
        let theirs = candle_core::safetensors::load(path("torch_flows.safetensors"), &Device::Cpu)?
            .remove("flows")
            .context("torch flows")?
            .to_dtype(DType::F32)?;
        let diff = (ours - &theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
        let scale = theirs.abs()?.max_all()?.to_scalar::<f32>()?;
        // SEA-RAFT: median (upper, for an even count) of the timed runs; MemFlow: mean per step on
        // both sides (ours times the whole clip, since it computes each frame's features once).
        let t = if unit == "step" { torch_ms.iter().sum::<f64>() / torch_ms.len() as f64 } else { median(torch_ms.clone()) };
        let o = median(ours_ms.clone());
        eprintln!("{model}: torch {torch_ms:.0?} ms, ours {ours_ms:.0?} ms per {unit}, max |Δflow| {diff:.1e} px");
        rows.push((model.to_string(), unit, t, o, diff, scale));
    }

    println!("At {SIZE}x{SIZE}, {threads} threads, random weights (torch vs Candle on the same weights and frames):");
    println!("{:<12} {:>6} {:>12} {:>12} {:>9} {:>16}", "model", "per", "ms torch", "ms ours", "speedup", "max |Δflow| px");
    for (model, unit, t, o, diff, scale) in rows {
        println!("{model:<12} {unit:>6} {t:>12.0} {o:>12.0} {:>8.2}x {diff:>9.1e} (of {scale:.0})", t / o);
    }
    Ok(())
}
