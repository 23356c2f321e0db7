//! `evaluate`: run a checkpoint on a benchmark manifest, score any model's predictions, compare
//! two runs. The work is in the `motionvl_eval` library; this file only parses flags.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use motionvl_data::samples::ReadOptions;
use motionvl_eval::config::RunConfig;
use motionvl_eval::results::Results;
use motionvl_eval::{REGISTRY, bench, report, run};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "evaluate",
    version,
    about = "Evaluate Qwen2.5-VL checkpoints on UAV video benchmarks"
)]
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
}

#[derive(Args)]
struct RunArgs {
    /// TOML run file (configs/eval/*.toml); the flags below override its keys.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Checkpoint folder or hub id (org/name[@revision]).
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
    /// f32, bf16 or f16 (default: f32 on CPU, bf16 on CUDA).
    #[arg(long)]
    dtype: Option<String>,
    /// cpu, cuda or cuda:N.
    #[arg(long)]
    device: Option<String>,
    /// Frame cap of the protocol (SPEC §2: 32).
    #[arg(long)]
    max_frames: Option<usize>,
    /// Pixel bounds per frame (SPEC §2: 200704 and 401408, i.e. 256 and 512 × 28²).
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
    /// Flow cache folder (default: <out>/flow-cache).
    #[arg(long)]
    flow_cache: Option<PathBuf>,
    /// Every flow must come from the flow cache (filled by `flow extract --config` with this
    /// evaluation config); a missing one is an error before the first question.
    #[arg(long)]
    flow_cache_only: bool,
    /// Allow a different estimator than the checkpoint was trained with.
    #[arg(long)]
    force_motion: bool,
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
    if let Some(v) = args.dtype {
        cfg.model.dtype = Some(v);
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
        cfg.motion.estimator = Some(v);
    }
    if let Some(v) = args.motion_weights {
        cfg.motion.weights = Some(v);
    }
    if let Some(v) = args.flow_cache {
        cfg.motion.cache_dir = Some(v);
    }
    cfg.motion.force |= args.force_motion;
    cfg.motion.cache_only |= args.flow_cache_only;
    if cfg.bench.is_empty() && !cfg.manifest.as_os_str().is_empty() {
        let b = bench::detect(&cfg.manifest)?;
        eprintln!("benchmark: {} (detected from the manifest)", b.name());
        cfg.bench = b.name().to_string();
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
    match Cli::parse().command {
        Command::Run(args) => {
            let quiet = args.quiet;
            let cfg = run_config(args)?;
            let summary = run(&cfg, !quiet).with_context(|| format!("evaluating into {}", cfg.out.display()))?;
            for e in &summary.skipped_rows {
                eprintln!("skipped row: {e}");
            }
            eprintln!(
                "{} answered now, {} resumed from the file, {} rows skipped, {} questions failed",
                summary.generated,
                summary.resumed,
                summary.skipped_rows.len(),
                summary.failed.len()
            );
            print_summary(&summary.results, &summary.reports);
        }
        Command::Score(args) => {
            let bench = match &args.bench {
                Some(b) => b.clone(),
                None => bench::detect(&args.manifest)?.name().to_string(),
            };
            // Scoring needs no media, so their files need not be here.
            let opts = ReadOptions {
                media_root: None,
                check_media: false,
                skip_bad: args.skip_bad,
            };
            let (results, reports) = motionvl_eval::score_predictions(
                &bench,
                &args.manifest,
                &args.predictions,
                &args.out,
                args.name,
                &opts,
            )?;
            if results.unmatched > 0 {
                eprintln!(
                    "warning: {} predictions name questions that are not in the manifest",
                    results.unmatched
                );
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
    }
    Ok(())
}
