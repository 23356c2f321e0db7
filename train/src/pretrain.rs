//! Stage 0: pretraining a fresh model, every parameter (vision tower, merger, language model),
//! on captioned videos — what a released checkpoint such as Qwen2.5-VL stands for before any
//! SFT. The result is a model folder in the hub layout (`config.json`, `model.safetensors`,
//! `tokenizer.json` and the processor files) that `train sft` and `evaluate run` load like a downloaded model.
//!
//! Every op of both towers is composed of differentiable primitives (see
//! `motionvl_models::ops`: Candle's fused RMSNorm, softmax and RoPE kernels have no backward),
//! so gradients reach the patch embedding. The recipe is an SFT [`Recipe`] whose `[lora]` and
//! `[motion]` sections are unused: `[model]` names the fresh model (`init_config`), `[data]` the
//! captions, `[optim]` the schedule (applied to all parameters).
//!
//! A pretraining run is short and saves only its final model, atomically: an interrupted run
//! starts over.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor, Var};
use candle_nn::VarBuilder;
use motionvl_data::loader::{DataLoader, EpochIter, LoadedSample};
use motionvl_data::preprocess::PreprocessConfig;
use motionvl_data::processor::{ModelFamily, ModelProcessor};
use motionvl_data::progress;
use motionvl_data::run_dir::RunLock;
use motionvl_data::samples::{ReadOptions, read_training_samples, tokenizer_for_fresh_model};
use motionvl_data::text::QwenTokenizer;
use motionvl_models::Qwen25VlConfig;
use motionvl_models::device::DTypeName;
use motionvl_models::qwen25vl::Qwen25Vl;

use crate::batch::collate;
use crate::checkpoint as ckpt;
use crate::guard::{TrainedGroup, require_gradients};
use crate::hf_layout::RunClock;
use crate::optim::{AdamW, AdamWConfig, lr_scale, warmup_steps};
use crate::recipe::Recipe;
use crate::sft::{StepLog, TrainError, check_loader, fresh_model_config, read_samples, require_usable, training_loader};

type Result<T> = std::result::Result<T, TrainError>;

/// The folder, inside the run directory, that holds the pretrained model.
pub const MODEL_DIR: &str = "model";

/// What a finished pretraining run left.
#[derive(Debug, Clone)]
pub struct Pretrained {
    /// The hub-layout model folder.
    pub model_dir: PathBuf,
    pub logs: Vec<StepLog>,
}

/// Which parameters pretraining updates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every parameter: the vision tower learns the world's objects.
    All,
    /// The merger and the language model; the vision tower (patch embedding and blocks) keeps
    /// its random initialisation. The baseline that shows what a trained tower adds: the merger
    /// and the language model co-adapt to the random tower's features exactly as they do to the
    /// trained one's.
    RandomTower,
}

impl Scope {
    /// Whether pretraining in this scope updates the weight `name`.
    pub fn trains(self, name: &str) -> bool {
        self == Scope::All || !is_tower(name)
    }
}

