//! CVAA window-embedding speed: satellite windows per second through a `train cvaa`
//! checkpoint's DINOv2 backbone and satellite head, against transformers' `Dinov2Model` with the
//! same weights on the same machine, in the same run.
//!
//! `CVAA_CHECKPOINT=runs/cvaa-synth/checkpoint-480 cargo bench -p motionvl-models --bench cvaa_windows`
//! runs the Candle side, then `tools/bench/cvaa_windows.py` (same checkpoint, windows and batch)
//! with `$PYTHON` (default python3), and prints both with their ratio. `CVAA_WINDOWS` (default
//! 512) and `CVAA_BATCH` (default 64) set the workload.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use candle_core::{DType, Device, Tensor};
use motionvl_models::cvaa::Cvaa;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let checkpoint =
        PathBuf::from(std::env::var("CVAA_CHECKPOINT").map_err(|_| anyhow::anyhow!("set CVAA_CHECKPOINT to a `train cvaa` checkpoint folder"))?);
    let (windows, batch) = (env_usize("CVAA_WINDOWS", 512), env_usize("CVAA_BATCH", 64));
    let model = Cvaa::load(&checkpoint, &Device::Cpu)?;
    let s = model.config().satellite_size;
    let pixels = Tensor::randn(0f32, 1.0, (batch, 3, s, s), &Device::Cpu)?;
    model.embed_satellite(&pixels)?; // warm-up
    let started = Instant::now();
    let mut done = 0;
    while done < windows {
        let n = batch.min(windows - done);
        let out = model.embed_satellite(&pixels.narrow(0, 0, n)?)?;
        out.to_dtype(DType::F32)?.sum_all()?.to_scalar::<f32>()?;
        done += n;
    }
    let ours = windows as f64 / started.elapsed().as_secs_f64();
    println!("candle: {ours:.1} windows/s ({windows} windows of {s}×{s}, batch {batch}, f32, CPU)");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/cvaa_windows.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let output = Command::new(python).arg(script).arg(&checkpoint).arg(windows.to_string()).arg(batch.to_string()).output();
    match output {
        Ok(o) if o.status.success() => {
            let line = String::from_utf8_lossy(&o.stdout);
            let torch: serde_json::Value = serde_json::from_str(line.trim())?;
            let theirs = torch["windows_per_s"].as_f64().unwrap_or(f64::NAN);
            println!("transformers Dinov2Model: {theirs:.1} windows/s (torch threads {})", torch["threads"]);
            println!("ratio candle / transformers: {:.2}", ours / theirs);
        }
        Ok(o) => println!("transformers side failed: {}", String::from_utf8_lossy(&o.stderr)),
        Err(e) => println!("transformers side not run: {e}"),
    }
    Ok(())
}
