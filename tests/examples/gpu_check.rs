//! Every parity fixture on CUDA against the CPU: the flow networks (RAFT, SEA-RAFT, MemFlow,
//! MOFNet) on each dump's frames, and Qwen2.5-VL's vision features, logits, loss and greedy
//! generation, with and without the fixture's PEFT adapter. The CPU results are the ones the
//! parity tests prove equal to PyTorch, so within these tolerances CUDA is too.
//!
//!     cargo run --release -p motionvl-tests --features cuda --example gpu_check
//!
//! Prints one line per comparison and a JSON summary; exits non-zero when one is out of
//! tolerance. `tools/gpu_check.sh` runs it with the rest of the GPU check.

use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use motionvl_flow::memflow::{MemFlowConfig, MemFlowEstimator};
use motionvl_flow::mofnet::{MofConfig, MofNetEstimator};
use motionvl_flow::sea_raft::{SeaRaftConfig, SeaRaftEstimator};
use motionvl_flow::{FlowEstimator, RaftConfig, RaftEstimator};
use motionvl_models::lora::LoraWeights;
use motionvl_models::qwen25vl::{causal_lm_loss, GenerateOptions, PixelInput, PromptBatch, Qwen25Vl, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_models::CheckpointFiles;
use motionvl_tests::{fixture_dirs, fixture_root, max_abs_diff, Tensors};
use ndarray::Array4;

/// The parity tests' tolerances: flows in pixels, logits and features absolute, loss absolute.
const FLOW_TOL: f32 = 1e-3;
const LOGITS_TOL: f32 = 1e-4;
const LOSS_TOL: f32 = 1e-5;

struct Check {
    what: String,
    diff: f32,
    tolerance: f32,
}

fn estimator(arch: &str, dir: &Path, device: &Device) -> Result<Box<dyn FlowEstimator>> {
    let config = std::fs::read_to_string(dir.join("config.json"))?;
    let weights = dir.join("model.safetensors");
    let no_iters = || anyhow::anyhow!("{}: config.json names no iterations", dir.display());
    Ok(match arch {
        "raft_small" | "raft_large" => {
            let (cfg, iters) = RaftConfig::from_json(&config)?;
            Box::new(RaftEstimator::from_checkpoint(&weights, cfg, iters.ok_or_else(no_iters)?, device)?)
        }
        "sea_raft_s" | "sea_raft_m" | "sea_raft_l" => Box::new(SeaRaftEstimator::from_checkpoint(&weights, &SeaRaftConfig::from_json(&config)?, device)?),
        "memflow" => Box::new(MemFlowEstimator::from_checkpoint(&weights, MemFlowConfig::from_json(&config)?, device)?),
        "mofnet" => {
            let (cfg, iters) = MofConfig::from_json(&config)?;
            Box::new(MofNetEstimator::from_checkpoint(&weights, cfg, iters.ok_or_else(no_iters)?, device)?)
        }
        other => bail!("no estimator for fixture family {other}"),
    })
}

fn flows(gpu: &Device, checks: &mut Vec<Check>) -> Result<()> {
    for arch_dir in fixture_dirs("flow") {
        let arch = arch_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        for dir in std::fs::read_dir(&arch_dir)?.flatten().map(|e| e.path()).filter(|p| p.join("config.json").is_file()) {
            let frames = Tensors::load(&dir.join("inputs.safetensors"))?.get("frames")?.to_dtype(DType::U8)?;
            let dims = frames.dims4()?;
            let frames = Array4::from_shape_vec(dims, frames.flatten_all()?.to_vec1::<u8>()?)?;
            let cpu = estimator(&arch, &dir, &Device::Cpu)?.estimate(frames.view())?;
            let cuda = estimator(&arch, &dir, gpu)?.estimate(frames.view())?;
            let diff = cpu.iter().zip(cuda.iter()).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            checks.push(Check { what: format!("{arch}/{}: flows", dir.file_name().unwrap_or_default().to_string_lossy()), diff, tolerance: FLOW_TOL });
        }
    }
    Ok(())
}

/// The prompt `<prefix>input_ids` (with its attention mask and token types) of a dump.
fn prompt(inputs: &Tensors, prefix: &str) -> Result<PromptBatch> {
    let rows = |name: &str| inputs.i64_rows(&format!("{prefix}{name}"));
    let (ids, types) = (rows("input_ids")?, rows("mm_token_type_ids")?);
    let mask = if inputs.has(&format!("{prefix}attention_mask")) { rows("attention_mask")? } else { ids.iter().map(|r| vec![1; r.len()]).collect() };
    Ok(PromptBatch {
        ids: ids.iter().map(|r| r.iter().map(|&t| t as u32).collect()).collect(),
        mask: mask.iter().map(|r| r.iter().map(|&m| m == 1).collect()).collect(),
        kinds: types.iter().map(|r| r.iter().map(|&t| TokenKind::from_id(t)).collect::<std::result::Result<Vec<_>, _>>()).collect::<std::result::Result<_, _>>()?,
    })
}

fn video(inputs: &Tensors, device: &Device) -> Result<VisionInputs> {
    let grids = inputs.i64_rows("video_grid_thw")?.iter().map(|g| [g[0] as usize, g[1] as usize, g[2] as usize]).collect();
    Ok(VisionInputs {
        images: None,
        videos: Some(PixelInput { pixel_values: inputs.get("pixel_values_videos")?.to_device(device)?, grids }),
        video_seconds_per_grid: inputs.get("second_per_grid_ts")?.to_dtype(DType::F64)?.to_vec1()?,
    })
}

/// One model on one device, and what the checks compare.
struct Outputs {
    features: Tensor,
    logits: Tensor,
    loss: Tensor,
    generated: Vec<u32>,
}

fn run_qwen(dir: &Path, adapter: Option<&Path>, device: &Device) -> Result<Outputs> {
    let inputs = Tensors::load(&dir.join("inputs.safetensors"))?;
    let mut model = Qwen25Vl::load(&CheckpointFiles::from_dir(dir)?, DType::F32, device)?;
    if let Some(adapter) = adapter {
        LoraWeights::load_peft(adapter, device)?.attach(&mut model)?;
    }
    let vision = video(&inputs, device)?;
    let pixels = vision.videos.as_ref().context("video")?;
    let features = model.visual().forward(&pixels.pixel_values, &pixels.grids)?;
    let batch = prompt(&inputs, "")?;
    let logits = model.forward(&batch, &vision, None)?;
    let loss = causal_lm_loss(&logits, &inputs.i64_rows("labels")?)?;
    let prefix = if inputs.has("prompt_input_ids") { "prompt_" } else { "" };
    let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: false };
    let generated = model.generate(&prompt(&inputs, prefix)?, &vision, None, &options)?.tokens.swap_remove(0);
    Ok(Outputs { features, logits, loss, generated })
}

