//! `train cvaa`: the cross-view retriever on UAV–satellite pairs. Symmetric InfoNCE over the
//! in-batch pairs with a learned temperature and optional label smoothing (Sample4Geo's loss),
//! AdamW with warmup + cosine, and the run directory of `train sft`: the resolved recipe,
//! `trainer_log.jsonl`, TensorBoard events, `train.log`, atomic `checkpoint-<step>/` folders
//! that resume exactly and that `evaluate retrieve --cvaa` loads as they are.
//!
//! Exact resume rests on every batch being a function of (seed, step): the epoch's order is a
//! seeded shuffle, and each pair's crop jitter is drawn from (seed, step, slot).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use candle_core::{D, DType, Device, Tensor, Var};
use motionvl_data::cvaa::{Pair, box_iou, crop, normalized_chw, read_pairs, read_university1652};
use motionvl_data::video::load_image;
use motionvl_models::HubOptions;
use motionvl_models::cvaa::{CONFIG_FILE, Cvaa, CvaaConfig, Interpolation, WEIGHTS_FILE};
use motionvl_models::dinov2::{Dinov2Config, Dinov2Weights};
use motionvl_models::seeded::SeededVars;
use ndarray::Array3;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self as ckpt, Checkpoints};
use crate::guard::{TrainedGroup, require_gradients};
use crate::optim::{AdamW, AdamWConfig, lr_scale, warmup_steps};
use crate::recipe::{RecipeError, set_dotted};
use motionvl_models::device::parse_device;

use crate::sft::TrainError;
use crate::tensorboard::EventWriter;
use motionvl_data::stop::StopFlag;

type Result<T> = std::result::Result<T, TrainError>;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}

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
    #[serde(default = "default_device")]
    pub device: String,
}

fn default_gem_p() -> f64 {
    3.0
}
fn default_temperature() -> f64 {
    0.07
}
fn default_device() -> String {
    "cpu".into()
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
    /// Soft targets from footprint overlap instead of the identity ([`overlap_targets`]).
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

/// What a checkpoint records besides tensors.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CvaaState {
    pub step: usize,
    pub seed: u64,
    pub total_steps: usize,
    pub pairs: usize,
}

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

/// Symmetric InfoNCE: `logits = s · uav satᵀ` [B, B], cross-entropy in both directions
/// against `targets` (row i: how much satellite view j matches UAV frame i; the identity when
/// `None`), each mixed with the uniform distribution by label smoothing ε, averaged.
pub fn symmetric_info_nce(uav: &Tensor, sat: &Tensor, scale: &Tensor, smoothing: f64, targets: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let b = uav.dim(0)?;
    let logits = uav.matmul(&sat.t()?)?.broadcast_mul(scale)?;
    let identity = Tensor::eye(b, DType::F32, uav.device())?;
    let targets = targets.unwrap_or(&identity);
    let one_way = |logits: &Tensor, targets: &Tensor| -> candle_core::Result<Tensor> {
        let targets = targets.broadcast_div(&targets.sum_keepdim(D::Minus1)?)?;
        let smoothed = ((targets * (1.0 - smoothing))? + smoothing / b as f64)?;
        let log_probs = candle_nn::ops::log_softmax(logits, D::Minus1)?;
        log_probs.mul(&smoothed)?.sum_all()? / -(b as f64)
    };
    (one_way(&logits, targets)? + one_way(&logits.t()?, &targets.t()?)?)? / 2.0
}

/// Soft InfoNCE targets from footprint overlap (after Game4Loc's weighted InfoNCE): UAV frame i
/// and satellite crop j of the same image match as much as i's footprint overlaps j's crop box.
/// Pairs without a box, or from different images, match only themselves.
pub fn overlap_targets(satellites: &[&Path], footprints: &[Option<[f64; 4]>], crops: &[Option<[f64; 4]>]) -> Vec<f32> {
    let b = satellites.len();
    let mut t = vec![0f32; b * b];
    for i in 0..b {
        for j in 0..b {
            t[i * b + j] = match (footprints[i], crops[j]) {
                (Some(f), Some(c)) if satellites[i] == satellites[j] => box_iou(f, c) as f32,
                _ => f32::from(u8::from(i == j)),
            };
        }
        // A frame always matches its own crop, however far the jitter moved it.
        t[i * b + i] = t[i * b + i].max(0.5);
    }
    t
}

/// Decoded images kept for the run: satellite images are shared by many pairs.
#[derive(Default)]
struct ImageCache {
    images: Mutex<HashMap<PathBuf, Arc<Array3<u8>>>>,
}

