//! A run directory as HF Trainer + PEFT and LLaMA-Factory lay one out, so their tools open ours:
//!
//! - `checkpoint-N/adapter_model.safetensors` + `adapter_config.json`, what
//!   `PeftModel.from_pretrained(model, "checkpoint-N")` and LLaMA-Factory's
//!   `adapter_name_or_path` open, with motionvl's own state (optimiser, loader position, motion
//!   connector) beside them;
//! - the final adapter at the run root, as `Trainer.save_model()` leaves it;
//! - `trainer_state.json` in transformers' `TrainerState` schema and nothing else:
//!   `TrainerState.load_from_json` hands every key to the dataclass, so one extra key makes it
//!   raise. What motionvl needs to resume exactly is `motionvl_state.json` beside it;
//! - `trainer_log.jsonl` lines carrying LLaMA-Factory's `LogCallback` keys next to ours.
//!
//! Runs written before this layout (adapter in `checkpoint-N/adapter/`, the resume state in
//! `trainer_state.json`) still resume, merge and evaluate: [`adapter_dir`] and
//! [`read_resume_state`] look in both places.

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::checkpoint as ckpt;

/// transformers' `TRAINER_STATE_NAME`.
pub const HF_STATE_FILE: &str = "trainer_state.json";

/// What an exact resume needs that HF's schema has no field for.
pub const RESUME_STATE_FILE: &str = "motionvl_state.json";

/// Where motionvl runs before the hub layout kept the adapter inside a checkpoint.
pub const LEGACY_ADAPTER_DIR: &str = "adapter";

/// PEFT's adapter files, which the run root receives from the final checkpoint.
pub const ADAPTER_FILES: [&str; 2] = ["adapter_model.safetensors", "adapter_config.json"];

/// The PEFT folder of `path`: `path` itself when it holds `adapter_config.json` (a checkpoint,
/// a run root, any PEFT folder), else its `adapter/` (an older motionvl checkpoint). `None`
/// when neither does.
pub fn adapter_dir(path: &Path) -> Option<PathBuf> {
    [path.to_path_buf(), path.join(LEGACY_ADAPTER_DIR)].into_iter().find(|d| d.join(ADAPTER_FILES[1]).is_file())
}

/// The folder holding a checkpoint's own state for the PEFT folder `adapter`: the folder itself,
/// or the checkpoint above it when `adapter` is an older run's `checkpoint-N/adapter/`.
pub fn checkpoint_of_adapter(adapter: &Path) -> PathBuf {
    let legacy = adapter.file_name().is_some_and(|n| n == LEGACY_ADAPTER_DIR);
    match adapter.parent() {
        Some(parent) if legacy && parent.join(ckpt::COMPLETE_MARKER).is_file() => parent.to_path_buf(),
        _ => adapter.to_path_buf(),
    }
}

/// The resume state of the checkpoint at `dir`: `motionvl_state.json`, or for an older run the
/// `trainer_state.json` that held it.
pub fn read_resume_state<T: DeserializeOwned>(dir: &Path) -> ckpt::Result<T> {
    let current = dir.join(RESUME_STATE_FILE);
    ckpt::load_json(if current.is_file() { current } else { dir.join(HF_STATE_FILE) })
}

/// One `log_history` entry, as HF Trainer logs a training step.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HfLogEntry {
    pub epoch: f64,
    pub grad_norm: f64,
    pub learning_rate: f64,
    pub loss: f64,
    pub step: usize,
}

/// transformers' `TrainerState` (trainer_callback.py), field for field.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HfTrainerState {
    pub epoch: f64,
    pub global_step: usize,
    pub max_steps: usize,
    pub logging_steps: usize,
    pub eval_steps: usize,
    pub save_steps: usize,
    pub train_batch_size: usize,
    pub num_train_epochs: usize,
    pub num_input_tokens_seen: u64,
    pub total_flos: f64,
    pub log_history: Vec<HfLogEntry>,
    pub best_metric: Option<f64>,
    pub best_global_step: Option<usize>,
    pub best_model_checkpoint: Option<String>,
    pub is_local_process_zero: bool,
    pub is_world_process_zero: bool,
    pub is_hyper_param_search: bool,
    pub trial_name: Option<String>,
    pub trial_params: Option<serde_json::Map<String, serde_json::Value>>,
    pub stateful_callbacks: serde_json::Map<String, serde_json::Value>,
}

/// What a run knows that [`HfTrainerState`] records.
#[derive(Debug, Clone)]
pub struct RunShape {
    pub max_steps: usize,
    pub steps_per_epoch: usize,
    pub save_steps: usize,
    /// Samples per optimiser step on one device, as HF's `train_batch_size`.
    pub train_batch_size: usize,
    pub tokens_seen: u64,
}

