//! Every parity fixture on a device against the CPU: the flow networks (RAFT, SEA-RAFT, MemFlow,
//! MOFNet) on each dump's frames; Qwen2.5-VL's vision features, logits, loss and greedy
//! generation, with and without the fixture's PEFT adapter; and the gradients of every trained
//! tensor (LoRA on each target set, the motion connector) with gradient checkpointing off and on.
//! First, each of our own device kernels alone against its CPU kernel (RMSNorm, SwiGLU and rotary
//! embedding forward and backward, LoRA dropout's mask), so that a wrong kernel is named before the models use it.
//! The CPU results are the ones the parity tests prove equal to PyTorch, so within these
//! tolerances the device's are too.
//!
//!     cargo run --release -p motionvl-tests --features cuda --example gpu_check [-- --device cuda:0]
//!
//! `--device cpu` runs the same sequence on the CPU against itself: how CI tests the check, not
//! a GPU. Prints one line per comparison and a JSON summary; exits non-zero when one is out of
//! tolerance. `tools/gpu_check.sh` runs it with the rest of the GPU check.

use anyhow::{Context, Result, bail};
use candle_core::Var;
use candle_core::{DType, Device, Tensor};
use motionvl_data::rng::SynthRng;
use motionvl_flow::memflow::{MemFlowConfig, MemFlowEstimator};
use motionvl_flow::mofnet::{MofConfig, MofNetEstimator};
use motionvl_flow::sea_raft::{SeaRaftConfig, SeaRaftEstimator};
use motionvl_flow::{FlowEstimator, RaftConfig, RaftEstimator};
use motionvl_models::CheckpointFiles;
use motionvl_models::config::Activation;
use motionvl_models::fused::{norm, rotary, swiglu};
use motionvl_models::lora::LoraWeights;
use motionvl_models::qwen25vl::{GenerateOptions, PixelInput, Qwen25Vl, VisionInputs, causal_lm_loss};
use motionvl_tests::fixtures::{families, fixtures_root, max_abs_diff, max_rel_diff, tolerance};
use motionvl_tests::flow_dump::{FlowDump, max_abs};
use motionvl_tests::gradients::{Setting, Targets, gradients};
use motionvl_tests::qwen_dump::QwenDump;

/// A gradient on the device against the CPU's, relative to the CPU gradient's largest entry:
/// the same f32 arithmetic in another order (cuBLAS' reductions, fused kernels).
const GRADIENT_RELATIVE: f32 = 1e-4;

struct Check {
    what: String,
    diff: f32,
    tolerance: f32,
}

fn estimator(dump: &FlowDump, device: &Device) -> Result<Box<dyn FlowEstimator>> {
    let config = dump.config_json();
    let weights = dump.dump.dir.join("model.safetensors");
    let no_iters = || anyhow::anyhow!("{}: config.json names no iterations", dump.dump.label);
    let family = dump.dump.label.split('/').nth(1).unwrap_or_default();
    Ok(match family {
        "raft_small" | "raft_large" => {
            let (cfg, iters) = RaftConfig::from_json(&config)?;
            Box::new(RaftEstimator::from_checkpoint(&weights, cfg, iters.ok_or_else(no_iters)?, device)?)
        }
        "sea_raft_s" | "sea_raft_m" | "sea_raft_l" => {
            Box::new(SeaRaftEstimator::from_checkpoint(&weights, &SeaRaftConfig::from_json(&config)?, device)?)
        }
        "memflow" => Box::new(MemFlowEstimator::from_checkpoint(&weights, MemFlowConfig::from_json(&config)?, device)?),
        "mofnet" => {
            let (cfg, iters) = MofConfig::from_json(&config)?;
            Box::new(MofNetEstimator::from_checkpoint(&weights, cfg, iters.ok_or_else(no_iters)?, motionvl_flow::WeightPrecision::F32, device)?)
        }
        other => bail!("{}: no estimator for fixture family {other}", dump.dump.label),
    })
}

