//! Training: the loop to the last step, the preflight pass before it, and one optimiser step —
//! read the step's micro-batches, forward and backward each, exchange gradients between ranks,
//! check them, clip and step.

use std::time::Instant;

use candle_core::Tensor;
use candle_core::backprop::GradStore;
use motionvl_data::progress;
use motionvl_models::training_loss::predicted_label_count;

use super::Trainer;
use super::error::{Result, TrainError};
use super::logs::StepLog;
use crate::batch::{TrainBatch, collate};
use crate::guard::{TrainedGroup, require_gradients};
use crate::hf_layout;
use crate::micro::RankBatches;
use crate::optim::lr_scale;
use crate::parallel::reduce_grads;
use crate::recipe::LossAverage;

/// Gradient values per all-reduce bucket: 25 MB of f32, PyTorch DDP's default.
const BUCKET_ELEMS: usize = 25 << 18;

impl Trainer {
    /// Trains until `max_steps` (or the schedule's end), with a progress bar, and leaves the
    /// final adapter at the run root.
    pub fn run(mut self) -> Result<Vec<StepLog>> {
        let target = self.target_steps();
        let bar = progress::bar(target as u64, "steps", self.recipe.logging.progress_bar && self.is_writer());
        bar.set_position(self.step as u64);
        let mut logs = Vec::new();
        if self.step < target {
            self.preflight()?;
        }
        while self.step < target {
            let log = self.train_step()?;
            bar.set_position(log.step as u64);
            bar.set_message(format!("loss {:.4}", log.loss));
            logs.push(log);
            if self.stopping && self.step < target {
                let checkpoint = self.last_checkpoint()?;
                bar.finish();
                self.log_line(&format!("stopped on request after step {}", self.step))?;
                return Err(TrainError::Stopped { step: self.step, checkpoint });
            }
        }
        if self.is_writer() {
            let last = self.last_checkpoint()?;
            hf_layout::publish_final(&last, &self.recipe.output_dir)?;
        }
        bar.finish();
        Ok(logs)
    }

    /// One forward and backward pass on the first micro-batch this rank will train on, before
    /// any step: a run whose trained tensors get no gradient fails here, having changed nothing.
    pub fn preflight(&mut self) -> Result<()> {
        let per_step = self.batches.plan().per_step();
        let Some(micro) = self.batches.plan().rank_micros(self.micro).next() else { return Ok(()) };
        let mut reader = RankBatches::new(self.batches.plan().clone(), self.micro);
        let read = reader.take(&self.loader, micro)?;
        if read.samples.is_empty() {
            return Ok(());
        }
        let batch = collate(&read.samples, self.pad_id, &self.device)?;
        let (value, grads) = self.forward_backward(&batch, micro, 1.0 / per_step as f64)?;
        let Some(grads) = grads else {
            return Err(TrainError::NonFinite { step: self.step + 1, what: format!("preflight loss {value}"), samples: batch.sample_ids });
        };
        self.optim.accumulate(&grads)?;
        let mut used = UsedInputs::default();
        used.add(&batch);
        let checked = self.require_gradients(&used, "preflight (one forward and backward pass on the first micro-batch)");
        let reach = self.optim.reach();
        self.optim.clear_grads()?;
        checked?;
        let summary: Vec<String> =
            reach?.iter().map(|r| format!("{} {} tensors, norm {:.4e}", r.group, r.params - r.unreached.len(), r.norm)).collect();
        self.log_line(&format!("preflight: gradients reach {}", summary.join("; ")))
    }