impl ImageCache {
    fn get(&self, path: &Path) -> Result<Arc<Array3<u8>>> {
        if let Some(hit) = self.images.lock().ok().and_then(|m| m.get(path).cloned()) {
            return Ok(hit);
        }
        let image = Arc::new(load_image(path).map_err(|e| TrainError::Data(e.to_string()))?);
        if let Ok(mut m) = self.images.lock() {
            m.insert(path.to_path_buf(), image.clone());
        }
        Ok(image)
    }
}

/// The trained variables of each group and the frozen tensors, by checkpoint name.
struct Weights {
    backbone: Option<SeededVars>,
    frozen_backbone: HashMap<String, Tensor>,
    heads: SeededVars,
}

impl Weights {
    fn named(vars: &SeededVars, prefix: &str) -> Vec<(String, Var)> {
        vars.named().into_iter().map(|(n, v)| (format!("{prefix}{n}"), v)).collect()
    }

    fn tensors(&self) -> HashMap<String, Tensor> {
        let mut out: HashMap<String, Tensor> = self.frozen_backbone.iter().map(|(n, t)| (format!("backbone.{n}"), t.clone())).collect();
        for map in self.backbone.iter() {
            out.extend(Self::named(map, "backbone.").into_iter().map(|(n, v)| (n, v.as_tensor().clone())));
        }
        out.extend(Self::named(&self.heads, "").into_iter().map(|(n, v)| (n, v.as_tensor().clone())));
        out
    }

    /// Overwrites every trained variable with the checkpoint's value.
    fn restore(&self, saved: &HashMap<String, Tensor>, origin: &Path) -> Result<()> {
        let mut trained = Self::named(&self.heads, "");
        for map in self.backbone.iter() {
            trained.extend(Self::named(map, "backbone."));
        }
        for (name, var) in trained {
            let value = saved.get(&name).ok_or_else(|| TrainError::Setup(format!("{}: the checkpoint lacks `{name}`", origin.display())))?;
            var.set(value)?;
        }
        Ok(())
    }
}

/// One pair's UAV and satellite pixels, and the UAV footprint's box in the satellite image.
type PairPixels = (Vec<f32>, Vec<f32>, Option<[f64; 4]>);

/// A batch's UAV pixels, satellite pixels and boxes.
type BatchPixels = (Tensor, Tensor, Vec<Option<[f64; 4]>>);

pub struct CvaaTrainer {
    recipe: CvaaRecipe,
    model: Cvaa,
    weights: Weights,
    optim: AdamW,
    pairs: Vec<Pair>,
    images: ImageCache,
    step: usize,
    total_steps: usize,
    warmup: usize,
    checkpoints: Checkpoints,
    events: Option<EventWriter>,
    text_log: std::fs::File,
    device: Device,
    /// Set by a signal; read after each step (see [`crate::stop`]).
    stop: StopFlag,
    /// One writer per run directory (see `motionvl_data::run_dir`).
    _lock: motionvl_data::run_dir::RunLock,
}