fn flows(device: &Device, checks: &mut Vec<Check>) -> Result<()> {
    for dump in families("flow", "").into_iter().filter(|d| d.has("config.json")).map(FlowDump::open) {
        let cpu = estimator(&dump, &Device::Cpu)?.estimate(dump.frames.view())?;
        let on_device = estimator(&dump, device)?.estimate(dump.frames.view())?;
        let diff = cpu.iter().zip(on_device.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        checks.push(Check { what: format!("{}: flows", dump.dump.label), diff, tolerance: tolerance::flow_px(max_abs(cpu.view())) });
    }
    Ok(())
}

/// One model on one device, and what the checks compare.
struct Outputs {
    features: Tensor,
    logits: Tensor,
    loss: Tensor,
    generated: Vec<u32>,
}

fn run_qwen(dump: &QwenDump, adapter: bool, device: &Device) -> Result<Outputs> {
    let mut model = Qwen25Vl::load(&CheckpointFiles::from_dir(&dump.dump.dir)?, DType::F32, device)?;
    if adapter {
        LoraWeights::load_peft(&dump.dump.dir.join("lora"), device)?.attach(model.linears_mut())?;
    }
    let on_device = |p: PixelInput| -> Result<PixelInput> { Ok(PixelInput { pixel_values: p.pixel_values.to_device(device)?, grids: p.grids }) };
    let host = dump.video_inputs();
    let vision = VisionInputs { videos: host.videos.map(on_device).transpose()?, ..host };
    let pixels = vision.videos.as_ref().context("video")?;
    let features = model.visual().forward(&pixels.pixel_values, &pixels.grids)?;
    let logits = model.forward(&dump.prompt(""), &vision, None)?;
    let loss = causal_lm_loss(&logits, &dump.inputs.i64_rows("labels"))?;
    let prefix = if dump.inputs.has("prompt_input_ids") { "prompt_" } else { "" };
    let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: false };
    let generated = model.generate(&dump.prompt(prefix), &vision, None, &options)?.tokens.swap_remove(0);
    Ok(Outputs { features, logits, loss, generated })
}

fn qwen(device: &Device, checks: &mut Vec<Check>) -> Result<()> {
    for dump in QwenDump::all() {
        let adapters = if dump.dump.has("lora") { vec![false, true] } else { vec![false] };
        for adapter in adapters {
            let (cpu, on_device) = (run_qwen(&dump, adapter, &Device::Cpu)?, run_qwen(&dump, adapter, device)?);
            let name = format!("{}{}", dump.dump.label, if adapter { " + LoRA" } else { "" });
            let close =
                |what: &str, a: &Tensor, b: &Tensor, tolerance: f32| Check { what: format!("{name}: {what}"), diff: max_abs_diff(a, b), tolerance };
            checks.push(close("vision features", &cpu.features, &on_device.features, tolerance::F32_ACTIVATIONS));
            checks.push(close("logits", &cpu.logits, &on_device.logits, tolerance::F32_ACTIVATIONS));
            checks.push(close("loss", &cpu.loss, &on_device.loss, tolerance::LOSS));
            let same = cpu.generated == on_device.generated;
            checks.push(Check {
                what: format!("{name}: greedy tokens {:?} vs {:?}", cpu.generated, on_device.generated),
                diff: if same { 0.0 } else { 1.0 },
                tolerance: 0.0,
            });
        }
    }
    Ok(())
}

