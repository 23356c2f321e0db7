//! `evaluate`: run a checkpoint on a benchmark manifest, score any model's predictions, compare
//! two runs. The work is in the `motionvl_eval` library; this file only parses flags.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use motionvl_data::cvaa::{UavView, read_pairs};
use motionvl_data::samples::ReadOptions;
use motionvl_eval::config::{AdapterMerge, ExtractMode, ProtocolKind, RunConfig};
use motionvl_eval::prior::{CvaaPriorConfig, write_prompts};
use motionvl_eval::results::Results;
use motionvl_eval::retrieve::{RetrievalOutput, Retriever, WindowConfig};
use motionvl_eval::{EvalError, REGISTRY, bench, report, run_until};
use motionvl_flow::WeightPrecision;
use motionvl_models::cvaa::{Cvaa, CvaaConfig};
use motionvl_models::device::{DTypeName, DeviceName};
use motionvl_models::seeded::SeededVars;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "evaluate", version, about = "Evaluate Qwen2.5-VL checkpoints on UAV video benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Ask a checkpoint every question of a manifest, then score and write the reports.
    Run(Box<RunArgs>),
    /// Score a predictions file (JSON lines {"question_id", "prediction"}) made by any model.
    Score(ScoreArgs),
    /// Print per-task accuracy of two runs and their difference.
    Compare {
        /// Run folder (or its results.json) of the baseline.
        run_a: PathBuf,
        /// Run folder (or its results.json) to compare with it.
        run_b: PathBuf,
        /// Print both runs as a Markdown table in the paper's layout as well.
        #[arg(long)]
        markdown: bool,
    },
    /// List the benchmarks `--bench` accepts.
    Benches,
    /// CVAA sliding-window retrieval: the satellite windows most like a UAV frame, as JSON
    /// `{"boxes": [[x1, y1, x2, y2], …], "scores": […]}`, best first.
    Retrieve(RetrieveArgs),
    /// CVAA retrieval metrics on a pairs manifest: Recall@1/5/10 and AP both ways, and the
    /// windowed hit rate (IoU ≥ 0.5) against a random window.
    Pairs(PairsArgs),
    /// Write a manifest's prompts (JSONL, with media paths and the CVAA box when `--cvaa` is
    /// given) for a model outside this toolkit; score its answers with `evaluate score`.
    Prompts(PromptsArgs),
}

#[derive(Args)]
struct WindowArgs {
    /// Window sides as fractions of the satellite image's shorter side (comma-separated).
    #[arg(long, value_delimiter = ',')]
    windows: Option<Vec<f64>>,
    /// Step between windows as a fraction of the window side.
    #[arg(long)]
    stride: Option<f64>,
    /// Windows embedded per forward pass.
    #[arg(long)]
    window_batch: Option<usize>,
    /// cpu, cuda or cuda:N.
    #[arg(long, default_value = "cpu")]
    device: DeviceName,
}

impl WindowArgs {
    fn apply(&self, mut w: WindowConfig) -> WindowConfig {
        if let Some(v) = &self.windows {
            w.sizes = v.clone();
        }
        if let Some(v) = self.stride {
            w.stride = v;
        }
        if let Some(v) = self.window_batch {
            w.batch = v;
        }
        w
    }
}

#[derive(Args)]
struct RetrieveArgs {
    /// A `train cvaa` checkpoint folder (RUN/checkpoint-N).
    #[arg(long)]
    cvaa: PathBuf,
    /// The UAV frame: an image, or VIDEO@SECONDS.
    #[arg(long)]
    uav: String,
    #[arg(long)]
    satellite: PathBuf,
    #[arg(long, default_value_t = 1)]
    top_k: usize,
    #[command(flatten)]
    windows: WindowArgs,
}

