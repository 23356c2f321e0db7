//! Motion pixels for the data loader: the exact frames the vision tower sees → optical flow
//! (from the cache when present) → pseudo-images → Qwen2.5-VL patches on the same grid, so
//! the motion encoder yields one token per visual token.
//!
//! [`MotionMedia::flow_input`] is the one place that decides which frames a flow is computed
//! on and under which cache key: `flow extract`, `train sft` and `evaluate run` all go through
//! it, so an entry extracted ahead of time is exactly the one training and evaluation look up.
//!
//! [`MotionPipeline::Official`] swaps every step for the SIS-Motion authors' (see
//! [`crate::official`]): the flow is MOFNet's on the decoded frames (converted to RGB as PyAV 13
//! does, [`ColourConversion::Pyav13`]) resized to 320×480, in one
//! pass per clip, kept at 1/8 resolution and in f32, under keys of its own; the motion pixels
//! are float pseudo-images resized onto the video's grid.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use motionvl_data::budget::{VideoBudget, VideoLimits};
use motionvl_data::frames::FramePlan;
use motionvl_data::loader::{BoxError, MediaGrids, MediaProcessor, PixelInput, ProcessedMedia, QwenMedia};
use motionvl_data::preprocess::normalize_patchify;
use motionvl_data::samples::TrainingSample;
use motionvl_data::video::ColourConversion;
use ndarray::Array4;

use crate::cache::{CacheKey, CacheStatus, Precision};
use crate::error::{FlowError, Result};
use crate::official;
use crate::{FlowCache, FlowEstimator, Flows, MotionPipeline, PseudoImageConfig, PseudoImages};

/// The frames a flow is computed on and its cache key.
pub struct FlowInput {
    pub plan: FramePlan,
    /// `[N,H,W,3]`: the planned frames resized to the grid-aligned size the vision tower sees
    /// (motionvl's pipeline computes the flow on them).
    pub frames: Array4<u8>,
    /// `[2·grid_t,3,320,480]` f32: the official pipeline's MOFNet input
    /// ([`official::mofnet_frames`]); `None` for motionvl's pipeline.
    pub mofnet_frames: Option<Array4<f32>>,
    pub key: CacheKey,
}

impl FlowInput {
    /// The plan as written in messages: frame indices and the frame size.
    pub fn describe(&self) -> String {
        let (_, h, w, _) = self.frames.dim();
        match &self.mofnet_frames {
            Some(mofnet) => format!("{:?}@{h}x{w}, MOFNet {:?}", self.plan.indices, mofnet.shape()),
            None => format!("{:?}@{h}x{w}", self.plan.indices),
        }
    }
}

/// Cache hits and misses of a run, for its log.
#[derive(Debug, Default)]
pub struct CacheCounts {
    pub hits: AtomicUsize,
    pub misses: AtomicUsize,
    pub repaired: AtomicUsize,
}

impl CacheCounts {
    pub fn snapshot(&self) -> (usize, usize, usize) {
        (self.hits.load(Ordering::Relaxed), self.misses.load(Ordering::Relaxed), self.repaired.load(Ordering::Relaxed))
    }
}

/// A [`MediaProcessor`] that adds motion pseudo-image pixels to every video.
#[derive(Clone)]
pub struct MotionMedia {
    pub qwen: QwenMedia,
    pub estimator: Arc<dyn FlowEstimator>,
    pub cache: Option<FlowCache>,
    pub pseudo: PseudoImageConfig,
    /// Every flow must come from the cache: a miss is [`FlowError::CacheMiss`].
    pub cache_only: bool,
    pub counts: Arc<CacheCounts>,
}

impl MotionMedia {
    pub fn new(qwen: QwenMedia, estimator: Arc<dyn FlowEstimator>, cache: Option<FlowCache>, pseudo: PseudoImageConfig) -> Self {
        MotionMedia { qwen, estimator, cache, pseudo, cache_only: false, counts: Arc::default() }
    }

