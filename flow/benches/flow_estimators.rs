//! Flow estimators at 448×448 on CPU, against their references in the same run.
//!
//! `cargo bench -p motionvl-flow --bench flow_estimators` writes the synthetic pairs of
//! `motionvl_flow::synthetic::standard_motions` (exact ground truth), times our DIS presets
//! on them, then runs `tools/bench/dis_opencv.py` (OpenCV's `DISOpticalFlow` FAST/MEDIUM on the
//! same grey images) and prints EPE and ms/pair side by side with the time ratio; then times
//! our RAFT small/large (random weights, 12 iterations, one pair) against torchvision's in the
//! same script. Set `RAYON_NUM_THREADS` to fix our thread count; the script gets the same via
//! `--threads`.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::VarBuilder;
use candle_nn::var_builder::SimpleBackend;
use motionvl_flow::synthetic::{SyntheticPair, average_epe, standard_motions, synthetic_pair};
use motionvl_flow::{Dis, DisPreset, FlowEstimator, Raft, RaftArch, RaftEstimator};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SIZE: usize = 448;
const RUNS: usize = 20;
const RAFT_RUNS: usize = 3;
const RAFT_ITERS: usize = 12;

/// Random N(0, 0.05) weights (running variances 1): timing does not depend on the values.
struct RandomWeights;

impl SimpleBackend for RandomWeights {
    fn get(&self, shape: Shape, name: &str, _: candle_nn::Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        if name.ends_with("running_var") {
            return Tensor::ones(shape, dtype, dev);
        }
        Tensor::randn(0f32, 0.05, shape, dev)?.to_dtype(dtype)
    }
    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("random weights need a shape for {name}")
    }
    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

fn median_ms(mut f: impl FnMut(), runs: usize) -> f64 {
    f();
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

fn write_pairs(path: &std::path::Path, pairs: &[(&str, SyntheticPair)]) -> anyhow::Result<()> {
    let mut bufs: Vec<(String, Vec<u8>, Vec<usize>, safetensors::Dtype)> = Vec::new();
    for (name, p) in pairs {
        bufs.push((format!("frames_{name}"), p.frames.iter().copied().collect(), p.frames.shape().to_vec(), safetensors::Dtype::U8));
        let flow: Vec<u8> = p.flow.iter().flat_map(|v| v.to_le_bytes()).collect();
        bufs.push((format!("flow_{name}"), flow, p.flow.shape().to_vec(), safetensors::Dtype::F32));
    }
    let views: Vec<(String, safetensors::tensor::TensorView)> =
        bufs.iter().map(|(n, b, s, d)| Ok((n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b)?))).collect::<anyhow::Result<_>>()?;
    safetensors::serialize_to_file(views, None, path)?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let threads = rayon::current_num_threads();
    let pairs: Vec<(&str, SyntheticPair)> = standard_motions(SIZE, SIZE).into_iter().map(|(n, m)| (n, synthetic_pair(SIZE, SIZE, m, 1))).collect();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("pairs.safetensors");
    write_pairs(&path, &pairs)?;

    // Rust side: EPE and median ms per pair, per preset and motion.
    let mut ours: BTreeMap<String, BTreeMap<String, (f64, f64)>> = BTreeMap::new();
    for (preset_name, preset) in [("ultrafast", DisPreset::UltraFast), ("fast", DisPreset::Fast), ("medium", DisPreset::Medium)] {
        let dis = Dis::new(preset.params())?;
        for (name, p) in &pairs {
            let (f0, f1) = (p.frames.index_axis(ndarray::Axis(0), 0), p.frames.index_axis(ndarray::Axis(0), 1));
            let flow = dis.pair(f0, f1)?;
            let epe = average_epe(flow.view(), p.flow.view()) as f64;
            let ms = median_ms(|| drop(dis.pair(f0, f1)), RUNS);
            ours.entry(preset_name.to_string()).or_default().insert(name.to_string(), (epe, ms));
        }
    }

    // Our RAFT on the first pair: features, correlation and 12 updates, as one estimate call.
    let mut raft_ms = BTreeMap::new();
    for arch in [RaftArch::Small, RaftArch::Large] {
        let vb = VarBuilder::from_backend(Box::new(RandomWeights), DType::F32, Device::Cpu);
        let model = Raft::new(vb, &arch.config())?;
        let est = RaftEstimator::from_model(model, RAFT_ITERS, &Device::Cpu, "random".into());
        let frames = pairs[0].1.frames.view();
        raft_ms.insert(est.name().to_string(), median_ms(|| drop(est.estimate(frames)), RAFT_RUNS));
    }

    // OpenCV and torchvision side, same pairs.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/dis_opencv.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let reference: Option<serde_json::Value> = match Command::new(python)
        .arg(script)
        .arg(&path)
        .args(["--threads", &threads.to_string(), "--runs", &RUNS.to_string(), "--raft", "--raft-runs", &RAFT_RUNS.to_string()])
        .output()
    {
        Ok(out) if out.status.success() => serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or("{}")).ok(),
        Ok(out) => {
            eprintln!("OpenCV reference failed:\n{}", String::from_utf8_lossy(&out.stderr));
            None
        }
        Err(e) => {
            eprintln!("could not run python for the OpenCV reference: {e}");
            None
        }
    };

    println!("DIS at {SIZE}x{SIZE}, {threads} threads, median of {RUNS} runs (EPE px / ms per pair)");
    if let Some(r) = &reference {
        println!("OpenCV {} with {} threads", r["opencv"].as_str().unwrap_or("?"), r["threads"]);
    }
    println!("{:<10} {:<12} {:>10} {:>10} {:>12} {:>12} {:>8}", "preset", "motion", "EPE ours", "ms ours", "EPE opencv", "ms opencv", "speedup");
    for (preset, rows) in &ours {
        let (mut se, mut sm, mut re, mut rm, mut n) = (0.0, 0.0, 0.0, 0.0, 0.0);
        for (motion, (epe, ms)) in rows {
            let cv = reference.as_ref().map(|r| &r[format!("opencv-dis-{preset}")][motion]);
            let cv_epe = cv.and_then(|c| c["epe"].as_f64()).unwrap_or(f64::NAN);
            let cv_ms = cv.and_then(|c| c["ms"].as_f64()).unwrap_or(f64::NAN);
            println!("{preset:<10} {motion:<12} {epe:>10.3} {ms:>10.2} {cv_epe:>12.3} {cv_ms:>12.2} {:>7.2}x", cv_ms / ms);
            se += epe;
            sm += ms;
            re += cv_epe;
            rm += cv_ms;
            n += 1.0;
        }
        println!("{preset:<10} {:<12} {:>10.3} {:>10.2} {:>12.3} {:>12.2} {:>7.2}x", "MEAN", se / n, sm / n, re / n, rm / n, rm / sm);
    }
    println!("\nRAFT at {SIZE}x{SIZE}, {RAFT_ITERS} iterations, random weights, median of {RAFT_RUNS} (ms per pair)");
    println!("{:<12} {:>10} {:>14} {:>8}", "model", "ms ours", "ms torchvision", "speedup");
    for (name, ms) in &raft_ms {
        let tv = reference.as_ref().and_then(|r| r[format!("torchvision-{}", name.replace('-', "_"))]["ms"].as_f64()).unwrap_or(f64::NAN);
        println!("{name:<12} {ms:>10.0} {tv:>14.0} {:>7.2}x", tv / ms);
    }
    Ok(())
}
