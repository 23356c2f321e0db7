//! Training recipes: a TOML file grouped by concern (`[model]`, `[lora]`, `[data]`, `[optim]`,
//! `[checkpoint]`, `[logging]`), with `--section.key value` overrides from the command line.
//! Unknown keys are errors, so a typo never silently falls back to a default.

use std::path::{Path, PathBuf};

use motionvl_data::frames::FramePolicy;
use motionvl_data::loader::QwenMedia;
use motionvl_data::media_config::TrainingVideo;
use motionvl_data::processor::ModelProcessor;
use motionvl_data::samples::LlavaRows;
use motionvl_models::device::{DTypeName, DeviceName};
use motionvl_models::lora::LoraConfig;
use serde::{Deserialize, Serialize};

#[derive(Debug, thiserror::Error)]
pub enum RecipeError {
    #[error("cannot read recipe {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("recipe {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
    #[error("override `{key}`: {reason}")]
    Override { key: String, reason: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    pub model: ModelSection,
    #[serde(default)]
    pub lora: LoraConfig,
    #[serde(default)]
    pub motion: MotionSection,
    pub data: DataSection,
    #[serde(default)]
    pub optim: OptimSection,
    #[serde(default)]
    pub checkpoint: CheckpointSection,
    #[serde(default)]
    pub logging: LoggingSection,
    /// Where runs write checkpoints and logs (`--output-dir`).
    pub output_dir: PathBuf,
    #[serde(default)]
    pub seed: u64,
}

/// The base model: an existing checkpoint, or a fresh one built from a config and a tokenizer
/// trained on the training text (small models trained from scratch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// Local directory or hub id; ignored when `init_config` is set.
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// Config of a model to initialise randomly (hub `config.json` layout, token ids filled
    /// from the trained tokenizer).
    #[serde(default)]
    pub init_config: Option<PathBuf>,
    /// Standard deviation of a fresh model's weights. Small models need about 1/√hidden: with the
    /// usual 0.02 a frozen tied embedding caps the logits near 2 and LoRA cannot fit anything.
    #[serde(default = "default_init_std")]
    pub init_std: f32,
    /// Vocabulary of the tokenizer trained for a fresh model.
    #[serde(default = "default_vocab")]
    pub init_vocab_size: usize,
    /// `f32`, `bf16` or `f16` for the frozen weights; trained tensors are always f32.
    #[serde(default)]
    pub dtype: DTypeName,
    #[serde(default)]
    pub gradient_checkpointing: bool,
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default)]
    pub device: DeviceName,
}

/// The SIS-Motion branch: flow estimator, pseudo-images, and the connector's learning rate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MotionSection {
    /// Flow estimator by its `--motion` name; `none` trains the visual-only baseline with every
    /// other setting unchanged.
    pub estimator: motionvl_flow::MotionChoice,
    /// Weights of a network estimator (RAFT, …).
    pub weights: Option<PathBuf>,
    /// What MOFNet computes with: `f32` (its weights as stored) or `bf16-rounded` (each weight
    /// rounded to bf16 and back, as the official training's bf16 model holds MOFNet; see
    /// [`motionvl_flow::WeightPrecision`]). Recorded in `motion.json`'s estimator settings.
    pub estimator_weights: motionvl_flow::WeightPrecision,
    /// The connector's learning rate (its own parameter group; the paper uses 2e-5).
    pub connector_lr: f64,
    /// Where computed flows are cached (default `<output_dir>/flow-cache`).
    pub cache_dir: Option<PathBuf>,
    /// Every flow must come from the cache (`--flow-cache-only`); checked for every sample
    /// before the first step.
    pub cache_only: bool,
    pub pseudo_images: motionvl_flow::PseudoImageConfig,
    /// The connector's hidden width: 2048 as released (`d → 2048 → d` whatever the model's
    /// width d); absent, d (motionvl's original `d → d → d`).
    pub connector_hidden: Option<usize>,
    /// `zero` (W₂, b₂ zero: step 0 is the visual-only model) or `truncated-normal` (the
    /// official recipe).
    pub connector_init: motionvl_models::motion::ConnectorInit,
}

