//! The video settings of the config files users already have — a training recipe's `[data]`
//! section and an evaluation config's `[protocol]` section — and the [`QwenMedia`] they mean.

use serde::{Deserialize, Serialize};

use crate::frames::{EvalProtocol, FramePolicy, TrainingPlan};
use crate::media::QwenMedia;
use crate::preprocess::PreprocessConfig;
use crate::sampling::Sampling;

/// The video keys of a training recipe's `[data]` section (SPEC §1 defaults: 2 FPS, 8–32
/// frames, 128–512 × 28² pixels per frame).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainingVideo {
    pub fps: f64,
    pub min_frames: usize,
    pub max_frames: usize,
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub sampling: Sampling,
}

impl Default for TrainingVideo {
    fn default() -> Self {
        let plan = TrainingPlan::default();
        let pixels = PreprocessConfig::sis_motion_training();
        TrainingVideo {
            fps: plan.fps,
            min_frames: plan.min_frames,
            max_frames: plan.max_frames,
            min_pixels: pixels.min_pixels,
            max_pixels: pixels.max_pixels,
            sampling: plan.sampling,
        }
    }
}

impl TrainingVideo {
    /// Videos and images of a training run with Qwen2.5-VL's processor.
    pub fn media(&self) -> QwenMedia {
        self.media_with(&PreprocessConfig::default())
    }

    /// Videos and images of a training run with the patch sizes and normalisation of `base`
    /// (the model's processor) and this section's pixel bounds.
    pub fn media_with(&self, base: &PreprocessConfig) -> QwenMedia {
        let plan = TrainingPlan { fps: self.fps, min_frames: self.min_frames, max_frames: self.max_frames, sampling: self.sampling };
        let pixels = PreprocessConfig { min_pixels: self.min_pixels, max_pixels: self.max_pixels, ..base.clone() };
        QwenMedia { video_policy: FramePolicy::Training(plan), video_config: pixels.clone(), image_config: pixels, ..QwenMedia::default() }
    }
}

/// Frame plan and pixel bounds of an evaluation. The frame keys are those of
/// [`EvalProtocol`], spelled out so that a misspelt key is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProtocolConfig {
    /// Clips shorter than this (seconds) are sampled at `short_fps`.
    pub short_below_s: f64,
    pub short_fps: f64,
    /// Clips up to this length (seconds) are sampled at `medium_fps`; longer ones get
    /// `max_frames` frames spread evenly.
    pub medium_up_to_s: f64,
    pub medium_fps: f64,
    /// Cap on the frames of any clip.
    pub max_frames: usize,
    /// Lower bound on height × width per frame or image.
    pub min_pixels: usize,
    /// Upper bound on height × width per frame or image.
    pub max_pixels: usize,
    /// `qwen-vl-utils` (default), `transformers` or `rate-exact`: see [`Sampling`].
    pub sampling: Sampling,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        let frames = EvalProtocol::default();
        let pixels = PreprocessConfig::sisbench_eval();
        Self {
            short_below_s: frames.short_below_s,
            short_fps: frames.short_fps,
            medium_up_to_s: frames.medium_up_to_s,
            medium_fps: frames.medium_fps,
            max_frames: frames.max_frames,
            min_pixels: pixels.min_pixels,
            max_pixels: pixels.max_pixels,
            sampling: frames.sampling,
        }
    }
}

impl ProtocolConfig {
    pub fn frames(&self) -> EvalProtocol {
        EvalProtocol {
            short_below_s: self.short_below_s,
            short_fps: self.short_fps,
            medium_up_to_s: self.medium_up_to_s,
            medium_fps: self.medium_fps,
            max_frames: self.max_frames,
            sampling: self.sampling,
        }
    }

    pub fn frame_policy(&self) -> FramePolicy {
        FramePolicy::SisbenchEval(self.frames())
    }

    /// The checkpoint's preprocessing (patch size, normalisation) with the protocol's pixel
    /// bounds.
    pub fn preprocess(&self, base: &PreprocessConfig) -> PreprocessConfig {
        PreprocessConfig { min_pixels: self.min_pixels, max_pixels: self.max_pixels, ..base.clone() }
    }

    /// Videos and images of an evaluation with the checkpoint's preprocessing `base`.
    pub fn media(&self, base: &PreprocessConfig) -> QwenMedia {
        let pixels = self.preprocess(base);
        QwenMedia { video_policy: self.frame_policy(), video_config: pixels.clone(), image_config: pixels, ..QwenMedia::default() }
    }
}
