//! `train sft` — supervised fine-tuning from a TOML recipe —, `train cvaa` — the cross-view
//! retriever —, `train merge` — fold an adapter into its base checkpoint — and `train export` —
//! a run as a released-layout SIS-Motion package.
//!
//! Any `--section.key value` after the known flags overrides that recipe key, e.g.
//! `train sft --config configs/sft/tiny.toml --optim.lr 1e-4 --data.workers 2`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use motionvl_data::stop::EXIT_STOPPED;
use motionvl_models::{CheckpointFiles, HubOptions};
use motionvl_train::cvaa::{CvaaRecipe, CvaaTrainer};
use motionvl_train::parallel::Launch;
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{Start, StepLog, TrainError, Trainer};
use motionvl_train::threads::train_threads;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "train", about = "Train motionvl models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every training command takes: the recipe, where the run goes, how far it goes, where it
/// resumes from, and recipe overrides.
#[derive(Args)]
struct RunArgs {
    /// Recipe (TOML), e.g. configs/sft/visual-3b.toml or configs/cvaa/synth.toml.
    #[arg(long)]
    config: PathBuf,
    /// Run directory (overrides the recipe's `output_dir`).
    #[arg(long)]
    output_dir: Option<PathBuf>,
    /// Stop after this many optimiser steps.
    #[arg(long)]
    max_steps: Option<usize>,
    /// Continue from `auto` (the newest complete checkpoint of the run directory) or a
    /// checkpoint directory.
    #[arg(long, num_args = 0..=1, default_missing_value = "auto")]
    resume: Option<String>,
    /// `--section.key value` recipe overrides.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    overrides: Vec<String>,
}

