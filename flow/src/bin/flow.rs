//! `flow`: extract, cache and look at optical flow.
//!
//! ```text
//! flow extract --video a.mp4 --video b.mp4 --motion dis --out flows/
//! flow extract --frames seq01/ --fps 15 --motion raft-large --weights raft_large_C_T_SKHT_V2-ff5fadd5.pth --out flows/
//! flow viz --video a.mp4 --motion dis --out viz/
//! ```
//!
//! Frames come from `motionvl-data` (FFmpeg for files, a folder of numbered PNG/JPEG frames
//! with a declared rate) under a frame plan (`training` = 2 FPS, 8–32 frames, as in SIS-Motion
//! training; `sisbench` = the evaluation protocol; `uniform:N`; `all`). Videos run in parallel.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use candle_core::Device;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use motionvl_data::frames::{EvalProtocol, FramePlan, FramePolicy, TrainingPlan};
use motionvl_data::manifest::{read_manifest, Benchmark};
use motionvl_data::samples::{read_training_samples, ReadOptions};
use motionvl_data::video::{DecodeOptions, VideoSource};
use motionvl_flow::estimator::{estimator_from_spec, EstimatorSpec};
use motionvl_flow::{viz, FlowCache, FlowEstimator, Flows};
use ndarray::{Array4, Axis};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "flow", about = "Extract, cache and visualise optical flow for motionvl")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Flows of every video to `<out>/<name>.safetensors` (`flows` f32 [N-1,2,H,W]).
    Extract {
        #[command(flatten)]
        input: Input,
        #[command(flatten)]
        motion: Motion,
        /// Output folder.
        #[arg(long)]
        out: PathBuf,
        /// Flow cache folder: read flows from it, and store the ones computed.
        #[arg(long)]
        cache: Option<PathBuf>,
    },
    /// Colour-wheel PNGs of every flow and a strip of frames above their flows.
    Viz {
        #[command(flatten)]
        input: Input,
        #[command(flatten)]
        motion: Motion,
        /// Output folder (one subfolder per video).
        #[arg(long)]
        out: PathBuf,
        /// Height of a strip tile in pixels.
        #[arg(long, default_value_t = 160)]
        tile_height: u32,
    },
}

#[derive(Args)]
struct Input {
    /// A video file (repeatable).
    #[arg(long = "video")]
    videos: Vec<PathBuf>,
    /// A folder of numbered frames (repeatable); see --fps.
    #[arg(long = "frames")]
    frame_dirs: Vec<PathBuf>,
    /// A text file listing videos or frame folders, one per line.
    #[arg(long)]
    list: Option<PathBuf>,
    /// A training data file (LLaVA / LLaMA-Factory conversations) or a benchmark manifest
    /// (SIS-Bench, UrbanVideo-Bench, UAV-DualCog, LinkS²Bench): every video it names.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Frame rate of frame folders.
    #[arg(long, default_value_t = 15.0)]
    fps: f64,
    /// Frames to take: training (2 FPS, 8-32 frames), sisbench, uniform:N or all.
    #[arg(long, default_value = "training")]
    plan: String,
    /// Downscale frames so the longer side is at most this many pixels before the flow.
    #[arg(long)]
    max_side: Option<u32>,
}