impl Default for MotionSection {
    fn default() -> Self {
        Self {
            estimator: motionvl_flow::MotionChoice::None,
            weights: None,
            estimator_weights: motionvl_flow::WeightPrecision::F32,
            connector_lr: 2e-5,
            cache_dir: None,
            cache_only: false,
            pseudo_images: motionvl_flow::PseudoImageConfig::default(),
            connector_hidden: None,
            connector_init: motionvl_models::motion::ConnectorInit::Zero,
        }
    }
}

impl MotionSection {
    pub fn enabled(&self) -> bool {
        self.estimator != motionvl_flow::MotionChoice::None
    }

    /// The connector this section asks for on a model of width `width`.
    pub fn connector(&self, width: usize) -> motionvl_models::motion::ConnectorSpec {
        motionvl_models::motion::ConnectorSpec { hidden: self.connector_hidden.unwrap_or(width), init: self.connector_init }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// Training conversations (LLaVA / LLaMA-Factory form, JSON or JSONL).
    pub train: PathBuf,
    /// Folder media paths are relative to (default: the data file's folder).
    #[serde(default)]
    pub media_root: Option<PathBuf>,
    #[serde(default = "default_max_seq_len")]
    pub max_seq_len: usize,
    #[serde(default = "default_workers")]
    pub workers: usize,
    #[serde(default = "default_fps")]
    pub fps: f64,
    #[serde(default = "default_min_frames")]
    pub min_frames: usize,
    #[serde(default = "default_max_frames")]
    pub max_frames: usize,
    /// Pixel bounds per frame (128·28² to 512·28²).
    #[serde(default = "default_min_pixels")]
    pub min_pixels: usize,
    #[serde(default = "default_max_pixels")]
    pub max_pixels: usize,
    /// Skip samples whose media or template fail instead of stopping (they are logged).
    #[serde(default)]
    pub skip_bad: bool,
    /// `qwen` (the answer, `<|im_end|>` and the `\n` after it, as Qwen's fine-tuning code and
    /// LLaMA-Factory) or `answer-im-end` (without the `\n`).
    #[serde(default)]
    pub label_mask: motionvl_data::text::LabelMask,
    /// Frame choice and resize: `rate-exact` (default), `qwen-vl-utils` or `transformers`.
    #[serde(default = "default_sampling")]
    pub sampling: motionvl_data::sampling::Sampling,
    /// A frame plan that replaces the one `fps`, `min_frames`, `max_frames` and `sampling`
    /// describe, e.g. `{ kind = "official", max_frames = 32 }` (the official loader's
    /// floor-linspace of at most 32 frames, `second_per_grid_ts` 1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frames: Option<FramePolicy>,
    /// What a sample longer than `max_seq_len` becomes: `fit` (default) or `none`.
    #[serde(default)]
    pub max_seq_len_policy: MaxSeqLenPolicy,
    /// `verbatim` (default) or `official`: how conversation rows are read (released
    /// SIS-Motion-54K rows always read as the official loader reads them), see
    /// [`motionvl_data::samples::LlavaRows`].
    #[serde(default)]
    pub llava_rows: LlavaRows,
}

/// What a training sample longer than `[data] max_seq_len` becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MaxSeqLenPolicy {
    /// Trailing text-only turns are dropped, then the videos shrink (pixels per frame toward
    /// `min_pixels`, then frames toward `min_frames`); a sample still too long is left out.
    #[default]
    Fit,
    /// No limit: every sample trains whole. What the official SIS-Motion code does in effect:
    /// its collator cuts at the *processor's* tokenizer's `model_max_length` (131072), never at
    /// run_train.sh's `--model_max_length 2048`, which reaches only a tokenizer the data path
    /// never uses (`data_processor.py:720-722, 868`; settled by running it, see
    /// tests/fixtures/sis_motion_samples/tiny/README.md).
    #[serde(rename = "none")]
    Unlimited,
}

/// How the micro-batch losses of one optimiser step are averaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LossAverage {
    /// Each micro-batch's mean over its trained tokens, averaged over the step's micro-batches
    /// (and ranks): HF Trainer's `loss / gradient_accumulation_steps` for a model that does not
    /// take `num_items_in_batch`, which Qwen2.5-VL (`accepts_loss_kwargs = False`) and the
    /// official SIS-Motion model built on it do not.
    #[default]
    MicroBatch,
    /// The mean over every trained token of the step's micro-batches on all ranks: HF Trainer
    /// with `num_items_in_batch` (models that take loss kwargs), so long answers weigh more.
    Tokens,
}

