//! The media a run feeds the model: the recipe's pixels, with motion pseudo-images when the
//! recipe is motion-aware, and the plain path for samples that train without motion.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::Device;
use motionvl_data::budget::{VideoBudget, VideoLimits};
use motionvl_data::frames::FramePolicy;
use motionvl_data::loader::{BoxError, MediaGrids, MediaProcessor, ProcessedMedia, QwenMedia};
use motionvl_data::processor::{ModelFamily, ModelProcessor};
use motionvl_data::samples::{LlavaRows, TrainingSample};
use motionvl_flow::media::MotionMedia;
use motionvl_flow::{EstimatorSpec, FlowCache, FlowEstimator, estimator_from_spec};
use motionvl_models::{HubOptions, ModelError};

use super::error::{Result, TrainError};
use crate::recipe::Recipe;

/// The media path of a run: plain (visual-only) or with motion pseudo-images.
pub(super) enum RunMedia {
    Visual(QwenMedia),
    Motion(MotionMedia),
}

/// A run's media: the run's path for its samples, and the plain path of samples without motion
/// (`with_motion` false: conversation rows under `llava_rows = "official"`), whose batches carry
/// no motion pixels, so the model runs them visual-only.
pub(super) struct Media {
    pub(super) run: RunMedia,
    pub(super) without_motion: QwenMedia,
}

impl Media {
    pub(super) fn new(recipe: &Recipe, run: RunMedia, processor: &ModelProcessor) -> Self {
        Media { run, without_motion: media_without_motion(recipe, processor) }
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
fn media_without_motion(recipe: &Recipe, processor: &ModelProcessor) -> QwenMedia {
    let mut media = recipe.data.media_for(processor);
    if recipe.data.llava_rows == LlavaRows::Official {
        media.video_policy = FramePolicy::Official { max_frames: usize::MAX };
    }
    media
}

/// The frames, flows and pseudo-images a run of `recipe` feeds its motion branch, with
/// `processor`'s pixels (the model's: [`recipe_processor`]), and the cache it keeps the flows in
/// (`[motion] cache_dir`, else `<output_dir>/flow-cache`); `None` for a visual-only recipe.
/// `flow extract --config` fills the same cache through this.
pub fn motion_media(recipe: &Recipe, processor: &ModelProcessor, device: &Device) -> Result<Option<MotionMedia>> {
    let Some(name) = recipe.motion.estimator.estimator() else {
        return Ok(None);
    };
    let spec = EstimatorSpec {
        name,
        weights: recipe.motion.weights.as_deref(),
        weight_precision: recipe.motion.estimator_weights,
        ..EstimatorSpec::default()
    };
    let estimator: Arc<dyn FlowEstimator> = estimator_from_spec(&spec, device)?.into();
    let cache_dir = recipe.motion.cache_dir.clone().unwrap_or_else(|| recipe.output_dir.join("flow-cache"));
    let mut media = MotionMedia::new(recipe.data.media_for(processor), estimator, Some(FlowCache::new(cache_dir)?), recipe.motion.pseudo_images);
    media.cache_only = recipe.motion.cache_only;
    Ok(Some(media))
}

/// The processor of the model a run of `recipe` trains, read without loading it: the family's
/// for a fresh model (`init_config`), else the checkpoint's `config.json` and
/// `preprocessor_config.json` (only those two fetched from the hub).
pub fn recipe_processor(recipe: &Recipe) -> Result<ModelProcessor> {
    let family =
        |config: &Path| ModelFamily::of_config(config).map_err(|reason| TrainError::from(ModelError::Config { path: config.to_path_buf(), reason }));
    let dir = match (&recipe.model.init_config, recipe.model.checkpoint.as_deref()) {
        (Some(init), _) => return Ok(ModelProcessor::of_family(family(init)?)),
        (None, Some(id)) if Path::new(id).is_dir() => PathBuf::from(id),
        (None, Some(id)) => {
            let (repo, revision) = id.split_once('@').unwrap_or((id, "main"));
            let hub = HubOptions::from_env();
            let config = hub.fetch(repo, revision, "config.json")?;
            // Absent from the repository: the family's defaults apply.
            let _ = hub.fetch(repo, revision, "preprocessor_config.json");
            config.parent().map(Path::to_path_buf).unwrap_or_default()
        }
        (None, None) => return Err(TrainError::NoModel),
    };
    Ok(ModelProcessor::of_checkpoint(family(&dir.join("config.json"))?, &dir)?)
}
