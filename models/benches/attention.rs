//! The fused CPU attention against the composed one on the mid-size benchmark's shapes: one
//! decoder layer's causal attention (575 tokens, 8 query heads over 2 KV heads, head_dim 64),
//! forward and forward+backward, and the vision tower's 64-patch windows and 256-patch frames
//! (2,048 patches, 4 heads).
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-models --bench attention` prints, per case, the
//! fastest wall time of 20 runs and the mean CPU time per run (which load on the machine
//! inflates less than wall time).

use std::time::Instant;

use candle_core::{Device, Tensor, Var};
use motionvl_models::fused::attention::{Mask, attention};
use motionvl_models::ops;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RUNS: usize = 20;

/// User + system CPU time of this process in ms (from /proc; 0 where there is none).
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) * 10.0
}

/// `(fastest wall ms, mean CPU ms)` of `f` over [`RUNS`] runs after a warm-up.
fn measure(mut f: impl FnMut() -> candle_core::Result<()>) -> candle_core::Result<(f64, f64)> {
    f()?;
    let cpu = cpu_ms();
    let mut best = f64::INFINITY;
    for _ in 0..RUNS {
        let start = Instant::now();
        f()?;
        best = best.min(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok((best, (cpu_ms() - cpu) / RUNS as f64))
}

fn report(case: &str, fused: (f64, f64), composed: (f64, f64)) {
    println!(
        "{case:<28} fused {:>7.2} ms ({:>7.2} ms cpu)   composed {:>7.2} ms ({:>7.2} ms cpu)   {:.1}x",
        fused.0,
        fused.1,
        composed.0,
        composed.1,
        composed.0 / fused.0
    );
}

fn main() -> candle_core::Result<()> {
    let dev = Device::Cpu;
    let (heads, kv_heads, len, dim) = (8, 2, 575, 64);
    let scale = (dim as f64).powf(-0.5);
    let q = Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, heads, len, dim), &dev)?)?;
    let k = Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, kv_heads, len, dim), &dev)?)?;
    let v = Var::from_tensor(&Tensor::randn(0f32, 1.0, (1, kv_heads, len, dim), &dev)?)?;
    let causal = Mask::Causal { past: 0, key_padding: None };
    let causal_rows: Vec<f32> = (0..len * len).map(|x| if x % len <= x / len { 0.0 } else { f32::MIN }).collect();
    let dense = Some(Tensor::from_vec(causal_rows, (1, 1, len, len), &dev)?);
    let repeat = |x: &Tensor| -> candle_core::Result<Tensor> {
        x.unsqueeze(2)?.broadcast_as((1, kv_heads, heads / kv_heads, len, dim))?.reshape((1, heads, len, dim))
    };
    let fused = measure(|| attention(&q.detach(), &k.detach(), &v.detach(), scale, &causal).map(drop))?;
    let composed = measure(|| ops::attention(&q.detach(), &repeat(&k.detach())?, &repeat(&v.detach())?, scale, dense.as_ref()).map(drop))?;
    report("decoder causal, forward", fused, composed);
    let fused = measure(|| attention(&q, &k, &v, scale, &causal)?.sum_all()?.backward().map(drop))?;
    let composed = measure(|| ops::attention(&q, &repeat(&k)?, &repeat(&v)?, scale, dense.as_ref())?.sum_all()?.backward().map(drop))?;
    report("decoder causal, fwd + bwd", fused, composed);

    let (patches, vision_heads) = (2048, 4);
    let x = Tensor::randn(0f32, 1.0, (1, vision_heads, patches, dim), &dev)?;
    for segment in [64, 256] {
        let mask = Mask::Segments((0..=patches / segment).map(|i| i * segment).collect());
        // The composed path batches equal segments: [segments, H, segment, D].
        let batched = x.reshape((vision_heads, patches / segment, segment, dim))?.transpose(0, 1)?.contiguous()?;
        let fused = measure(|| attention(&x, &x, &x, scale, &mask).map(drop))?;
        let composed = measure(|| ops::attention(&batched, &batched, &batched, scale, None).map(drop))?;
        report(&format!("vision segments of {segment}"), fused, composed);
    }
    Ok(())
}