#[derive(Args)]
struct PairsArgs {
    /// A `train cvaa` checkpoint folder.
    #[arg(long)]
    cvaa: PathBuf,
    /// Pairs manifest (JSONL), e.g. data/synth/test/cvaa_pairs.jsonl.
    #[arg(long)]
    pairs: PathBuf,
    /// Also write the report here (JSON).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seed of the random-window baseline.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Score the checkpoint's architecture at its initialisation (seeded), not its weights:
    /// the untrained backbone's CLS/GeM through identity adapters.
    #[arg(long)]
    untrained: bool,
    #[command(flatten)]
    windows: WindowArgs,
}

#[derive(Args)]
struct PromptsArgs {
    #[arg(long)]
    manifest: PathBuf,
    /// Benchmark of the manifest; detected when left out.
    #[arg(long)]
    bench: Option<String>,
    /// A `train cvaa` checkpoint: append its box to each question.
    #[arg(long)]
    cvaa: Option<PathBuf>,
    /// Prior template; `{box}` becomes `[x1, y1, x2, y2]`.
    #[arg(long)]
    template: Option<String>,
    #[arg(long)]
    out: PathBuf,
    #[arg(long)]
    media_root: Option<PathBuf>,
    #[arg(long)]
    skip_bad: bool,
    #[command(flatten)]
    windows: WindowArgs,
}

#[derive(Args)]
struct RunArgs {
    /// TOML run file (configs/eval/*.toml); the flags below override its keys.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Checkpoint folder or hub id (`org/name[@revision]`).
    #[arg(long)]
    checkpoint: Option<String>,
    /// PEFT LoRA adapter folder, or a `train sft` checkpoint folder.
    #[arg(long)]
    adapter: Option<PathBuf>,
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// sisbench, urbanvideo, dualcog, links2 or nav; detected from the manifest when left out.
    #[arg(long)]
    bench: Option<String>,
    /// Run folder: predictions.jsonl, run.json and the reports.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Name of the run in the reports (default: the run folder's name).
    #[arg(long)]
    name: Option<String>,
    /// Folder relative media paths resolve against (default: the manifest's folder).
    #[arg(long)]
    media_root: Option<PathBuf>,
    /// Skip bad manifest rows and questions whose media fail, and count them.
    #[arg(long)]
    skip_bad: bool,
    /// Continue the predictions already in --out.
    #[arg(long)]
    resume: bool,
    /// Ask only the first N questions.
    #[arg(long)]
    limit: Option<usize>,
    #[arg(long)]
    batch_size: Option<usize>,
    #[arg(long)]
    max_new_tokens: Option<usize>,
    /// Whose evaluation to reproduce: `official` (the authors' released evaluator; the default
    /// for sisbench and nav), `paper` (SPEC §2 as motionvl read the paper; the default
    /// elsewhere) or `vllm-baseline` (the released zero-shot vLLM path: one image per frame).
    #[arg(long)]
    protocol: Option<ProtocolKind>,
    /// Answer extraction: `official` (the released regex cascade; the official and vLLM
    /// protocols' default) or `motionvl` (the paper protocol's).
    #[arg(long)]
    extract: Option<ExtractMode>,
    /// Official protocol: leave out questions whose video header counts 1 to N-1 frames (8).
    #[arg(long)]
    min_frames: Option<usize>,
    /// Hugging Face repetition penalty of greedy decoding (default: the base model's
    /// generation_config.json under the official and vLLM protocols, none under the paper's).
    #[arg(long)]
    repetition_penalty: Option<f64>,
    /// How multiple-choice questions are answered: `generate` (greedy decoding, SPEC §2) or
    /// `likelihood` (each option scored as the answer, the likeliest chosen).
    #[arg(long)]
    answer: Option<String>,
    /// f32, bf16 or f16 (default: f32 on CPU, bf16 on CUDA).
    #[arg(long)]
    dtype: Option<DTypeName>,
    /// How the adapter is applied: `merged` (folded into the weights in the model's dtype, as
    /// PEFT's merge_and_unload; the default of --protocol official in bf16) or `unmerged` (f32
    /// adapters at run time; the default otherwise).
    #[arg(long)]
    adapter_merge: Option<String>,
    /// cpu, cuda or cuda:N.
    #[arg(long)]
    device: Option<DeviceName>,
    /// Frame cap of the protocol (32).
    #[arg(long)]
    max_frames: Option<usize>,
    /// Pixel bounds per frame (200704 and 401408, i.e. 256 and 512 × 28²).
    #[arg(long)]
    min_pixels: Option<usize>,
    #[arg(long)]
    max_pixels: Option<usize>,
    /// Flow estimator of a motion-aware checkpoint (dis, raft-small, ...); default: the one it
    /// was trained with. `none` evaluates it without its motion branch (needs --force-motion).
    #[arg(long)]
    motion: Option<String>,
    /// Weights file of a network flow estimator.
    #[arg(long)]
    motion_weights: Option<PathBuf>,
    /// What MOFNet computes with: `bf16-rounded` (its weights rounded to bf16 and back, as the
    /// official code's bf16 model holds them; the default of --protocol official in bf16) or
    /// `f32` (the default otherwise).
    #[arg(long)]
    estimator_weights: Option<WeightPrecision>,
    /// Flow cache folder (default: `<out>/flow-cache`).
    #[arg(long)]
    flow_cache: Option<PathBuf>,
    /// Every flow must come from the flow cache (filled by `flow extract --config` with this
    /// evaluation config); a missing one is an error before the first question.
    #[arg(long)]
    flow_cache_only: bool,
    /// Allow a different estimator than the checkpoint was trained with.
    #[arg(long)]
    force_motion: bool,
    /// Evaluate visual-only (as --motion none): an --adapter without a motion branch is an
    /// error without it.
    #[arg(long)]
    no_motion: bool,
    /// A `train cvaa` checkpoint: append its satellite box to each question as an alignment
    /// prior (template and windows in the config's `[cvaa]`).
    #[arg(long)]
    cvaa: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
}

