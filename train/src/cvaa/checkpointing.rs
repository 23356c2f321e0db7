//! Checkpoints of a `train cvaa` run: what one holds (the whole retriever, loadable by
//! `Cvaa::load`, the optimiser state, the trainer state and the recipe), saving one, and
//! resuming from one.

use std::path::PathBuf;

use candle_core::Device;
use motionvl_models::cvaa::{CONFIG_FILE, WEIGHTS_FILE};
use serde::{Deserialize, Serialize};

use super::logs::truncate_log;
use super::{CvaaTrainer, Result};
use crate::checkpoint as ckpt;
use crate::sft::TrainError;

/// What a checkpoint records besides tensors.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CvaaState {
    pub step: usize,
    pub seed: u64,
    pub total_steps: usize,
    pub pairs: usize,
}

impl CvaaTrainer {
    /// Writes `checkpoint-<step>` atomically: `cvaa.json` + `model.safetensors` (the whole
    /// retriever, loadable by `Cvaa::load`), the optimiser state and the trainer state.
    pub fn save_checkpoint(&mut self) -> Result<PathBuf> {
        let pending = self.checkpoints.begin(self.step as u64)?;
        ckpt::save_json(pending.dir().join(CONFIG_FILE), self.model.config())?;
        ckpt::save_tensors(pending.dir().join(WEIGHTS_FILE), &self.weights.tensors())?;
        ckpt::save_tensors(pending.dir().join("optimizer.safetensors"), &self.optim.state_tensors()?)?;
        let state = CvaaState { step: self.step, seed: self.recipe.seed, total_steps: self.total_steps, pairs: self.pairs.len() };
        ckpt::save_json(pending.dir().join("trainer_state.json"), &state)?;
        ckpt::write_atomic(pending.dir().join("config.toml"), self.recipe.to_toml().as_bytes())?;
        let committed = pending.commit()?;
        let path = committed.checkpoint.path.clone();
        self.log_line(&format!("saved {}", path.display()))?;
        Ok(path)
    }

    /// The checkpoint of the current step: the one the step saved, else saved now.
    pub(super) fn last_checkpoint(&mut self) -> Result<PathBuf> {
        if self.step.is_multiple_of(self.recipe.checkpoint.every.max(1)) {
            return Ok(self.recipe.output_dir.join(format!("{}{}", ckpt::CHECKPOINT_PREFIX, self.step)));
        }
        self.save_checkpoint()
    }

    pub(super) fn restore(&mut self, arg: &str) -> Result<()> {
        let found = ckpt::resolve_resume(arg, &self.recipe.output_dir)?;
        let state: CvaaState = ckpt::load_json(found.path.join("trainer_state.json"))?;
        if state.seed != self.recipe.seed || state.pairs != self.pairs.len() {
            return Err(TrainError::CheckpointMismatch {
                checkpoint: found.path,
                problem: format!(
                    "was trained with seed {} on {} pairs; the recipe says seed {} and its data holds {} pairs",
                    state.seed,
                    state.pairs,
                    self.recipe.seed,
                    self.pairs.len()
                ),
            });
        }
        let saved = ckpt::load_tensors(found.path.join(WEIGHTS_FILE), &self.device)?;
        self.weights.restore(&saved, &found.path)?;
        self.optim.load_state(&ckpt::load_tensors(found.path.join("optimizer.safetensors"), &Device::Cpu)?)?;
        self.step = state.step;
        truncate_log(&self.recipe.output_dir.join("trainer_log.jsonl"), self.step)?;
        self.log_line(&format!("resumed from {} at step {}", found.path.display(), self.step))?;
        Ok(())
    }
}
