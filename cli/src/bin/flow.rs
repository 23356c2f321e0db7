//! `flow`: extract, cache and look at optical flow.
//!
//! ```text
//! flow extract --config configs/sft/sis-motion-3b.toml --manifest train.jsonl --motion.weights MOF_kitti.pth --shard 0/4
//! flow extract --video a.mp4 --video b.mp4 --motion dis --out flows/
//! flow extract --frames seq01/ --fps 15 --motion raft-large --weights raft_large_C_T_SKHT_V2-ff5fadd5.pth --out flows/
//! flow viz --video a.mp4 --motion dis --out viz/
//! ```
//!
//! With `--config` (a training recipe or an evaluation config, the same file `train sft` /
//! `evaluate run` take) every flow is computed on exactly the frames that run will feed the
//! vision tower — its frame plan, its resize, and for training samples longer than
//! `max_seq_len` the fitted size — and stored under the key the run looks up, in the run's
//! cache folder unless `--cache` names another. `--shard I/N` takes a disjoint, deterministic
//! part of the work, so N processes (GPUs, a SLURM array) fill one cache; entries already
//! there are skipped, and each is written atomically.
//!
//! Without `--config`, frames come under a frame plan (`training` = 2 FPS, 8–32 frames, as in
//! SIS-Motion training; `sisbench` = the evaluation protocol; `uniform:N`) at the default sizes
//! of those runs, or natively sized (`all`, `--max-side`; written to `--out` only). Videos run
//! in parallel.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use candle_core::Device;
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use motionvl_cli::config_media::{MotionOverrides, config_media};
use motionvl_data::frames::{EvalProtocol, FramePlan, FramePolicy, TrainingPlan};
use motionvl_data::video::{DecodeOptions, FolderListing, VideoSource};
use motionvl_flow::extract::{Shard, manifest_videos, plan_jobs, plan_media};
use motionvl_flow::media::MotionMedia;
use motionvl_flow::{EstimatorName, EstimatorSpec, MotionChoice, estimator_from_spec, known_estimators};
use motionvl_flow::{FlowCache, FlowEstimator, Flows, PseudoImageConfig, viz};
use motionvl_models::device::DeviceName;
use motionvl_train::parallel::Ranks;
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
    /// Flows of every video into a flow cache and/or `<out>/<name>.safetensors` (`flows` f32
    /// [N-1,2,H,W]).
    Extract {
        #[command(flatten)]
        input: Input,
        #[command(flatten)]
        motion: Motion,
        /// A training recipe or evaluation config: extract at the frames and sizes that run uses.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Output folder for one flow file per video.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Flow cache folder (default with --config: the run's own, `<run dir>/flow-cache` or
        /// `[motion] cache_dir`): existing entries are skipped, new ones stored.
        #[arg(long)]
        cache: Option<PathBuf>,
        /// Process part I of N (0-based) of the work: `--shard 2/8`. Under torchrun or srun
        /// (`RANK`/`WORLD_SIZE`, `SLURM_PROCID`/`SLURM_NTASKS`) the rank's part by default, and
        /// `--device cuda` is the rank's GPU.
        #[arg(long)]
        shard: Option<Shard>,
        /// tokenizer.json of the recipe's model, to fit long training samples as `train sft`
        /// does (default: found from the recipe's model).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
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
    /// Frames to take without --config: training (2 FPS, 8-32 frames; the default), sisbench,
    /// uniform:N or all.
    #[arg(long)]
    plan: Option<String>,
    /// Downscale frames so the longer side is at most this many pixels before the flow.
    #[arg(long)]
    max_side: Option<u32>,
}

#[derive(Args)]
struct Motion {
    /// Estimator: dis (alias classic), dis-fast, dis-ultrafast, raft-small, raft-large,
    /// sea-raft-s, sea-raft-m, sea-raft-l, memflow, mofnet (default: the config's
    /// `[motion] estimator`, else dis).
    #[arg(long)]
    motion: Option<MotionChoice>,
    /// Checkpoint of a network estimator (.safetensors or .pth, as its official code saves it).
    #[arg(long, alias = "motion.weights")]
    weights: Option<PathBuf>,
    /// RAFT refinement iterations.
    #[arg(long)]
    iters: Option<usize>,
    /// Where a network estimator runs: cpu, cuda or cuda:N (a build with `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: DeviceName,
}

impl Motion {
    fn device(&self) -> Result<Device> {
        self.device.open().with_context(|| format!("--device {}", self.device))
    }
}

