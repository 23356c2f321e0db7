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

mod common;

use std::time::Instant;

use anyhow::{Context, Result, bail};
use candle_core::{Device, Tensor};
use common::{SIZE, arg, flow_difference, median, moving_frames, reference_ms, reference_script, run_reference};
use motionvl_flow::FlowEstimator;
use motionvl_flow::memflow::{MemFlowConfig, MemFlowEstimator};
use motionvl_flow::sea_raft::{SeaRaftEstimator, SeaRaftPreset};
use ndarray::s;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const FRAMES: usize = 3;

fn main() -> Result<()> {
    let runs: usize = arg("--runs").map(|s| s.parse()).transpose()?.unwrap_or(3);
    let models = arg("--models").unwrap_or_else(|| "sea_raft_s,sea_raft_m,sea_raft_l,memflow".into());
    let threads = rayon::current_num_threads();
    let dir = tempfile::tempdir()?;
    let frames = moving_frames(FRAMES, dir.path())?;
    let script = reference_script("searaft_memflow_torch.py");
    let mut rows = Vec::new();
    for model in models.split(',') {
        let (repo_flag, unit) = if model == "memflow" { ("--memflow", "step") } else { ("--sea-raft", "pair") };
        let repo = arg(repo_flag).with_context(|| format!("pass {repo_flag} PATH (a checkout of the official code)"))?;
        eprintln!("{model}: PyTorch at {SIZE}x{SIZE}, {threads} threads…");
        let args = ["--model", model, "--repo", &repo, "--runs", &runs.to_string(), "--threads", &threads.to_string()].map(String::from);
        let reference = run_reference(&script, &args, dir.path(), &format!("for {model} "))?;
        let torch_ms = reference_ms(&reference)?;

        eprintln!("{model}: Candle…");
        let weights = dir.path().join("weights.safetensors");
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
        let (diff, scale) = flow_difference(ours, dir.path(), "flows")?;
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
