//! The SFT loop: LoRA on a frozen Qwen2.5-VL, AdamW with gradient accumulation, clipping and a
//! warmup + cosine schedule, atomic checkpoints that resume exactly, and a run directory with
//! `trainer_log.jsonl`, TensorBoard events, a text log and the resolved recipe.
//!
//! Exact resume rests on three things: the loader's order is a function of (seed, epoch); LoRA
//! dropout masks are a function of (seed, micro-batch number); and the optimiser's moments and
//! f32 master weights are saved bit for bit.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use std::sync::Arc;

use candle_core::backprop::GradStore;
use candle_core::{Device, Tensor};
use motionvl_data::budget::{DataCheck, DataReport, SampleFit, VideoBudget, VideoLimits};
use motionvl_data::frames::FramePolicy;
use motionvl_data::loader::{BoxError, MediaGrids, MediaProcessor, ProcessedMedia};
use motionvl_data::loader::{DataLoader, LoaderConfig, Position, QwenMedia};
use motionvl_data::progress;
use motionvl_data::run_dir::RunLock;
use motionvl_data::samples::tokenizer_for_fresh_model;
use motionvl_data::samples::{LlavaRows, ReadOptions, TrainingSample, read_training_rows};
use motionvl_data::text::{QwenTokenizer, TemplateOptions};
use motionvl_flow::key_index::check_cached;
use motionvl_flow::media::{CacheCounts, MotionMedia};
use motionvl_flow::{EstimatorSpec, FlowCache, FlowEstimator, estimator_from_spec};
use motionvl_models::device::{parse_device, parse_dtype};
use motionvl_models::lora::LoraWeights;
use motionvl_models::motion::{Connector, MOTION_WEIGHTS_FILE, MotionBranch, MotionMeta, vision_features};
use motionvl_models::qwen25vl::Qwen25Vl;
use motionvl_models::recompute::RecomputedGrads;
use motionvl_models::training_loss::predicted_label_count;
use motionvl_models::{CheckpointFiles, HubOptions, Qwen25VlConfig};
use serde::{Deserialize, Serialize};

