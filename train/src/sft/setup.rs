//! Setting a rank up: rank 0 prepares the run directory while the others wait, then every rank
//! builds its trainer (model, LoRA, media, data, optimiser, logs) and checks that all of them
//! start from the same state.

use std::io::Write;
use std::sync::Arc;

use motionvl_data::processor::ModelProcessor;
use motionvl_data::run_dir::RunLock;
use motionvl_data::samples::TrainingSample;
use motionvl_data::stop::StopFlag;
use motionvl_data::text::QwenTokenizer;
use motionvl_models::CheckpointFiles;

use super::data::{check_flow_cache, check_loader, data_digest, read_samples, require_usable, training_loader};
use super::error::{Result, TrainError, io};
use super::media::{Media, RunMedia, motion_media};
use super::model::{Motion, base_model_files, base_model_name, load_with_lora};
use super::run_dir::Prepared;
use super::{Start, Trainer};
use crate::checkpoint::{self as ckpt, Checkpoints};
use crate::hf_layout::RunClock;
use crate::micro::{MicroPlan, RankBatches};
use crate::optim::{AdamW, AdamWConfig, warmup_steps};
use crate::parallel::{GradExchange, all_agree, vote};
use crate::recipe::Recipe;
use crate::tensorboard::EventWriter;

impl Trainer {
    /// Sets up one rank of a data-parallel run (`exchange` reaches the others; `None` trains
    /// alone). Rank 0 owns the run directory (lock, logs, checkpoints) and prepares it before
    /// the others read from it.
    pub fn start_parallel(recipe: &Recipe, start: Start<'_>, exchange: Option<Box<dyn GradExchange>>) -> Result<Self> {
        let (rank, world) = exchange.as_ref().map_or((0, 1), |e| (e.rank(), e.world_size()));
        if rank != 0 {
            return Self::follow(recipe, start, exchange);
        }
        // Rank 0 prepares the run directory while the others wait at the barrier; it votes there
        // whether it succeeded, so that its refusal (a busy lock, a run without --resume, bad
        // data) ends every rank rather than leaving them in a collective.
        let prepared = Self::prepare(recipe, start);
        if let Some(exchange) = &exchange {
            let failed = vote(exchange.as_ref(), prepared.is_ok())?;
            if failed > 0 && prepared.is_ok() {
                return Err(TrainError::RanksFailed { failed });
            }
        }
        let Prepared { lock, resume, note, samples, files } = prepared?;
        Self::build(recipe, samples, files, resume, note, Some(lock), exchange, (rank, world))
    }