impl CvaaTrainer {
    /// Sets the run up (model, data, optimiser), then restores a checkpoint when `resume` is
    /// `auto` or a directory.
    pub fn new(recipe: &CvaaRecipe, resume: Option<&str>) -> Result<Self> {
        recipe.validate().map_err(TrainError::Setup)?;
        let out = recipe.output_dir.clone();
        let lock = motionvl_data::run_dir::RunLock::acquire(&out).map_err(|e| TrainError::Setup(e.to_string()))?;
        ckpt::write_atomic(out.join("config.toml"), recipe.to_toml().as_bytes())?;
        let device = parse_device(&recipe.model.device)?;

        let pairs = match (&recipe.data.train, &recipe.data.university1652) {
            (Some(manifest), _) => read_pairs(manifest),
            (None, Some(root)) => read_university1652(root, "train"),
            (None, None) => unreachable!("validated"),
        }
        .map_err(|e| TrainError::Data(e.to_string()))?;
        if pairs.len() < recipe.optim.batch_size {
            return Err(TrainError::Data(format!("{} pairs are fewer than one batch of {}", pairs.len(), recipe.optim.batch_size)));
        }

        let m = &recipe.model;
        let (backbone_cfg, interpolation, backbone_vb, backbone_vars, frozen_backbone) = match (&m.backbone, &m.init) {
            (Some(path), _) => {
                let weights = Dinov2Weights::resolve(path, &HubOptions::from_env(), &device)?;
                let cfg = weights.config.clone();
                let interpolation = Interpolation::from(weights.interpolation);
                if m.train_backbone {
                    let vars = SeededVars::from_tensors(recipe.seed, &weights.tensors)?;
                    (cfg, interpolation, vars.var_builder(&device), Some(vars), HashMap::new())
                } else {
                    let tensors = weights.tensors.clone();
                    (cfg, interpolation, weights.var_builder(DType::F32, &device), None, tensors)
                }
            }
            (None, Some(init)) => {
                init.validate().map_err(|e| TrainError::Setup(format!("[model.init]: {e}")))?;
                let vars = SeededVars::new(mix(recipe.seed, 0xbac6));
                (init.clone(), Interpolation::Transformers, vars.var_builder(&device), Some(vars), HashMap::new())
            }
            (None, None) => unreachable!("validated"),
        };
        let cfg = CvaaConfig {
            backbone: backbone_cfg,
            interpolation,
            embed_dim: m.embed_dim,
            adapter_hidden: m.adapter_hidden,
            gem_p: m.gem_p,
            temperature: m.temperature,
            uav_size: m.uav_size,
            satellite_size: m.satellite_size,
        };
        cfg.validate().map_err(|e| TrainError::Setup(format!("[model]: {e}")))?;
        let heads = SeededVars::new(mix(recipe.seed, 0x4ead));
        let model = Cvaa::new(&cfg, backbone_vb, heads.var_builder(&device))?;
        let weights = Weights { backbone: backbone_vars, frozen_backbone, heads };
        if let Some(dir) = &m.init_from {
            let saved = CvaaConfig::from_file(&dir.join(CONFIG_FILE))?;
            if saved != cfg {
                return Err(TrainError::Setup(format!("{}: its cvaa.json differs from the recipe's model", dir.display())));
            }
            weights.restore(&ckpt::load_tensors(dir.join(WEIGHTS_FILE), &device)?, dir)?;
        }

        let o = &recipe.optim;
        let adam = AdamWConfig { beta1: o.beta1, beta2: o.beta2, eps: o.eps, weight_decay: o.weight_decay };
        let mut groups = vec![("heads".to_owned(), o.lr, Weights::named(&weights.heads, ""))];
        if let Some(map) = &weights.backbone {
            groups.push(("backbone".to_owned(), o.backbone_lr.unwrap_or(o.lr), Weights::named(map, "backbone.")));
        }
        let optim = AdamW::new(groups, adam)?;

        let checkpoints = Checkpoints::open(&out, std::num::NonZeroUsize::new(recipe.checkpoint.keep))?;
        let text_log = std::fs::OpenOptions::new().create(true).append(true).open(out.join("train.log")).map_err(io(&out))?;
        let events = if recipe.logging.tensorboard { Some(EventWriter::create(out.join("tensorboard"))?) } else { None };
        let mut trainer = Self {
            _lock: lock,
            recipe: recipe.clone(),
            model,
            weights,
            optim,
            pairs,
            images: ImageCache::default(),
            step: 0,
            // Set below, once the batches per epoch are known.
            total_steps: 0,
            warmup: 0,
            checkpoints,
            events,
            text_log,
            device,
            stop: StopFlag::new(),
        };
        if trainer.groups().iter().all(|g| g.len() < o.batch_size) {
            return Err(TrainError::Data(format!("no satellite image has {} pairs for a batch of its own (data.same_image_batches)", o.batch_size)));
        }
        trainer.total_steps = trainer.batches_per_epoch() * o.epochs.max(1);
        trainer.warmup = warmup_steps(o.warmup_ratio, trainer.total_steps);
        if let Some(arg) = resume {
            trainer.restore(arg)?;
        }
        Ok(trainer)
    }

    pub fn model(&self) -> &Cvaa {
        &self.model
    }

    pub fn step_count(&self) -> usize {
        self.step
    }

    pub fn target_steps(&self) -> usize {
        self.recipe.optim.max_steps.unwrap_or(self.total_steps)
    }

    /// Every trained tensor and the frozen backbone, by checkpoint name.
    pub fn tensors(&self) -> HashMap<String, Tensor> {
        self.weights.tensors()
    }