impl LossAverage {
    /// The factor on one micro-batch's mean loss, which predicts `targets` tokens, in a step of
    /// `per_step` micro-batches predicting `step_targets` tokens over all ranks (the ranks'
    /// gradients are then summed).
    pub fn scale(self, targets: usize, step_targets: usize, per_step: u64) -> f64 {
        match self {
            LossAverage::MicroBatch => 1.0 / per_step.max(1) as f64,
            LossAverage::Tokens => targets as f64 / step_targets.max(1) as f64,
        }
    }
}

fn default_sampling() -> motionvl_data::sampling::Sampling {
    TrainingVideo::default().sampling
}

impl DataSection {
    /// The training media with `processor`'s patch sizes and normalisation: [`Self::video`]'s
    /// frames and pixel bounds, with `frames` as the frame plan when set.
    pub fn media_for(&self, processor: &ModelProcessor) -> QwenMedia {
        let mut media = self.video().media_with(&processor.pixels);
        if let Some(frames) = self.frames {
            media.video_policy = frames;
        }
        media
    }

    /// The length limit the loader applies, if any.
    pub fn length_limit(&self) -> Option<usize> {
        match self.max_seq_len_policy {
            MaxSeqLenPolicy::Fit => Some(self.max_seq_len),
            MaxSeqLenPolicy::Unlimited => None,
        }
    }

