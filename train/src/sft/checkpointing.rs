//! What a checkpoint of an SFT run holds, and saving one: the PEFT adapter, the motion branch,
//! the optimiser state, HF's `trainer_state.json`, the resume state and the recipe.

use std::path::PathBuf;

use motionvl_models::motion::MOTION_WEIGHTS_FILE;
use serde::{Deserialize, Serialize};

use super::Trainer;
use super::data::data_digest;
use super::error::Result;
use super::logs::StepLog;
use crate::checkpoint as ckpt;
use crate::hf_layout::{self, HfTrainerState, RunShape};
use motionvl_data::loader::Position;

/// What a checkpoint records besides tensors, in `motionvl_state.json` (older runs: in
/// `trainer_state.json`, see [`hf_layout`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrainerState {
    pub step: usize,
    /// Next sample the loader yields.
    pub position: Position,
    pub seed: u64,
    pub total_steps: usize,
    /// SHA-256 of the training file's bytes: the same path with other rows is other data.
    #[serde(default)]
    pub data_sha256: Option<String>,
}

impl Trainer {
    /// Writes `checkpoint-<step>` atomically: the adapter (PEFT files at its top), optimiser
    /// state, HF's `trainer_state.json` and the resume state (step, loader position, seed).
    pub fn save_checkpoint(&mut self) -> Result<PathBuf> {
        let pending = self.checkpoints.begin(self.step as u64)?;
        self.lora.save_peft(pending.dir(), Some(&self.base_model))?;
        if let Some(motion) = &self.motion {
            let tensors = motion.vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect();
            ckpt::save_tensors(pending.dir().join(MOTION_WEIGHTS_FILE), &tensors)?;
            motion.meta.write(pending.dir())?;
        }
        ckpt::save_tensors(pending.dir().join("optimizer.safetensors"), &self.optim.state_tensors()?)?;
        let state = TrainerState {
            step: self.step,
            position: self.batches.plan().position_of(&self.loader, self.micro),
            seed: self.recipe.seed,
            total_steps: self.total_steps,
            data_sha256: Some(data_digest(&self.recipe)?),
        };
        ckpt::save_json(pending.dir().join(hf_layout::RESUME_STATE_FILE), &state)?;
        ckpt::save_json(pending.dir().join(hf_layout::HF_STATE_FILE), &self.hf_state())?;
        ckpt::write_atomic(pending.dir().join("config.toml"), self.recipe.to_toml().as_bytes())?;
        let committed = pending.commit()?;
        let path = committed.checkpoint.path.clone();
        self.log_line(&format!("saved {}", path.display()))?;
        if let Some(counts) = &self.flow_counts {
            let (hits, misses, repaired) = counts.snapshot();
            self.log_line(&format!("flow cache: {hits} hits, {misses} computed, {repaired} repaired"))?;
        }
        Ok(path)
    }

    fn hf_state(&self) -> HfTrainerState {
        let shape = RunShape {
            max_steps: self.target_steps(),
            steps_per_epoch: self.steps_per_epoch,
            save_steps: self.recipe.checkpoint.every.max(1),
            train_batch_size: self.recipe.optim.batch_size.max(1),
            tokens_seen: self.history.iter().map(|l| l.tokens).sum(),
        };
        let epoch = self.history.last().map_or(0.0, |l| l.epoch);
        HfTrainerState::new(&shape, self.step, epoch, self.history.iter().map(StepLog::hf_entry).collect())
    }

    /// The checkpoint of the current step: the one the step saved, else saved now (by the writer).
    pub(super) fn last_checkpoint(&mut self) -> Result<PathBuf> {
        let saved = self.step > 0 && self.step.is_multiple_of(self.recipe.checkpoint.every.max(1));
        if saved || !self.is_writer() {
            return Ok(self.recipe.output_dir.join(format!("{}{}", ckpt::CHECKPOINT_PREFIX, self.step)));
        }
        self.save_checkpoint()
    }
}