fn qwen(gpu: &Device, checks: &mut Vec<Check>) -> Result<()> {
    for dir in fixture_dirs("qwen2_5_vl") {
        let lora = dir.join("lora");
        let adapters = if lora.is_dir() { vec![None, Some(lora.as_path())] } else { vec![None] };
        for adapter in adapters {
            let (cpu, cuda) = (run_qwen(&dir, adapter, &Device::Cpu)?, run_qwen(&dir, adapter, gpu)?);
            let name = format!("qwen2_5_vl/{}{}", dir.file_name().unwrap_or_default().to_string_lossy(), if adapter.is_some() { " + LoRA" } else { "" });
            checks.push(Check { what: format!("{name}: vision features"), diff: max_abs_diff(&cpu.features, &cuda.features)?, tolerance: LOGITS_TOL });
            checks.push(Check { what: format!("{name}: logits"), diff: max_abs_diff(&cpu.logits, &cuda.logits)?, tolerance: LOGITS_TOL });
            checks.push(Check { what: format!("{name}: loss"), diff: max_abs_diff(&cpu.loss, &cuda.loss)?, tolerance: LOSS_TOL });
            let same = cpu.generated == cuda.generated;
            checks.push(Check { what: format!("{name}: greedy tokens {:?} vs {:?}", cpu.generated, cuda.generated), diff: if same { 0.0 } else { 1.0 }, tolerance: 0.0 });
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let gpu = Device::new_cuda(0).context("cuda:0 (build with --features cuda, on a machine with a GPU)")?;
    println!("fixtures: {}", fixture_root("").display());
    let mut checks = Vec::new();
    flows(&gpu, &mut checks)?;
    qwen(&gpu, &mut checks)?;
    let failed: Vec<&Check> = checks.iter().filter(|c| !(c.diff <= c.tolerance)).collect();
    for c in &checks {
        println!("{:<4} {:<70} max |Δ| {:.2e} (tolerance {:.0e})", if c.diff <= c.tolerance { "ok" } else { "FAIL" }, c.what, c.diff, c.tolerance);
    }
    println!("{}", serde_json::json!({"parity_checks": checks.len(), "failed": failed.len()}));
    if !failed.is_empty() {
        bail!("{} of {} CUDA results differ from the CPU beyond tolerance", failed.len(), checks.len());
    }
    Ok(())
}
