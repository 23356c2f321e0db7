//! A sample's media as the loader needs them: the [`MediaProcessor`] trait that turns a
//! [`TrainingSample`]'s images and videos into pixel arrays (`(pixel_values, grid_thw)` per
//! item), and [`QwenMedia`], the real one: videos probed, planned with a frame policy, decoded
//! with ffmpeg and preprocessed for Qwen2.5-VL; images read and preprocessed. A processor can
//! also predict its grids and fit videos to a token budget from file headers alone, so a
//! sample too long for `max_seq_len` is fitted or skipped before anything is decoded. Tests and
//! the synthetic world pass a closure instead.
//!
//! No Candle here: processors run on loader threads and never touch a device.

use std::path::Path;

use ndarray::Array4;

use crate::budget::{VideoBudget, VideoLimits};
use crate::frames::{FramePlan, FramePolicy, TrainingPlan};
use crate::preprocess::{PreprocessConfig, normalize_patchify, preprocess_image, smart_resize};
use crate::samples::TrainingSample;
use crate::sampling::{resize_video, video_size};
use crate::video::{ColourConversion, DecodeOptions, FolderListing, VideoSource, load_image};

/// The pixels of one image or video; defined below `models`, which reads them.
pub use motionvl_util::pixels::PixelInput;

/// Error type media processors may return; the loader wraps it with the sample's id and row.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A sample's media after preprocessing, each list in the sample's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessedMedia {
    pub images: Vec<PixelInput>,
    pub videos: Vec<PixelInput>,
    /// Per video, pixels of its motion pseudo-images (same frames, same grid); empty when the
    /// processor computes no motion.
    pub motion: Vec<PixelInput>,
}

/// Grids of a sample's media, each list in the sample's order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MediaGrids {
    pub images: Vec<[usize; 3]>,
    pub videos: Vec<[usize; 3]>,
    /// Per video, the `<t seconds>` of each temporal step (what a timestamped layout writes).
    pub video_seconds: Vec<Vec<f64>>,
}

/// Turns a sample's media into pixel arrays. Called from worker threads.
pub trait MediaProcessor: Send + Sync {
    fn process(&self, sample: &TrainingSample) -> Result<ProcessedMedia, BoxError>;

    /// The grids [`MediaProcessor::process`] will produce, found cheaply (file headers only),
    /// so that a sample too long for `max_seq_len` is skipped before its media are decoded.
    /// With video at up to 512·28² pixels and 32 frames a sample can need 8k vision tokens,
    /// so under the paper's 2048 this saves real work. `None` (the default) means "unknown
    /// without decoding": the loader then decodes first and checks the length afterwards.
    fn grids(&self, _sample: &TrainingSample) -> Option<Result<MediaGrids, BoxError>> {
        None
    }

    /// What the processor knows of the sample's videos from their headers, so that a sample
    /// too long for `max_seq_len` is fitted ([`crate::budget`]) instead of dropped. `None`
    /// (the default): this processor cannot shrink videos.
    fn video_budget(&self, _sample: &TrainingSample) -> Option<Result<VideoBudget, BoxError>> {
        None
    }

    /// The sample's media with its videos held to `limits`.
    fn process_limited(&self, _sample: &TrainingSample, _limits: VideoLimits) -> Result<ProcessedMedia, BoxError> {
        Err("this media processor cannot limit videos".into())
    }
}

impl<F> MediaProcessor for F
where
    F: Fn(&TrainingSample) -> Result<ProcessedMedia, BoxError> + Send + Sync,
{
    fn process(&self, sample: &TrainingSample) -> Result<ProcessedMedia, BoxError> {
        self(sample)
    }
}

/// The planned frames of one video, decoded once.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedFrames {
    pub plan: FramePlan,
    /// `[N,H,W,3]` at the decoded size.
    pub decoded: Array4<u8>,
    /// `[N,h,w,3]` at the grid-aligned size the vision tower sees.
    pub resized: Array4<u8>,
}

