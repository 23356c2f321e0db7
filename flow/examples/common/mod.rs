//! What the speed comparisons against the official PyTorch code share: flags, the test clip,
//! running a reference script and comparing its flows with ours.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use candle_core::{DType, Device, Tensor};
use ndarray::Array4;

/// Side of the test frames.
pub const SIZE: usize = 448;

/// The value after `name` on the command line.
pub fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1).cloned())
}

/// The median (the upper one, for an even count).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `n` smooth frames moving a few pixels per frame (as in the fixtures), also written to
/// `dir/frames.safetensors` for the reference script.
pub fn moving_frames(n: usize, dir: &Path) -> Result<Array4<u8>> {
    let frames = Array4::from_shape_fn((n, SIZE, SIZE, 3), |(t, y, x, c)| {
        let (xf, yf) = (x as f32 + 3.0 * t as f32, y as f32 - 2.0 * t as f32);
        (127.5 + 60.0 * (xf / 13.0 + c as f32).sin() + 60.0 * (yf / 17.0 - c as f32).cos()).clamp(0.0, 255.0) as u8
    });
    let tensor = Tensor::from_vec(frames.iter().copied().collect::<Vec<u8>>(), (n, SIZE, SIZE, 3), &Device::Cpu)?;
    candle_core::safetensors::save(&[("frames".to_string(), tensor)].into_iter().collect(), dir.join("frames.safetensors"))?;
    Ok(frames)
}

/// `tools/bench/<script>` in the checkout this was built in, or in `MOTIONVL_REPO` (a prebuilt
/// bench on a GPU machine).
pub fn reference_script(script: &str) -> String {
    let repo = std::env::var("MOTIONVL_REPO").unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/..").to_string());
    format!("{repo}/tools/bench/{script}")
}

/// Runs a reference script (`PYTHON` picks the interpreter) with `args` and the files of `dir`:
/// it reads `frames.safetensors` and writes the weights it drew and its flows there. Returns its
/// last stdout line, a JSON object with the timings (`ms`) and what else it measured.
pub fn run_reference(script: &str, args: &[String], dir: &Path, what: &str) -> Result<serde_json::Value> {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let out = Command::new(&python)
        .arg(script)
        .args(args)
        .arg("--frames")
        .arg(dir.join("frames.safetensors"))
        .arg("--weights-out")
        .arg(dir.join("weights.safetensors"))
        .arg("--flows-out")
        .arg(dir.join("torch_flows.safetensors"))
        .output()
        .with_context(|| format!("running {python} {script}"))?;
    if !out.status.success() {
        bail!("the PyTorch reference {what}failed:\n{}", String::from_utf8_lossy(&out.stderr));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(serde_json::from_str(stdout.trim().lines().last().unwrap_or("{}"))?)
}

/// The reference's timings, ms.
pub fn reference_ms(reference: &serde_json::Value) -> Result<Vec<f64>> {
    Ok(reference["ms"].as_array().context("no timings from PyTorch")?.iter().filter_map(|v| v.as_f64()).collect())
}

/// The largest |ours − theirs| against the reference's flows `key` in `dir`, and the largest
/// |theirs| (the scale of the difference).
pub fn flow_difference(ours: Tensor, dir: &Path, key: &str) -> Result<(f32, f32)> {
    let theirs = candle_core::safetensors::load(dir.join("torch_flows.safetensors"), &Device::Cpu)?
        .remove(key)
        .context("torch flows")?
        .to_dtype(DType::F32)?;
    let diff = (ours - &theirs)?.abs()?.max_all()?.to_scalar::<f32>()?;
    let scale = theirs.abs()?.max_all()?.to_scalar::<f32>()?;
    Ok((diff, scale))
}