    /// A rank other than 0: waits for rank 0 to prepare the run directory, then reads it.
    fn follow(recipe: &Recipe, start: Start<'_>, exchange: Option<Box<dyn GradExchange>>) -> Result<Self> {
        let ranks = exchange.as_ref().map_or((0, 1), |e| (e.rank(), e.world_size()));
        if let Some(exchange) = &exchange {
            let failed = vote(exchange.as_ref(), true)?;
            if failed > 0 {
                return Err(TrainError::RankZeroFailed { dir: recipe.output_dir.clone() });
            }
        }
        // Rank 0 has cleared a run that `--resume auto` found without a checkpoint.
        let resume = match start {
            Start::Resume(arg) if arg != "auto" || ckpt::latest_complete(&recipe.output_dir)?.is_some() => Some(arg),
            _ => None,
        };
        let samples = read_samples(recipe)?;
        let files = base_model_files(recipe, &samples)?;
        Self::build(recipe, samples, files, resume, None, None, exchange, ranks)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        recipe: &Recipe,
        samples: Vec<TrainingSample>,
        files: CheckpointFiles,
        resume: Option<&str>,
        note: Option<String>,
        lock: Option<RunLock>,
        exchange: Option<Box<dyn GradExchange>>,
        (rank, world): (usize, usize),
    ) -> Result<Self> {
        let out = recipe.output_dir.clone();
        // A GPU rank computes on the exchange's device: the one NCCL's stream belongs to.
        let device = match &exchange {
            Some(e) if e.device().is_cuda() => e.device().clone(),
            _ => recipe.model.device.open()?,
        };
        if recipe.motion.enabled() && recipe.optim.batch_size > 1 {
            let with_videos = |motion: bool| samples.iter().find(|s| !s.videos.is_empty() && s.with_motion == motion);
            if let (Some(moving), Some(still)) = (with_videos(true), with_videos(false)) {
                return Err(TrainError::Recipe {
                    key: "optim.batch_size",
                    problem: format!(
                        "{} would batch rows with motion ({}) and without ({}, read with data.llava_rows = \"official\"); use batch_size 1",
                        recipe.optim.batch_size,
                        moving.location(),
                        still.location()
                    ),
                });
            }
        }
        let tokenizer = QwenTokenizer::from_model_dir(&files.dir)?;
        let (model, lora, recomputed) = load_with_lora(recipe, &files, &tokenizer, &device)?;
        let processor = ModelProcessor::of_checkpoint(model.family(), &files.dir)?;

        let adam =
            AdamWConfig { beta1: recipe.optim.beta1, beta2: recipe.optim.beta2, eps: recipe.optim.eps, weight_decay: recipe.optim.weight_decay };
        let mut groups = vec![("lora".to_owned(), recipe.optim.lr, lora.named_vars())];

        let (media, motion) = if let Some(media) = motion_media(recipe, &processor, &device)? {
            let motion = Motion::init(recipe, &model, &media, &device)?;
            groups.push(("connector".to_owned(), recipe.motion.connector_lr, motion.vars.clone()));
            (Media::new(recipe, RunMedia::Motion(media), &processor), Some(motion))
        } else {
            (Media::new(recipe, RunMedia::Visual(recipe.data.media_for(&processor)), &processor), None)
        };
        let optim = AdamW::new(groups, adam)?;
        let pad_id = tokenizer.special().endoftext;
        let flow_media = match &media.run {
            RunMedia::Motion(m) => Some(m.clone()),
            RunMedia::Visual(_) => None,
        };
        let loader = training_loader(recipe, samples, tokenizer, media, &processor);
        let mut text_log =
            if rank == 0 { Some(std::fs::OpenOptions::new().create(true).append(true).open(out.join("train.log")).map_err(io(&out))?) } else { None };
        let check = check_loader(&loader, recipe.logging.progress_bar && rank == 0)?;
        if let Some(log) = &mut text_log {
            writeln!(log, "data: {}", check.report.to_json_line()).map_err(io(&out))?;
        }
        require_usable(&check.report, recipe)?;
        if let Some(media) = flow_media.as_ref().filter(|m| m.cache_only) {
            let decoded = check_flow_cache(media, loader.samples(), &check.fits, recipe.logging.progress_bar && rank == 0)?;
            if let Some(log) = &mut text_log {
                writeln!(log, "flow cache check: every flow present ({decoded} video(s) decoded to key them)").map_err(io(&out))?;
            }
        }

        let micro_per_epoch = loader.len().div_ceil(recipe.optim.batch_size.max(1));
        let per_epoch = (micro_per_epoch / (recipe.optim.grad_accum.max(1) * world)).max(1);
        let total_steps = recipe.optim.schedule_steps.or(recipe.optim.max_steps).unwrap_or(per_epoch * recipe.optim.epochs.max(1));
        let checkpoints = Checkpoints::open(&out, std::num::NonZeroUsize::new(recipe.checkpoint.keep))?;
        let events = if recipe.logging.tensorboard && rank == 0 { Some(EventWriter::create(out.join("tensorboard"))?) } else { None };
        let plan = MicroPlan::new(&check.fits, loader.len(), recipe.optim.batch_size, recipe.optim.grad_accum, rank, world);

        let mut trainer = Self {
            batches: RankBatches::new(plan, 0),
            micro: 0,
            exchange,
            recipe: recipe.clone(),
            model,
            lora,
            motion,
            optim,
            loader,
            step: 0,
            total_steps,
            steps_per_epoch: per_epoch,
            history: Vec::new(),
            clock: RunClock::starting_at(0),
            warmup: warmup_steps(recipe.optim.warmup_ratio, total_steps),
            recomputed,
            checkpoints,
            events,
            text_log,
            device,
            pad_id,
            base_model: base_model_name(recipe, &files),
            flow_counts: flow_media.map(|m| Arc::clone(&m.counts)),
            note,
            stop: StopFlag::new(),
            stopping: false,
            _lock: lock,
        };
        if let Some(arg) = resume {
            trainer.restore(arg)?;
        }
        trainer.check_ranks_agree()?;
        if let Some(note) = &trainer.note {
            let line = note.clone();
            trainer.log_line(&line)?;
        }
        Ok(trainer)
    }

    /// Every rank starts from the same state: step, next micro-batch, data, sample numbering
    /// and LoRA weights. A rank that resumed elsewhere (a node-local `output_dir`, a stale NFS
    /// view) or numbered the samples otherwise would add gradients of another run, silently.
    fn check_ranks_agree(&self) -> Result<()> {
        let Some(exchange) = &self.exchange else { return Ok(()) };
        use sha2::Digest;
        let data = data_digest(&self.recipe)?;
        let mut h = sha2::Sha256::new();
        h.update((self.step as u64).to_le_bytes());
        h.update(self.micro.to_le_bytes());
        h.update(data.as_bytes());
        h.update(self.batches.plan().layout_digest());
        for (name, var) in self.lora.named_vars() {
            h.update(name.as_bytes());
            let values: Vec<f32> = var.as_tensor().flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1()?;
            h.update(values.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        }
        let digest: [u8; 32] = h.finalize().into();
        let fingerprint = u64::from_le_bytes(digest[..8].try_into().unwrap_or_default());
        if all_agree(exchange.as_ref(), fingerprint)? {
            return Ok(());
        }
        Err(TrainError::RanksDisagree { rank: exchange.rank(), step: self.step, micro: self.micro, data: data.chars().take(12).collect() })
    }
}