impl RunArgs {
    /// The recipe overrides: `--section.key value` pairs, then `--output-dir` and `--max-steps`.
    fn overrides(&self) -> Result<Vec<(String, String)>> {
        let mut overrides = parse_overrides(&self.overrides)?;
        if let Some(dir) = &self.output_dir {
            overrides.push(("output_dir".into(), format!("{:?}", dir.display().to_string())));
        }
        if let Some(steps) = self.max_steps {
            overrides.push(("optim.max_steps".into(), steps.to_string()));
        }
        Ok(overrides)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Supervised fine-tuning with LoRA.
    Sft {
        #[command(flatten)]
        run: RunArgs,
        /// Start over in a run directory that already holds a run, removing its logs and
        /// checkpoints (the flow cache is kept).
        #[arg(long, conflicts_with = "resume")]
        overwrite: bool,
        /// Flow estimator of the motion branch (`none` = visual-only baseline): dis (alias
        /// classic), raft-small, raft-large, …
        #[arg(long)]
        motion: Option<motionvl_flow::MotionChoice>,
        /// Weights of a network flow estimator (RAFT, SEA-RAFT, MemFlow, MOFNet checkpoints).
        #[arg(long)]
        flow_weights: Option<PathBuf>,
        /// Every flow must come from the flow cache (filled by `flow extract --config` with this
        /// recipe); a missing one is an error before the first step.
        #[arg(long)]
        flow_cache_only: bool,
        /// Only check the data: print how many samples fit `max_seq_len` as they are, fitted
        /// or dropped, as one JSON object, and exit (no model is loaded).
        #[arg(long)]
        check_data: bool,
        /// Print the first N training samples (file order) as the model receives them, one
        /// JSON object a line (`input_ids`, `labels` with −100, `video_grid_thw`,
        /// `second_per_grid_ts`, `frame_indices`, `pixel_values_shape`), and exit: no model
        /// weights are loaded and the run directory is not touched.
        #[arg(long, value_name = "N", conflicts_with_all = ["check_data", "resume", "overwrite"])]
        show_samples: Option<usize>,
        /// Data parallel over N threads of this process (CPU): each reads its share of every
        /// global batch (`grad_accum` micro-batches per rank) and the gradients are summed.
        /// On GPUs, launch one process per GPU with torchrun or srun instead (`nccl` builds).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
        data_parallel: u16,
    },
    /// The cross-view (UAV ↔ satellite) retriever CVAA, with symmetric InfoNCE.
    Cvaa {
        #[command(flatten)]
        run: RunArgs,
    },
    /// Fold a LoRA adapter into its base model and write a hub-layout checkpoint.
    Merge {
        /// Base checkpoint: local directory or hub id.
        #[arg(long)]
        base: String,
        /// Adapter: a run's `checkpoint-N` or root, or any PEFT folder (an older run's
        /// `checkpoint-N/adapter/` too).
        #[arg(long)]
        adapter: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Largest shard in MiB.
        #[arg(long, default_value_t = 4096)]
        shard_mib: usize,
    },
    /// Write a run's checkpoint in a released layout (`sis-motion`: what the official
    /// Self-in-Space `motion/src/eval/eval.py` loads); a package already in that layout is
    /// read back and written again.
    Export {
        #[arg(long, value_enum)]
        format: ExportFormatArg,
        /// A run folder (its newest complete checkpoint), one `checkpoint-N`, or a released
        /// SIS-Motion package.
        run: PathBuf,
        /// The package folder: absent, empty, or a previous export (replaced).
        #[arg(long)]
        out: PathBuf,
        /// `base_model_name_or_path` for the package (default: the one the adapter records).
        #[arg(long)]
        base_model: Option<String>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ExportFormatArg {
    SisMotion,
}

/// `--a.b value` pairs from the trailing arguments.
fn parse_overrides(args: &[String]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut iter = args.iter();
    while let Some(flag) = iter.next() {
        let Some(key) = flag.strip_prefix("--") else { bail!("unexpected argument `{flag}` (overrides look like --section.key value)") };
        let (key, value) = match key.split_once('=') {
            Some((k, v)) => (k.to_owned(), v.to_owned()),
            None => (key.to_owned(), iter.next().with_context(|| format!("`{flag}` needs a value"))?.clone()),
        };
        if !key.contains('.') && !matches!(key.as_str(), "seed" | "output_dir") {
            bail!("unknown flag `--{key}` (recipe overrides are --section.key value)");
        }
        out.push((key, value));
    }
    Ok(out)
}

fn report_done(logs: &[StepLog]) {
    if let (Some(first), Some(last)) = (logs.first(), logs.last()) {
        eprintln!("done: step {} loss {:.4} (first logged {:.4})", last.step, last.loss, first.loss);
    }
}

/// This process's rank of a torchrun/SLURM launch. A CPU recipe's ranks sum over TCP through
/// rank 0; a GPU recipe's rank takes `cuda:LOCAL_RANK` and joins the others through NCCL.
fn join_group(launch: &Launch, recipe: &mut Recipe) -> Result<Box<dyn motionvl_train::parallel::GradExchange>> {
    if recipe.model.device.is_cpu() {
        let timeout = collective_timeout()?;
        let exchange = motionvl_train::parallel::TcpExchange::connect(launch, timeout)
            .with_context(|| format!("rank {} of {} joining the CPU process group", launch.rank, launch.world_size))?;
        return Ok(Box::new(exchange));
    }
    join_gpu_group(launch, recipe)
}

/// How long a rank waits for the others in one collective (a CPU rank for their bytes, a GPU
/// rank before its watchdog aborts NCCL): `MOTIONVL_COLLECTIVE_TIMEOUT_S`, 30 minutes by default
/// (rank 0 prepares the run directory while the others wait).
fn collective_timeout() -> Result<std::time::Duration> {
    const KEY: &str = "MOTIONVL_COLLECTIVE_TIMEOUT_S";
    match std::env::var(KEY) {
        Err(_) => Ok(std::time::Duration::from_secs(1800)),
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(s) if s > 0.0 && s.is_finite() => Ok(std::time::Duration::from_secs_f64(s)),
            _ => bail!("{KEY}: `{v}` is not a positive number of seconds"),
        },
    }
}

#[cfg(feature = "nccl")]
fn join_gpu_group(launch: &Launch, recipe: &mut Recipe) -> Result<Box<dyn motionvl_train::parallel::GradExchange>> {
    // Each GPU rank takes cuda:LOCAL_RANK among the GPUs it sees, whatever ordinal the recipe names.
    let ordinal = launch.cuda_ordinal(std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref());
    recipe.model.device = motionvl_models::device::DeviceName::Cuda(Some(ordinal));
    let device = recipe.model.device.open()?;
    let exchange = motionvl_train::parallel::NcclExchange::connect(launch, &device, collective_timeout()?)
        .with_context(|| format!("rank {} of {} joining the NCCL group", launch.rank, launch.world_size))?;
    Ok(Box::new(exchange))
}

#[cfg(not(feature = "nccl"))]
fn join_gpu_group(launch: &Launch, recipe: &mut Recipe) -> Result<Box<dyn motionvl_train::parallel::GradExchange>> {
    bail!(
        "launched as rank {} of {} (torchrun/SLURM environment) with model.device = `{}`, but this `train` was built without NCCL: build with --features cuda,nccl, train on the CPU (model.device = \"cpu\"), or unset WORLD_SIZE/SLURM_NTASKS to train alone",
        launch.rank,
        launch.world_size,
        recipe.model.device
    )
}

/// A run stopped by a signal exits with [`EXIT_STOPPED`] once its checkpoint is saved (what
/// requeue scripts test); other outcomes are returned.
fn stopped_or<T>(outcome: std::result::Result<T, TrainError>) -> Result<T> {
    match outcome {
        Err(stopped @ TrainError::Stopped { .. }) => {
            eprintln!("{stopped}");
            std::process::exit(EXIT_STOPPED);
        }
        other => other.context("training"),
    }
}

fn main() -> Result<()> {
    motionvl_cli::install_progress_bars();
    motionvl_cli::keep_freed_memory();
    match Cli::parse_from(motionvl_train::recipe::overrides_last(std::env::args())).command {
        Command::Sft { run, overwrite, motion, flow_weights, flow_cache_only, check_data, show_samples, data_parallel } => {
            let mut overrides = run.overrides()?;
            let (config, resume) = (run.config, run.resume);
            if let Some(name) = motion {
                overrides.push(("motion.estimator".into(), format!("{:?}", name.as_str())));
            }
            if let Some(weights) = flow_weights {
                overrides.push(("motion.weights".into(), format!("{:?}", weights.display().to_string())));
            }
            if flow_cache_only {
                overrides.push(("motion.cache_only".into(), "true".into()));
            }
            let mut recipe = Recipe::load(&config, &overrides).with_context(|| format!("loading recipe {}", config.display()))?;
            if let Some(n) = show_samples {
                let (stdout, stderr) = (std::io::stdout(), std::io::stderr());
                motionvl_train::sft::show_samples(&recipe, n, &mut stdout.lock(), &mut stderr.lock()).context("showing the training samples")?;
                return Ok(());
            }
            if check_data {
                let report = motionvl_train::sft::check_data(&recipe).context("checking the training data")?;
                println!("{}", report.to_json_line());
                return Ok(());
            }
            let start = match (&resume, overwrite) {
                (Some(arg), _) => Start::Resume(arg),
                (None, true) => Start::Overwrite,
                (None, false) => Start::Fresh,
            };
            let launch = Launch::from_vars(|k| std::env::var(k).ok()).context("reading the launcher's environment")?;
            if data_parallel > 1 {
                if launch.is_some() {
                    bail!("--data-parallel runs threads in one process; under torchrun or srun every process is already a rank");
                }
                eprintln!("training on {data_parallel} threads into {}", recipe.output_dir.display());
                let logs = train_threads(&recipe, start, usize::from(data_parallel), &motionvl_cli::stop_on_signals()?);
                report_done(&stopped_or(logs)?);
                return Ok(());
            }
            let exchange = match &launch {
                Some(launch) => Some(join_group(launch, &mut recipe)?),
                None => None,
            };
            let mut trainer = Trainer::start_parallel(&recipe, start, exchange).context("setting up training")?;
            trainer.stop_on(motionvl_cli::stop_on_signals()?);
            if launch.as_ref().is_some_and(|l| l.rank != 0) {
                stopped_or(trainer.run())?;
                return Ok(());
            }
            if let Some(note) = trainer.note() {
                eprintln!("{note}");
            }
            eprintln!("training {} steps into {}", trainer.target_steps(), recipe.output_dir.display());
            report_done(&stopped_or(trainer.run())?);
        }
        Command::Cvaa { run } => {
            let overrides = run.overrides()?;
            let (config, resume) = (run.config, run.resume);
            let recipe = CvaaRecipe::load(&config, &overrides).with_context(|| format!("loading recipe {}", config.display()))?;
            let mut trainer = CvaaTrainer::new(&recipe, resume.as_deref()).context("setting up CVAA training")?;
            trainer.stop_on(motionvl_cli::stop_on_signals()?);
            eprintln!("training CVAA {} steps into {}", trainer.target_steps(), recipe.output_dir.display());
            let logs = stopped_or(trainer.run())?;
            if let (Some(first), Some(last)) = (logs.first(), logs.last()) {
                eprintln!(
                    "done: step {} loss {:.4} batch accuracy {:.3} (first logged loss {:.4})",
                    last.step, last.loss, last.batch_accuracy, first.loss
                );
            }
        }
        Command::Merge { base, adapter, out, shard_mib } => {
            let files = CheckpointFiles::resolve(&base, &HubOptions::from_env()).with_context(|| format!("resolving {base}"))?;
            let summary = motionvl_train::merge::merge(&files, &adapter, &out, shard_mib << 20).context("merging")?;
            eprintln!(
                "merged {} adapted layers; wrote {} tensors in {} shard(s), {:.1} MiB, to {}",
                summary.merged_modules,
                summary.tensors,
                summary.shards,
                summary.bytes as f64 / (1 << 20) as f64,
                out.display()
            );
        }
        Command::Export { format, run, out, base_model } => {
            let format = match format {
                ExportFormatArg::SisMotion => motionvl_train::export::ExportFormat::SisMotion,
            };
            let summary =
                motionvl_train::export::export(format, &run, &out, base_model.as_deref()).with_context(|| format!("exporting {}", run.display()))?;
            eprintln!(
                "exported {} ({} LoRA modules, connector hidden {}, MOFNet {}, base {}) to {}",
                summary.checkpoint.display(),
                summary.lora_modules,
                summary.connector_hidden,
                summary.mofnet_weights.display(),
                summary.base_model,
                out.display()
            );
            if summary.mofnet_converted {
                eprintln!(
                    "note: MOF_kitti.pth was written from a safetensors conversion, which lacks the tensors MOFNet never uses \
                     (att.pos_emb.*, velocity_update_block.*); the official loader warns about them. Train with the original \
                     .pth to bundle it byte for byte"
                );
            }
        }
    }
    Ok(())
}