impl HfTrainerState {
    /// The state after `history`'s last step at fractional `epoch`. Every step is logged
    /// (`logging_steps` 1), there is no evaluation (HF then sets `eval_steps` to
    /// `logging_steps`), and no best model.
    pub fn new(shape: &RunShape, global_step: usize, epoch: f64, log_history: Vec<HfLogEntry>) -> Self {
        Self {
            epoch,
            global_step,
            max_steps: shape.max_steps,
            logging_steps: 1,
            eval_steps: 1,
            save_steps: shape.save_steps,
            train_batch_size: shape.train_batch_size,
            // As HF computes it when `max_steps` is set: the epochs those steps touch.
            num_train_epochs: shape.max_steps.div_ceil(shape.steps_per_epoch.max(1)),
            num_input_tokens_seen: shape.tokens_seen,
            total_flos: 0.0,
            log_history,
            best_metric: None,
            best_global_step: None,
            best_model_checkpoint: None,
            is_local_process_zero: true,
            is_world_process_zero: true,
            is_hyper_param_search: false,
            trial_name: None,
            trial_params: None,
            stateful_callbacks: serde_json::Map::new(),
        }
    }
}

/// The keys LLaMA-Factory's `LogCallback` writes to each `trainer_log.jsonl` line beside `loss`,
/// `lr` and `epoch`, which LlamaBoard's progress bar and loss plot read.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LfProgress {
    #[serde(default)]
    pub current_steps: usize,
    #[serde(default)]
    pub total_steps: usize,
    #[serde(default)]
    pub percentage: f64,
    /// `H:MM:SS`, as Python's `str(timedelta(seconds=int(s)))`.
    #[serde(default)]
    pub elapsed_time: String,
    #[serde(default)]
    pub remaining_time: String,
}

/// The wall clock of one process's share of a run: a resumed run's remaining time is estimated
/// from its own steps, not from the killed run's.
#[derive(Debug, Clone)]
pub struct RunClock {
    started: Instant,
    first_step: usize,
}

impl RunClock {
    /// A clock for a process that starts after `step` steps.
    pub fn starting_at(step: usize) -> Self {
        Self { started: Instant::now(), first_step: step }
    }

    pub fn progress(&self, step: usize, total_steps: usize) -> LfProgress {
        let elapsed = self.started.elapsed().as_secs_f64();
        let done = step.saturating_sub(self.first_step);
        let remaining = if done == 0 { 0.0 } else { elapsed / done as f64 * total_steps.saturating_sub(step) as f64 };
        let percentage = if total_steps == 0 { 100.0 } else { (step as f64 / total_steps as f64 * 10_000.0).round() / 100.0 };
        LfProgress { current_steps: step, total_steps, percentage, elapsed_time: timedelta(elapsed), remaining_time: timedelta(remaining) }
    }
}

/// `str(datetime.timedelta(seconds=int(seconds)))` for spans under a day: `0:01:05`.
pub fn timedelta(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    let (days, rest) = (s / 86_400, s % 86_400);
    let clock = format!("{}:{:02}:{:02}", rest / 3600, rest % 3600 / 60, rest % 60);
    match days {
        0 => clock,
        1 => format!("1 day, {clock}"),
        d => format!("{d} days, {clock}"),
    }
}

/// Copies the final checkpoint's adapter, motion branch and `trainer_state.json` to the run
/// root, each file atomically, where `Trainer.save_model()` + `save_state()` leave theirs.
pub fn publish_final(checkpoint: &Path, run_root: &Path) -> ckpt::Result<()> {
    for file in published_files() {
        let src = checkpoint.join(file);
        let dst = run_root.join(file);
        match std::fs::read(&src) {
            Ok(bytes) => ckpt::write_atomic(&dst, &bytes)?,
            // A visual-only run has no motion files; an older one published there must go.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match std::fs::remove_file(&dst) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(ckpt::CheckpointError::Io { action: "cannot remove", path: dst, source: e });
                }
                _ => {}
            },
            Err(source) => return Err(ckpt::CheckpointError::Io { action: "cannot read", path: src, source }),
        }
    }
    Ok(())
}

/// The files [`publish_final`] writes at the run root, which `--overwrite` clears.
pub fn published_files() -> [&'static str; 5] {
    [ADAPTER_FILES[0], ADAPTER_FILES[1], motionvl_models::motion::MOTION_META_FILE, motionvl_models::motion::MOTION_WEIGHTS_FILE, HF_STATE_FILE]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timedelta_matches_python() {
        // str(timedelta(seconds=int(x))) for these x.
        for (x, want) in [
            (0.0, "0:00:00"),
            (65.9, "0:01:05"),
            (3600.0, "1:00:00"),
            (86_399.0, "23:59:59"),
            (90_061.0, "1 day, 1:01:01"),
            (200_000.0, "2 days, 7:33:20"),
        ] {
            assert_eq!(timedelta(x), want, "{x}");
        }
    }

    #[test]
    fn percentage_rounds_to_two_decimals_and_an_empty_run_is_done() {
        let clock = RunClock::starting_at(0);
        assert_eq!(clock.progress(1, 3).percentage, 33.33);
        assert_eq!(clock.progress(2, 3).percentage, 66.67);
        assert_eq!(clock.progress(0, 0).percentage, 100.0);
        assert_eq!(clock.progress(0, 5).remaining_time, "0:00:00");
    }
}
