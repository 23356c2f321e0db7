//! Seconds per SFT optimiser step and peak memory, with and without gradient checkpointing,
//! against transformers + PEFT on the same machine: the mid-size Qwen2.5-VL of
//! `models/benches/qwen25vl_midsize.rs`, LoRA r32/α64/dropout 0.05 on the language model,
//! AdamW, one micro-batch (a 16-frame 224×224 video, 575 tokens, loss on the last 30), f32.
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-train --bench sft_step` — each configuration
//! runs in its own process so that each peak RSS is its own.
//!
//! `--profile 3b-gpu` (with `--features cuda`; `tools/gpu_check.sh` runs it) measures the
//! paper's setting instead: the real Qwen2.5-VL-3B config on random weights, bf16 frozen
//! weights, LoRA r32 in f32 masters, gradient checkpointing, one 2,048-token sample holding a
//! 16-frame 420×448 video, on `cuda:0`, with tokens/s and peak GPU memory (the card's used
//! memory above its level before the run, sampled with nvidia-smi, the same way for both sides).

use std::process::Command;
use std::time::Instant;

use candle_core::{Device, Tensor};
use motionvl_models::Qwen25VlConfig;
use motionvl_models::flops::ForwardFlops;
use motionvl_models::init::random_model;
use motionvl_models::lora::{LoraConfig, LoraWeights};
use motionvl_models::machine::{MachineReport, peak_rss_mib};
use motionvl_models::qwen25vl::{PixelInput, PromptBatch, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_train::guard::{Snapshot, TrainedGroup, require_gradients};
use motionvl_train::optim::{AdamW, AdamWConfig};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What one run measures.
struct Profile {
    name: &'static str,
    /// Model config (the PyTorch script reads the same file).
    config: &'static str,
    cuda: bool,
    bf16: bool,
    /// Video grid (t, h, w) in patches.
    grid: [usize; 3],
    /// Text tokens after the video.
    suffix: usize,
}

/// The mid-size config shared by the CPU benchmarks, f32, a 16-frame 224×224 video (575 tokens).
const MIDSIZE_CPU: Profile =
    Profile { name: "midsize-cpu", config: "configs/models/midsize.json", cuda: false, bf16: false, grid: [8, 16, 16], suffix: 40 };
/// Qwen2.5-VL-3B, bf16, a 16-frame 420×448 video: 1 + 20 + 1 + 1,920 + 1 + 105 = 2,048 tokens.
const QWEN_3B_GPU: Profile =
    Profile { name: "3b-gpu", config: "configs/models/qwen2.5-vl-3b.json", cuda: true, bf16: true, grid: [8, 30, 32], suffix: 105 };

fn profile(name: &str) -> anyhow::Result<&'static Profile> {
    [&MIDSIZE_CPU, &QWEN_3B_GPU].into_iter().find(|p| p.name == name).ok_or_else(|| anyhow::anyhow!("unknown profile `{name}` (midsize-cpu, 3b-gpu)"))
}

/// `rel` in the checkout this was built in, or in `MOTIONVL_REPO` (a prebuilt bench run in
/// another copy of the repository, as on a GPU machine).
fn repo_path(rel: &str) -> String {
    std::env::var("MOTIONVL_REPO").map_or_else(|_| format!("{}/../{rel}", env!("CARGO_MANIFEST_DIR")), |repo| format!("{repo}/{rel}"))
}

/// Used memory of GPU 0 in MiB, from nvidia-smi; `None` without one.
fn gpu_used_mib() -> Option<f64> {
    let out = Command::new("nvidia-smi").args(["--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"]).output().ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// Uniform pixels in [-1, 1) from a fixed seed: every mode sees the same inputs, so the runs with
/// and without checkpointing must report the same gradient norms.
fn seeded_pixels(n: usize) -> anyhow::Result<Tensor> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    Ok(Tensor::from_vec((0..n).map(|_| rng.random_range(-1f32..1.0)).collect::<Vec<_>>(), n, &Device::Cpu)?)
}

/// One configuration, in this process; prints a JSON line.
fn measure(profile: &Profile, checkpointing: bool) -> anyhow::Result<()> {
    let device = if profile.cuda { Device::new_cuda(0)? } else { Device::Cpu };
    let cfg = Qwen25VlConfig::from_json(&std::fs::read_to_string(repo_path(profile.config))?).map_err(anyhow::Error::msg)?;
    // Random weights are drawn in f32 on the CPU (as the PyTorch side does), then placed.
    let (_, tensors) = random_model(&cfg, 0.02, 0, &Device::Cpu)?;
    let dtype = if profile.bf16 { candle_core::DType::BF16 } else { candle_core::DType::F32 };
    let vb = candle_nn::VarBuilder::from_tensors(tensors, dtype, &device);
    let mut model = motionvl_models::qwen25vl::Qwen25Vl::new(&cfg, vb)?;
    let recomputed = checkpointing.then(|| model.enable_gradient_checkpointing());
    let lora = LoraWeights::init(&model.linear_shapes(), &LoraConfig::default(), 0, &device)?;
    lora.attach(model.linears_mut())?;
    lora.runtime().set_training(true);
    let adam = AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
    let mut optim = AdamW::new(vec![("lora".into(), 1e-5, lora.named_vars())], adam)?;

    let grid = profile.grid;
    let patches: usize = grid.iter().product();
    let mut ids = vec![151644u32];
    ids.extend([100; 20]);
    ids.push(cfg.vision_start_token_id);
    ids.extend(std::iter::repeat_n(cfg.video_token_id, patches / 4));
    ids.push(cfg.vision_end_token_id);
    ids.extend(std::iter::repeat_n(200, profile.suffix));
    let kinds = ids.iter().map(|&i| if i == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }).collect();
    let n = ids.len();
    let labels = vec![ids.iter().enumerate().map(|(i, &t)| if i + 30 >= n { t as i64 } else { -100 }).collect::<Vec<_>>()];
    let batch = PromptBatch::single(ids, kinds);
    let inputs = VisionInputs {
        images: None,
        videos: Some(PixelInput {
            pixel_values: seeded_pixels(patches * 1176)?.reshape((patches, 1176))?.to_device(&device)?.to_dtype(dtype)?,
            grids: vec![grid],
        }),
        video_seconds_per_grid: vec![1.0],
    };
    let trained = lora.named_vars();
    let before = Snapshot::take(&trained)?;
    // A step is timed only with its proof that it trained: every adapter got a gradient and
    // the norm is not zero (a checkpointed step once had no backward pass at all).
    let mut step = || -> anyhow::Result<f64> {
        let positions = model.positions(&batch, &inputs)?;
        let mut grads = model.training_loss(&batch, &model.encode_vision(&inputs)?, &positions, &labels)?.backward(1.0)?;
        if let Some(r) = &recomputed {
            r.merge_into(&mut grads)?;
        }
        optim.accumulate(&grads)?;
        require_gradients(&optim.reach()?, &[TrainedGroup::Lora], "benchmark step")?;
        let norm = optim.step_with_clip(1.0, 1.0)?;
        device.synchronize()?;
        Ok(norm)
    };
    let mut grad_norms = vec![step()?];
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        grad_norms.push(step()?);
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let unchanged = before.unchanged(&trained)?;
    anyhow::ensure!(unchanged.is_empty(), "{} of {} adapter tensors did not change, e.g. {}", unchanged.len(), trained.len(), unchanged[0]);
    let trainable: usize = lora.named_vars().iter().map(|(_, v)| v.elem_count()).sum();
    // The trainer's loss applies the LM head to the 30 labelled rows only; checkpointing reruns
    // each decoder layer's forward once more.
    let flops = ForwardFlops::new(&cfg, &[grid], n)?;
    let step_flops = flops.train_adapters(30) + if checkpointing { flops.decoder } else { 0.0 };
    println!(
        "{}",
        serde_json::json!({"checkpointing": checkpointing, "trainable_M": trainable as f64 / 1e6, "tokens": n, "grad_norms": grad_norms,
            "step_s": (times[1] * 1000.0).round() / 1000.0, "tokens_per_s": (n as f64 / times[1]).round(), "peak_rss_MiB": peak_rss_mib().map_or(f64::NAN, f64::round),
            "matmul_GFLOP_per_s": (step_flops / times[1] / 1e9).round(), "threads": candle_core::utils::get_num_threads()})
    );
    Ok(())
}

/// Runs one side in its own process; its last stdout line is a JSON object, to which the peak
/// GPU memory above the level before it started is added when there is a GPU.
fn run_child(program: &str, args: &[&str]) -> Option<serde_json::Value> {
    let base = gpu_used_mib();
    // motionvl's binaries keep freed pages (`motionvl_cli::keep_freed_memory`); so does the
    // Candle side here. The setting means nothing to the Python side.
    let mut child = Command::new(program)
        .env("MIMALLOC_PURGE_DELAY", "-1")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    let mut peak = base;
    while child.try_wait().ok()?.is_none() {
        if let Some(now) = gpu_used_mib() {
            peak = Some(peak.map_or(now, |p: f64| p.max(now)));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let out = child.wait_with_output().ok()?;
    if !out.status.success() {
        eprintln!("{program} {args:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    let mut json: serde_json::Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last()?).ok()?;
    if let (Some(base), Some(peak)) = (base, peak) {
        json["peak_gpu_MiB"] = (peak - base).into();
    }
    Some(json)
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).cloned();
    let profile = profile(&value("--profile").unwrap_or_else(|| MIDSIZE_CPU.name.into()))?;
    if let Some(mode) = value("--measure") {
        return measure(profile, mode == "checkpointing");
    }
    let me = std::env::current_exe()?;
    let me = me.to_string_lossy();
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let script = repo_path("tools/bench/sft_step_midsize.py");
    let config = repo_path(profile.config);
    // The paper trains with gradient checkpointing; on a GPU that is the setting measured.
    let modes: &[(&str, &str, Option<&str>)] = if profile.cuda {
        &[("with checkpointing", "checkpointing", Some("--checkpointing"))]
    } else {
        &[("without checkpointing", "plain", None), ("with checkpointing", "checkpointing", Some("--checkpointing"))]
    };
    let before = MachineReport::now();
    println!("machine {}", serde_json::to_string(&before)?);
    let mut candle_norms: Vec<Vec<f64>> = Vec::new();
    for &(label, mode, py_flag) in modes {
        let candle = run_child(&me, &["--profile", profile.name, "--measure", mode]);
        if let Some(c) = &candle {
            candle_norms.push(c["grad_norms"].as_array().map(|a| a.iter().filter_map(|x| x.as_f64()).collect()).unwrap_or_default());
        }
        let grid = profile.grid.map(|g| g.to_string()).join(",");
        let suffix = profile.suffix.to_string();
        let mut py_args = vec![script.as_str(), "--config", config.as_str(), "--grid", grid.as_str(), "--suffix", suffix.as_str()];
        if profile.cuda {
            py_args.extend(["--device", "cuda", "--dtype", "bf16"]);
        }
        py_args.extend(py_flag);
        let torch = run_child(&python, &py_args);
        println!("{label}:\n  candle  {}\n  pytorch {}", candle.clone().unwrap_or_default(), torch.clone().unwrap_or_default());
        if let (Some(c), Some(t)) = (candle, torch) {
            let ratio = |k: &str| t[k].as_f64().unwrap_or(f64::NAN) / c[k].as_f64().unwrap_or(f64::NAN);
            let memory = if profile.cuda { "peak_gpu_MiB" } else { "peak_rss_MiB" };
            println!("  pytorch/candle: step time {:.2}x, peak memory {:.2}x", ratio("step_s"), ratio(memory));
        }
    }
    // The same steps with and without checkpointing: the same gradients (measured bit-identical).
    if let [plain, ckpt] = candle_norms.as_slice() {
        let worst = plain.iter().zip(ckpt).map(|(p, c)| (p - c).abs() / p.abs()).fold(0.0, f64::max);
        println!("gradient norms with against without checkpointing: worst relative difference {worst:e}");
        anyhow::ensure!(plain.len() == ckpt.len() && worst <= 1e-5, "checkpointing changed the gradients: {plain:?} against {ckpt:?}");
    }
    println!("load average: {:.2} before, {:.2} after", before.load_1m, MachineReport::now().load_1m);
    Ok(())
}