    /// The planned frames of `path` as the vision tower sees them, what the flow is computed
    /// on, and its cache key.
    pub fn flow_input(&self, path: &Path) -> Result<FlowInput> {
        let bad = |e: motionvl_data::media::BoxError| FlowError::Video { path: path.to_path_buf(), reason: e.to_string() };
        match self.pseudo.pipeline {
            MotionPipeline::Motionvl => {
                let (plan, frames) = self.qwen.load_video_frames(path).map_err(bad)?;
                let (_, h, w, _) = frames.dim();
                let key = CacheKey::new(frames.view(), &format!("{:?}@{h}x{w}", plan.indices), self.estimator.as_ref());
                Ok(FlowInput { plan, frames, mofnet_frames: None, key })
            }
            MotionPipeline::Official => {
                // The official code converts every decoded frame with PyAV 13's `to_image()`,
                // whatever plan picked them (C13); the flows' keys hash the frames, so the two
                // conversions never share an entry.
                let planned = self.qwen.with_default_colour(ColourConversion::Pyav13).load_planned_frames(path).map_err(bad)?;
                // The processor pads the clip to whole temporal patches; the reference resamples
                // the MOFNet frames to that count.
                let tp = self.qwen.video_config.temporal_patch_size;
                let count = planned.plan.indices.len().div_ceil(tp) * tp;
                let mofnet = official::mofnet_frames(planned.decoded.view(), count)
                    .map_err(|e| FlowError::Video { path: path.to_path_buf(), reason: e.to_string() })?;
                let (_, dh, dw, _) = planned.decoded.dim();
                let plan = format!("official:{:?}@{dh}x{dw}->{count}x{}x{}", planned.plan.indices, official::MOFNET_HEIGHT, official::MOFNET_WIDTH);
                let key = CacheKey::of_floats(mofnet.view(), &plan, self.estimator.as_ref());
                Ok(FlowInput { plan: planned.plan, frames: planned.resized, mofnet_frames: Some(mofnet), key })
            }
        }
    }

    /// Whether the cache holds a readable entry for `path`'s flow.
    pub fn is_cached(&self, path: &Path) -> Result<bool> {
        let Some(cache) = &self.cache else { return Ok(false) };
        let input = self.flow_input(path)?;
        Ok(matches!(cache.get(&input.key), Ok(Some(_))))
    }

    /// The error a cache-only run raises for `path`.
    pub fn miss_error(&self, path: &Path, input: &FlowInput) -> FlowError {
        FlowError::CacheMiss {
            video: path.to_path_buf(),
            plan: input.describe(),
            cache: self.cache.as_ref().map(|c| c.root().to_path_buf()).unwrap_or_else(|| PathBuf::from("(no cache)")),
        }
    }

    /// Flows of `input`: read from the cache, or computed (and stored) unless the run is
    /// cache-only. motionvl's pipeline rounds fresh flows to f16 like cached ones, so a
    /// sample's pixels do not depend on whether its flow was just computed or read back (exact
    /// resume); the official pipeline's are MOFNet's `[N−2,2,40,60]` middle-frame flows in f32.
    pub fn flows(&self, path: &Path, input: &FlowInput) -> Result<Flows> {
        let (precision, compute): (Precision, Box<dyn FnOnce() -> Result<Flows> + '_>) = match &input.mofnet_frames {
            Some(mofnet) => (Precision::Single, Box::new(|| self.estimator.coarse_clip_flows(mofnet.view()))),
            None => (Precision::Half, Box::new(|| self.estimator.estimate(input.frames.view()))),
        };
        let mut flows = match &self.cache {
            Some(cache) if self.cache_only => match cache.get(&input.key)? {
                Some(flows) => {
                    self.counts.hits.fetch_add(1, Ordering::Relaxed);
                    flows
                }
                None => return Err(self.miss_error(path, input)),
            },
            Some(cache) => {
                let (flows, status) = cache.get_or_compute_with(&input.key, self.estimator.name(), precision, compute)?;
                let counter = match status {
                    CacheStatus::Hit => &self.counts.hits,
                    CacheStatus::Miss => &self.counts.misses,
                    CacheStatus::Repaired => &self.counts.repaired,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                flows
            }
            None if self.cache_only => return Err(self.miss_error(path, input)),
            None => compute()?,
        };
        if precision == Precision::Half {
            flows.mapv_inplace(|v| half::f16::from_f32(v).to_f32());
        }
        Ok(flows)
    }

    /// The video's pixels and its motion pixels, on the same grid.
    pub fn load_video_with_motion(&self, path: &Path) -> std::result::Result<(PixelInput, PixelInput), BoxError> {
        let input = self.flow_input(path)?;
        let cfg = &self.qwen.video_config;
        let second_per_grid = Some(input.plan.second_per_grid(cfg.temporal_patch_size));
        let grid_seconds = self.qwen.grid_seconds(&input.plan);
        let vision = normalize_patchify(input.frames.view(), cfg)?;
        let flows = self.flows(path, &input)?;
        let motion_pixels = match self.pseudo.pipeline {
            MotionPipeline::Motionvl => {
                let pseudo = PseudoImages::from_flows(flows.view(), &self.pseudo)?.to_u8();
                let motion = normalize_patchify(pseudo.view(), cfg)?;
                if motion.grid_thw != vision.grid_thw {
                    return Err(
                        format!("{}: motion grid {:?} differs from the video grid {:?}", path.display(), motion.grid_thw, vision.grid_thw).into()
                    );
                }
                motion.pixel_values
            }
            MotionPipeline::Official => official::pixel_values_flow(official::clip_flows(flows.view())?.view(), vision.grid_thw, cfg)?,
        };
        Ok((
            PixelInput { pixel_values: vision.pixel_values, grid_thw: vision.grid_thw, second_per_grid, grid_seconds: grid_seconds.clone() },
            PixelInput { pixel_values: motion_pixels, grid_thw: vision.grid_thw, second_per_grid, grid_seconds },
        ))
    }

    /// The same media with videos held to `limits`.
    pub fn limited(&self, limits: VideoLimits) -> MotionMedia {
        MotionMedia { qwen: self.qwen.limited(limits), ..self.clone() }
    }
}

impl MediaProcessor for MotionMedia {
    fn process(&self, sample: &TrainingSample) -> std::result::Result<ProcessedMedia, BoxError> {
        let images = sample.images.iter().map(|p| self.qwen.load_image(p)).collect::<std::result::Result<_, _>>()?;
        let (videos, motion) =
            sample.videos.iter().map(|p| self.load_video_with_motion(p)).collect::<std::result::Result<Vec<_>, _>>()?.into_iter().unzip();
        Ok(ProcessedMedia { images, videos, motion })
    }

