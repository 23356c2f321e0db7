//! The model a run trains: the base checkpoint (the recipe's, or a fresh one built in the run
//! directory), LoRA attached to it, and the motion branch of a motion-aware recipe.

use std::path::Path;

use candle_core::Device;
use motionvl_data::processor::{ModelFamily, ModelProcessor};
use motionvl_data::samples::{TrainingSample, tokenizer_for_fresh_model};
use motionvl_data::text::QwenTokenizer;
use motionvl_flow::media::MotionMedia;
use motionvl_models::backbone::Backbone;
use motionvl_models::checkpoint::transformers5_name;
use motionvl_models::lora::LoraWeights;
use motionvl_models::motion::{Connector, MotionBranch, MotionMeta};
use motionvl_models::qwen3vl::Qwen3VlConfig;
use motionvl_models::recompute::RecomputedGrads;
use motionvl_models::{CheckpointFiles, HubOptions, Qwen25VlConfig};

use super::error::{Result, TrainError, io};
use crate::recipe::Recipe;

/// The base checkpoint: the recipe's own, or a fresh random model with a tokenizer trained on
/// the training text, built once in `<output_dir>/base-model`.
pub(super) fn base_model_files(recipe: &Recipe, samples: &[TrainingSample]) -> Result<CheckpointFiles> {
    let Some(init_config) = &recipe.model.init_config else {
        let id = recipe.model.checkpoint.as_deref().ok_or(TrainError::NoModel)?;
        return Ok(CheckpointFiles::resolve(id, &HubOptions::from_env())?);
    };
    let dir = recipe.output_dir.join("base-model");
    if !dir.join("model.safetensors").is_file() {
        let tokenizer = tokenizer_for_fresh_model(samples, recipe.model.init_vocab_size)?;
        let family = ModelFamily::of_config(init_config).map_err(|reason| TrainError::InitConfig { path: init_config.to_path_buf(), reason })?;
        let (std, seed) = (recipe.model.init_std, recipe.seed);
        let (config, tensors) = match family {
            ModelFamily::Qwen25Vl => {
                let cfg = fresh_model_config(init_config, &tokenizer)?;
                (cfg.to_hub_json(), motionvl_models::init::random_model(&cfg, std, seed, &Device::Cpu)?.1)
            }
            ModelFamily::Qwen3Vl => {
                let cfg = Qwen3VlConfig::from_json(&fresh_config_json(init_config, &tokenizer)?.to_string())
                    .map_err(|reason| TrainError::InitConfig { path: init_config.to_path_buf(), reason })?;
                // Stored under transformers' module paths: it reads no legacy names for Qwen3-VL.
                let tensors = motionvl_models::init::random_qwen3(&cfg, std, seed, &Device::Cpu)?.1;
                (cfg.to_hub_json(), tensors.into_iter().map(|(name, t)| (transformers5_name(&name), t)).collect())
            }
        };
        let tmp = recipe.output_dir.join(format!(".tmp-base-model-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        motionvl_models::init::save_checkpoint(&tmp, &config, &tensors)?;
        tokenizer.save(tmp.join("tokenizer.json"))?;
        let pixels = recipe.data.media_for(&ModelProcessor::of_family(family)).image_config;
        motionvl_data::hub_files::write_processor_files(&tmp, &tokenizer, &pixels, family)?;
        std::fs::rename(&tmp, &dir).map_err(io(&dir))?;
    }
    Ok(CheckpointFiles::from_dir(&dir)?)
}

/// A fresh Qwen2.5-VL's config: `init_config` with the vocabulary and special token ids of the
/// tokenizer trained for it.
pub(crate) fn fresh_model_config(init_config: &Path, tokenizer: &QwenTokenizer) -> Result<Qwen25VlConfig> {
    Qwen25VlConfig::from_json(&fresh_config_json(init_config, tokenizer)?.to_string())
        .map_err(|e| TrainError::InitConfig { path: init_config.to_path_buf(), reason: e.to_string() })
}

/// `init_config` with the vocabulary and special token ids of `tokenizer`, at the top and, in a
/// nested layout, in `text_config` too (where they win).
fn fresh_config_json(init_config: &Path, tokenizer: &QwenTokenizer) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(init_config).map_err(io(init_config))?;
    let mut json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| TrainError::InitConfig { path: init_config.to_path_buf(), reason: e.to_string() })?;
    let special = tokenizer.special();
    json["image_token_id"] = special.image_pad.into();
    json["video_token_id"] = special.video_pad.into();
    json["vision_start_token_id"] = special.vision_start.into();
    json["vision_end_token_id"] = special.vision_end.into();
    let text_keys = [
        ("vocab_size", tokenizer.vocab_size().into()),
        ("eos_token_id", serde_json::json!([special.im_end, special.endoftext])),
        // Qwen's own: `<|endoftext|>` begins and pads.
        ("bos_token_id", special.endoftext.into()),
        ("pad_token_id", special.endoftext.into()),
    ];
    for (key, value) in text_keys {
        json[key] = value.clone();
        if let Some(nested) = json.get_mut("text_config").and_then(|t| t.as_object_mut()) {
            nested.insert(key.to_owned(), value);
        }
    }
    Ok(json)
}

