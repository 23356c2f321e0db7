//! The `train cvaa` recipe: model, data, optimiser, checkpoint and logging sections, read from
//! TOML with `--section.key value` overrides and checked before a run starts.

use std::path::{Path, PathBuf};

use motionvl_models::device::DeviceName;
use motionvl_models::dinov2::Dinov2Config;
use serde::{Deserialize, Serialize};

use crate::recipe::{RecipeError, set_dotted};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CvaaRecipe {
    pub output_dir: PathBuf,
    #[serde(default)]
    pub seed: u64,
    pub model: ModelSection,
    pub data: DataSection,
    pub optim: OptimSection,
    #[serde(default)]
    pub checkpoint: CheckpointSection,
    #[serde(default)]
    pub logging: LoggingSection,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// A pretrained DINOv2: a transformers folder (`config.json` + `model.safetensors`), a
    /// Meta/timm safetensors file, or a hub id (`facebook/dinov2-small`). Exclusive with `init`.
    #[serde(default)]
    pub backbone: Option<String>,
    /// A fresh DINOv2-shaped ViT (`Dinov2Config` keys), trained from scratch.
    #[serde(default)]
    pub init: Option<Dinov2Config>,
    /// Train the backbone too (required for `init`; a pretrained backbone is frozen by default).
    #[serde(default)]
    pub train_backbone: bool,
    /// Start from the weights of an earlier `train cvaa` checkpoint (same architecture), e.g.
    /// a second stage with harder negatives.
    #[serde(default)]
    pub init_from: Option<PathBuf>,
    pub embed_dim: usize,
    pub adapter_hidden: usize,
    #[serde(default = "default_gem_p")]
    pub gem_p: f64,
    #[serde(default = "default_temperature")]
    pub temperature: f64,
    pub uav_size: [usize; 2],
    pub satellite_size: usize,
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default)]
    pub device: DeviceName,
}

fn default_gem_p() -> f64 {
    3.0
}
fn default_temperature() -> f64 {
    0.07
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DataSection {
    /// A pairs manifest (JSONL).
    #[serde(default)]
    pub train: Option<PathBuf>,
    /// Or University-1652's root folder (its `train/` split is used).
    #[serde(default)]
    pub university1652: Option<PathBuf>,
    /// Satellite crops at a pair's box are shifted and scaled by up to this fraction of the box.
    #[serde(default = "default_jitter")]
    pub crop_jitter: f64,
    /// Fill each batch from one satellite image, so the negatives are other places of the same
    /// image: the ones windowed retrieval has to tell apart.
    #[serde(default)]
    pub same_image_batches: bool,
    /// Soft targets from footprint overlap instead of the identity ([`overlap_targets`](super::overlap_targets)).
    #[serde(default)]
    pub overlap_targets: bool,
}

fn default_jitter() -> f64 {
    0.1
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OptimSection {
    pub lr: f64,
    /// Learning rate of a trained backbone.
    #[serde(default)]
    pub backbone_lr: Option<f64>,
    #[serde(default = "default_weight_decay")]
    pub weight_decay: f64,
    #[serde(default = "default_beta1")]
    pub beta1: f64,
    #[serde(default = "default_beta2")]
    pub beta2: f64,
    #[serde(default = "default_eps")]
    pub eps: f64,
    pub batch_size: usize,
    #[serde(default = "default_epochs")]
    pub epochs: usize,
    #[serde(default)]
    pub max_steps: Option<usize>,
    #[serde(default)]
    pub warmup_ratio: f64,
    #[serde(default)]
    pub schedule: crate::optim::LrSchedule,
    #[serde(default = "default_clip")]
    pub max_grad_norm: f64,
    /// Sample4Geo uses 0.1.
    #[serde(default)]
    pub label_smoothing: f64,
}

fn default_weight_decay() -> f64 {
    0.01
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_eps() -> f64 {
    1e-8
}
fn default_epochs() -> usize {
    1
}
fn default_clip() -> f64 {
    1.0
}

// Checkpoint cadence and logging are the same sections as the SFT recipe's.
pub use crate::recipe::{CheckpointSection, LoggingSection};

impl CvaaRecipe {
    /// Reads a recipe and applies `--section.key value` overrides; unknown keys are errors.
    pub fn load(path: &Path, overrides: &[(String, String)]) -> std::result::Result<Self, RecipeError> {
        let text = std::fs::read_to_string(path).map_err(|source| RecipeError::Io { path: path.to_path_buf(), source })?;
        let mut table: toml::Table = toml::from_str(&text).map_err(|e| RecipeError::Invalid { path: path.to_path_buf(), reason: e.to_string() })?;
        for (key, raw) in overrides {
            set_dotted(&mut table, key, raw)?;
        }
        let recipe: Self = table.try_into().map_err(|e: toml::de::Error| RecipeError::Invalid { path: path.to_path_buf(), reason: e.to_string() })?;
        recipe.validate().map_err(|reason| RecipeError::Invalid { path: path.to_path_buf(), reason })?;
        Ok(recipe)
    }

    pub fn validate(&self) -> std::result::Result<(), String> {
        match (&self.model.backbone, &self.model.init) {
            (Some(_), Some(_)) => return Err("[model] takes `backbone` (pretrained) or `init` (from scratch), not both".into()),
            (None, None) => return Err("[model] needs `backbone` (a pretrained DINOv2) or `init` (a fresh one)".into()),
            (None, Some(_)) if !self.model.train_backbone => {
                return Err("[model] `init` builds an untrained backbone: set `train_backbone = true`".into());
            }
            _ => {}
        }
        if self.data.train.is_some() == self.data.university1652.is_some() {
            return Err("[data] needs exactly one of `train` (a pairs manifest) and `university1652` (its root folder)".into());
        }
        if self.optim.batch_size < 2 {
            return Err("[optim] `batch_size` must be at least 2: InfoNCE contrasts the pairs of a batch".into());
        }
        if !(0.0..1.0).contains(&self.optim.label_smoothing) {
            return Err(format!("[optim] `label_smoothing` {} must be in [0, 1)", self.optim.label_smoothing));
        }
        if !(0.0..0.5).contains(&self.data.crop_jitter) {
            return Err(format!("[data] `crop_jitter` {} must be in [0, 0.5)", self.data.crop_jitter));
        }
        Ok(())
    }

    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }
}
