//! MOFNet speed against the official PyTorch code, on this machine, in one run:
//!
//!     cargo run --release -p motionvl-flow --example bench_mofnet -- --videoflow /tmp/videoflow
//!
//! Writes a 5-frame 448×448 window, runs `tools/bench/mofnet_torch.py` (VideoFlow's MOFNet,
//! sintel config, seeded random weights, which it saves for us), then times our MOFNet on the
//! same weights and frames, and prints ms per window for both, the ratio and the largest flow
//! difference. Needs `timm==0.4.12 einops yacs` beside torch, and a checkout of
//! XiaoyuShi97/VideoFlow (`core/`, `configs/`). `PYTHON` picks the interpreter. `--device cuda`
//! (a `--features cuda` build) runs both sides on GPU 0 and also prints frames per second.

mod common;

use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use common::{SIZE, arg, flow_difference, median, moving_frames, reference_ms, reference_script, run_reference};
use motionvl_flow::mofnet::{MofConfig, MofNetEstimator};

/// CPU time of this process (user + system) in ms, from `/proc/self/stat`: under contention
/// from other processes it is steadier than wall time. `None` off Linux.
fn cpu_ms() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks * 10.0) // USER_HZ = 100 on Linux
}

fn main() -> Result<()> {
    let videoflow = arg("--videoflow").context("pass --videoflow PATH (a checkout of XiaoyuShi97/VideoFlow)")?;
    let iters: usize = arg("--iters").map(|s| s.parse()).transpose()?.unwrap_or(12);
    let runs: usize = arg("--runs").map(|s| s.parse()).transpose()?.unwrap_or(2);
    let cuda = arg("--device").is_some_and(|d| d.starts_with("cuda"));
    let device = if cuda { Device::new_cuda(0)? } else { Device::Cpu };
    let threads = rayon::current_num_threads();
    let dir = tempfile::tempdir()?;
    let frames = moving_frames(5, dir.path())?;

    eprintln!("PyTorch: {runs} runs + warm-up of a {SIZE}x{SIZE} window, {iters} iterations, {threads} threads…");
    let args = [
        "--videoflow",
        &videoflow,
        "--iters",
        &iters.to_string(),
        "--runs",
        &runs.to_string(),
        "--threads",
        &threads.to_string(),
        "--device",
        if cuda { "cuda" } else { "cpu" },
    ]
    .map(String::from);
    let reference = run_reference(&reference_script("mofnet_torch.py"), &args, dir.path(), "")?;
    let torch_ms = reference_ms(&reference)?;

    eprintln!("Candle: {runs} runs + warm-up…");
    let est = MofNetEstimator::from_checkpoint(
        &dir.path().join("weights.safetensors"),
        MofConfig::default(),
        iters,
        motionvl_flow::WeightPrecision::F32,
        &device,
    )?;
    let (mut ours_ms, mut ours_cpu) = (Vec::with_capacity(runs), Vec::with_capacity(runs));
    let mut flows = est.window_flows(frames.view())?;
    for _ in 0..runs {
        let (t0, c0) = (Instant::now(), cpu_ms());
        flows = est.window_flows(frames.view())?;
        device.synchronize()?;
        ours_ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        if let (Some(c0), Some(c1)) = (c0, cpu_ms()) {
            ours_cpu.push(c1 - c0);
        }
    }
    let ours = Tensor::cat(&[&flows.0, &flows.1], 0)?.to_device(&Device::Cpu)?;
    let (diff, scale) = flow_difference(ours, dir.path(), "window")?;

    let (t, o) = (median(torch_ms.clone()), median(ours_ms.clone()));
    println!(
        "MOFNet, one 5-frame window at {SIZE}x{SIZE}, {iters} iterations, {threads} threads (torch {}):",
        reference["torch"].as_str().unwrap_or("?")
    );
    println!("  PyTorch (official code) ms: {torch_ms:.0?}  median {t:.0}");
    println!("  Candle (ours)           ms: {ours_ms:.0?}  median {o:.0}");
    let torch_cpu: Vec<f64> = reference["cpu_ms"].as_array().map(|a| a.iter().filter_map(|v| v.as_f64()).collect()).unwrap_or_default();
    if !torch_cpu.is_empty() && !ours_cpu.is_empty() {
        let (tc, oc) = (median(torch_cpu.clone()), median(ours_cpu.clone()));
        println!("  CPU time ms: PyTorch {torch_cpu:.0?} / Candle {ours_cpu:.0?}  (medians {tc:.0} / {oc:.0}, ratio {:.2}x)", tc / oc);
    }
    let frames_per_s = |ms: f64| 5000.0 / ms;
    println!("  frames/s: PyTorch {:.2}, Candle {:.2} ({})", frames_per_s(t), frames_per_s(o), if cuda { "GPU 0" } else { "CPU" });
    println!("  speed-up {:.2}x; max |Δflow| {diff:.2e} px (flows up to {scale:.1} px, relative {:.1e})", t / o, diff / scale.max(1e-6));
    Ok(())
}