#[derive(Args)]
struct ScoreArgs {
    #[arg(long)]
    predictions: PathBuf,
    #[arg(long)]
    manifest: PathBuf,
    /// Benchmark of the manifest; detected when left out.
    #[arg(long)]
    bench: Option<String>,
    #[arg(long)]
    out: PathBuf,
    /// Name of the model in the reports (default: the predictions file's name).
    #[arg(long)]
    name: Option<String>,
    #[arg(long)]
    skip_bad: bool,
    /// Answer extraction: `motionvl` (default) or `official` (the released regex cascade, and
    /// uav_accuracy.json beside the reports).
    #[arg(long, default_value = "motionvl")]
    extract: ExtractMode,
}

fn run_config(args: Box<RunArgs>) -> Result<RunConfig> {
    let mut cfg = match &args.config {
        Some(path) => RunConfig::from_file(path)?,
        None => RunConfig::default(),
    };
    if let Some(v) = args.checkpoint {
        cfg.model.checkpoint = v;
    }
    if let Some(v) = args.adapter {
        cfg.model.adapter = Some(v);
    }
    if let Some(v) = args.manifest {
        cfg.manifest = v;
    }
    if let Some(v) = args.bench {
        cfg.bench = v;
    }
    if let Some(v) = args.out {
        cfg.out = v;
    }
    if let Some(v) = args.name {
        cfg.name = Some(v);
    }
    if let Some(v) = args.media_root {
        cfg.media_root = Some(v);
    }
    cfg.skip_bad |= args.skip_bad;
    cfg.resume |= args.resume;
    if let Some(v) = args.limit {
        cfg.limit = Some(v);
    }
    if let Some(v) = args.batch_size {
        cfg.generation.batch_size = v;
    }
    if let Some(v) = args.max_new_tokens {
        cfg.generation.max_new_tokens = v;
    }
    if let Some(v) = args.protocol {
        cfg.protocol_kind = Some(v);
    }
    if let Some(v) = args.extract {
        cfg.extract = Some(v);
    }
    if let Some(v) = args.min_frames {
        cfg.official.min_frames = v;
    }
    if let Some(v) = args.repetition_penalty {
        cfg.generation.repetition_penalty = Some(v);
    }
    if let Some(v) = args.answer {
        cfg.generation.answer = motionvl_eval::config::AnswerMode::try_from(v).map_err(anyhow::Error::msg)?;
    }
    if let Some(v) = args.dtype {
        cfg.model.dtype = Some(v);
    }
    if let Some(v) = args.adapter_merge {
        cfg.model.adapter_merge = Some(AdapterMerge::try_from(v).map_err(anyhow::Error::msg)?);
    }
    if let Some(v) = args.device {
        cfg.model.device = v;
    }
    if let Some(v) = args.max_frames {
        cfg.protocol.max_frames = v;
    }
    if let Some(v) = args.min_pixels {
        cfg.protocol.min_pixels = v;
    }
    if let Some(v) = args.max_pixels {
        cfg.protocol.max_pixels = v;
    }
    if let Some(v) = args.motion {
        cfg.motion.estimator = motionvl_eval::config::parse_motion(&v)?;
    }
    if let Some(v) = args.motion_weights {
        cfg.motion.weights = Some(v);
    }
    if let Some(v) = args.estimator_weights {
        cfg.motion.estimator_weights = Some(v);
    }
    if let Some(v) = args.flow_cache {
        cfg.motion.cache_dir = Some(v);
    }
    cfg.motion.force |= args.force_motion;
    cfg.motion.no_motion |= args.no_motion;
    cfg.motion.cache_only |= args.flow_cache_only;
    if let Some(v) = args.cvaa {
        cfg.cvaa.checkpoint = Some(v);
    }
    if cfg.bench.is_empty() && !cfg.manifest.as_os_str().is_empty() {
        let b = bench::detect(&cfg.manifest)?;
        eprintln!("benchmark: {} (detected from the manifest)", b.name());
        cfg.bench = b.name().to_string();
    }
    if cfg.protocol_kind.is_none() {
        let kind = ProtocolKind::default_for(&cfg.bench);
        eprintln!("protocol: {} (the default for {}; --protocol chooses)", kind.as_str(), cfg.bench);
        cfg.protocol_kind = Some(kind);
    }
    Ok(cfg)
}

