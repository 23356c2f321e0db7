//! Motion pixels for the data loader: the exact frames the vision tower sees → optical flow
//! (from the cache when present) → pseudo-images → Qwen2.5-VL patches on the same grid, so
//! the motion encoder yields one token per visual token.

use std::sync::Arc;

use motionvl_data::loader::{BoxError, MediaGrids, MediaProcessor, PixelInput, ProcessedMedia, QwenMedia};
use motionvl_data::preprocess::normalize_patchify;
use motionvl_data::samples::TrainingSample;

use crate::{FlowCache, FlowEstimator, PseudoImageConfig, PseudoImages};

/// A [`MediaProcessor`] that adds motion pseudo-image pixels to every video.
#[derive(Clone)]
pub struct MotionMedia {
    pub qwen: QwenMedia,
    pub estimator: Arc<dyn FlowEstimator>,
    pub cache: Option<FlowCache>,
    pub pseudo: PseudoImageConfig,
}

impl MotionMedia {
    /// The video's pixels and its motion pixels, on the same grid.
    pub fn load_video_with_motion(&self, path: &std::path::Path) -> Result<(PixelInput, PixelInput), BoxError> {
        let (plan, frames) = self.qwen.load_video_frames(path)?;
        let cfg = &self.qwen.video_config;
        let second_per_grid = Some(plan.second_per_grid(cfg.temporal_patch_size));
        let vision = normalize_patchify(frames.view(), cfg)?;
        let mut flows = match &self.cache {
            Some(cache) => {
                let (_, h, w, _) = frames.dim();
                let plan_key = format!("{:?}@{h}x{w}", plan.indices);
                cache.get_or_compute(frames.view(), &plan_key, self.estimator.as_ref())?.0
            }
            None => self.estimator.estimate(frames.view())?,
        };
        // The cache stores f16; rounding fresh flows the same way makes a sample's pixels
        // independent of whether its flow was just computed or read back (exact resume).
        flows.mapv_inplace(|v| half::f16::from_f32(v).to_f32());
        let pseudo = PseudoImages::from_flows(flows.view(), &self.pseudo)?.to_u8();
        let motion = normalize_patchify(pseudo.view(), cfg)?;
        if motion.grid_thw != vision.grid_thw {
            return Err(format!("{}: motion grid {:?} differs from the video grid {:?}", path.display(), motion.grid_thw, vision.grid_thw).into());
        }
        Ok((
            PixelInput { pixel_values: vision.pixel_values, grid_thw: vision.grid_thw, second_per_grid },
            PixelInput { pixel_values: motion.pixel_values, grid_thw: motion.grid_thw, second_per_grid },
        ))
    }
}

impl MediaProcessor for MotionMedia {
    fn process(&self, sample: &TrainingSample) -> Result<ProcessedMedia, BoxError> {
        let images = sample.images.iter().map(|p| self.qwen.load_image(p)).collect::<Result<_, _>>()?;
        let (videos, motion) = sample
            .videos
            .iter()
            .map(|p| self.load_video_with_motion(p))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .unzip();
        Ok(ProcessedMedia { images, videos, motion })
    }

    fn grids(&self, sample: &TrainingSample) -> Option<Result<MediaGrids, BoxError>> {
        self.qwen.grids(sample)
    }
}
