//! `train cvaa`: the cross-view retriever on UAV–satellite pairs. Symmetric InfoNCE over the
//! in-batch pairs with a learned temperature and optional label smoothing (Sample4Geo's loss),
//! AdamW with warmup + cosine, and the run directory of `train sft`: the resolved recipe,
//! `trainer_log.jsonl`, TensorBoard events, `train.log`, atomic `checkpoint-<step>/` folders
//! that resume exactly and that `evaluate retrieve --cvaa` loads as they are.
//!
//! Exact resume rests on every batch being a function of (seed, step): the epoch's order is a
//! seeded shuffle, and each pair's crop jitter is drawn from (seed, step, slot).
//!
//! One file per part of a run: `recipe.rs`, `setup.rs` (with the retriever's `weights.rs`),
//! `batches.rs`, `loss.rs`, `step.rs`, `logs.rs` and `checkpointing.rs` (saving and resuming).

mod batches;
mod checkpointing;
mod logs;
mod loss;
mod recipe;
mod setup;
mod step;
mod weights;

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use motionvl_data::cvaa::Pair;
use motionvl_data::stop::StopFlag;
use motionvl_models::cvaa::Cvaa;

use self::batches::ImageCache;
pub use self::checkpointing::CvaaState;
pub use self::logs::CvaaStepLog;
pub use self::loss::{overlap_targets, symmetric_info_nce};
pub use self::recipe::{CheckpointSection, CvaaRecipe, DataSection, LoggingSection, ModelSection, OptimSection};
use self::weights::Weights;
use crate::checkpoint::Checkpoints;
use crate::optim::AdamW;
use crate::sft::TrainError;
use crate::tensorboard::EventWriter;

type Result<T> = std::result::Result<T, TrainError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}

/// A `train cvaa` run.
pub struct CvaaTrainer {
    recipe: CvaaRecipe,
    model: Cvaa,
    weights: Weights,
    optim: AdamW,
    pairs: Vec<Pair>,
    images: ImageCache,
    step: usize,
    total_steps: usize,
    warmup: usize,
    checkpoints: Checkpoints,
    events: Option<EventWriter>,
    text_log: std::fs::File,
    device: Device,
    /// Set by a signal; read after each step (see [`motionvl_data::stop`]).
    stop: StopFlag,
    /// One writer per run directory (see `motionvl_data::run_dir`).
    _lock: motionvl_data::run_dir::RunLock,
}

impl CvaaTrainer {
    pub fn model(&self) -> &Cvaa {
        &self.model
    }

    pub fn step_count(&self) -> usize {
        self.step
    }

    pub fn target_steps(&self) -> usize {
        self.recipe.optim.max_steps.unwrap_or(self.total_steps)
    }

    /// Every trained tensor and the frozen backbone, by checkpoint name.
    pub fn tensors(&self) -> HashMap<String, Tensor> {
        self.weights.tensors()
    }

    /// Stops the run at a checkpoint once `stop` is requested (see [`motionvl_data::stop`]).
    pub fn stop_on(&mut self, stop: StopFlag) {
        self.stop = stop;
    }
}