    fn grids(&self, sample: &TrainingSample) -> Option<std::result::Result<MediaGrids, BoxError>> {
        self.qwen.grids(sample)
    }

    fn video_budget(&self, sample: &TrainingSample) -> Option<std::result::Result<VideoBudget, BoxError>> {
        self.qwen.video_budget(sample)
    }

    fn process_limited(&self, sample: &TrainingSample, limits: VideoLimits) -> std::result::Result<ProcessedMedia, BoxError> {
        self.limited(limits).process(sample)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zero::ZeroFlow;
    use motionvl_data::frames::FramePolicy;

    /// A BT.709-tagged clip of `tests/fixtures/pyav_colour`, where the two conversions differ.
    fn bt709_clip() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pyav_colour/bt709_limited_h264/clip.mp4")
    }

    fn media(policy: FramePolicy, colour: Option<ColourConversion>, pseudo: PseudoImageConfig) -> MotionMedia {
        let mut qwen = QwenMedia { video_policy: policy, ..QwenMedia::default() };
        qwen.decode.colour = colour;
        MotionMedia::new(qwen, Arc::new(ZeroFlow), None, pseudo)
    }

    /// The official pipeline sees frames as PyAV 13 converts them even under a plan of
    /// motionvl's (the 3B recipe's), unless a conversion is named; keys tell the two apart.
    #[test]
    fn official_pipeline_converts_like_pyav_13_and_keys_the_conversion() {
        let clip = bt709_clip();
        let policy = FramePolicy::Uniform { frames: 4 };
        let official = media(policy, None, PseudoImageConfig::official()).flow_input(&clip).expect("official");
        let named = media(policy, Some(ColourConversion::Pyav13), PseudoImageConfig::official()).flow_input(&clip).expect("named");
        let tagged = media(policy, Some(ColourConversion::FrameTagged), PseudoImageConfig::official()).flow_input(&clip).expect("tagged");
        assert_eq!((&official.frames, &official.key), (&named.frames, &named.key));
        assert_ne!(official.frames, tagged.frames);
        assert_ne!(official.key, tagged.key);
        // motionvl's pipeline keeps the plan's conversion: the frame's tags.
        let motionvl = media(policy, None, PseudoImageConfig::default()).flow_input(&clip).expect("motionvl");
        assert_eq!(motionvl.frames, tagged.frames);
    }
}
