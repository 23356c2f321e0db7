//! Continuing a run from a checkpoint: what changed since it was saved, and restoring the
//! adapter, optimiser, motion branch, step and loader position from it.

use std::path::Path;

use candle_core::Device;
use motionvl_models::lora::LoraWeights;
use motionvl_models::motion::MotionMeta;

use super::Trainer;
use super::checkpointing::TrainerState;
use super::data::data_digest;
use super::error::{Result, TrainError, io};
use super::logs::truncate_log;
use crate::checkpoint as ckpt;
use crate::hf_layout::{self, RunClock};
use crate::micro::RankBatches;
use crate::recipe::Recipe;

/// What a resume from the checkpoint at `dir` would change: each recipe key that differs
/// from the recipe saved with it (save those a resume may change, [`Recipe::unsafe_changes`]),
/// and the training file when its contents differ. Empty: the checkpoint continues this run.
pub fn changes_since_checkpoint(recipe: &Recipe, dir: &Path) -> Result<Vec<String>> {
    let saved_recipe = dir.join("config.toml");
    let text = std::fs::read_to_string(&saved_recipe).map_err(io(&saved_recipe))?;
    let saved: Recipe = toml::from_str(&text).map_err(|e| TrainError::CheckpointMismatch {
        checkpoint: saved_recipe.clone(),
        problem: format!("(the recipe saved with the checkpoint) does not read: {e}"),
    })?;
    let mut changed = recipe.unsafe_changes(&saved);
    let state: TrainerState = hf_layout::read_resume_state(dir)?;
    if let Some(then) = state.data_sha256 {
        let now = data_digest(recipe)?;
        if then != now {
            // A digest read from the checkpoint may be short or not ASCII: shown as far as it goes.
            let short = |d: &str| d.chars().take(12).collect::<String>();
            changed.push(format!("contents of {}: sha256 {} → {}", recipe.data.train.display(), short(&then), short(&now)));
        }
    }
    Ok(changed)
}

impl Trainer {
    pub(super) fn restore(&mut self, arg: &str) -> Result<()> {
        let found = ckpt::resolve_resume(arg, &self.recipe.output_dir)?;
        let changed = changes_since_checkpoint(&self.recipe, &found.path)?;
        if !changed.is_empty() {
            return Err(TrainError::CheckpointMismatch {
                checkpoint: found.path,
                problem: format!(
                    "was trained with another recipe; changed since: {} — resume with the recipe and data it was saved with, or train into a new --output-dir",
                    changed.join("; ")
                ),
            });
        }
        let adapter_dir = hf_layout::adapter_dir(&found.path).ok_or_else(|| TrainError::NoAdapter { dir: found.path.clone(), hint: "" })?;
        let adapter = LoraWeights::load_peft(&adapter_dir, &self.device)?;
        let adapter_file = adapter_dir.join(hf_layout::ADAPTER_FILES[0]);
        for (name, pair) in &self.lora.modules {
            let saved = adapter.modules.get(name).ok_or_else(|| TrainError::CheckpointMismatch {
                checkpoint: adapter_file.clone(),
                problem: format!("lacks the adapter of {name}"),
            })?;
            for (which, now, then) in [("lora_A", &pair.a, &saved.a), ("lora_B", &pair.b, &saved.b)] {
                if now.shape() != then.shape() {
                    return Err(TrainError::CheckpointMismatch {
                        checkpoint: adapter_file,
                        problem: format!(
                            "holds tensor {name}.{which} as {:?}, but this recipe's model needs {:?} (another LoRA rank or model size)",
                            then.dims(),
                            now.dims()
                        ),
                    });
                }
                now.set(then.as_tensor())?;
            }
        }
        self.optim.load_state(&ckpt::load_tensors(found.path.join("optimizer.safetensors"), &Device::Cpu)?)?;
        let saved_motion = MotionMeta::read(&found.path)?;
        match (&self.motion, &saved_motion) {
            (Some(now), Some(saved)) if now.meta.estimator != saved.estimator || now.meta.estimator_settings != saved.estimator_settings => {
                return Err(TrainError::CheckpointMismatch {
                    checkpoint: found.path,
                    problem: format!(
                        "was trained with flow estimator {} {}, the recipe asks for {} {}",
                        saved.estimator, saved.estimator_settings, now.meta.estimator, now.meta.estimator_settings
                    ),
                });
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(TrainError::CheckpointMismatch {
                    checkpoint: found.path,
                    problem: format!("disagrees with the recipe on the motion branch (recipe motion.estimator = {})", self.recipe.motion.estimator),
                });
            }
            _ => {}
        }
        let state: TrainerState = hf_layout::read_resume_state(&found.path)?;
        if state.seed != self.recipe.seed {
            return Err(TrainError::CheckpointMismatch {
                checkpoint: found.path,
                problem: format!("was trained with seed {}, the recipe says {}", state.seed, self.recipe.seed),
            });
        }
        self.step = state.step;
        if state.position.index > self.loader.len() {
            return Err(TrainError::CheckpointMismatch {
                checkpoint: found.path,
                problem: format!("resumes at sample {}, past the {} samples of the training data", state.position.index, self.loader.len()),
            });
        }
        // The position is a sample, not a rank's place: any world size continues from it.
        self.micro = self.batches.plan().micro_at(&self.loader, state.position);
        self.batches = RankBatches::new(self.batches.plan().clone(), self.micro);
        self.clock = RunClock::starting_at(self.step);
        if self.is_writer() {
            self.history = truncate_log(&self.recipe.output_dir.join("trainer_log.jsonl"), self.step)?;
            if let Some(events) = &mut self.events {
                // TensorBoard drops what the killed run logged after this checkpoint.
                events.add_session_start(self.step as i64 + 1)?;
                events.flush()?;
            }
        }
        self.log_line(&format!("resumed from {} at step {}", found.path.display(), self.step))?;
        Ok(())
    }
}