/// What the adapter names as its base: the hub id when the model came from the hub (what PEFT
/// and LLaMA-Factory resolve), else the model folder.
pub(super) fn base_model_name(recipe: &Recipe, files: &CheckpointFiles) -> String {
    match recipe.model.checkpoint.as_deref() {
        Some(id) if recipe.model.init_config.is_none() && !Path::new(id).is_dir() => id.split_once('@').map_or(id, |(repo, _)| repo).to_owned(),
        _ => files.dir.display().to_string(),
    }
}

/// The base model of `files` on `device`, in the recipe's dtype, with the recipe's LoRA attached
/// and in training mode; and the gradients of checkpointed layers when the recipe recomputes
/// them (`gradient_checkpointing`).
pub(super) fn load_with_lora(
    recipe: &Recipe,
    files: &CheckpointFiles,
    tokenizer: &QwenTokenizer,
    device: &Device,
) -> Result<(Backbone, LoraWeights, Option<RecomputedGrads>)> {
    let mut model = Backbone::load(files, recipe.model.dtype.dtype(), device)?;
    if let Some(mismatch) = model.vision_token_mismatch(tokenizer.special().vision_ids()) {
        return Err(mismatch.into());
    }
    let recomputed = recipe.model.gradient_checkpointing.then(|| model.enable_gradient_checkpointing());
    let lora = LoraWeights::init(&model.linear_shapes(), &recipe.lora, recipe.seed, device)?;
    lora.attach(model.linears_mut())?;
    lora.runtime().set_training(true);
    Ok((model, lora, recomputed))
}

/// The trained motion branch and what its checkpoints record.
pub(super) struct Motion {
    pub(super) branch: MotionBranch,
    pub(super) vars: Vec<(String, candle_core::Var)>,
    pub(super) meta: MotionMeta,
}

impl Motion {
    /// A fresh connector on `model`'s vision tower, seeded from the recipe, and the metadata
    /// its checkpoints record: `media`'s estimator and the recipe's pseudo-images.
    pub(super) fn init(recipe: &Recipe, model: &Backbone, media: &MotionMedia, device: &Device) -> Result<Self> {
        let estimator = media.estimator.clone();
        let connector = recipe.motion.connector(model.hidden_size());
        let vars = Connector::init_vars_with(model.hidden_size(), connector, recipe.seed ^ 0x6d6f74696f6e, device)?;
        let branch = MotionBranch::from_visual(model.motion_tower(), &vars)?;
        let meta = MotionMeta {
            estimator: estimator.name().to_owned(),
            estimator_settings: estimator.settings(),
            pseudo_images: serde_json::to_value(recipe.motion.pseudo_images).unwrap_or_default(),
            own_encoder: false,
            connector: Some(connector),
        };
        Ok(Motion { branch, vars, meta })
    }
}