#[derive(Args)]
struct Motion {
    /// Estimator: dis (alias classic), dis-fast, dis-ultrafast, raft-small, raft-large,
    /// sea-raft-s, sea-raft-m, sea-raft-l, memflow, mofnet.
    #[arg(long, default_value = "dis")]
    motion: String,
    /// Checkpoint of a network estimator (.safetensors or .pth, as its official code saves it).
    #[arg(long)]
    weights: Option<PathBuf>,
    /// RAFT refinement iterations.
    #[arg(long)]
    iters: Option<usize>,
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Extract { input, motion, out, cache } => {
            let estimator = build_estimator(&motion)?;
            let cache = cache.map(FlowCache::new).transpose()?;
            let sources = sources(&input)?;
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            for_each_source(&sources, |source, name| {
                let (plan, frames) = load(source, &input)?;
                let flows = flows_for(estimator.as_ref(), cache.as_ref(), &frames, &plan, source)?;
                write_flows(&out.join(format!("{name}.safetensors")), &flows, &plan, estimator.as_ref())
            })
        }
        Command::Viz { input, motion, out, tile_height } => {
            let estimator = build_estimator(&motion)?;
            let sources = sources(&input)?;
            for_each_source(&sources, |source, name| {
                let (plan, frames) = load(source, &input)?;
                let flows = flows_for(estimator.as_ref(), None, &frames, &plan, source)?;
                let dir = out.join(name);
                std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                for (t, flow) in flows.axis_iter(Axis(0)).enumerate() {
                    let path = dir.join(format!("flow_{t:04}.png"));
                    viz::flow_to_rgb(flow, None).save(&path).with_context(|| format!("writing {}", path.display()))?;
                }
                let path = dir.join("strip.png");
                viz::strip(frames.view(), flows.view(), tile_height).save(&path).with_context(|| format!("writing {}", path.display()))
            })
        }
    }
}

fn build_estimator(m: &Motion) -> Result<Arc<dyn FlowEstimator>> {
    let spec = EstimatorSpec { name: &m.motion, weights: m.weights.as_deref(), iters: m.iters };
    Ok(Arc::from(estimator_from_spec(&spec, &Device::Cpu)?))
}

fn sources(input: &Input) -> Result<Vec<VideoSource>> {
    let mut out: Vec<VideoSource> = input.videos.iter().cloned().map(VideoSource::File).collect();
    out.extend(input.frame_dirs.iter().map(|dir| VideoSource::FrameFolder { dir: dir.clone(), fps: input.fps }));
    if let Some(list) = &input.list {
        let text = std::fs::read_to_string(list).with_context(|| format!("reading {}", list.display()))?;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            let path = PathBuf::from(line);
            out.push(if path.is_dir() { VideoSource::FrameFolder { dir: path, fps: input.fps } } else { VideoSource::File(path) });
        }
    }
    if let Some(manifest) = &input.manifest {
        for path in manifest_videos(manifest)? {
            out.push(if path.is_dir() { VideoSource::FrameFolder { dir: path, fps: input.fps } } else { VideoSource::File(path) });
        }
    }
    if out.is_empty() {
        bail!("no input: pass --video FILE, --frames DIR, --list FILE or --manifest FILE");
    }
    Ok(out)
}

/// The distinct videos a data file names, in order: read as training conversations, else as
/// each benchmark's manifest in turn.
fn manifest_videos(path: &Path) -> Result<Vec<PathBuf>> {
    let opts = ReadOptions::default();
    let mut videos: Vec<PathBuf> = match read_training_samples(path, &opts) {
        Ok(read) if !read.items.is_empty() => read.items.into_iter().flat_map(|s| s.videos).collect(),
        _ => {
            let read = Benchmark::ALL
                .iter()
                .find_map(|&b| read_manifest(b, path, &opts).ok().filter(|r| !r.items.is_empty()))
                .with_context(|| format!("{} is neither training conversations nor a benchmark manifest motionvl reads", path.display()))?;
            read.items.into_iter().flat_map(|q| q.videos).collect()
        }
    };
    let mut seen = std::collections::HashSet::new();
    videos.retain(|v| seen.insert(v.clone()));
    Ok(videos)
}

fn policy(plan: &str) -> Result<Option<FramePolicy>> {
    Ok(Some(match plan {
        "training" => FramePolicy::Training(TrainingPlan::default()),
        "sisbench" => FramePolicy::SisbenchEval(EvalProtocol::default()),
        "all" => return Ok(None),
        other => match other.strip_prefix("uniform:").map(str::parse::<usize>) {
            Some(Ok(frames)) if frames >= 2 => FramePolicy::Uniform { frames },
            _ => bail!("unknown --plan `{other}`: use training, sisbench, uniform:N (N ≥ 2) or all"),
        },
    }))
}