/// The real media path: videos (files or frame folders) are probed, planned with
/// `video_policy`, decoded with ffmpeg and preprocessed with `video_config`; images are read
/// with `image` and preprocessed with `image_config`.
#[derive(Debug, Clone, PartialEq)]
pub struct QwenMedia {
    pub video_policy: FramePolicy,
    pub video_config: PreprocessConfig,
    pub image_config: PreprocessConfig,
    pub decode: DecodeOptions,
    /// Rate declared for frame folders, which carry none (VisDrone sequences were converted at
    /// 15 FPS for SIS-Bench).
    pub frame_folder_fps: f64,
}

impl Default for QwenMedia {
    /// The SIS-Motion training settings: 2 FPS, 8–32 frames, 128–512 × 28² pixels.
    fn default() -> Self {
        QwenMedia {
            video_policy: FramePolicy::Training(TrainingPlan::default()),
            video_config: PreprocessConfig::sis_motion_training(),
            image_config: PreprocessConfig::default(),
            decode: DecodeOptions::default(),
            frame_folder_fps: 15.0,
        }
    }
}

impl QwenMedia {
    /// The same media with videos held to `limits` (images unchanged).
    pub fn limited(&self, limits: VideoLimits) -> QwenMedia {
        let mut out = self.clone();
        out.video_policy = self.video_policy.with_max_frames(limits.max_frames);
        out.video_config.max_pixels = limits.max_pixels.clamp(self.video_config.min_pixels, self.video_config.max_pixels);
        out
    }

    /// The same media converting decoded video with `colour` where no conversion is named yet
    /// (in place of the frame policy's): for a pipeline that must see frames as the official
    /// code does whatever the plan.
    pub fn with_default_colour(&self, colour: ColourConversion) -> QwenMedia {
        let mut out = self.clone();
        out.decode.colour = Some(self.decode.colour.unwrap_or(colour));
        out
    }

    /// A file is decoded with ffmpeg; a folder is a numbered-frame sequence, listed as the
    /// frame policy reads folders ([`FolderListing::for_policy`]).
    pub fn source(&self, path: &Path) -> VideoSource {
        if path.is_dir() {
            let listing = FolderListing::for_policy(&self.video_policy);
            VideoSource::FrameFolder { dir: path.to_path_buf(), fps: self.frame_folder_fps, listing }
        } else {
            VideoSource::File(path.to_path_buf())
        }
    }

    pub fn load_video(&self, path: &Path) -> Result<PixelInput, BoxError> {
        let (plan, frames) = self.load_video_frames(path)?;
        let vision = normalize_patchify(frames.view(), &self.video_config)?;
        Ok(PixelInput {
            pixel_values: vision.pixel_values,
            grid_thw: vision.grid_thw,
            second_per_grid: Some(plan.second_per_grid(self.video_config.temporal_patch_size)),
            grid_seconds: self.grid_seconds(&plan),
        })
    }

    /// The planned frames of a video resized to the grid-aligned size (the sampler's pixel
    /// bounds and resize kernel, see [`crate::sampling`]), with the plan: what the vision tower
    /// and a motion path's flow both see.
    pub fn load_video_frames(&self, path: &Path) -> Result<(FramePlan, Array4<u8>), BoxError> {
        let planned = self.load_planned_frames(path)?;
        Ok((planned.plan, planned.resized))
    }

    /// [`QwenMedia::load_video_frames`] keeping the decoded frames too, for a motion path whose
    /// flow network takes the frames at their own size (the SIS-Motion code resizes the
    /// decoded frames for MOFNet itself).
    pub fn load_planned_frames(&self, path: &Path) -> Result<PlannedFrames, BoxError> {
        let (plan, decoded) = self.source(path).load(&self.video_policy, &self.decode)?;
        let (t, h, w, _) = decoded.frames.dim();
        let sampling = self.video_policy.sampling();
        let (rh, rw) = video_size(sampling, h, w, t, &self.video_config)?;
        let resized = resize_video(sampling, decoded.frames.view(), rh, rw);
        Ok(PlannedFrames { plan, decoded: decoded.frames, resized })
    }

