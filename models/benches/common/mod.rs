//! What the mid-size benches share: each measurement runs in a child process that prints one
//! JSON line last; random weights whose language-model part is trained; median timing.

// Each bench compiles this module and uses only part of it.
#![allow(dead_code)]

use std::process::Command;
use std::time::Instant;

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::var_builder::SimpleBackend;
use serde_json::Value;

/// Random N(0, 0.02) weights; the language model's are variables (they get gradients),
/// remembered by name so that a backward pass can be checked to reach every one of them; the
/// vision tower's stay constants (frozen), as in the reference run.
#[derive(Clone, Default)]
pub struct RandomWeights(pub std::sync::Arc<std::sync::Mutex<Vec<(String, Tensor)>>>);

impl SimpleBackend for RandomWeights {
    fn get(&self, shape: Shape, name: &str, _: candle_nn::Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let t = Tensor::randn(0f32, 0.02, shape, dev)?.to_dtype(dtype)?;
        if name.starts_with("visual.") {
            return Ok(t);
        }
        let var = Var::from_tensor(&t)?.as_tensor().clone();
        self.0.lock().map_err(|_| candle_core::Error::Msg("weights poisoned".into()))?.push((name.to_owned(), var.clone()));
        Ok(var)
    }
    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape for {name}")
    }
    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

impl RandomWeights {
    /// A backward pass is timed only once it is shown to reach every trained weight.
    pub fn require_all_reached(&self, grads: &GradStore, mode: &str) -> anyhow::Result<()> {
        let vars = self.0.lock().map_err(|_| anyhow::anyhow!("weights poisoned"))?;
        let missing: Vec<&str> = vars
            .iter()
            .filter(|(_, v)| {
                grads.get(v).is_none_or(|g| g.abs().and_then(|a| a.max_all()).and_then(|m| m.to_scalar::<f32>()).is_ok_and(|m| m == 0.0))
            })
            .map(|(n, _)| n.as_str())
            .collect();
        anyhow::ensure!(missing.is_empty(), "{mode}: {} of {} trained weights got no gradient, e.g. {}", missing.len(), vars.len(), missing[0]);
        Ok(())
    }
}

/// The median of `runs` timed calls of `f`, after one untimed warm-up call.
pub fn median_seconds(mut f: impl FnMut() -> anyhow::Result<()>, runs: usize) -> anyhow::Result<f64> {
    f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Runs `command` and reads its last stdout line as JSON; `None` (with the reason on stderr) if it
/// cannot run or fails, as the Python side does where torch is not installed.
pub fn child(command: &mut Command, what: &str) -> Option<Value> {
    match command.output() {
        Ok(out) if out.status.success() => serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last()?).ok(),
        Ok(out) => {
            eprintln!("{what} failed:\n{}", String::from_utf8_lossy(&out.stderr));
            None
        }
        Err(e) => {
            eprintln!("{what} not run ({e}); install torch and transformers to compare");
            None
        }
    }
}

/// The allocator setting of motionvl's binaries (`motionvl_cli::keep_freed_memory`): freed pages
/// stay with the process instead of coming back as page faults every step.
pub fn as_the_cli_runs(command: &mut Command) -> &mut Command {
    command.env("MIMALLOC_PURGE_DELAY", "-1")
}