/// Pretrains a fresh model on `recipe.data.train` into `<output_dir>/model`. The tokenizer is
/// trained on the captions and on the text of `tokenizer_text` (conversation files of the later
/// stages, whose words the model must be able to spell).
pub fn pretrain(recipe: &Recipe, tokenizer_text: &[PathBuf], scope: Scope) -> Result<Pretrained> {
    if recipe.motion.enabled() {
        return Err(TrainError::Recipe {
            key: "motion.estimator",
            problem: "pretraining trains the visual model only: set motion.estimator = \"none\"".into(),
        });
    }
    let init_config = recipe.model.init_config.as_deref().ok_or_else(|| TrainError::Recipe {
        key: "model.init_config",
        problem: "pretraining builds a fresh model: [model] needs `init_config`".into(),
    })?;
    if recipe.model.dtype != DTypeName::F32 {
        return Err(TrainError::Recipe {
            key: "model.dtype",
            problem: format!("pretraining trains every weight in f32; model.dtype is {}", recipe.model.dtype),
        });
    }
    let out = recipe.output_dir.clone();
    let _lock = RunLock::acquire(&out)?;
    for stale in ["trainer_log.jsonl", "train.log"] {
        let path = out.join(stale);
        if path.is_file() {
            std::fs::remove_file(&path).map_err(|source| TrainError::Io { path, source })?;
        }
    }
    ckpt::write_atomic(out.join("config.toml"), recipe.to_toml().as_bytes())?;
    let device = recipe.model.device.open()?;

    let samples = read_samples(recipe)?;
    let mut corpus = samples.clone();
    for path in tokenizer_text {
        let read = read_training_samples(path, &ReadOptions::rows_only())?;
        corpus.extend(read.items);
    }
    let tokenizer = tokenizer_for_fresh_model(&corpus, recipe.model.init_vocab_size)?;
    let cfg = fresh_model_config(init_config, &tokenizer)?;
    let (model, weights) = trainable_model(&cfg, recipe, scope, &device)?;

    let pad_id = tokenizer.special().endoftext;
    let loader = training_loader(recipe, samples, tokenizer.clone(), recipe.data.video().media(), &ModelProcessor::of_family(ModelFamily::Qwen25Vl));
    let mut text_log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out.join("train.log"))
        .map_err(|source| TrainError::Io { path: out.join("train.log"), source })?;
    let check = check_loader(&loader, recipe.logging.progress_bar)?;
    writeln!(text_log, "data: {}", check.report.to_json_line()).map_err(|source| TrainError::Io { path: out.join("train.log"), source })?;
    require_usable(&check.report, recipe)?;

    let micro_per_epoch = loader.len().div_ceil(recipe.optim.batch_size.max(1));
    let per_epoch = (micro_per_epoch / recipe.optim.grad_accum.max(1)).max(1);
    let total = recipe.optim.max_steps.unwrap_or(per_epoch * recipe.optim.epochs.max(1));
    let adam = AdamWConfig { beta1: recipe.optim.beta1, beta2: recipe.optim.beta2, eps: recipe.optim.eps, weight_decay: recipe.optim.weight_decay };
    let named: Vec<(String, Var)> = {
        let mut v: Vec<(String, Var)> = weights.trained.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let mut optim = AdamW::new(vec![("all".to_owned(), recipe.optim.lr, named)], adam)?;
    let warmup = warmup_steps(recipe.optim.warmup_ratio, total);

    let bar = progress::bar(total as u64, "pretraining steps", recipe.logging.progress_bar);
    let clock = RunClock::starting_at(0);
    let mut batches = Batches { loader: &loader, iter: loader.epoch(0), epoch: 0, yielded: 0, size: recipe.optim.batch_size.max(1) };
    let mut logs = Vec::with_capacity(total);
    // The trained tensors no step of the first epoch has reached yet (one group: "all").
    let first_epoch = per_epoch.min(total);
    let mut never_reached: BTreeSet<String> = weights.trained.keys().cloned().collect();
    for step in 0..total {
        let started = std::time::Instant::now();
        let accum = recipe.optim.grad_accum.max(1);
        let (mut loss_sum, mut tokens, mut count) = (0.0, 0, 0);
        for _ in 0..accum {
            let samples = batches.next()?;
            let batch = collate(&samples, pad_id, &device)?;
            // A random tower's weights are constants: its blocks record no graph, and the
            // backward pass starts at the merger.
            let features = model.encode_vision(&batch.vision)?;
            let positions = model.positions(&batch.prompt, &batch.vision)?;
            let loss = model.training_loss(&batch.prompt, &features, &positions, &batch.labels)?;
            let value = loss.value()?;
            if !value.is_finite() {
                return Err(TrainError::NonFinite { step: step + 1, what: "loss".into(), samples: batch.sample_ids });
            }
            optim.accumulate(&loss.backward(1.0 / accum as f64)?)?;
            loss_sum += value;
            tokens += batch.tokens;
            count += batch.sample_ids.len();
        }
        let bad = optim.non_finite_grads()?;
        if !bad.is_empty() {
            return Err(TrainError::NonFinite { step: step + 1, what: format!("gradient in {}", bad.join(", ")), samples: Vec::new() });
        }
        let mut reach = optim.reach()?;
        // Parts of a fresh model sit idle in some steps (the vision tower on text-only
        // batches): in a step only a gradient that is zero as a whole is an error, and a
        // tensor no step of the first epoch reached is one at its end (a detached merger once
        // trained nothing, unnoticed).
        let unreached: BTreeSet<String> = reach.iter_mut().flat_map(|r| std::mem::take(&mut r.unreached)).collect();
        if step < first_epoch {
            never_reached.retain(|name| unreached.contains(name));
        }
        require_gradients(&reach, &[TrainedGroup::Pretrained], &format!("pretraining step {}", step + 1))?;
        if step + 1 == first_epoch
            && let Some(group) = reach.first_mut()
        {
            group.unreached = std::mem::take(&mut never_reached).into_iter().collect();
            require_gradients(&reach, &[TrainedGroup::Pretrained], "pretraining's first epoch")?;
        }
        let scale = lr_scale(recipe.optim.schedule, step, warmup, total);
        let grad_norm = optim.step_with_clip(scale, recipe.optim.max_grad_norm)?;
        let seconds = started.elapsed().as_secs_f64().max(1e-9);
        let lr = recipe.optim.lr * scale;
        let log = StepLog {
            step: step + 1,
            epoch: batches.epoch as f64 + batches.yielded as f64 / loader.len().max(1) as f64,
            loss: loss_sum / accum as f64,
            lr,
            lr_groups: vec![("all".to_owned(), lr)],
            grad_norm,
            tokens_per_s: tokens as f64 / seconds,
            samples_per_s: count as f64 / seconds,
            tokens: tokens as u64,
            progress: clock.progress(step + 1, total),
        };
        ckpt::append_json_line(out.join("trainer_log.jsonl"), &log)?;
        bar.set_position(log.step as u64);
        bar.set_message(format!("loss {:.4}", log.loss));
        logs.push(log);
    }
    bar.finish();

    let tensors = weights.current();
    let model_dir = save_model(&out, &cfg, &tensors, &tokenizer, &recipe.data.video().media().image_config)?;
    writeln!(text_log, "saved {} after {total} steps", model_dir.display())
        .map_err(|source| TrainError::Io { path: out.join("train.log"), source })?;
    Ok(Pretrained { model_dir, logs })
}