/// The gradients of every trained tensor on `device` (checkpointing off and on) against the
/// CPU's without checkpointing: LoRA on each target set, with and without the motion connector.
fn backward(device: &Device, checks: &mut Vec<Check>) -> Result<()> {
    for dump in QwenDump::all() {
        for targets in Targets::ALL {
            for motion in [false, true] {
                let setting = |checkpointing| Setting { targets, motion, dtype: DType::F32, checkpointing, dropout: 0.0 };
                let reference = gradients(&dump, setting(false), &Device::Cpu)?;
                for checkpointing in [false, true] {
                    let on_device = gradients(&dump, setting(checkpointing), device)?;
                    let worst = reference
                        .iter()
                        .zip(&on_device)
                        .map(|((name, want), (_, got))| (max_rel_diff(got, want), name))
                        .max_by(|a, b| a.0.total_cmp(&b.0))
                        .context("no trained tensor")?;
                    checks.push(Check {
                        what: format!(
                            "{}: {targets:?}{} gradients, checkpointing {checkpointing} (worst: {}, relative)",
                            dump.dump.label,
                            if motion { " + connector" } else { "" },
                            worst.1
                        ),
                        diff: worst.0,
                        tolerance: GRADIENT_RELATIVE,
                    });
                }
            }
        }
    }
    Ok(())
}

/// N(0, 1) values of `shape` from a seeded stream, on the CPU.
fn normal(rng: &mut SynthRng, shape: &[usize]) -> Result<Tensor> {
    let values: Vec<f32> = (0..shape.iter().product()).map(|_| rng.normal() as f32).collect();
    Ok(Tensor::from_vec(values, shape, &Device::Cpu)?)
}

/// `op` on copies of `inputs` on `device` (as variables; `op` moves any constant it needs there
/// itself): its output, and the gradients of `Σ output·probe` with respect to each input, all
/// back on the CPU.
fn forward_backward(inputs: &[Tensor], probe: &Tensor, device: &Device, op: impl Fn(&[Tensor], &Device) -> Result<Tensor>) -> Result<Vec<Tensor>> {
    let vars = inputs.iter().map(|t| Var::from_tensor(&t.to_device(device)?)).collect::<candle_core::Result<Vec<_>>>()?;
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let out = op(&tensors, device)?;
    let grads = (&out * probe.to_device(device)?)?.sum_all()?.backward()?;
    let mut results = vec![out.to_device(&Device::Cpu)?];
    for t in &tensors {
        results.push(grads.get(t).context("an input got no gradient")?.to_device(&Device::Cpu)?);
    }
    Ok(results)
}