    /// The frame plan and pixel bounds of the training videos.
    pub fn video(&self) -> TrainingVideo {
        TrainingVideo {
            fps: self.fps,
            min_frames: self.min_frames,
            max_frames: self.max_frames,
            min_pixels: self.min_pixels,
            max_pixels: self.max_pixels,
            sampling: self.sampling,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OptimSection {
    /// Learning rate of the LoRA parameters.
    pub lr: f64,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub warmup_ratio: f64,
    /// `cosine` or `constant` (after warmup).
    pub schedule: crate::optim::LrSchedule,
    pub grad_accum: usize,
    /// Clip the global gradient norm to this (0 disables).
    pub max_grad_norm: f64,
    pub epochs: usize,
    /// Stop after this many optimiser steps (`--max-steps`); the schedule then spans exactly
    /// these steps (as in HF Trainer), unless `schedule_steps` is set.
    pub max_steps: Option<usize>,
    pub schedule_steps: Option<usize>,
    pub batch_size: usize,
    /// `micro-batch` (default) or `tokens`: see [`LossAverage`].
    pub loss_average: LossAverage,
}

impl Default for OptimSection {
    /// The paper's SFT settings.
    fn default() -> Self {
        Self {
            lr: 1e-5,
            weight_decay: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            warmup_ratio: 0.03,
            schedule: crate::optim::LrSchedule::Cosine,
            grad_accum: 8,
            max_grad_norm: 1.0,
            epochs: 1,
            max_steps: None,
            schedule_steps: None,
            batch_size: 1,
            loss_average: LossAverage::MicroBatch,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointSection {
    /// Optimiser steps between checkpoints.
    pub every: usize,
    /// Complete checkpoints kept.
    pub keep: usize,
}

impl Default for CheckpointSection {
    fn default() -> Self {
        Self { every: 100, keep: 3 }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LoggingSection {
    pub tensorboard: bool,
    pub progress_bar: bool,
}

impl Default for LoggingSection {
    fn default() -> Self {
        Self { tensorboard: true, progress_bar: true }
    }
}

fn default_init_std() -> f32 {
    0.02
}
fn default_vocab() -> usize {
    512
}
fn default_max_seq_len() -> usize {
    2048
}
fn default_workers() -> usize {
    4
}
fn default_fps() -> f64 {
    TrainingVideo::default().fps
}
fn default_min_frames() -> usize {
    TrainingVideo::default().min_frames
}
fn default_max_frames() -> usize {
    TrainingVideo::default().max_frames
}
fn default_min_pixels() -> usize {
    TrainingVideo::default().min_pixels
}
fn default_max_pixels() -> usize {
    TrainingVideo::default().max_pixels
}

impl Recipe {
    /// Reads a recipe and applies `(dotted.key, value)` overrides. Relative paths in the recipe
    /// are taken from the current directory (recipes are run from the repository root).
    pub fn load(path: &Path, overrides: &[(String, String)]) -> Result<Self, RecipeError> {
        let text = std::fs::read_to_string(path).map_err(|source| RecipeError::Io { path: path.to_path_buf(), source })?;
        let value: toml::Table = toml::from_str(&text).map_err(|e| RecipeError::Invalid { path: path.to_path_buf(), reason: e.to_string() })?;
        Self::from_table(value, path, overrides)
    }

    /// A recipe from an already parsed table (e.g. a section of a larger file); `origin` names
    /// it in errors.
    pub fn from_table(mut value: toml::Table, origin: &Path, overrides: &[(String, String)]) -> Result<Self, RecipeError> {
        let path = origin;
        for (key, raw) in overrides {
            set_dotted(&mut value, key, raw)?;
        }
        let recipe: Recipe =
            value.try_into().map_err(|e: toml::de::Error| RecipeError::Invalid { path: path.to_path_buf(), reason: e.to_string() })?;
        recipe.validate().map_err(|reason| RecipeError::Invalid { path: path.to_path_buf(), reason })?;
        Ok(recipe)
    }

    /// Every number within the range it makes sense in, checked before any work starts; the
    /// error names the key and the allowed range.
    pub fn validate(&self) -> Result<(), String> {
        fn check(ok: bool, key: &str, value: impl std::fmt::Display, range: &str) -> Result<(), String> {
            if ok { Ok(()) } else { Err(format!("`{key}` = {value}: must be {range}")) }
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        let (o, d, l, c) = (&self.optim, &self.data, &self.lora, &self.checkpoint);
        check(positive(o.lr), "optim.lr", o.lr, "a positive number")?;
        check(positive(self.motion.connector_lr), "motion.connector_lr", self.motion.connector_lr, "a positive number")?;
        if let Some(hidden) = self.motion.connector_hidden {
            check(hidden > 0, "motion.connector_hidden", hidden, "a positive width")?;
        }
        check(o.weight_decay.is_finite() && o.weight_decay >= 0.0, "optim.weight_decay", o.weight_decay, "≥ 0")?;
        check((0.0..1.0).contains(&o.beta1), "optim.beta1", o.beta1, "in [0, 1)")?;
        check((0.0..1.0).contains(&o.beta2), "optim.beta2", o.beta2, "in [0, 1)")?;
        check(positive(o.eps), "optim.eps", o.eps, "a positive number")?;
        check((0.0..=1.0).contains(&o.warmup_ratio), "optim.warmup_ratio", o.warmup_ratio, "in [0, 1]")?;
        check(o.grad_accum >= 1, "optim.grad_accum", o.grad_accum, "≥ 1")?;
        check(o.batch_size >= 1, "optim.batch_size", o.batch_size, "≥ 1")?;
        check(o.epochs >= 1, "optim.epochs", o.epochs, "≥ 1")?;
        check(o.max_grad_norm.is_finite() && o.max_grad_norm >= 0.0, "optim.max_grad_norm", o.max_grad_norm, "≥ 0 (0 disables clipping)")?;
        if let Some(steps) = o.max_steps {
            check(steps >= 1, "optim.max_steps", steps, "≥ 1")?;
        }
        if let Some(steps) = o.schedule_steps {
            check(steps >= 1, "optim.schedule_steps", steps, "≥ 1")?;
        }
        check(c.every >= 1, "checkpoint.every", c.every, "≥ 1 (optimiser steps between checkpoints)")?;
        check(d.max_seq_len >= 1, "data.max_seq_len", d.max_seq_len, "≥ 1")?;
        check(positive(d.fps), "data.fps", d.fps, "a positive number")?;
        check(d.min_frames >= 1, "data.min_frames", d.min_frames, "≥ 1")?;
        check(d.max_frames >= d.min_frames.max(2), "data.max_frames", d.max_frames, &format!("≥ data.min_frames ({}) and ≥ 2", d.min_frames))?;
        check(d.min_pixels >= 1, "data.min_pixels", d.min_pixels, "≥ 1")?;
        check(d.max_pixels >= d.min_pixels, "data.max_pixels", d.max_pixels, &format!("≥ data.min_pixels ({})", d.min_pixels))?;
        check(l.rank >= 1, "lora.rank", l.rank, "≥ 1")?;
        check(positive(l.alpha), "lora.alpha", l.alpha, "a positive number")?;
        check((0.0..1.0).contains(&l.dropout), "lora.dropout", l.dropout, "in [0, 1)")?;
        check(positive(self.model.init_std as f64), "model.init_std", self.model.init_std, "a positive number")?;
        Ok(())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Keys whose values differ from `saved`'s (as `section.key: saved → now`), leaving out
    /// the ones a resumed run may change without changing what it computes: when it stops,
    /// how it logs, how often it checkpoints, its loader threads and where flows are cached.
    pub fn unsafe_changes(&self, saved: &Recipe) -> Vec<String> {
        const SAFE: [&str; 7] =
            ["optim.max_steps", "checkpoint.every", "checkpoint.keep", "data.workers", "motion.cache_dir", "motion.cache_only", "output_dir"];
        let (mut now, mut then) = (Vec::new(), Vec::new());
        flatten("", &toml::Value::try_from(self).unwrap_or(toml::Value::Table(Default::default())), &mut now);
        flatten("", &toml::Value::try_from(saved).unwrap_or(toml::Value::Table(Default::default())), &mut then);
        let value_of = |list: &[(String, String)], key: &str| list.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        let mut keys: Vec<String> = now.iter().chain(&then).map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys.dedup();
        keys.into_iter()
            .filter(|k| !SAFE.contains(&k.as_str()) && !k.starts_with("logging."))
            .filter_map(|k| {
                let (a, b) = (value_of(&then, &k), value_of(&now, &k));
                (a != b).then(|| format!("{k}: {} → {}", a.unwrap_or_else(|| "(unset)".into()), b.unwrap_or_else(|| "(unset)".into())))
            })
            .collect()
    }
}

/// `section.key = value` leaves of a TOML value, values as TOML text.
fn flatten(prefix: &str, value: &toml::Value, out: &mut Vec<(String, String)>) {
    match value {
        toml::Value::Table(t) => {
            for (k, v) in t {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                flatten(&key, v, out);
            }
        }
        leaf => out.push((prefix.to_string(), leaf.to_string())),
    }
}

/// Command-line arguments with every `--section.key value` (or `--section.key=value`)
/// override moved behind the other arguments. The binaries collect overrides as trailing
/// arguments, and clap would otherwise swallow a known flag that follows one, as in
/// `train sft --config R --optim.lr 1e-4 --max-steps 3`.
pub fn overrides_last(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let (mut known, mut overrides) = (Vec::new(), Vec::new());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let key = arg.strip_prefix("--").map(|flag| flag.split_once('=').map_or(flag, |(k, _)| k));
        if !key.is_some_and(|k| k.contains('.')) {
            known.push(arg);
            continue;
        }
        let inline = arg.contains('=');
        overrides.push(arg);
        if !inline && let Some(value) = args.next() {
            overrides.push(value);
        }
    }
    known.extend(overrides);
    known
}

/// Sets `a.b.c = value`, reading the value as a TOML literal (number, bool, array) and as a
/// plain string otherwise.
pub fn set_dotted(table: &mut toml::Table, key: &str, raw: &str) -> Result<(), RecipeError> {
    let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("v = {raw}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()));
    let mut parts: Vec<&str> = key.split('.').collect();
    let last = parts.pop().filter(|p| !p.is_empty()).ok_or_else(|| RecipeError::Override { key: key.into(), reason: "empty key".into() })?;
    let mut current = table;
    for part in parts {
        let entry = current.entry(part.to_owned()).or_insert_with(|| toml::Value::Table(Default::default()));
        current = entry.as_table_mut().ok_or_else(|| RecipeError::Override { key: key.into(), reason: format!("`{part}` is not a section") })?;
    }
    current.insert(last.to_owned(), parsed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_average_scales_micro_batches_by_count_or_by_tokens() {
        // A step of 4 micro-batches predicting 30 tokens in all; this one predicts 12.
        assert_eq!(LossAverage::MicroBatch.scale(12, 30, 4), 0.25);
        assert_eq!(LossAverage::Tokens.scale(12, 30, 4), 0.4);
        assert_eq!(LossAverage::Tokens.scale(0, 0, 4), 0.0);
    }
}