    fn restore(&mut self, arg: &str) -> Result<()> {
        let found = ckpt::resolve_resume(arg, &self.recipe.output_dir)?;
        let state: CvaaState = ckpt::load_json(found.path.join("trainer_state.json"))?;
        if state.seed != self.recipe.seed || state.pairs != self.pairs.len() {
            return Err(TrainError::Setup(format!(
                "{} was trained with seed {} on {} pairs; the recipe says seed {} and its data holds {} pairs",
                found.path.display(),
                state.seed,
                state.pairs,
                self.recipe.seed,
                self.pairs.len()
            )));
        }
        let saved = ckpt::load_tensors(found.path.join(WEIGHTS_FILE), &self.device)?;
        self.weights.restore(&saved, &found.path)?;
        self.optim.load_state(&ckpt::load_tensors(found.path.join("optimizer.safetensors"), &Device::Cpu)?)?;
        self.step = state.step;
        truncate_log(&self.recipe.output_dir.join("trainer_log.jsonl"), self.step)?;
        self.log_line(&format!("resumed from {} at step {}", found.path.display(), self.step))?;
        Ok(())
    }

    /// The pairs of optimiser step `step` (0-based): full batches of a seeded shuffle per epoch,
    /// each from one satellite image when `same_image_batches` is set.
    fn batch_indices(&self, step: usize) -> (usize, Vec<usize>) {
        let b = self.recipe.optim.batch_size;
        let batches_per_epoch = self.batches_per_epoch();
        let epoch = step / batches_per_epoch;
        let mut rng = rand::rngs::StdRng::seed_from_u64(mix(self.recipe.seed, epoch as u64));
        let mut shuffle = |items: &mut Vec<usize>| {
            for i in (1..items.len()).rev() {
                items.swap(i, rng.random_range(0..=i));
            }
        };
        let mut batches: Vec<Vec<usize>> = Vec::new();
        for mut group in self.groups() {
            shuffle(&mut group);
            batches.extend(group.chunks_exact(b).map(<[usize]>::to_vec));
        }
        let mut order: Vec<usize> = (0..batches.len()).collect();
        shuffle(&mut order);
        (epoch, batches[order[step % batches_per_epoch]].clone())
    }

    /// The pairs batches are drawn from together: one group per satellite image, or all.
    fn groups(&self) -> Vec<Vec<usize>> {
        if !self.recipe.data.same_image_batches {
            return vec![(0..self.pairs.len()).collect()];
        }
        let mut by_image: std::collections::BTreeMap<&Path, Vec<usize>> = std::collections::BTreeMap::new();
        for (i, p) in self.pairs.iter().enumerate() {
            by_image.entry(p.satellite.as_path()).or_default().push(i);
        }
        by_image.into_values().collect()
    }

    fn batches_per_epoch(&self) -> usize {
        let b = self.recipe.optim.batch_size;
        self.groups().iter().map(|g| g.len() / b).sum::<usize>().max(1)
    }

    /// `[B, 3, H, W]` UAV frames and `[B, 3, S, S]` satellite views of the pairs, with the box
    /// each satellite view was cropped at.
    fn pixels(&self, step: usize, indices: &[usize]) -> Result<BatchPixels> {
        let cfg = self.model.config();
        let [uh, uw] = cfg.uav_size;
        let s = cfg.satellite_size;
        let jitter = self.recipe.data.crop_jitter;
        let views: Vec<PairPixels> = indices
            .par_iter()
            .enumerate()
            .map(|(slot, &i)| {
                let pair = &self.pairs[i];
                let uav = pair.uav.load().map_err(|e| TrainError::Data(format!("pair {}: {e}", pair.id)))?;
                let satellite = self.images.get(&pair.satellite)?;
                let crop_box = pair.footprint.map(|b| {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(mix(mix(self.recipe.seed, step as u64), slot as u64));
                    jittered(b, jitter, &mut rng)
                });
                let view = match crop_box {
                    Some(b) => crop(satellite.view(), b),
                    None => (*satellite).clone(),
                };
                Ok((normalized_chw(uav.view(), uh, uw), normalized_chw(view.view(), s, s), crop_box))
            })
            .collect::<Result<_>>()?;
        let b = indices.len();
        let mut uav = Vec::with_capacity(b * 3 * uh * uw);
        let mut sat = Vec::with_capacity(b * 3 * s * s);
        let mut crops = Vec::with_capacity(b);
        for (u, v, c) in views {
            uav.extend(u);
            sat.extend(v);
            crops.push(c);
        }
        let uav = Tensor::from_vec(uav, (b, 3, uh, uw), &self.device)?;
        let sat = Tensor::from_vec(sat, (b, 3, s, s), &self.device)?;
        Ok((uav, sat, crops))
    }

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