/// The planned frames of a source, downscaled if asked.
fn load(source: &VideoSource, input: &Input) -> Result<(FramePlan, Array4<u8>)> {
    let options = DecodeOptions::default();
    let (plan, decoded) = match policy(&input.plan)? {
        Some(p) => source.load(&p, &options)?,
        None => {
            let info = source.probe()?;
            let p = FramePolicy::Uniform { frames: info.frame_count.max(2) };
            source.load(&p, &options)?
        }
    };
    let frames = match input.max_side {
        Some(side) => downscale(decoded.frames, side),
        None => decoded.frames,
    };
    Ok((plan, frames))
}

fn downscale(frames: Array4<u8>, max_side: u32) -> Array4<u8> {
    let (n, h, w, _) = frames.dim();
    let longer = h.max(w) as u32;
    if longer <= max_side {
        return frames;
    }
    let (nw, nh) = (((w as u32 * max_side) / longer).max(1), ((h as u32 * max_side) / longer).max(1));
    let mut out = Array4::<u8>::zeros((n, nh as usize, nw as usize, 3));
    for t in 0..n {
        let img = viz::frame_to_rgb(frames.index_axis(Axis(0), t));
        let small = image::imageops::resize(&img, nw, nh, image::imageops::FilterType::Triangle);
        for (x, y, p) in small.enumerate_pixels() {
            for c in 0..3 {
                out[[t, y as usize, x as usize, c]] = p.0[c];
            }
        }
    }
    out
}

fn flows_for(estimator: &dyn FlowEstimator, cache: Option<&FlowCache>, frames: &Array4<u8>, plan: &FramePlan, source: &VideoSource) -> Result<Flows> {
    Ok(match cache {
        Some(cache) => {
            let (_, h, w, _) = frames.dim();
            let key = format!("{}|{:?}@{h}x{w}", source.path().display(), plan.indices);
            cache.get_or_compute(frames.view(), &key, estimator)?.0
        }
        None => estimator.estimate(frames.view())?,
    })
}

fn write_flows(path: &Path, flows: &Flows, plan: &FramePlan, estimator: &dyn FlowEstimator) -> Result<()> {
    let data: Vec<u8> = flows.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, flows.shape().to_vec(), &data)?;
    let meta = std::collections::HashMap::from([
        ("estimator".to_string(), estimator.name().to_string()),
        ("settings".to_string(), estimator.settings().to_string()),
        ("frame_indices".to_string(), serde_json::to_string(&plan.indices)?),
        ("timestamps".to_string(), serde_json::to_string(&plan.timestamps)?),
    ]);
    safetensors::serialize_to_file([("flows", view)], Some(meta), path).with_context(|| format!("writing {}", path.display()))
}

/// Runs `job` over the sources in parallel with a progress bar; names outputs after the file
/// stem (the folder name for frame folders), numbered when two sources share one.
fn for_each_source(sources: &[VideoSource], job: impl Fn(&VideoSource, &str) -> Result<()> + Sync) -> Result<()> {
    let bar = ProgressBar::new(sources.len() as u64);
    bar.set_style(ProgressStyle::with_template("{bar:40} {pos}/{len} videos {elapsed_precise} eta {eta} {msg}").unwrap_or_else(|_| ProgressStyle::default_bar()));
    let names = unique_names(sources);
    let failures: Vec<String> = sources
        .par_iter()
        .zip(names.par_iter())
        .filter_map(|(source, name)| {
            let result = job(source, name);
            bar.inc(1);
            result.err().map(|e| format!("{e:#}"))
        })
        .collect();
    bar.finish_and_clear();
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("error: {f}");
        }
        bail!("{} of {} videos failed", failures.len(), sources.len());
    }
    eprintln!("{} videos done", sources.len());
    Ok(())
}

fn unique_names(sources: &[VideoSource]) -> Vec<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    sources
        .iter()
        .map(|s| {
            let stem = s.path().file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "video".into());
            let count = seen.entry(stem.clone()).or_insert(0);
            *count += 1;
            if *count == 1 { stem } else { format!("{stem}-{count}") }
        })
        .collect()
}