fn main() -> Result<()> {
    motionvl_cli::install_progress_bars();
    motionvl_cli::keep_freed_memory();
    let cli = Cli::parse();
    match cli.command {
        Command::Extract { input, mut motion, config, out, cache, shard, tokenizer } => {
            // One process per GPU under torchrun or srun: each rank takes its own shard and GPU.
            let launch = Ranks::from_vars(|k| std::env::var(k).ok()).context("reading the launcher's environment")?;
            let shard = match (shard, &launch) {
                (Some(shard), _) => shard,
                (None, Some(launch)) => Shard { index: launch.rank, count: launch.world_size },
                (None, None) => Shard::WHOLE,
            };
            if let Some(launch) = launch.as_ref().filter(|_| motion.device == DeviceName::Cuda(None)) {
                motion.device = DeviceName::Cuda(Some(launch.cuda_ordinal(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())));
            }
            extract(&input, &motion, config.as_deref(), out, cache, shard, tokenizer.as_deref())
        }
        Command::Viz { input, motion, out, tile_height } => {
            let estimator = build_estimator(&motion)?;
            let sources = sources(&input)?;
            let names = unique_names(&sources.iter().map(|s| s.path().to_path_buf()).collect::<Vec<_>>());
            run_parallel(sources.len(), "videos", |k| {
                let (_, frames) = load(&sources[k], &input)?;
                let flows = estimator.estimate(frames.view())?;
                let dir = out.join(&names[k]);
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
    let name = match m.motion {
        None => EstimatorName::Dis,
        Some(choice) => {
            choice.estimator().with_context(|| format!("--motion none computes no flows; name an estimator: {}", known_estimators().join(", ")))?
        }
    };
    let spec = EstimatorSpec { name, weights: m.weights.as_deref(), iters: m.iters, ..EstimatorSpec::default() };
    Ok(Arc::from(estimator_from_spec(&spec, &m.device()?)?))
}

fn extract(
    input: &Input,
    motion: &Motion,
    config: Option<&Path>,
    out: Option<PathBuf>,
    cache: Option<PathBuf>,
    shard: Shard,
    tokenizer: Option<&Path>,
) -> Result<()> {
    let native = input.max_side.is_some() || input.plan.as_deref() == Some("all");
    if native {
        if config.is_some() || cache.is_some() {
            bail!("--plan all and --max-side give native-size frames, which no model sees: they cannot be combined with --config or --cache");
        }
        let out = out.context("--plan all / --max-side write flow files: pass --out DIR")?;
        return extract_native(input, motion, &out);
    }
    let settings = match config {
        Some(path) => {
            if input.plan.is_some() {
                bail!("--plan and --config both choose the frames: the config's own plan is used, drop --plan");
            }
            if motion.iters.is_some() {
                bail!("--iters and --config: the run's estimator decides its iterations, and flows of other settings are not the ones it looks up");
            }
            let overrides = MotionOverrides { estimator: motion.motion, weights: motion.weights.clone(), cache_dir: cache.clone() };
            Some(config_media(path, &overrides, &motion.device()?)?)
        }
        None => None,
    };
    let mut motion_media = match &settings {
        Some(s) => s.motion.clone(),
        None => {
            if out.is_none() && cache.is_none() {
                bail!("nowhere to put the flows: pass --cache DIR and/or --out DIR (or --config, whose run has a cache folder)");
            }
            let media = plan_media(input.plan.as_deref().unwrap_or("training"))?;
            MotionMedia::new(media, build_estimator(motion)?, cache.map(FlowCache::new).transpose()?, PseudoImageConfig::default())
        }
    };
    motion_media.qwen.frame_folder_fps = input.fps;
    // Extraction fills the cache a `cache_only` run reads.
    motion_media.cache_only = false;
    let estimator = motion_media.estimator.clone();
    let cache = motion_media.cache.clone();

    let (all_jobs, warning) = plan_jobs(&listed_videos(input)?, input.manifest.as_deref(), settings.as_ref(), &motion_media.qwen, tokenizer)?;
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    if all_jobs.is_empty() {
        bail!("no input: pass --video FILE, --frames DIR, --list FILE or --manifest FILE");
    }
    let jobs = shard.take(&all_jobs);
    if let Some(out) = &out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    }
    let names = unique_names(&jobs.iter().map(|j| j.video.clone()).collect::<Vec<_>>());
    run_parallel(jobs.len(), "flows", |k| {
        let (flow_input, flows) = jobs[k].run(&motion_media)?;
        match &out {
            Some(out) => write_flows(&out.join(format!("{}.safetensors", names[k])), &flows, &flow_input.plan, estimator.as_ref()),
            None => Ok(()),
        }
    })?;
    let (hits, misses, repaired) = motion_media.counts.snapshot();
    // The counts are the cache's: without one, every flow was computed.
    let misses = if cache.is_some() { misses } else { jobs.len() };
    eprintln!(
        "shard {}/{}: {} of {} flows; computed {}, already cached {}, repaired {}{}",
        shard.index,
        shard.count,
        jobs.len(),
        all_jobs.len(),
        misses,
        hits,
        repaired,
        cache.map(|c| format!(" (cache {})", c.root().display())).unwrap_or_default()
    );
    Ok(())
}

/// Flows of natively sized frames (`--plan all`, `--max-side`) to `--out`.
fn extract_native(input: &Input, motion: &Motion, out: &Path) -> Result<()> {
    let estimator = build_estimator(motion)?;
    let sources = sources(input)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let names = unique_names(&sources.iter().map(|s| s.path().to_path_buf()).collect::<Vec<_>>());
    run_parallel(sources.len(), "videos", |k| {
        let (plan, frames) = load(&sources[k], input)?;
        let flows = estimator.estimate(frames.view())?;
        write_flows(&out.join(format!("{}.safetensors", names[k])), &flows, &plan, estimator.as_ref())
    })
}

/// The videos and frame folders named directly (`--video`, `--frames`, `--list`).
fn listed_videos(input: &Input) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = input.videos.iter().chain(&input.frame_dirs).cloned().collect();
    if let Some(list) = &input.list {
        let text = std::fs::read_to_string(list).with_context(|| format!("reading {}", list.display()))?;
        out.extend(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(PathBuf::from));
    }
    Ok(out)
}

/// Every source the inputs name, a manifest's videos included (each once).
fn sources(input: &Input) -> Result<Vec<VideoSource>> {
    let mut paths = listed_videos(input)?;
    if let Some(manifest) = &input.manifest {
        paths.extend(manifest_videos(manifest)?);
    }
    let mut seen = std::collections::HashSet::new();
    paths.retain(|v| seen.insert(v.clone()));
    if paths.is_empty() {
        bail!("no input: pass --video FILE, --frames DIR, --list FILE or --manifest FILE");
    }
    Ok(paths
        .into_iter()
        .map(|path| {
            if path.is_dir() {
                VideoSource::FrameFolder { dir: path, fps: input.fps, listing: FolderListing::Numeric }
            } else {
                VideoSource::File(path)
            }
        })
        .collect())
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
    let (plan, decoded) = match policy(input.plan.as_deref().unwrap_or("training"))? {
        Some(p) => source.load(&p, &options)?,
        // Every frame the stream holds, decoded to its end: the header's frame count is not
        // trusted to size the plan (a bogus one would ask for billions of frames).
        None => match source {
            VideoSource::File(path) => {
                let all = motionvl_data::video::decode_all(path)?;
                let span = all.timestamps.last().zip(all.timestamps.first()).map_or(0.0, |(l, f)| l - f);
                let fps = if all.timestamps.len() > 1 && span > 0.0 { (all.timestamps.len() - 1) as f64 / span } else { input.fps };
                let plan = FramePlan { indices: (0..all.timestamps.len()).collect(), timestamps: all.timestamps, fps };
                return Ok((plan, downscaled(all.frames, input.max_side)));
            }
            // A folder's frames are its files, counted.
            _ => {
                let info = source.probe()?;
                source.load(&FramePolicy::Uniform { frames: info.frame_count.max(2) }, &options)?
            }
        },
    };
    Ok((plan, downscaled(decoded.frames, input.max_side)))
}

fn downscaled(frames: Array4<u8>, max_side: Option<u32>) -> Array4<u8> {
    match max_side {
        Some(side) => downscale(frames, side),
        None => frames,
    }
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

fn write_flows(path: &Path, flows: &Flows, plan: &FramePlan, estimator: &dyn FlowEstimator) -> Result<()> {
    let data: Vec<u8> = flows.iter().flat_map(|v| v.to_le_bytes()).collect();
    let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, flows.shape().to_vec(), &data)?;
    let meta = std::collections::HashMap::from([
        ("estimator".to_string(), estimator.name().to_string()),
        ("settings".to_string(), estimator.settings().to_string()),
        ("frame_indices".to_string(), serde_json::to_string(&plan.indices)?),
        ("timestamps".to_string(), serde_json::to_string(&plan.timestamps)?),
    ]);
    safetensors::serialize_to_file([("flows", view)], Some(meta), path).with_context(|| format!("writing {}", path.display()))?;
    motionvl_data::files::apply_default_mode(path).with_context(|| format!("setting the mode of {}", path.display()))
}

/// Runs `job(k)` for k in 0..n in parallel with a progress bar; every failure is reported.
fn run_parallel(n: usize, unit: &str, job: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    let bar = ProgressBar::new(n as u64);
    let template = format!("{{bar:40}} {{pos}}/{{len}} {unit} {{elapsed_precise}} eta {{eta}} {{msg}}");
    bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()));
    let failures: Vec<String> = (0..n)
        .into_par_iter()
        .filter_map(|k| {
            let result = job(k);
            bar.inc(1);
            result.err().map(|e| format!("{e:#}"))
        })
        .collect();
    bar.finish_and_clear();
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("error: {f}");
        }
        bail!("{} of {n} {unit} failed", failures.len());
    }
    eprintln!("{n} {unit} done");
    Ok(())
}

/// Output names after the file stem (the folder name for frame folders), numbered when two
/// share one.
fn unique_names(paths: &[PathBuf]) -> Vec<String> {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    paths
        .iter()
        .map(|p| {
            let stem = p.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "video".into());
            let count = seen.entry(stem.clone()).or_insert(0);
            *count += 1;
            if *count == 1 { stem } else { format!("{stem}-{count}") }
        })
        .collect()
}