/// Whether a weight belongs to the vision tower proper (patch embedding and blocks), not the
/// merger that projects its output into the language model.
fn is_tower(name: &str) -> bool {
    name.starts_with("visual.") && !name.starts_with("visual.merger.")
}

/// Mean loss per answer token of the model in `model_dir` on the conversations of
/// `recipe.data.train` (read with `recipe.data`'s frame plan and sizes). No gradients.
pub fn answer_loss(recipe: &Recipe, model_dir: &Path) -> Result<f64> {
    let device = recipe.model.device.open()?;
    let files = motionvl_models::CheckpointFiles::from_dir(model_dir)?;
    let model = Qwen25Vl::load(&files, DType::F32, &device)?;
    let tokenizer = QwenTokenizer::from_model_dir(model_dir)?;
    let samples = read_samples(recipe)?;
    let loader = training_loader(recipe, samples, tokenizer.clone(), recipe.data.video().media(), &ModelProcessor::of_family(ModelFamily::Qwen25Vl));
    require_usable(&check_loader(&loader, false)?.report, recipe)?;
    let pad_id = tokenizer.special().endoftext;
    let (mut total, mut tokens) = (0.0, 0usize);
    for sample in loader.epoch(0) {
        let sample = sample?;
        let batch = collate(std::slice::from_ref(&sample), pad_id, &device)?;
        let answer_tokens = batch.labels.iter().flatten().skip(1).filter(|&&l| l >= 0).count();
        let features = model.encode_vision(&batch.vision)?;
        let embeds = model.embed(&batch.prompt, &features)?;
        let positions = model.positions(&batch.prompt, &batch.vision)?;
        let loss = model.loss_from_embeds(&embeds, &batch.prompt.mask, &positions, &batch.labels)?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
        total += loss * answer_tokens as f64;
        tokens += answer_tokens;
    }
    if tokens == 0 {
        return Err(TrainError::NoAnswerTokens { file: recipe.data.train.clone() });
    }
    Ok(total / tokens as f64)
}