    pub fn load_image(&self, path: &Path) -> Result<PixelInput, BoxError> {
        let image = load_image(path)?;
        let vision = preprocess_image(image.view(), &self.image_config)?;
        Ok(PixelInput { pixel_values: vision.pixel_values, grid_thw: vision.grid_thw, second_per_grid: None, grid_seconds: Vec::new() })
    }
}

impl MediaProcessor for QwenMedia {
    fn process(&self, sample: &TrainingSample) -> Result<ProcessedMedia, BoxError> {
        let images = sample.images.iter().map(|p| self.load_image(p)).collect::<Result<_, _>>()?;
        let videos = sample.videos.iter().map(|p| self.load_video(p)).collect::<Result<_, _>>()?;
        Ok(ProcessedMedia { images, videos, motion: Vec::new() })
    }

    fn video_budget(&self, sample: &TrainingSample) -> Option<Result<VideoBudget, BoxError>> {
        let budget = || -> Result<VideoBudget, BoxError> {
            let videos = sample
                .videos
                .iter()
                .map(|p| self.source(p).probe().map(|info| (info.height, info.width, info.timing_for(&self.video_policy))))
                .collect::<Result<_, _>>()?;
            Ok(VideoBudget { videos, policy: self.video_policy, config: self.video_config.clone() })
        };
        Some(budget())
    }

    fn process_limited(&self, sample: &TrainingSample, limits: VideoLimits) -> Result<ProcessedMedia, BoxError> {
        self.limited(limits).process(sample)
    }

    fn grids(&self, sample: &TrainingSample) -> Option<Result<MediaGrids, BoxError>> {
        let grids = || -> Result<MediaGrids, BoxError> {
            let images = sample.images.iter().map(|p| self.image_grid(p)).collect::<Result<_, _>>()?;
            let (videos, video_seconds) =
                sample.videos.iter().map(|p| self.planned_video_grid(p)).collect::<Result<Vec<_>, _>>()?.into_iter().unzip();
            Ok(MediaGrids { images, videos, video_seconds })
        };
        Some(grids())
    }
}

impl QwenMedia {
    /// The grid [`QwenMedia::load_video`] will produce, from the container header and the plan.
    pub fn video_grid(&self, path: &Path) -> Result<[usize; 3], BoxError> {
        Ok(self.planned_video_grid(path)?.0)
    }

    /// [`QwenMedia::video_grid`] and the `<t seconds>` of each of its temporal steps.
    fn planned_video_grid(&self, path: &Path) -> Result<([usize; 3], Vec<f64>), BoxError> {
        let source = self.source(path);
        let info = source.probe()?;
        let plan = self.video_policy.plan(info.timing_for(&self.video_policy))?;
        let cfg = &self.video_config;
        let (h, w) = video_size(self.video_policy.sampling(), info.height, info.width, plan.len(), cfg)?;
        Ok(([plan.len().div_ceil(cfg.temporal_patch_size), h / cfg.patch_size, w / cfg.patch_size], self.grid_seconds(&plan)))
    }

    /// The `<t seconds>` of each temporal grid step of a video planned as `plan` (see
    /// [`FramePlan::grid_seconds`]; the official plan's frames are presampled).
    pub fn grid_seconds(&self, plan: &FramePlan) -> Vec<f64> {
        plan.grid_seconds(self.video_config.temporal_patch_size, self.video_policy.presamples())
    }

    /// The grid [`QwenMedia::load_image`] will produce, from the image header.
    pub fn image_grid(&self, path: &Path) -> Result<[usize; 3], BoxError> {
        let (width, height) = image::image_dimensions(path)?;
        let cfg = &self.image_config;
        let (h, w) = smart_resize(height as usize, width as usize, cfg.factor(), cfg.min_pixels, cfg.max_pixels)?;
        Ok([1, h / cfg.patch_size, w / cfg.patch_size])
    }
}