/// Our device kernels, each alone, against the CPU kernels on seeded inputs: forward outputs and
/// every input's gradient relative to the CPU's largest entry, and LoRA dropout's mask bit for bit
/// (the same hash of each element's index on both).
fn kernels(device: &Device, checks: &mut Vec<Check>) -> Result<()> {
    let mut rng = SynthRng::new(29);
    // Widths that are not multiples of a block, rows that are not of a chunk.
    let (rows, width) = (70, 300);
    let x = normal(&mut rng, &[rows, width])?;
    let weight = normal(&mut rng, &[width])?;
    let probe = normal(&mut rng, &[rows, width])?;
    let fused = norm::applies(&x.to_device(device)?, &weight.to_device(device)?);
    let rms = |t: &[Tensor], _: &Device| Ok(norm::rms_norm(&t[0], &t[1], 1e-6)?);
    let (cpu, on_device) =
        (forward_backward(&[x.clone(), weight.clone()], &probe, &Device::Cpu, rms)?, forward_backward(&[x, weight], &probe, device, rms)?);
    for (what, a, b) in [("output", &cpu[0], &on_device[0]), ("dx", &cpu[1], &on_device[1]), ("dweight", &cpu[2], &on_device[2])] {
        checks.push(Check {
            what: format!("kernel: RMSNorm {what} (fused on the device: {fused}, relative)"),
            diff: max_rel_diff(b, a),
            tolerance: GRADIENT_RELATIVE,
        });
    }
    let (gate, up, probe) = (normal(&mut rng, &[rows, width])?, normal(&mut rng, &[rows, width])?, normal(&mut rng, &[rows, width])?);
    let fused = swiglu::applies(Activation::Silu, &gate.to_device(device)?, &up.to_device(device)?);
    let silu = |t: &[Tensor], _: &Device| Ok(swiglu::gated_activation(Activation::Silu, &t[0], &t[1])?);
    let inputs = [gate, up];
    let (cpu, on_device) = (forward_backward(&inputs, &probe, &Device::Cpu, silu)?, forward_backward(&inputs, &probe, device, silu)?);
    for (what, a, b) in [("output", &cpu[0], &on_device[0]), ("dgate", &cpu[1], &on_device[1]), ("dup", &cpu[2], &on_device[2])] {
        checks.push(Check {
            what: format!("kernel: SwiGLU {what} (fused on the device: {fused}, relative)"),
            diff: max_rel_diff(b, a),
            tolerance: GRADIENT_RELATIVE,
        });
    }
    // The decoder's layout: tables [B, 1, L, D] broadcast over the heads of x [B, H, L, D].
    let (x, probe) = (normal(&mut rng, &[2, 3, 37, 16])?, normal(&mut rng, &[2, 3, 37, 16])?);
    let (cos, sin) = (normal(&mut rng, &[2, 1, 37, 16])?, normal(&mut rng, &[2, 1, 37, 16])?);
    let fused = rotary::applies(&x.to_device(device)?, &cos.to_device(device)?, &sin.to_device(device)?);
    let rotate = |t: &[Tensor], device: &Device| Ok(rotary::apply_rotary(&t[0], &cos.to_device(device)?, &sin.to_device(device)?)?);
    let (cpu, on_device) =
        (forward_backward(std::slice::from_ref(&x), &probe, &Device::Cpu, rotate)?, forward_backward(&[x], &probe, device, rotate)?);
    for (what, a, b) in [("output", &cpu[0], &on_device[0]), ("dx", &cpu[1], &on_device[1])] {
        checks.push(Check {
            what: format!("kernel: rotary {what} (fused on the device: {fused}, relative)"),
            diff: max_rel_diff(b, a),
            tolerance: GRADIENT_RELATIVE,
        });
    }
    let shape = candle_core::Shape::from((33, 1000));
    let mask = |device: &Device| -> Result<Vec<f32>> {
        Ok(motionvl_models::lora::dropout_keep_mask(&shape, device, 0x5eed, 0.05)?.to_device(&Device::Cpu)?.flatten_all()?.to_vec1()?)
    };
    let (cpu, on_device) = (mask(&Device::Cpu)?, mask(device)?);
    let differ = cpu.iter().zip(&on_device).filter(|(a, b)| a != b).count();
    checks.push(Check { what: format!("kernel: LoRA dropout mask, {differ} of {} elements differ", cpu.len()), diff: differ as f32, tolerance: 0.0 });
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let device_name = match args.as_slice() {
        [] => "cuda:0",
        [flag, name] if flag == "--device" => name.as_str(),
        _ => bail!("usage: gpu_check [--device cuda:N|cpu]"),
    };
    let device = motionvl_models::device::parse_device(device_name).with_context(|| format!("device {device_name}"))?;
    println!("fixtures: {}; device: {device_name}", fixtures_root().display());
    let mut checks = Vec::new();
    kernels(&device, &mut checks)?;
    flows(&device, &mut checks)?;
    qwen(&device, &mut checks)?;
    backward(&device, &mut checks)?;
    let failed: Vec<&Check> = checks.iter().filter(|c| !(c.diff <= c.tolerance)).collect();
    for c in &checks {
        println!("{:<4} {:<90} max |Δ| {:.2e} (tolerance {:.0e})", if c.diff <= c.tolerance { "ok" } else { "FAIL" }, c.what, c.diff, c.tolerance);
    }
    println!("{}", serde_json::json!({"device": device_name, "parity_checks": checks.len(), "failed": failed.len()}));
    if !failed.is_empty() {
        bail!("{} of {} results on {device_name} differ from the CPU beyond tolerance", failed.len(), checks.len());
    }
    Ok(())
}