/// A freshly initialised model whose every weight is a variable (by hub name). A tied head
/// stays the embedding: only the weights the initialiser made are variables.
/// A fresh model's weights: those the scope trains as variables, the rest as constants.
struct Weights {
    trained: HashMap<String, Var>,
    fixed: HashMap<String, Tensor>,
}

impl Weights {
    /// Every weight by hub name, as it stands.
    fn current(&self) -> HashMap<String, Tensor> {
        let trained = self.trained.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone()));
        self.fixed.iter().map(|(n, t)| (n.clone(), t.clone())).chain(trained).collect()
    }
}

fn trainable_model(cfg: &Qwen25VlConfig, recipe: &Recipe, scope: Scope, device: &Device) -> Result<(Qwen25Vl, Weights)> {
    let (_, init) = motionvl_models::init::random_model(cfg, recipe.model.init_std, recipe.seed, device)?;
    let mut weights = Weights { trained: HashMap::new(), fixed: HashMap::new() };
    for (name, tensor) in init {
        if scope.trains(&name) {
            weights.trained.insert(name, Var::from_tensor(&tensor)?);
        } else {
            weights.fixed.insert(name, tensor);
        }
    }
    let model = Qwen25Vl::new(cfg, VarBuilder::from_tensors(weights.current(), DType::F32, device))?;
    Ok((model, weights))
}

/// Writes `<out>/model` atomically: built beside it, then renamed over the previous one.
fn save_model(
    out: &Path,
    cfg: &Qwen25VlConfig,
    tensors: &HashMap<String, Tensor>,
    tokenizer: &QwenTokenizer,
    pixels: &PreprocessConfig,
) -> Result<PathBuf> {
    let dir = out.join(MODEL_DIR);
    let tmp = out.join(format!(".tmp-{MODEL_DIR}-{}", std::process::id()));
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| TrainError::Io { path, source }
    };
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    motionvl_models::init::save_checkpoint(&tmp, &cfg.to_hub_json(), tensors)?;
    tokenizer.save(tmp.join("tokenizer.json"))?;
    motionvl_data::hub_files::write_processor_files(&tmp, tokenizer, pixels, ModelFamily::Qwen25Vl)?;
    crate::output_dir::replace(&tmp, &dir)?;
    Ok(dir)
}

/// Micro-batches over epoch after epoch.
struct Batches<'a, P: motionvl_data::loader::MediaProcessor + 'static> {
    loader: &'a DataLoader<P>,
    iter: EpochIter,
    epoch: u64,
    yielded: usize,
    size: usize,
}

impl<P: motionvl_data::loader::MediaProcessor + 'static> Batches<'_, P> {
    fn next(&mut self) -> Result<Vec<LoadedSample>> {
        let mut out = Vec::with_capacity(self.size);
        while out.len() < self.size {
            match self.iter.next() {
                Some(sample) => {
                    out.push(sample?);
                    self.yielded += 1;
                }
                None if self.yielded == 0 => {
                    return Err(TrainError::EmptyEpoch { epoch: self.epoch });
                }
                None if !out.is_empty() => break,
                None => {
                    self.epoch += 1;
                    self.iter = self.loader.epoch(self.epoch);
                    self.yielded = 0;
                }
            }
        }
        Ok(out)
    }
}
