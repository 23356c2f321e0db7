//! `flow extract --config`: what a training recipe or an evaluation config computes, resolved by
//! the code of the run itself (`train sft`'s [`motion_media`], `evaluate run`'s
//! [`evaluation_inputs`]), so flows extracted ahead of time are those frames' flows, under the
//! keys that run looks up, in its cache.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use candle_core::Device;
use motionvl_eval::config::RunConfig;
use motionvl_eval::infer::evaluation_inputs;
use motionvl_flow::MotionChoice;
use motionvl_flow::extract::{ConfigMedia, TokenizerSource};
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{motion_media, recipe_processor};

/// What the command line changes of the config's motion settings, as `train sft -o motion.…`
/// and `evaluate run --motion/--motion-weights` would.
#[derive(Debug, Clone, Default)]
pub struct MotionOverrides {
    pub estimator: Option<MotionChoice>,
    pub weights: Option<PathBuf>,
    pub cache_dir: Option<PathBuf>,
}

/// Reads a training recipe (it has `[data] train`) or an evaluation config (anything else).
pub fn config_media(path: &Path, overrides: &MotionOverrides, device: &Device) -> Result<ConfigMedia> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let table: toml::Table = toml::from_str(&text).with_context(|| format!("{} is not TOML", path.display()))?;
    if table.get("data").and_then(|d| d.get("train")).is_some() {
        recipe_media(path, overrides, device)
    } else {
        evaluation_media(path, overrides, device)
    }
}

fn recipe_media(path: &Path, overrides: &MotionOverrides, device: &Device) -> Result<ConfigMedia> {
    let mut recipe = Recipe::load(path, &[])?;
    if let Some(choice) = overrides.estimator {
        recipe.motion.estimator = choice;
    }
    recipe.motion.weights = overrides.weights.clone().or(recipe.motion.weights);
    recipe.motion.cache_dir = overrides.cache_dir.clone().or(recipe.motion.cache_dir);
    let processor = recipe_processor(&recipe)?;
    let Some(motion) = motion_media(&recipe, &processor, device)? else {
        bail!("{} trains no motion branch ([motion] estimator = \"none\"): it needs no flows (pass --motion NAME to extract anyway)", path.display());
    };
    let tokenizer = match (&recipe.model.init_config, &recipe.model.checkpoint) {
        (Some(_), _) => TokenizerSource::Fresh { base_dir: recipe.output_dir.join("base-model"), vocab: recipe.model.init_vocab_size },
        (None, Some(id)) => checkpoint_source(id),
        (None, None) => TokenizerSource::Unknown,
    };
    Ok(ConfigMedia {
        motion,
        length_limit: recipe.data.length_limit(),
        tokenizer,
        media_root: recipe.data.media_root.clone(),
        llava_rows: recipe.data.llava_rows,
    })
}

fn evaluation_media(path: &Path, overrides: &MotionOverrides, device: &Device) -> Result<ConfigMedia> {
    let mut config = RunConfig::from_file(path)?;
    config.motion.estimator = overrides.estimator.or(config.motion.estimator);
    config.motion.weights = overrides.weights.clone().or(config.motion.weights);
    config.motion.cache_dir = overrides.cache_dir.clone().or(config.motion.cache_dir);
    if config.motion.cache_dir.is_none() && config.out.as_os_str().is_empty() {
        bail!("{} names neither `out` nor [motion] cache_dir, so its flow cache is unknown: pass --cache DIR", path.display());
    }
    let inputs = evaluation_inputs(&config, device).with_context(|| format!("resolving {}", path.display()))?;
    let Some(motion) = inputs.motion else {
        bail!("{} evaluates a model without a motion branch: it needs no flows", path.display());
    };
    Ok(ConfigMedia {
        motion: motion.media,
        length_limit: None,
        tokenizer: checkpoint_source(&config.model.checkpoint),
        media_root: config.media_root.clone(),
        llava_rows: Default::default(),
    })
}

/// A checkpoint named as a local folder or a hub id.
fn checkpoint_source(id: &str) -> TokenizerSource {
    if Path::new(id).is_dir() { TokenizerSource::Dir(PathBuf::from(id)) } else { TokenizerSource::Hub(id.to_owned()) }
}
