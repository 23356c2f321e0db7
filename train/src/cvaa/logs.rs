//! What a `train cvaa` run logs: each step as a line of `trainer_log.jsonl`, as TensorBoard
//! scalars and in `train.log`; a resumed run first drops the lines logged after its checkpoint.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{CvaaTrainer, Result, io};
use crate::checkpoint as ckpt;

/// One optimiser step's numbers, as written to `trainer_log.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CvaaStepLog {
    pub step: usize,
    pub epoch: usize,
    pub loss: f64,
    /// Fraction of the batch whose own satellite view scored highest (UAV → satellite).
    pub batch_accuracy: f64,
    pub temperature: f64,
    pub lr: f64,
    pub grad_norm: f64,
    pub pairs_per_s: f64,
}

impl CvaaTrainer {
    pub(super) fn write_logs(&mut self, log: &CvaaStepLog) -> Result<()> {
        ckpt::append_json_line(self.recipe.output_dir.join("trainer_log.jsonl"), log)?;
        if let Some(events) = &mut self.events {
            let scalars = [
                ("train/loss", log.loss as f32),
                ("train/batch_accuracy", log.batch_accuracy as f32),
                ("train/temperature", log.temperature as f32),
                ("train/lr", log.lr as f32),
                ("train/grad_norm", log.grad_norm as f32),
                ("train/pairs_per_s", log.pairs_per_s as f32),
            ];
            events.add_scalars(&scalars, log.step as i64)?;
            events.flush()?;
        }
        self.log_line(&format!(
            "step {} epoch {} loss {:.5} batch-acc {:.3} temperature {:.4} lr {:.3e} grad_norm {:.4}",
            log.step, log.epoch, log.loss, log.batch_accuracy, log.temperature, log.lr, log.grad_norm
        ))
    }

    pub(super) fn log_line(&mut self, line: &str) -> Result<()> {
        let path = self.recipe.output_dir.join("train.log");
        writeln!(self.text_log, "{line}").map_err(io(&path))
    }
}

/// A resumed run continues the log from its checkpoint.
pub(super) fn truncate_log(path: &Path, step: usize) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(()) };
    let kept: String =
        text.lines().filter(|line| serde_json::from_str::<CvaaStepLog>(line).is_ok_and(|l| l.step <= step)).map(|l| format!("{l}\n")).collect();
    ckpt::write_atomic(path, kept.as_bytes())?;
    Ok(())
}
