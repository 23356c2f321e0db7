//! The SFT loop: LoRA on a frozen Qwen2.5-VL, AdamW with gradient accumulation, clipping and a
//! warmup + cosine schedule, atomic checkpoints that resume exactly, and a run directory with
//! `trainer_log.jsonl`, TensorBoard events, a text log and the resolved recipe.
//!
//! Exact resume rests on three things: the loader's order is a function of (seed, epoch); LoRA
//! dropout masks are a function of (seed, micro-batch number); and the optimiser's moments and
//! f32 master weights are saved bit for bit.
//!
//! One file per part of a run: `setup.rs` starts a rank (after rank 0's `run_dir.rs` prepares
//! the run directory) from `model.rs` (base model, LoRA, motion branch), `media.rs` and
//! `data.rs`; `resume.rs` continues from a checkpoint; `step.rs` trains; `logs.rs` and
//! `checkpointing.rs` write the run directory; `inspect.rs` serves `--check-data` and
//! `--show-samples`; `error.rs` holds [`TrainError`].

mod checkpointing;
mod data;
mod error;
mod inspect;
mod logs;
mod media;
mod model;
mod resume;
mod run_dir;
mod setup;
mod step;

use std::sync::Arc;

use candle_core::Device;
use motionvl_data::loader::DataLoader;
use motionvl_data::run_dir::RunLock;
use motionvl_data::stop::StopFlag;
use motionvl_flow::media::CacheCounts;
use motionvl_models::backbone::Backbone;
use motionvl_models::lora::LoraWeights;
use motionvl_models::recompute::RecomputedGrads;

pub use checkpointing::TrainerState;
pub(crate) use data::{check_loader, read_samples, require_usable, training_loader};
use error::Result;
pub use error::TrainError;
pub use inspect::{ShownSample, check_data, show_samples};
pub use logs::StepLog;
use media::Media;
pub use media::{motion_media, recipe_processor};
use model::Motion;
pub(crate) use model::fresh_model_config;
pub use resume::changes_since_checkpoint;

use crate::checkpoint::Checkpoints;
use crate::hf_layout::RunClock;
use crate::micro::RankBatches;
use crate::optim::AdamW;
use crate::parallel::GradExchange;
use crate::recipe::Recipe;
use crate::tensorboard::EventWriter;

/// One rank of an SFT run (the only one when it trains alone).
pub struct Trainer {
    recipe: Recipe,
    model: Backbone,
    lora: LoraWeights,
    motion: Option<Motion>,
    optim: AdamW,
    loader: DataLoader<Media>,
    /// This rank's micro-batches.
    batches: RankBatches,
    /// Global number of the next step's first micro-batch.
    micro: u64,
    /// The other data-parallel ranks; `None` trains alone.
    exchange: Option<Box<dyn GradExchange>>,
    step: usize,
    total_steps: usize,
    steps_per_epoch: usize,
    /// This run's steps so far, for `trainer_state.json`'s `log_history`.
    history: Vec<StepLog>,
    clock: RunClock,
    warmup: usize,
    recomputed: Option<RecomputedGrads>,
    checkpoints: Checkpoints,
    events: Option<EventWriter>,
    /// Rank 0's `train.log`; the other ranks write nothing.
    text_log: Option<std::fs::File>,
    device: Device,
    pad_id: u32,
    base_model: String,
    flow_counts: Option<Arc<CacheCounts>>,
    /// What the start did that the user did not spell out (a fresh start under `--resume auto`).
    note: Option<String>,
    /// Set by a signal; read once per step (see [`motionvl_data::stop`]).
    stop: StopFlag,
    /// Every rank saw the stop request by the end of the last step.
    stopping: bool,
    _lock: Option<RunLock>,
}

/// How a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start<'a> {
    /// A new run; refused when the directory already holds one.
    Fresh,
    /// A new run after clearing the directory's previous run (`--overwrite`).
    Overwrite,
    /// `auto` (the newest complete checkpoint, or a fresh run when there is none) or a
    /// checkpoint directory.
    Resume(&'a str),
}

impl Trainer {
    /// Sets the run up: base model (building a fresh one if the recipe asks), tokenizer, LoRA,
    /// data, optimiser — then restores a checkpoint when `resume` is `auto` or a directory.
    pub fn new(recipe: &Recipe, resume: Option<&str>) -> Result<Self> {
        Self::start(recipe, resume.map_or(Start::Fresh, Start::Resume))
    }

    /// Sets the run up as [`Trainer::new`], taking the run directory's lock first: a fresh start
    /// refuses a directory that already holds a run, `Overwrite` clears it, and `--resume auto`
    /// without a complete checkpoint starts fresh (see [`Trainer::note`]).
    pub fn start(recipe: &Recipe, start: Start<'_>) -> Result<Self> {
        Self::start_parallel(recipe, start, None)
    }

    /// Stops the run at a checkpoint once `stop` is requested (see [`motionvl_data::stop`]).
    pub fn stop_on(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    /// What the start did that was not asked for explicitly, for the user to read.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    pub fn model(&self) -> &Backbone {
        &self.model
    }

    pub fn lora(&self) -> &LoraWeights {
        &self.lora
    }

    /// The connector's trained variables, when the run is motion-aware.
    pub fn connector_vars(&self) -> Option<&[(String, candle_core::Var)]> {
        self.motion.as_ref().map(|m| m.vars.as_slice())
    }

    pub fn step_count(&self) -> usize {
        self.step
    }

    /// Optimiser steps this run will take in all.
    pub fn target_steps(&self) -> usize {
        self.recipe.optim.max_steps.unwrap_or(self.total_steps)
    }

    /// Whether this process writes the run directory (rank 0, or a run alone).
    fn is_writer(&self) -> bool {
        self.exchange.as_ref().is_none_or(|e| e.rank() == 0)
    }
}