    fn write_logs(&mut self, log: &CvaaStepLog) -> Result<()> {
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

    fn log_line(&mut self, line: &str) -> Result<()> {
        let path = self.recipe.output_dir.join("train.log");
        writeln!(self.text_log, "{line}").map_err(io(&path))
    }

    /// Writes `checkpoint-<step>` atomically: `cvaa.json` + `model.safetensors` (the whole
    /// retriever, loadable by `Cvaa::load`), the optimiser state and the trainer state.
    pub fn save_checkpoint(&mut self) -> Result<PathBuf> {
        let pending = self.checkpoints.begin(self.step as u64)?;
        ckpt::save_json(pending.dir().join(CONFIG_FILE), self.model.config())?;
        ckpt::save_tensors(pending.dir().join(WEIGHTS_FILE), &self.weights.tensors())?;
        ckpt::save_tensors(pending.dir().join("optimizer.safetensors"), &self.optim.state_tensors()?)?;
        let state = CvaaState { step: self.step, seed: self.recipe.seed, total_steps: self.total_steps, pairs: self.pairs.len() };
        ckpt::save_json(pending.dir().join("trainer_state.json"), &state)?;
        ckpt::write_atomic(pending.dir().join("config.toml"), self.recipe.to_toml().as_bytes())?;
        let committed = pending.commit()?;
        let path = committed.checkpoint.path.clone();
        self.log_line(&format!("saved {}", path.display()))?;
        Ok(path)
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

    /// Stops the run at a checkpoint once `stop` is requested (see [`crate::stop`]).
    pub fn stop_on(&mut self, stop: StopFlag) {
        self.stop = stop;
    }

    /// The checkpoint of the current step: the one the step saved, else saved now.
    fn last_checkpoint(&mut self) -> Result<PathBuf> {
        if self.step.is_multiple_of(self.recipe.checkpoint.every.max(1)) {
            return Ok(self.recipe.output_dir.join(format!("{}{}", ckpt::CHECKPOINT_PREFIX, self.step)));
        }
        self.save_checkpoint()
    }
}

/// A box shifted and scaled by up to `amount` of its size, kept inside [0, 1].
fn jittered(b: [f64; 4], amount: f64, rng: &mut impl Rng) -> [f64; 4] {
    if amount == 0.0 {
        return b;
    }
    let (w, h) = (b[2] - b[0], b[3] - b[1]);
    let scale = 1.0 + rng.random_range(-amount..=amount);
    let (nw, nh) = ((w * scale).min(1.0), (h * scale).min(1.0));
    let cx = (b[0] + b[2]) / 2.0 + rng.random_range(-amount..=amount) * w;
    let cy = (b[1] + b[3]) / 2.0 + rng.random_range(-amount..=amount) * h;
    let x1 = (cx - nw / 2.0).clamp(0.0, 1.0 - nw);
    let y1 = (cy - nh / 2.0).clamp(0.0, 1.0 - nh);
    [x1, y1, x1 + nw, y1 + nh]
}

/// SplitMix64 of (seed, counter).
fn mix(seed: u64, counter: u64) -> u64 {
    let mut z = seed ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A resumed run continues the log from its checkpoint.
fn truncate_log(path: &Path, step: usize) -> Result<()> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(()) };
    let kept: String =
        text.lines().filter(|line| serde_json::from_str::<CvaaStepLog>(line).is_ok_and(|l| l.step <= step)).map(|l| format!("{l}\n")).collect();
    ckpt::write_atomic(path, kept.as_bytes())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_nce_of_perfectly_aligned_views_approaches_zero_and_smoothing_adds_the_uniform_term() {
        let eye = Tensor::eye(4, DType::F32, &Device::Cpu).unwrap();
        let scale = Tensor::new(&[100f32], &Device::Cpu).unwrap();
        let loss = symmetric_info_nce(&eye, &eye, &scale, 0.0, None).unwrap().to_scalar::<f32>().unwrap();
        assert!(loss < 1e-6, "{loss}");
        // Unit logit scale, orthogonal views: log-probs are 1 − log(e + 3) on the diagonal and
        // −log(e + 3) elsewhere.
        let one = Tensor::new(&[1f32], &Device::Cpu).unwrap();
        let z = (1f64.exp() + 3.0).ln();
        let smoothed = symmetric_info_nce(&eye, &eye, &one, 0.1, None).unwrap().to_scalar::<f32>().unwrap();
        let want = 0.9 * (z - 1.0) + 0.1 * (z - 0.25);
        assert!((f64::from(smoothed) - want).abs() < 1e-5, "{smoothed} vs {want}");
    }

    /// Two different views, so `S = s · uav satᵀ` is not symmetric and each direction has its
    /// own loss. Expected values from PyTorch 2.15.0 in float64, with `I = arange(3)` and `T` the
    /// soft targets below:
    /// `(F.cross_entropy(S, I, label_smoothing=ε) + F.cross_entropy(S.T, I, label_smoothing=ε)) / 2`
    /// and `(F.cross_entropy(S, T / T.sum(1, keepdim=True), label_smoothing=ε)
    ///  + F.cross_entropy(S.T, T.T / T.T.sum(1, keepdim=True), label_smoothing=ε)) / 2`.
    #[test]
    fn info_nce_averages_both_directions_as_pytorch_cross_entropy() {
        let uav = Tensor::new(&[[1.0f32, 0.2, -0.5, 0.3], [0.1, 0.9, 0.4, -0.2], [-0.3, 0.5, 0.8, 0.6]], &Device::Cpu).unwrap();
        let sat = Tensor::new(&[[0.7f32, -0.1, 0.2, 0.9], [0.3, 1.1, -0.6, 0.0], [0.5, 0.4, 0.9, -0.7]], &Device::Cpu).unwrap();
        let scale = Tensor::new(&[2.5f32], &Device::Cpu).unwrap();
        let loss = |smoothing: f64, targets: Option<&Tensor>| {
            f64::from(symmetric_info_nce(&uav, &sat, &scale, smoothing, targets).unwrap().to_scalar::<f32>().unwrap())
        };
        // UAV → satellite alone is 0.8640 (ε = 0) and satellite → UAV 0.9540: a second direction
        // without the transpose, or the first one twice, gives 0.8640.
        for (smoothing, torch) in [(0.0, 0.9090241546065086), (0.1, 0.9648574879398422)] {
            let got = loss(smoothing, None);
            assert!((got - torch).abs() < 1e-6, "ε = {smoothing}: {got} vs torch {torch}");
        }
        // Soft targets, not symmetric either: the second direction reads them transposed (1.0841
        // if it did not).
        let targets = Tensor::new(&[[1.0f32, 0.4, 0.0], [0.1, 0.8, 0.0], [0.0, 0.3, 0.6]], &Device::Cpu).unwrap();
        let (got, torch) = (loss(0.1, Some(&targets)), 1.1408899554723098);
        assert!((got - torch).abs() < 1e-6, "soft targets: {got} vs torch {torch}");
    }

    #[test]
    fn overlap_targets_grade_crops_of_the_same_image_by_iou() {
        let (a, b) = (Path::new("a.png"), Path::new("b.png"));
        let footprints = [Some([0.0, 0.0, 0.5, 0.5]), Some([0.25, 0.0, 0.75, 0.5]), Some([0.0, 0.0, 0.5, 0.5])];
        let t = overlap_targets(&[a, a, b], &footprints, &footprints);
        let third = 1.0 / 3.0;
        let want = [1.0, third, 0.0, third, 1.0, 0.0, 0.0, 0.0, 1.0];
        for (got, want) in t.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{t:?}");
        }
        // Identity targets give the plain loss (two different views: the logits are not symmetric).
        let uav = Tensor::new(&[[1f32, 0.0], [0.6, 0.8]], &Device::Cpu).unwrap();
        let sat = Tensor::new(&[[0.8f32, -0.6], [0.0, 1.0]], &Device::Cpu).unwrap();
        let s = Tensor::new(&[5f32], &Device::Cpu).unwrap();
        let eye = Tensor::eye(2, DType::F32, &Device::Cpu).unwrap();
        let plain = symmetric_info_nce(&uav, &sat, &s, 0.1, None).unwrap().to_scalar::<f32>().unwrap();
        let explicit = symmetric_info_nce(&uav, &sat, &s, 0.1, Some(&eye)).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(plain, explicit);
    }

    #[test]
    fn jitter_keeps_boxes_inside_the_image() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..200 {
            let b = jittered([0.8, 0.0, 1.0, 0.3], 0.2, &mut rng);
            assert!(b[0] >= 0.0 && b[1] >= 0.0 && b[2] <= 1.0 + 1e-12 && b[3] <= 1.0 + 1e-12 && b[0] < b[2] && b[1] < b[3], "{b:?}");
        }
    }
}
