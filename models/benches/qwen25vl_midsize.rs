//! Mid-size Qwen2.5-VL benchmark: prefill forward and forward+backward (vision frozen, loss on
//! the last 30 tokens) with random f32 weights, against transformers on the same machine.
//!
//! `cargo bench -p motionvl-models --bench qwen25vl_midsize` runs the Candle side, then
//! `tools/bench/qwen25vl_midsize.py` (same config and inputs) when Python with torch and
//! transformers is available, and prints both with their ratio. Peak memory is each process's
//! peak resident set.

use std::process::Command;
use std::time::Instant;

use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use motionvl_models::qwen25vl::{causal_lm_loss, PixelInput, PromptBatch, Qwen25Vl, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_models::Qwen25VlConfig;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The mid-size config shared by the benchmarks (and the PyTorch scripts beside them).
const CONFIG: &str = include_str!("../../configs/models/midsize.json");

/// Random N(0, 0.02) weights; language-model tensors become variables (they get gradients),
/// vision tensors stay constants (frozen), as in the reference run.
struct RandomWeights;

impl SimpleBackend for RandomWeights {
    fn get(&self, shape: Shape, name: &str, _: candle_nn::Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let t = Tensor::randn(0f32, 0.02, shape, dev)?.to_dtype(dtype)?;
        if name.starts_with("visual.") { Ok(t) } else { Ok(Var::from_tensor(&t)?.as_tensor().clone()) }
    }
    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape for {name}")
    }
    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

fn median_seconds(mut f: impl FnMut(), runs: usize) -> f64 {
    f();
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

fn main() -> anyhow::Result<()> {
    // The reference runs first: a child inherits its parent's peak RSS, so it must start small.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/qwen25vl_midsize.py");
    let torch: Option<serde_json::Value> = match Command::new(std::env::var("PYTHON").unwrap_or_else(|_| "python3".into())).arg(script).output() {
        Ok(out) if out.status.success() => serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or("{}")).ok(),
        Ok(out) => {
            eprintln!("pytorch reference failed:\n{}", String::from_utf8_lossy(&out.stderr));
            None
        }
        Err(e) => {
            eprintln!("pytorch reference not run ({e}); install torch and transformers to compare");
            None
        }
    };

    let device = Device::Cpu;
    let cfg = Qwen25VlConfig::from_json(CONFIG).map_err(anyhow::Error::msg)?;
    let model = Qwen25Vl::new(&cfg, VarBuilder::from_backend(Box::new(RandomWeights), DType::F32, device.clone()))?;

    let (t, h, w) = (16, 224, 224);
    let grid = [t / 2, h / 14, w / 14];
    let patches = grid.iter().product::<usize>();
    let video_tokens = patches / 4;
    let mut ids = vec![151644u32];
    ids.extend([100; 20]);
    ids.push(cfg.vision_start_token_id);
    ids.extend(std::iter::repeat_n(cfg.video_token_id, video_tokens));
    ids.push(cfg.vision_end_token_id);
    ids.extend([200; 40]);
    let kinds = ids.iter().map(|&i| if i == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }).collect();
    let seq_len = ids.len();
    let labels = vec![ids.iter().enumerate().map(|(i, &t)| if i + 30 >= seq_len { t as i64 } else { -100 }).collect::<Vec<_>>()];
    let batch = PromptBatch::single(ids, kinds);
    let inputs = VisionInputs {
        images: None,
        videos: Some(PixelInput { pixel_values: Tensor::randn(0f32, 1.0, (patches, 3 * 2 * 14 * 14), &device)?, grids: vec![grid] }),
        video_seconds_per_grid: vec![1.0],
    };

    let forward = median_seconds(|| drop(model.forward(&batch, &inputs, None).expect("forward")), 3);
    let forward_backward = median_seconds(
        || {
            let logits = model.forward(&batch, &inputs, None).expect("forward");
            drop(causal_lm_loss(&logits, &labels).expect("loss").backward().expect("backward"));
        },
        3,
    );
    let candle = serde_json::json!({
        "seq_len": seq_len, "video_tokens": video_tokens, "patches": patches,
        "prefill_forward_s": (forward * 1000.0).round() / 1000.0,
        "forward_backward_s": (forward_backward * 1000.0).round() / 1000.0,
        "peak_rss_MiB": peak_rss_mib().round(),
        "threads": rayon_threads(),
    });
    println!("candle  {candle}");
    if let Some(torch) = torch {
        println!("pytorch {torch}");
        let ratio = |key: &str| torch[key].as_f64().unwrap_or(f64::NAN) / candle[key].as_f64().unwrap_or(f64::NAN);
        println!(
            "speed-up of candle over pytorch (pytorch time / candle time): forward {:.2}x, forward+backward {:.2}x; peak memory pytorch/candle {:.2}",
            ratio("prefill_forward_s"),
            ratio("forward_backward_s"),
            ratio("peak_rss_MiB")
        );
    }

    Ok(())
}

fn rayon_threads() -> String {
    std::env::var("RAYON_NUM_THREADS").unwrap_or_else(|_| "all cores".into())
}