use crate::batch::{TrainBatch, collate};
use crate::checkpoint::{self as ckpt, Checkpoints};
use crate::guard::{TrainedGroup, require_gradients};
use crate::hf_layout::{self, HfLogEntry, HfTrainerState, LfProgress, RunClock, RunShape};
use crate::micro::{MicroPlan, RankBatches};
use crate::optim::{AdamW, AdamWConfig, lr_scale, warmup_steps};
use crate::parallel::{GradExchange, all_agree, reduce_grads, vote};
use crate::recipe::{LossAverage, Recipe};
use crate::tensorboard::EventWriter;
use motionvl_data::stop::StopFlag;

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Model(#[from] motionvl_models::ModelError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Optim(#[from] crate::optim::OptimError),
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    #[error(transparent)]
    TensorBoard(#[from] crate::tensorboard::TensorBoardError),
    #[error("training data: {0}")]
    Data(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("step {step}: non-finite {what} (samples {samples:?}); stopped, the last checkpoint is intact")]
    NonFinite { step: usize, what: String, samples: Vec<String> },
    #[error(transparent)]
    Flow(#[from] motionvl_flow::FlowError),
    #[error(transparent)]
    Parallel(#[from] crate::parallel::ParallelError),
    #[error(transparent)]
    Gradient(#[from] crate::guard::GradientError),
    #[error("{0}")]
    Setup(String),
    #[error("stopped on request after step {step}; {} holds it — continue with --resume auto", checkpoint.display())]
    Stopped { step: usize, checkpoint: PathBuf },
}

/// Gradient values per all-reduce bucket: 25 MB of f32, PyTorch DDP's default.
const BUCKET_ELEMS: usize = 25 << 18;

/// The media path of a run: plain (visual-only) or with motion pseudo-images.
enum RunMedia {
    Visual(QwenMedia),
    Motion(MotionMedia),
}

/// A run's media: the run's path for its samples, and the plain path of samples without motion
/// (`with_motion` false: conversation rows under `llava_rows = "official"`), whose batches carry
/// no motion pixels, so the model runs them visual-only.
struct Media {
    run: RunMedia,
    without_motion: QwenMedia,
}

impl Media {
    fn new(recipe: &Recipe, run: RunMedia) -> Self {
        Media { run, without_motion: media_without_motion(recipe) }
    }

    fn for_sample(&self, sample: &TrainingSample) -> &dyn MediaProcessor {
        match &self.run {
            _ if !sample.with_motion => &self.without_motion,
            RunMedia::Visual(m) => m,
            RunMedia::Motion(m) => m,
        }
    }
}

impl MediaProcessor for Media {
    fn process(&self, sample: &TrainingSample) -> std::result::Result<ProcessedMedia, BoxError> {
        self.for_sample(sample).process(sample)
    }

    fn grids(&self, sample: &TrainingSample) -> Option<std::result::Result<MediaGrids, BoxError>> {
        self.for_sample(sample).grids(sample)
    }

    fn video_budget(&self, sample: &TrainingSample) -> Option<std::result::Result<VideoBudget, BoxError>> {
        self.for_sample(sample).video_budget(sample)
    }

    fn process_limited(&self, sample: &TrainingSample, limits: VideoLimits) -> std::result::Result<ProcessedMedia, BoxError> {
        self.for_sample(sample).process_limited(sample, limits)
    }
}

/// The media of samples without motion: the recipe's pixels, and every frame of the video, as
/// the official loader's conversation rows get them (the processor decodes the whole clip
/// itself, `do_sample_frames` false; `second_per_grid_ts` stays 2 / 2.0 = 1.0).
fn media_without_motion(recipe: &Recipe) -> QwenMedia {
    let mut media = recipe.data.media();
    if recipe.data.llava_rows == LlavaRows::Official {
        media.video_policy = FramePolicy::Official { max_frames: usize::MAX };
    }
    media
}

/// The trained motion branch and what its checkpoints record.
struct Motion {
    branch: MotionBranch,
    vars: Vec<(String, candle_core::Var)>,
    meta: MotionMeta,
}

type Result<T> = std::result::Result<T, TrainError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}

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
    fn hf_entry(&self) -> HfLogEntry {
        HfLogEntry { epoch: self.epoch, grad_norm: self.grad_norm, learning_rate: self.lr, loss: self.loss, step: self.step }
    }
}

pub struct Trainer {
    recipe: Recipe,
    model: Qwen25Vl,
    lora: LoraWeights,
    motion: Option<Motion>,
    optim: AdamW,
    loader: DataLoader<Media>,
    /// This rank's micro-batches.
    batches: RankBatches,
    /// Global number of the next step's first micro-batch.
    micro: u64,
    /// The other data-parallel ranks; `None` trains alone.
    exchange: Option<Box<dyn GradExchange>>,
    step: usize,
    total_steps: usize,
    steps_per_epoch: usize,
    /// This run's steps so far, for `trainer_state.json`'s `log_history`.
    history: Vec<StepLog>,
    clock: RunClock,
    warmup: usize,
    recomputed: Option<RecomputedGrads>,
    checkpoints: Checkpoints,
    events: Option<EventWriter>,
    /// Rank 0's `train.log`; the other ranks write nothing.
    text_log: Option<std::fs::File>,
    device: Device,
    pad_id: u32,
    base_model: String,
    flow_counts: Option<Arc<CacheCounts>>,
    /// What the start did that the user did not spell out (a fresh start under `--resume auto`).
    note: Option<String>,
    /// Set by a signal; read once per step (see [`crate::stop`]).
    stop: StopFlag,
    /// Every rank saw the stop request by the end of the last step.
    stopping: bool,
    _lock: Option<RunLock>,
}

/// What rank 0's preparation of the run directory yields ([`Trainer::prepare`]).
struct Prepared<'a> {
    lock: RunLock,
    /// The checkpoint to resume (`auto` or a folder), if any.
    resume: Option<&'a str>,
    note: Option<String>,
    samples: Vec<TrainingSample>,
    files: CheckpointFiles,
}

/// How a run starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start<'a> {
    /// A new run; refused when the directory already holds one.
    Fresh,
    /// A new run after clearing the directory's previous run (`--overwrite`).
    Overwrite,
    /// `auto` (the newest complete checkpoint, or a fresh run when there is none) or a
    /// checkpoint directory.
    Resume(&'a str),
}

impl Trainer {
    /// Sets the run up: base model (building a fresh one if the recipe asks), tokenizer, LoRA,
    /// data, optimiser — then restores a checkpoint when `resume` is `auto` or a directory.
    pub fn new(recipe: &Recipe, resume: Option<&str>) -> Result<Self> {
        Self::start(recipe, resume.map_or(Start::Fresh, Start::Resume))
    }

    /// Sets the run up as [`Trainer::new`], taking the run directory's lock first: a fresh start
    /// refuses a directory that already holds a run, `Overwrite` clears it, and `--resume auto`
    /// without a complete checkpoint starts fresh (see [`Trainer::note`]).
    pub fn start(recipe: &Recipe, start: Start<'_>) -> Result<Self> {
        Self::start_parallel(recipe, start, None)
    }

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
                return Err(TrainError::Setup(format!("{failed} data-parallel rank(s) failed to start; their errors are above")));
            }
        }
        let Prepared { lock, resume, note, samples, files } = prepared?;
        Self::build(recipe, samples, files, resume, note, Some(lock), exchange, (rank, world))
    }

    /// Rank 0's preparation of the run directory: its lock, the start's decision (resume,
    /// clear, refuse), the recipe beside it, the data and the base model.
    fn prepare<'a>(recipe: &Recipe, start: Start<'a>) -> Result<Prepared<'a>> {
        let out = recipe.output_dir.clone();
        let lock = RunLock::acquire(&out).map_err(|e| TrainError::Setup(e.to_string()))?;
        let mut note = None;
        let resume = match start {
            Start::Fresh => {
                if let Some(found) = run_artefacts(&out).iter().find(|p| is_progress(p)) {
                    return Err(TrainError::Setup(format!(
                        "{} already holds a run ({}): pass --resume auto to continue it, --overwrite to start it over, or choose another --output-dir",
                        out.display(),
                        found.display()
                    )));
                }
                clear_run(&out)?;
                None
            }
            Start::Overwrite => {
                let removed = clear_run(&out)?;
                if !removed.is_empty() {
                    note = Some(format!("--overwrite removed the previous run's {} from {}", removed.join(", "), out.display()));
                }
                None
            }
            Start::Resume("auto") if ckpt::latest_complete(&out)?.is_none() => {
                clear_run(&out)?;
                note = Some(format!("--resume auto: {} holds no complete checkpoint; started a fresh run", out.display()));
                None
            }
            Start::Resume(arg) => Some(arg),
        };
        ckpt::write_atomic(out.join("config.toml"), recipe.to_toml().as_bytes())?;
        let samples = read_samples(recipe)?;
        let files = base_model_files(recipe, &samples)?;
        Ok(Prepared { lock, resume, note, samples, files })
    }

    /// A rank other than 0: waits for rank 0 to prepare the run directory, then reads it.
    fn follow(recipe: &Recipe, start: Start<'_>, exchange: Option<Box<dyn GradExchange>>) -> Result<Self> {
        let ranks = exchange.as_ref().map_or((0, 1), |e| (e.rank(), e.world_size()));
        if let Some(exchange) = &exchange {
            let failed = vote(exchange.as_ref(), true)?;
            if failed > 0 {
                return Err(TrainError::Setup(format!(
                    "rank 0 failed to prepare {} (its error is in its output); this rank stops too",
                    recipe.output_dir.display()
                )));
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
            _ => parse_device(&recipe.model.device)?,
        };
        if recipe.motion.enabled() && recipe.optim.batch_size > 1 {
            let with_videos = |motion: bool| samples.iter().find(|s| !s.videos.is_empty() && s.with_motion == motion);
            if let (Some(moving), Some(still)) = (with_videos(true), with_videos(false)) {
                return Err(TrainError::Setup(format!(
                    "optim.batch_size {} would batch rows with motion ({}) and without ({}, read with data.llava_rows = \"official\"); use batch_size 1",
                    recipe.optim.batch_size,
                    moving.location(),
                    still.location()
                )));
            }
        }
        let tokenizer = QwenTokenizer::from_model_dir(&files.dir).map_err(|e| TrainError::Setup(e.to_string()))?;
        let mut model = Qwen25Vl::load(&files, parse_dtype(Some(&recipe.model.dtype), &device)?, &device)?;
        if let Some(mismatch) = model.config().vision_token_mismatch(tokenizer.special().vision_ids()) {
            return Err(TrainError::Setup(mismatch));
        }
        let recomputed = recipe.model.gradient_checkpointing.then(|| model.enable_gradient_checkpointing());
        let lora = LoraWeights::init(&model.linear_shapes(), &recipe.lora, recipe.seed, &device)?;
        lora.attach(model.linears_mut())?;
        lora.runtime().set_training(true);

        let adam =
            AdamWConfig { beta1: recipe.optim.beta1, beta2: recipe.optim.beta2, eps: recipe.optim.eps, weight_decay: recipe.optim.weight_decay };
        let mut groups = vec![("lora".to_owned(), recipe.optim.lr, lora.named_vars())];

        let (media, motion) = if let Some(media) = motion_media(recipe, &device)? {
            let estimator = media.estimator.clone();
            let connector = recipe.motion.connector(model.config().text.hidden_size);
            let vars = Connector::init_vars_with(model.config().text.hidden_size, connector, recipe.seed ^ 0x6d6f74696f6e, &device)?;
            let branch = MotionBranch::from_visual(model.visual(), &vars)?;
            let meta = MotionMeta {
                estimator: estimator.name().to_owned(),
                estimator_settings: estimator.settings(),
                pseudo_images: serde_json::to_value(recipe.motion.pseudo_images).unwrap_or_default(),
                own_encoder: false,
                connector: Some(connector),
            };
            groups.push(("connector".to_owned(), recipe.motion.connector_lr, vars.clone()));
            (Media::new(recipe, RunMedia::Motion(media)), Some(Motion { branch, vars, meta }))
        } else {
            (Media::new(recipe, RunMedia::Visual(recipe.data.media())), None)
        };
        let optim = AdamW::new(groups, adam)?;
        let pad_id = tokenizer.special().endoftext;
        let flow_media = match &media.run {
            RunMedia::Motion(m) => Some(m.clone()),
            RunMedia::Visual(_) => None,
        };
        let loader = training_loader(recipe, samples, tokenizer, media);
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
        Err(TrainError::Setup(format!(
            "the data-parallel ranks start from different states (rank {}: step {}, next micro-batch {}, data sha256 {}): every rank must read the same output_dir (a shared filesystem, not a node-local one) and the same data",
            exchange.rank(),
            self.step,
            self.micro,
            data.chars().take(12).collect::<String>()
        )))
    }

    /// Stops the run at a checkpoint once `stop` is requested (see [`crate::stop`]).
    pub fn stop_on(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    /// What the start did that was not asked for explicitly, for the user to read.
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    pub fn model(&self) -> &Qwen25Vl {
        &self.model
    }

    pub fn lora(&self) -> &LoraWeights {
        &self.lora
    }

    /// The connector's trained variables, when the run is motion-aware.
    pub fn connector_vars(&self) -> Option<&[(String, candle_core::Var)]> {
        self.motion.as_ref().map(|m| m.vars.as_slice())
    }

    pub fn step_count(&self) -> usize {
        self.step
    }

    /// Optimiser steps this run will take in all.
    pub fn target_steps(&self) -> usize {
        self.recipe.optim.max_steps.unwrap_or(self.total_steps)
    }

    fn restore(&mut self, arg: &str) -> Result<()> {
        let found = ckpt::resolve_resume(arg, &self.recipe.output_dir)?;
        let changed = changes_since_checkpoint(&self.recipe, &found.path)?;
        if !changed.is_empty() {
            return Err(TrainError::Setup(format!(
                "{} was trained with another recipe; changed since: {} — resume with the recipe and data it was saved with, or train into a new --output-dir",
                found.path.display(),
                changed.join("; ")
            )));
        }
        let adapter_dir = hf_layout::adapter_dir(&found.path)
            .ok_or_else(|| TrainError::Setup(format!("{} holds no adapter_config.json (nor does its adapter/ folder)", found.path.display())))?;
        let adapter = LoraWeights::load_peft(&adapter_dir, &self.device)?;
        let adapter_file = adapter_dir.join(hf_layout::ADAPTER_FILES[0]);
        for (name, pair) in &self.lora.modules {
            let saved =
                adapter.modules.get(name).ok_or_else(|| TrainError::Setup(format!("{}: the adapter lacks {name}", adapter_file.display())))?;
            for (which, now, then) in [("lora_A", &pair.a, &saved.a), ("lora_B", &pair.b, &saved.b)] {
                if now.shape() != then.shape() {
                    return Err(TrainError::Setup(format!(
                        "{}: tensor {name}.{which} is {:?}, but this recipe's model needs {:?} (another LoRA rank or model size)",
                        adapter_file.display(),
                        then.dims(),
                        now.dims()
                    )));
                }
                now.set(then.as_tensor())?;
            }
        }
        self.optim.load_state(&ckpt::load_tensors(found.path.join("optimizer.safetensors"), &Device::Cpu)?)?;
        let saved_motion = MotionMeta::read(&found.path)?;
        match (&self.motion, &saved_motion) {
            (Some(now), Some(saved)) if now.meta.estimator != saved.estimator || now.meta.estimator_settings != saved.estimator_settings => {
                return Err(TrainError::Setup(format!(
                    "{} was trained with flow estimator {} {}, the recipe asks for {} {}",
                    found.path.display(),
                    saved.estimator,
                    saved.estimator_settings,
                    now.meta.estimator,
                    now.meta.estimator_settings
                )));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(TrainError::Setup(format!(
                    "{} and the recipe disagree on the motion branch (recipe motion.estimator = {})",
                    found.path.display(),
                    self.recipe.motion.estimator
                )));
            }
            _ => {}
        }
        let state: TrainerState = hf_layout::read_resume_state(&found.path)?;
        if state.seed != self.recipe.seed {
            return Err(TrainError::Setup(format!(
                "{} was trained with seed {}, the recipe says {}",
                found.path.display(),
                state.seed,
                self.recipe.seed
            )));
        }
        self.step = state.step;
        if state.position.index > self.loader.len() {
            return Err(TrainError::Data(format!(
                "{}: position {} is past the {} samples",
                found.path.display(),
                state.position.index,
                self.loader.len()
            )));
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

    /// Whether this process writes the run directory (rank 0, or a run alone).
    fn is_writer(&self) -> bool {
        self.exchange.as_ref().is_none_or(|e| e.rank() == 0)
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
            let read = self.batches.take(&self.loader, micro).map_err(|e| TrainError::Data(e.to_string()))?;
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
        let features = vision_features(&self.model, branch, &batch.vision, batch.motion.as_ref())?;
        let positions = self.model.positions(&batch.prompt, &batch.vision)?;
        let loss = self.model.training_loss(&batch.prompt, &features, &positions, &batch.labels)?;
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

    /// One forward and backward pass on the first micro-batch this rank will train on, before
    /// any step: a run whose trained tensors get no gradient fails here, having changed nothing.
    pub fn preflight(&mut self) -> Result<()> {
        let per_step = self.batches.plan().per_step();
        let Some(micro) = self.batches.plan().rank_micros(self.micro).next() else { return Ok(()) };
        let mut reader = RankBatches::new(self.batches.plan().clone(), self.micro);
        let read = reader.take(&self.loader, micro).map_err(|e| TrainError::Data(e.to_string()))?;
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

    fn write_logs(&mut self, log: &StepLog) -> Result<()> {
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

    fn log_line(&mut self, line: &str) -> Result<()> {
        let path = self.recipe.output_dir.join("train.log");
        match &mut self.text_log {
            Some(log) => writeln!(log, "{line}").map_err(io(&path)),
            None => Ok(()),
        }
    }

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

    /// The checkpoint of the current step: the one the step saved, else saved now (by the writer).
    fn last_checkpoint(&mut self) -> Result<PathBuf> {
        let saved = self.step > 0 && self.step.is_multiple_of(self.recipe.checkpoint.every.max(1));
        if saved || !self.is_writer() {
            return Ok(self.recipe.output_dir.join(format!("{}{}", ckpt::CHECKPOINT_PREFIX, self.step)));
        }
        self.save_checkpoint()
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

/// A resumed run continues the log from its checkpoint: later lines (steps the killed run took
/// after it) are dropped. Returns the steps kept.
fn truncate_log(path: &Path, step: usize) -> Result<Vec<StepLog>> {
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

/// What the adapter names as its base: the hub id when the model came from the hub (what PEFT
/// and LLaMA-Factory resolve), else the model folder.
fn base_model_name(recipe: &Recipe, files: &CheckpointFiles) -> String {
    match recipe.model.checkpoint.as_deref() {
        Some(id) if recipe.model.init_config.is_none() && !Path::new(id).is_dir() => id.split_once('@').map_or(id, |(repo, _)| repo).to_owned(),
        _ => files.dir.display().to_string(),
    }
}

/// The base checkpoint: the recipe's own, or a fresh random model with a tokenizer trained on
/// the training text, built once in `<output_dir>/base-model`.
fn base_model_files(recipe: &Recipe, samples: &[TrainingSample]) -> Result<CheckpointFiles> {
    let Some(init_config) = &recipe.model.init_config else {
        let id = recipe.model.checkpoint.as_deref().ok_or_else(|| TrainError::Setup("[model] needs `checkpoint` or `init_config`".into()))?;
        return Ok(CheckpointFiles::resolve(id, &HubOptions::from_env())?);
    };
    let dir = recipe.output_dir.join("base-model");
    if !dir.join("model.safetensors").is_file() {
        let tokenizer = tokenizer_for_fresh_model(samples, recipe.model.init_vocab_size).map_err(|e| TrainError::Setup(e.to_string()))?;
        let cfg = fresh_model_config(init_config, &tokenizer)?;
        let (_, tensors) = motionvl_models::init::random_model(&cfg, recipe.model.init_std, recipe.seed, &Device::Cpu)?;
        let tmp = recipe.output_dir.join(format!(".tmp-base-model-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        motionvl_models::init::save_checkpoint(&tmp, &cfg, &tensors)?;
        tokenizer.save(tmp.join("tokenizer.json")).map_err(|e| TrainError::Setup(e.to_string()))?;
        let pixels = recipe.data.media().image_config;
        motionvl_data::hub_files::write_processor_files(&tmp, &tokenizer, &pixels).map_err(|e| TrainError::Setup(e.to_string()))?;
        std::fs::rename(&tmp, &dir).map_err(io(&dir))?;
    }
    Ok(CheckpointFiles::from_dir(&dir)?)
}

/// A fresh model's config: `init_config` with the vocabulary and special token ids of the
/// tokenizer trained for it.
pub(crate) fn fresh_model_config(init_config: &Path, tokenizer: &QwenTokenizer) -> Result<Qwen25VlConfig> {
    let text = std::fs::read_to_string(init_config).map_err(io(init_config))?;
    let mut json: serde_json::Value = serde_json::from_str(&text).map_err(|e| TrainError::Setup(format!("{}: {e}", init_config.display())))?;
    let special = tokenizer.special();
    json["vocab_size"] = tokenizer.vocab_size().into();
    json["image_token_id"] = special.image_pad.into();
    json["video_token_id"] = special.video_pad.into();
    json["vision_start_token_id"] = special.vision_start.into();
    json["vision_end_token_id"] = special.vision_end.into();
    json["eos_token_id"] = serde_json::json!([special.im_end, special.endoftext]);
    // Qwen's own: `<|endoftext|>` begins and pads.
    json["bos_token_id"] = special.endoftext.into();
    json["pad_token_id"] = special.endoftext.into();
    Qwen25VlConfig::from_json(&json.to_string()).map_err(|e| TrainError::Setup(format!("{}: {e}", init_config.display())))
}

/// The frames, flows and pseudo-images a run of `recipe` feeds its motion branch, and the
/// cache it keeps the flows in (`[motion] cache_dir`, else `<output_dir>/flow-cache`); `None`
/// for a visual-only recipe. `flow extract --config` fills the same cache through this.
pub fn motion_media(recipe: &Recipe, device: &Device) -> Result<Option<MotionMedia>> {
    if !recipe.motion.enabled() {
        return Ok(None);
    }
    let spec = EstimatorSpec {
        name: &recipe.motion.estimator,
        weights: recipe.motion.weights.as_deref(),
        weight_precision: recipe.motion.estimator_weights,
        ..EstimatorSpec::default()
    };
    let estimator: Arc<dyn FlowEstimator> = estimator_from_spec(&spec, device)?.into();
    let cache_dir = recipe.motion.cache_dir.clone().unwrap_or_else(|| recipe.output_dir.join("flow-cache"));
    let mut media = MotionMedia::new(recipe.data.media(), estimator, Some(FlowCache::new(cache_dir)?), recipe.motion.pseudo_images);
    media.cache_only = recipe.motion.cache_only;
    Ok(Some(media))
}

/// The files and folders of a previous run in `out` (the flow cache and the lock are not the
/// run's: flows are extracted into `<out>/flow-cache` before a first run).
fn run_artefacts(out: &Path) -> Vec<PathBuf> {
    const FILES: [&str; 5] = ["config.toml", "train.log", "trainer_log.jsonl", "tensorboard", "base-model"];
    let Ok(entries) = std::fs::read_dir(out) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            FILES.contains(&name.as_str())
                || hf_layout::published_files().contains(&name.as_str())
                || name.starts_with("checkpoint-")
                || name.starts_with(".tmp-")
        })
        .collect();
    found.sort();
    found
}

/// Whether `path` records training progress (steps logged, checkpoints), which a fresh start
/// must not silently discard; the rest is set-up that a failed start may leave behind.
fn is_progress(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name == "trainer_log.jsonl" || name == hf_layout::ADAPTER_FILES[0] || name.starts_with("checkpoint-")
}

/// Removes a previous run's files from `out`, nothing else; returns their names.
fn clear_run(out: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for path in run_artefacts(out) {
        let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        removed.map_err(io(&path))?;
        names.push(path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    }
    Ok(names)
}

fn data_digest(recipe: &Recipe) -> Result<String> {
    motionvl_data::digest::sha256_file(&recipe.data.train).map_err(io(&recipe.data.train))
}

/// What a resume from the checkpoint at `dir` would change: each recipe key that differs
/// from the recipe saved with it (save those a resume may change, [`Recipe::unsafe_changes`]),
/// and the training file when its contents differ. Empty: the checkpoint continues this run.
pub fn changes_since_checkpoint(recipe: &Recipe, dir: &Path) -> Result<Vec<String>> {
    let saved_recipe = dir.join("config.toml");
    let text = std::fs::read_to_string(&saved_recipe).map_err(io(&saved_recipe))?;
    let saved: Recipe = toml::from_str(&text)
        .map_err(|e| TrainError::Setup(format!("{}: the recipe saved with the checkpoint does not read: {e}", saved_recipe.display())))?;
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

/// The training conversations of a recipe (bad rows are errors unless `skip_bad`).
pub(crate) fn read_samples(recipe: &Recipe) -> Result<Vec<TrainingSample>> {
    let read = read_training_rows(
        &recipe.data.train,
        &ReadOptions { media_root: recipe.data.media_root.clone(), check_media: true, skip_bad: recipe.data.skip_bad },
        recipe.data.llava_rows,
    )
    .map_err(|e| TrainError::Data(e.to_string()))?;
    if read.items.is_empty() {
        return Err(TrainError::Data(format!("{} holds no usable sample", recipe.data.train.display())));
    }
    Ok(read.items)
}

pub(crate) fn training_loader<P: MediaProcessor + 'static>(
    recipe: &Recipe,
    samples: Vec<TrainingSample>,
    tokenizer: QwenTokenizer,
    media: P,
) -> DataLoader<P> {
    DataLoader::new(samples, tokenizer, media, loader_config(recipe))
}

fn loader_config(recipe: &Recipe) -> LoaderConfig {
    // Pads per medium follow the processor's merge size, which is also what fitting counts.
    let merge_size = motionvl_data::preprocess::PreprocessConfig::default().merge_size;
    let template =
        TemplateOptions { max_seq_len: recipe.data.length_limit(), merge_size, label_mask: recipe.data.label_mask, ..TemplateOptions::default() };
    LoaderConfig { workers: recipe.data.workers, seed: recipe.seed, template, skip_errors: recipe.data.skip_bad, ..LoaderConfig::default() }
}

/// Fits every sample to `max_seq_len` from its headers, with a progress bar.
pub(crate) fn check_loader<P: MediaProcessor + 'static>(loader: &DataLoader<P>, show: bool) -> Result<DataCheck> {
    let bar = progress::bar(loader.len() as u64, "samples checked", show);
    let check = loader.check_data(&|| bar.inc(1)).map_err(|e| TrainError::Data(e.to_string()))?;
    bar.finish();
    Ok(check)
}

/// A training set in which nothing fits is an error before the first step.
pub(crate) fn require_usable(report: &DataReport, recipe: &Recipe) -> Result<()> {
    if report.usable() > 0 {
        return Ok(());
    }
    let longest =
        report.longest.as_ref().map(|(id, at, tokens)| format!("; the longest is sample {id} ({at}) at {tokens} tokens")).unwrap_or_default();
    Err(TrainError::Data(format!(
        "no sample of {} fits max_seq_len {} even at min_pixels {} and min_frames {} ({} too long, {} failed){longest}",
        recipe.data.train.display(),
        recipe.data.max_seq_len,
        recipe.data.min_pixels,
        recipe.data.min_frames,
        report.dropped,
        report.failed
    )))
}

/// Every flow a `--flow-cache-only` run will read is in the cache, checked before the first
/// step: keys of unchanged videos come from the cache's key index (a sample of them decoded to
/// verify it), entries are checked by their header. Returns how many videos were decoded.
fn check_flow_cache(media: &MotionMedia, samples: &[TrainingSample], fits: &[Option<SampleFit>], show: bool) -> Result<usize> {
    let jobs: Vec<(PathBuf, MotionMedia)> = samples
        .iter()
        .zip(fits.iter().chain(std::iter::repeat(&None)))
        .filter(|(sample, fit)| sample.with_motion && !matches!(fit, Some(SampleFit::TooLong { .. })))
        .flat_map(|(sample, fit)| {
            let media = match fit {
                Some(SampleFit::Fitted { limits, .. }) => media.limited(*limits),
                _ => media.clone(),
            };
            sample.videos.iter().map(move |v| (v.clone(), media.clone()))
        })
        .collect();
    let bar = progress::bar(jobs.len() as u64, "cached flows checked", show);
    let check = check_cached(&jobs, FLOW_KEYS_VERIFIED, &|| bar.inc(1))?;
    bar.finish();
    let count = check.missing.len();
    match check.missing.into_iter().next() {
        None => Ok(check.decoded),
        Some(first) if count == 1 => Err(first.into()),
        Some(first) => Err(TrainError::Data(format!("{count} of {} flows are not in the cache; the first: {first}", jobs.len()))),
    }
}

/// Indexed flow keys decoded anyway at a cache-only start, to catch a stale index.
const FLOW_KEYS_VERIFIED: usize = 16;

/// `train sft --check-data`: how the training set meets `max_seq_len`, from media headers and
/// the tokenizer alone (no model weights are loaded).
pub fn check_data(recipe: &Recipe) -> Result<DataReport> {
    let samples = read_samples(recipe)?;
    let tokenizer = data_tokenizer(recipe, &samples)?;
    let loader = training_loader(recipe, samples, tokenizer, Media::new(recipe, RunMedia::Visual(recipe.data.media())));
    Ok(check_loader(&loader, recipe.logging.progress_bar)?.report)
}

/// The tokenizer training would use, without loading model weights: a local checkpoint
/// folder's `tokenizer.json` (weights need not be there), a hub checkpoint's, or the one a
/// fresh model gets.
fn data_tokenizer(recipe: &Recipe, samples: &[TrainingSample]) -> Result<QwenTokenizer> {
    match (&recipe.model.init_config, &recipe.model.checkpoint) {
        (Some(_), _) => {
            let built = recipe.output_dir.join("base-model").join("tokenizer.json");
            if built.is_file() { QwenTokenizer::from_file(&built) } else { tokenizer_for_fresh_model(samples, recipe.model.init_vocab_size) }
        }
        (None, Some(dir)) if Path::new(dir).is_dir() => QwenTokenizer::from_model_dir(dir),
        (None, Some(id)) => QwenTokenizer::from_model_dir(&CheckpointFiles::resolve(id, &HubOptions::from_env())?.dir),
        (None, None) => return Err(TrainError::Setup("[model] needs `checkpoint` or `init_config`".into())),
    }
    .map_err(|e| TrainError::Setup(e.to_string()))
}

/// One training sample as the model receives it: what `train sft --show-samples` prints, one
/// JSON object a line, in the keys of the official collator's batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShownSample {
    /// Index of the row among the file's samples (0-based, bad rows left out under `skip_bad`).
    pub row: usize,
    pub id: String,
    /// `file:line` of the row.
    pub location: String,
    /// Whether a motion-aware run fuses motion into its videos (`video_tchw` officially).
    pub with_motion: bool,
    pub input_ids: Vec<u32>,
    /// −100 where untrained; not shifted.
    pub labels: Vec<i64>,
    /// Per video `[t, h, w]` in patches.
    pub video_grid_thw: Vec<[usize; 3]>,
    pub second_per_grid_ts: Vec<f64>,
    /// Per video, the indices of the decoded frames it keeps (positions in the ordered frame
    /// list for a frame folder); a last frame repeated to fill a temporal pair is not listed
    /// again unless the plan itself repeats it.
    pub frame_indices: Vec<Vec<usize>>,
    /// Shape of the videos' `pixel_values_videos`, concatenated as the collator does.
    pub pixel_values_shape: Option<[usize; 2]>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub image_grid_thw: Vec<[usize; 3]>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub image_pixel_values_shape: Option<[usize; 2]>,
}

/// `train sft --show-samples N`: the first `n` samples of the training file, in file order, as
/// the loader makes them for the model (fitted to `max_seq_len` when the recipe fits), one
/// [`ShownSample`] per line on `out`. No model weights are loaded and no run folder is touched;
/// a sample the loader leaves out is named on `notes` instead.
pub fn show_samples(recipe: &Recipe, n: usize, out: &mut dyn Write, notes: &mut dyn Write) -> Result<()> {
    let mut samples = read_samples(recipe)?;
    let tokenizer = data_tokenizer(recipe, &samples)?;
    samples.truncate(n);
    let media = Media::new(recipe, RunMedia::Visual(recipe.data.media()));
    let without_motion = media.without_motion.clone();
    let plain = |sample: &TrainingSample| if sample.with_motion { recipe.data.media() } else { without_motion.clone() };
    let loader = DataLoader::new(samples, tokenizer, media, LoaderConfig { shuffle: false, ..loader_config(recipe) });
    let stdout_err = |e: std::io::Error| TrainError::Io { path: PathBuf::from("<stdout>"), source: e };
    let mut iter = loader.epoch(0);
    for loaded in iter.by_ref() {
        let loaded = loaded.map_err(|e| TrainError::Data(e.to_string()))?;
        let sample = &loader.samples()[loaded.dataset_index];
        let limited = match loader.sample_fit(loaded.dataset_index).map_err(|e| TrainError::Data(e.to_string()))? {
            Some(SampleFit::Fitted { limits, .. }) => plain(sample).limited(limits),
            _ => plain(sample),
        };
        let frame_indices = sample
            .videos
            .iter()
            .map(|video| limited.load_video_frames(video).map(|(plan, _)| plan.indices))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| TrainError::Data(format!("{}: {e}", sample.location())))?;
        let shape = |items: &[motionvl_data::loader::PixelInput]| {
            let rows: usize = items.iter().map(|p| p.pixel_values.nrows()).sum();
            items.first().map(|p| [rows, p.pixel_values.ncols()])
        };
        let shown = ShownSample {
            row: loaded.dataset_index,
            id: sample.id.clone(),
            location: sample.location(),
            with_motion: sample.with_motion,
            input_ids: loaded.encoded.input_ids.clone(),
            labels: loaded.encoded.labels.clone(),
            video_grid_thw: loaded.videos.iter().map(|v| v.grid_thw).collect(),
            second_per_grid_ts: loaded.videos.iter().map(|v| v.second_per_grid.unwrap_or(1.0)).collect(),
            frame_indices,
            pixel_values_shape: shape(&loaded.videos),
            image_grid_thw: loaded.images.iter().map(|i| i.grid_thw).collect(),
            image_pixel_values_shape: shape(&loaded.images),
        };
        let line = serde_json::to_string(&shown).map_err(|e| TrainError::Data(e.to_string()))?;
        writeln!(out, "{line}").map_err(stdout_err)?;
    }
    for skipped in iter.skipped() {
        writeln!(notes, "left out sample {} ({}): {}", skipped.sample_id, skipped.location, skipped.reason).map_err(stdout_err)?;
    }
    Ok(())
}
