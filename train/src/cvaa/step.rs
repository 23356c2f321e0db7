//! Training: one optimiser step over one batch, and the loop to the last step.

use std::path::Path;
use std::time::Instant;

use candle_core::{D, DType, Tensor};

use super::logs::CvaaStepLog;
use super::loss::{overlap_targets, symmetric_info_nce};
use super::{CvaaTrainer, Result};
use crate::guard::{TrainedGroup, require_gradients};
use crate::optim::lr_scale;
use crate::sft::TrainError;

impl CvaaTrainer {
    /// One optimiser step over one batch.
    pub fn train_step(&mut self) -> Result<CvaaStepLog> {
        let started = Instant::now();
        let (epoch, indices) = self.batch_indices(self.step);
        let (uav_pixels, sat_pixels, crops) = self.pixels(self.step, &indices)?;
        let targets = if self.recipe.data.overlap_targets {
            let satellites: Vec<&Path> = indices.iter().map(|&i| self.pairs[i].satellite.as_path()).collect();
            let footprints: Vec<Option<[f64; 4]>> = indices.iter().map(|&i| self.pairs[i].footprint).collect();
            let b = indices.len();
            Some(Tensor::from_vec(overlap_targets(&satellites, &footprints, &crops), (b, b), &self.device)?)
        } else {
            None
        };
        let uav = self.model.embed_uav(&uav_pixels)?;
        let sat = self.model.embed_satellite(&sat_pixels)?;
        let scale = self.model.heads().logit_scale()?;
        let loss = symmetric_info_nce(&uav, &sat, &scale, self.recipe.optim.label_smoothing, targets.as_ref())?;
        let value = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        let ids = || indices.iter().map(|&i| self.pairs[i].id.clone()).collect::<Vec<_>>();
        if !value.is_finite() {
            return Err(TrainError::NonFinite { step: self.step + 1, what: "loss".into(), samples: ids() });
        }
        let best: Vec<u32> = uav.matmul(&sat.t()?)?.argmax(D::Minus1)?.to_vec1()?;
        let batch_accuracy = best.iter().enumerate().filter(|(i, j)| *i as u32 == **j).count() as f64 / best.len() as f64;
        self.optim.accumulate(&loss.backward()?)?;
        let bad = self.optim.non_finite_grads()?;
        if !bad.is_empty() {
            let what = format!("gradient in {}", bad.join(", "));
            return Err(TrainError::NonFinite { step: self.step + 1, what, samples: ids() });
        }
        let groups = [TrainedGroup::CvaaHeads, TrainedGroup::CvaaBackbone];
        require_gradients(&self.optim.reach()?, &groups, &format!("step {}", self.step + 1))?;
        let lr_mult = lr_scale(self.recipe.optim.schedule, self.step, self.warmup, self.total_steps);
        let grad_norm = self.optim.step_with_clip(lr_mult, self.recipe.optim.max_grad_norm)?;
        self.step += 1;
        let log = CvaaStepLog {
            step: self.step,
            epoch,
            loss: value,
            batch_accuracy,
            temperature: 1.0 / f64::from(scale.to_vec1::<f32>()?[0]),
            lr: self.recipe.optim.lr * lr_mult,
            grad_norm,
            pairs_per_s: indices.len() as f64 / started.elapsed().as_secs_f64().max(1e-9),
        };
        self.write_logs(&log)?;
        if self.step.is_multiple_of(self.recipe.checkpoint.every.max(1)) {
            self.save_checkpoint()?;
        }
        Ok(log)
    }

    /// Trains until `max_steps` (or the schedule's end), with a progress bar; the last step is
    /// always checkpointed.
    pub fn run(mut self) -> Result<Vec<CvaaStepLog>> {
        let target = self.target_steps();
        let bar = motionvl_data::progress::bar(target as u64, "steps", self.recipe.logging.progress_bar);
        bar.set_position(self.step as u64);
        let mut logs = Vec::new();
        while self.step < target {
            let log = self.train_step()?;
            bar.set_position(log.step as u64);
            bar.set_message(format!("loss {:.4} batch-acc {:.2}", log.loss, log.batch_accuracy));
            logs.push(log);
            if self.stop.is_requested() && self.step < target {
                let checkpoint = self.last_checkpoint()?;
                bar.finish();
                return Err(TrainError::Stopped { step: self.step, checkpoint });
            }
        }
        self.last_checkpoint()?;
        bar.finish();
        Ok(logs)
    }
}