fn print_summary(results: &Results, reports: &[PathBuf]) {
    println!("{}", report::table2(&[results]));
    for path in reports {
        println!("wrote {}", path.display());
    }
}

fn main() -> Result<()> {
    motionvl_cli::install_progress_bars();
    motionvl_cli::keep_freed_memory();
    match Cli::parse().command {
        Command::Run(args) => {
            let quiet = args.quiet;
            let cfg = run_config(args)?;
            let summary = match run_until(&cfg, !quiet, &motionvl_cli::stop_on_signals()?) {
                Err(stopped @ EvalError::Stopped { .. }) => {
                    eprintln!("{stopped}");
                    std::process::exit(motionvl_data::stop::EXIT_STOPPED);
                }
                other => other.with_context(|| format!("evaluating into {}", cfg.out.display()))?,
            };
            for e in &summary.skipped_rows {
                eprintln!("skipped row: {e}");
            }
            for l in &summary.left_out {
                eprintln!("left out {}: {}", l.question_id, l.reason);
            }
            eprintln!(
                "{} answered now, {} resumed from the file, {} rows skipped, {} questions failed, {} left out by the protocol",
                summary.generated,
                summary.resumed,
                summary.skipped_rows.len(),
                summary.failed.len(),
                summary.left_out.len()
            );
            print_summary(&summary.results, &summary.reports);
        }
        Command::Score(args) => {
            let bench = match &args.bench {
                Some(b) => b.clone(),
                None => bench::detect(&args.manifest)?.name().to_string(),
            };
            // Scoring needs no media, so their files need not be here.
            let opts = ReadOptions { media_root: None, check_media: false, skip_bad: args.skip_bad };
            let (results, reports) =
                motionvl_eval::run::score_predictions_as(&bench, &args.manifest, &args.predictions, &args.out, args.name, &opts, args.extract)?;
            if results.unmatched > 0 {
                eprintln!("warning: {} predictions name questions that are not in the manifest", results.unmatched);
            }
            print_summary(&results, &reports);
        }
        Command::Compare { run_a, run_b, markdown } => {
            let a = Results::read_run(&run_a)?;
            let b = Results::read_run(&run_b)?;
            print!("{}", report::compare(&a, &b));
            if markdown {
                println!("\n{}", report::table2(&[&a, &b]));
            }
        }
        Command::Benches => {
            for b in REGISTRY {
                println!("{:<12} {}", b.name(), b.title());
            }
        }
        Command::Retrieve(args) => {
            let device = args.windows.device.open()?;
            let retriever = Retriever::load(&args.cvaa, args.windows.apply(WindowConfig::default()), &device)?;
            let uav = UavView::parse(&args.uav)?;
            let best = retriever
                .retrieve(&uav, &args.satellite, args.top_k)
                .with_context(|| format!("retrieving {} in {}", args.uav, args.satellite.display()))?;
            println!("{}", serde_json::to_string(&RetrievalOutput::from(best.as_slice()))?);
        }
        Command::Pairs(args) => {
            let device = args.windows.device.open()?;
            let windows = args.windows.apply(WindowConfig::default());
            let retriever = if args.untrained {
                let cfg = CvaaConfig::from_file(&args.cvaa.join(motionvl_models::cvaa::CONFIG_FILE))?;
                let (backbone, heads) = (SeededVars::new(args.seed), SeededVars::new(args.seed ^ 1));
                Retriever::new(Cvaa::new(&cfg, backbone.var_builder(&device), heads.var_builder(&device))?, windows, device)?
            } else {
                Retriever::load(&args.cvaa, windows, &device)?
            };
            let pairs = read_pairs(&args.pairs)?;
            let bar = indicatif::ProgressBar::new(pairs.len() as u64);
            let report = retriever.evaluate_pairs(&pairs, args.seed, &|| bar.inc(1))?;
            bar.finish_and_clear();
            let text = serde_json::to_string_pretty(&report)?;
            if let Some(out) = &args.out {
                let tmp = out.with_extension("json.tmp");
                std::fs::write(&tmp, format!("{text}\n")).with_context(|| format!("writing {}", tmp.display()))?;
                std::fs::rename(&tmp, out).with_context(|| format!("writing {}", out.display()))?;
            }
            println!("{text}");
        }
        Command::Prompts(args) => {
            let bench = match &args.bench {
                Some(b) => bench::find(b)?,
                None => bench::detect(&args.manifest)?,
            };
            let mut cvaa = CvaaPriorConfig { checkpoint: args.cvaa.clone(), ..CvaaPriorConfig::default() };
            if let Some(t) = &args.template {
                cvaa.template = t.clone();
            }
            cvaa.windows = args.windows.apply(cvaa.windows);
            let opts = ReadOptions { media_root: args.media_root.clone(), check_media: true, skip_bad: args.skip_bad };
            let device = args.windows.device.open()?;
            let bar = indicatif::ProgressBar::new_spinner();
            let (rows, boxed) = write_prompts(bench, &args.manifest, &opts, &cvaa, &device, &args.out, &|| bar.inc(1))
                .with_context(|| format!("writing prompts of {}", args.manifest.display()))?;
            bar.finish_and_clear();
            eprintln!("wrote {} prompts ({} with a CVAA box) to {}", rows, boxed, args.out.display());
        }
    }
    Ok(())
}
