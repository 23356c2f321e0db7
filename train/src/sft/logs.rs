//! What a run logs: each step as a line of `trainer_log.jsonl`, as TensorBoard scalars and in
//! rank 0's `train.log`; a resumed run first drops the lines logged after its checkpoint.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::Trainer;
use super::error::{Result, io};
use crate::checkpoint as ckpt;
use crate::hf_layout::{HfLogEntry, LfProgress};

/// One optimiser step's numbers, as written to `trainer_log.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepLog {
    pub step: usize,
    /// Fractional, as HF and LLaMA-Factory log it: 1.5 is half-way through the second epoch.
    pub epoch: f64,
    pub loss: f64,
    pub lr: f64,
    pub lr_groups: Vec<(String, f64)>,
    pub grad_norm: f64,
    pub tokens_per_s: f64,
    pub samples_per_s: f64,
    #[serde(default)]
    pub tokens: u64,
    #[serde(flatten)]
    pub progress: LfProgress,
}

impl StepLog {
    pub(super) fn hf_entry(&self) -> HfLogEntry {
        HfLogEntry { epoch: self.epoch, grad_norm: self.grad_norm, learning_rate: self.lr, loss: self.loss, step: self.step }
    }
}

impl Trainer {
    pub(super) fn write_logs(&mut self, log: &StepLog) -> Result<()> {
        if !self.is_writer() {
            return Ok(());
        }
        ckpt::append_json_line(self.recipe.output_dir.join("trainer_log.jsonl"), log)?;
        if let Some(events) = &mut self.events {
            let step = log.step as i64;
            // HF Trainer's tags; the first group's rate is `train/learning_rate`, as HF logs it.
            let mut scalars: Vec<(String, f32)> = vec![
                ("train/loss".into(), log.loss as f32),
                ("train/learning_rate".into(), log.lr as f32),
                ("train/epoch".into(), log.epoch as f32),
                ("train/grad_norm".into(), log.grad_norm as f32),
                ("train/tokens_per_s".into(), log.tokens_per_s as f32),
                ("train/samples_per_s".into(), log.samples_per_s as f32),
            ];
            scalars.extend(log.lr_groups.iter().skip(1).map(|(g, lr)| (format!("train/learning_rate/{g}"), *lr as f32)));
            let refs: Vec<(&str, f32)> = scalars.iter().map(|(t, v)| (t.as_str(), *v)).collect();
            events.add_scalars(&refs, step)?;
            events.flush()?;
        }
        self.log_line(&format!(
            "step {} epoch {:.4} loss {:.6} lr {:.3e} grad_norm {:.4} tokens/s {:.1}",
            log.step, log.epoch, log.loss, log.lr, log.grad_norm, log.tokens_per_s
        ))
    }

    pub(super) fn log_line(&mut self, line: &str) -> Result<()> {
        let path = self.recipe.output_dir.join("train.log");
        match &mut self.text_log {
            Some(log) => writeln!(log, "{line}").map_err(io(&path)),
            None => Ok(()),
        }
    }
}

/// A resumed run continues the log from its checkpoint: later lines (steps the killed run took
/// after it) are dropped. Returns the steps kept.
pub(super) fn truncate_log(path: &Path, step: usize) -> Result<Vec<StepLog>> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(Vec::new()) };
    let (mut kept, mut logs) = (String::new(), Vec::new());
    for line in text.lines() {
        match serde_json::from_str::<StepLog>(line) {
            Ok(log) if log.step <= step => {
                kept.push_str(line);
                kept.push('\n');
                logs.push(log);
            }
            _ => {}
        }
    }
    // Rewritten only when the killed run logged past the checkpoint: resuming a finished run
    // changes nothing on disk.
    if kept != text {
        ckpt::write_atomic(path, kept.as_bytes())?;
    }
    Ok(logs)
}