    /// One optimiser step over `grad_accum` micro-batches per rank; with data parallel, the
    /// ranks' gradients are summed before clipping and the step.
    pub fn train_step(&mut self) -> Result<StepLog> {
        let started = Instant::now();
        let per_step = self.batches.plan().per_step();
        let averaging = self.recipe.optim.loss_average;
        let (mut loss_sum, mut tokens, mut samples, mut non_finite) = (0.0, 0, 0, 0);
        let mut sample_ids = Vec::new();
        let mut used = UsedInputs::default();
        // The step's micro-batches are read before the first backward: averaged over tokens,
        // each one's weight needs the step's trained-token count over every rank.
        let mut reads = Vec::new();
        for micro in self.batches.plan().rank_micros(self.micro) {
            let read = self.batches.take(&self.loader, micro)?;
            for s in &read.skipped {
                self.log_line(&format!("skipped sample {} ({}): {}", s.sample_id, s.location, s.reason))?;
            }
            let targets: usize = read.samples.iter().map(|s| predicted_label_count(&s.encoded.labels)).sum();
            reads.push((micro, read.samples, targets));
        }
        let step_targets = self.step_targets(reads.iter().map(|r| r.2).sum())?;
        for (micro, read_samples, targets) in reads {
            // A micro-batch whose every sample failed under `skip_bad` adds nothing.
            if read_samples.is_empty() {
                continue;
            }
            let batch = collate(&read_samples, self.pad_id, &self.device)?;
            let (value, grads) = self.forward_backward(&batch, micro, averaging.scale(targets, step_targets, per_step))?;
            sample_ids.extend(batch.sample_ids.iter().cloned());
            let Some(grads) = grads else {
                if self.exchange.is_none() {
                    return Err(TrainError::NonFinite { step: self.step + 1, what: "loss".into(), samples: sample_ids });
                }
                // The other ranks wait in the exchange below: fail there, all together.
                non_finite += 1;
                continue;
            };
            self.optim.accumulate(&grads)?;
            used.add(&batch);
            loss_sum += match averaging {
                LossAverage::MicroBatch => value,
                LossAverage::Tokens => value * targets as f64,
            };
            tokens += batch.tokens;
            samples += batch.sample_ids.len();
        }
        let stop_requested = self.stop.is_requested();
        self.stopping = stop_requested;
        if let Some(exchange) = &self.exchange {
            let totals = Tensor::new(
                &[loss_sum as f32, tokens as f32, samples as f32, non_finite as f32, f32::from(u8::from(stop_requested))],
                exchange.device(),
            )?;
            exchange.all_reduce_sum(&totals)?;
            let totals: Vec<f32> = totals.to_vec1()?;
            // One rank's signal stops them all after this step.
            self.stopping = totals[4] > 0.0;
            if totals[3] > 0.0 {
                return Err(TrainError::NonFinite {
                    step: self.step + 1,
                    what: format!("loss on {} micro-batch(es) of the step", totals[3]),
                    samples: sample_ids,
                });
            }
            (loss_sum, tokens, samples) = (f64::from(totals[0]), totals[1] as usize, totals[2] as usize);
            reduce_grads(exchange.as_ref(), self.optim.grads_mut(), BUCKET_ELEMS)?;
        }
        let bad = self.optim.non_finite_grads()?;
        if !bad.is_empty() {
            let what = format!("gradient in {}", bad.join(", "));
            return Err(TrainError::NonFinite { step: self.step + 1, what, samples: sample_ids });
        }
        self.require_gradients(&used, &format!("step {}", self.step + 1))?;
        let scale = lr_scale(self.recipe.optim.schedule, self.step, self.warmup, self.total_steps);
        let grad_norm = self.optim.step_with_clip(scale, self.recipe.optim.max_grad_norm)?;
        self.step += 1;
        self.micro += per_step;
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        let lr_groups: Vec<(String, f64)> = self.optim.groups.iter().map(|g| (g.name.clone(), g.lr * scale)).collect();
        // Fractional, as HF logs it: where the next micro-batch starts.
        let position = self.batches.plan().position_of(&self.loader, self.micro);
        let epoch = position.epoch as f64 + position.index as f64 / self.loader.len().max(1) as f64;
        let log = StepLog {
            step: self.step,
            epoch,
            loss: match averaging {
                LossAverage::MicroBatch => loss_sum / per_step as f64,
                LossAverage::Tokens => loss_sum / step_targets.max(1) as f64,
            },
            lr: lr_groups.first().map_or(0.0, |g| g.1),
            lr_groups,
            grad_norm,
            tokens_per_s: tokens as f64 / seconds,
            samples_per_s: samples as f64 / seconds,
            tokens: tokens as u64,
            progress: self.clock.progress(self.step, self.target_steps()),
        };
        self.write_logs(&log)?;
        self.history.push(log.clone());
        if self.is_writer() && self.step.is_multiple_of(self.recipe.checkpoint.every.max(1)) {
            self.save_checkpoint()?;
        }
        Ok(log)
    }

    /// The trained tokens of the step over every rank, when the loss is averaged over them
    /// (exchanged before the first backward); else this rank's own count, which nothing uses.
    fn step_targets(&self, local: usize) -> Result<usize> {
        match (&self.exchange, self.recipe.optim.loss_average) {
            (Some(exchange), LossAverage::Tokens) => {
                let total = Tensor::new(&[local as f32], exchange.device())?;
                exchange.all_reduce_sum(&total)?;
                Ok(total.to_vec1::<f32>()?[0].round() as usize)
            }
            _ => Ok(local),
        }
    }

    /// One micro-batch's loss and, only when it is finite, its gradients scaled by `scale`
    /// (those of checkpointed layers merged in). A batch without motion pixels (its samples
    /// train without motion) runs visual-only.
    fn forward_backward(&self, batch: &TrainBatch, micro: u64, scale: f64) -> Result<(f64, Option<GradStore>)> {
        // Independent dropout seeds per micro-batch, a function of its number in the run (not
        // of the rank that reads it).
        self.lora.runtime().set_dropout_seed(motionvl_data::rng::derive_seed(self.recipe.seed, micro));
        let branch = self.motion.as_ref().filter(|_| batch.motion.is_some()).map(|m| &m.branch);
        let motion = branch.map(|b| (b, batch.motion.as_ref()));
        let loss = self.model.training_loss(&batch.prompt, &batch.vision, motion, &batch.labels)?;
        let value = loss.value()?;
        if !value.is_finite() {
            return Ok((value, None));
        }
        let mut grads = loss.backward(scale)?;
        if let Some(recomputed) = &self.recomputed {
            recomputed.merge_into(&mut grads)?;
        }
        Ok((value, Some(grads)))
    }

    /// Fails when a trained group the step's batches used got no gradient, or a zero one
    /// (see [`crate::guard`]).
    fn require_gradients(&self, used: &UsedInputs, when: &str) -> Result<()> {
        if used.backwards == 0 {
            return Ok(());
        }
        let mut reach = self.optim.reach()?;
        if !used.vision {
            // Adapters on the vision tower see no input in a text-only step.
            for r in &mut reach {
                r.unreached.retain(|name| !name.starts_with("visual."));
            }
        }
        let mut groups = vec![TrainedGroup::Lora];
        if used.motion && self.motion.is_some() {
            groups.push(TrainedGroup::Connector);
        }
        Ok(require_gradients(&reach, &groups, when)?)
    }
}

/// What the micro-batches of a step fed the model, for [`Trainer::require_gradients`].
#[derive(Debug, Default)]
struct UsedInputs {
    backwards: usize,
    vision: bool,
    motion: bool,
}

impl UsedInputs {
    fn add(&mut self, batch: &TrainBatch) {
        self.backwards += 1;
        self.vision |= batch.vision.images.is_some() || batch.vision.videos.is_some();
        self.motion |= batch.motion.is_some() && batch.vision.videos.is_some();
    }
}
