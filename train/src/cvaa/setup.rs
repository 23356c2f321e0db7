//! Setting a `train cvaa` run up: its run directory, the pairs, the retriever (a pretrained or
//! fresh backbone, fresh heads, or the weights of an earlier run), the optimiser and the logs.

use std::collections::HashMap;

use candle_core::DType;
use motionvl_data::cvaa::{read_pairs, read_university1652};
use motionvl_data::stop::StopFlag;
use motionvl_models::HubOptions;
use motionvl_models::cvaa::{CONFIG_FILE, Cvaa, CvaaConfig, Interpolation, WEIGHTS_FILE};
use motionvl_models::dinov2::Dinov2Weights;
use motionvl_models::seeded::SeededVars;

use super::batches::{ImageCache, mix};
use super::weights::Weights;
use super::{CvaaRecipe, CvaaTrainer, Result, io};
use crate::checkpoint::{self as ckpt, Checkpoints};
use crate::optim::{AdamW, AdamWConfig, warmup_steps};
use crate::sft::TrainError;
use crate::tensorboard::EventWriter;

impl CvaaTrainer {
    /// Sets the run up (model, data, optimiser), then restores a checkpoint when `resume` is
    /// `auto` or a directory.
    pub fn new(recipe: &CvaaRecipe, resume: Option<&str>) -> Result<Self> {
        recipe.validate().map_err(|problem| TrainError::Recipe { key: "recipe", problem })?;
        let out = recipe.output_dir.clone();
        let lock = motionvl_data::run_dir::RunLock::acquire(&out)?;
        ckpt::write_atomic(out.join("config.toml"), recipe.to_toml().as_bytes())?;
        let device = recipe.model.device.open()?;

        let pairs = match (&recipe.data.train, &recipe.data.university1652) {
            (Some(manifest), _) => read_pairs(manifest),
            (None, Some(root)) => read_university1652(root, "train"),
            (None, None) => unreachable!("validated"),
        }?;
        if pairs.len() < recipe.optim.batch_size {
            return Err(TrainError::TooFewPairs { pairs: pairs.len(), batch_size: recipe.optim.batch_size });
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
                init.validate().map_err(|problem| TrainError::Recipe { key: "model.init", problem })?;
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
        cfg.validate().map_err(|problem| TrainError::Recipe { key: "model", problem })?;
        let heads = SeededVars::new(mix(recipe.seed, 0x4ead));
        let model = Cvaa::new(&cfg, backbone_vb, heads.var_builder(&device))?;
        let weights = Weights { backbone: backbone_vars, frozen_backbone, heads };
        if let Some(dir) = &m.init_from {
            let saved = CvaaConfig::from_file(&dir.join(CONFIG_FILE))?;
            if saved != cfg {
                return Err(TrainError::CheckpointMismatch {
                    checkpoint: dir.clone(),
                    problem: "holds a cvaa.json that differs from the recipe's model".into(),
                });
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
            return Err(TrainError::NoImageBatch { batch_size: o.batch_size });
        }
        trainer.total_steps = trainer.batches_per_epoch() * o.epochs.max(1);
        trainer.warmup = warmup_steps(o.warmup_ratio, trainer.total_steps);
        if let Some(arg) = resume {
            trainer.restore(arg)?;
        }
        Ok(trainer)
    }
}
