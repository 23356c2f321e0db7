//! Frame plans: which frames of a clip a sample keeps, and at what rate they really are.
//!
//! Every plan returns the kept frame indices, their timestamps and the **actual** frame rate of
//! the kept frames. That rate is what Qwen2.5-VL's `second_per_grid_ts =
//! temporal_patch_size / fps` must use: after a frame cap (a 60 s clip squeezed into 32
//! frames) or a floor (a 2 s clip stretched to 8 frames) the nominal sampling rate is wrong,
//! and the temporal M-RoPE positions would then lie about how much time passed.
//!
//! Two ways of laying frames out are used:
//! - *rate steps*: frame k at `k / fps` seconds, when a plan's rate fits the clip without
//!   clamping; the actual rate is the requested one;
//! - *spread*: `n` frames evenly over the whole clip (first to last frame), the layout of
//!   `qwen-vl-utils` (`linspace(0, total - 1, n).round()`); the actual rate is
//!   `(n - 1) / (time from first to last kept frame)`.
//!
//! The official SIS-Motion code's plan ([`FramePolicy::Official`], [`official_plan`]) is the
//! exception: it takes at most `max_frames` frames by `numpy.linspace(..., dtype=int)` over the
//! whole clip whatever its length or rate, and its `second_per_grid_ts` is always
//! `temporal_patch_size / 2.0` = 1.0, the processor's default rate, not the frames' real one.
//!
//! Plans work on frame counts and a frame rate ([`ClipTiming`]); the decoder in [`crate::video`]
//! matches the plan's timestamps to real frame timestamps, so variable-frame-rate files work
//! too, and a frame folder uses the indices directly.

use serde::{Deserialize, Serialize};

use crate::sampling::{Element, FPS_MIN_FRAMES, Sampling};

/// Errors raised while planning. They describe the clip, since the caller knows its path.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlanError {
    #[error("clip has no frames; nothing to sample")]
    EmptyClip,
    #[error("clip frame rate {0} is not a positive finite number")]
    BadClipFps(f64),
    #[error("training fps {0} must be positive")]
    TrainingFps(f64),
    #[error("training frames [{min_frames}, {max_frames}] hold no even count of at least 2")]
    TrainingFrames { min_frames: usize, max_frames: usize },
    /// An evaluation protocol with no frames to keep (`max_frames` 0 or a rate not positive).
    #[error("evaluation protocol keeps no frames (max_frames {max_frames}, rates {short_fps} and {medium_fps} fps)")]
    EvalKeepsNothing { max_frames: usize, short_fps: f64, medium_fps: f64 },
    /// A plan of a fixed count (`plan`: official, uniform) asked for no frame.
    #[error("the {plan} plan needs at least one frame")]
    NoFramesAsked { plan: &'static str },
    /// Plan timestamps a decoder cannot seek to.
    #[error("plan timestamps {0:?} must be finite and non-empty")]
    BadTimestamps(Vec<f64>),
    #[error("clip has {frames} frames, fewer than the plan's min_frames {min_frames}")]
    TooFewFrames { frames: usize, min_frames: usize },
}

/// What a plan needs to know about a clip: how many frames, at which (average) rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ClipTiming {
    pub frame_count: usize,
    pub fps: f64,
}

impl ClipTiming {
    pub fn new(frame_count: usize, fps: f64) -> Self {
        Self { frame_count, fps }
    }

    /// Length in seconds: `frame_count / fps` (every frame lasts one frame period).
    pub fn duration_s(&self) -> f64 {
        self.frame_count as f64 / self.fps
    }

    fn validate(&self) -> Result<(), PlanError> {
        if self.frame_count == 0 {
            return Err(PlanError::EmptyClip);
        }
        if !(self.fps.is_finite() && self.fps > 0.0) {
            return Err(PlanError::BadClipFps(self.fps));
        }
        Ok(())
    }
}

/// The frames one sample keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FramePlan {
    /// Frame indices into the clip, non-decreasing (repeats only when the clip is shorter
    /// than the plan insists on, e.g. one frame padded to a temporal pair).
    pub indices: Vec<usize>,
    /// Time of each kept frame in seconds from the clip start (`index / clip fps`).
    pub timestamps: Vec<f64>,
    /// The actual rate of the kept frames (frames per second of video time); for the official
    /// plan the rate its processor assumes instead ([`OFFICIAL_PROCESSOR_FPS`]).
    pub fps: f64,
}

impl FramePlan {
    pub fn len(&self) -> usize {
        self.indices.len()
    }

    pub fn is_empty(&self) -> bool {
        self.indices.is_empty()
    }

    /// Seconds covered by one temporal grid slot: `temporal_patch_size / fps`, the value
    /// Qwen2.5-VL's M-RoPE takes as `second_per_grid_ts`.
    pub fn second_per_grid(&self, temporal_patch_size: usize) -> f64 {
        temporal_patch_size as f64 / self.fps
    }

    /// The time of each temporal grid step as Qwen3-VL's processor computes it
    /// (`_calculate_timestamps`): frame times padded with the last to whole steps, then the mean
    /// of each step's first and last. `presampled` frames (the official code hands its kept
    /// frames over with `frames_indices = 0..n` at the processor's rate) are timed `k / fps`;
    /// otherwise each frame keeps its time in the clip, as when the processor samples itself.
    pub fn grid_seconds(&self, temporal_patch_size: usize, presampled: bool) -> Vec<f64> {
        let step = temporal_patch_size.max(1);
        let mut times: Vec<f64> = if presampled { (0..self.len()).map(|k| k as f64 / self.fps).collect() } else { self.timestamps.clone() };
        if let Some(&last) = times.last() {
            times.resize(times.len().div_ceil(step) * step, last);
        }
        times.chunks(step).map(|c| (c[0] + c[c.len() - 1]) / 2.0).collect()
    }
}

/// The SIS-Motion training plan: a target rate clamped to a frame range, the count
/// rounded down to a multiple of 2 (one temporal patch holds two frames).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TrainingPlan {
    pub fps: f64,
    pub min_frames: usize,
    pub max_frames: usize,
    pub sampling: Sampling,
}

impl Default for TrainingPlan {
    /// 2 FPS, 8–32 frames, motionvl's rate-exact plan (recipes name another).
    fn default() -> Self {
        Self { fps: 2.0, min_frames: 8, max_frames: 32, sampling: Sampling::RateExact }
    }
}

/// The SIS-Bench evaluation protocol: at most 32 frames; 2 FPS for clips under 16 s,
/// 1 FPS for 16–32 s, 32 frames spread uniformly above 32 s.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EvalProtocol {
    /// Clips shorter than this (seconds) use `short_fps`.
    pub short_below_s: f64,
    pub short_fps: f64,
    /// Clips up to and including this length (seconds) use `medium_fps`.
    pub medium_up_to_s: f64,
    pub medium_fps: f64,
    /// Frames of longer clips, and the cap for every clip.
    pub max_frames: usize,
    pub sampling: Sampling,
}

impl Default for EvalProtocol {
    fn default() -> Self {
        Self {
            short_below_s: 16.0,
            short_fps: 2.0,
            medium_up_to_s: 32.0,
            medium_fps: 1.0,
            max_frames: 32,
            // What the released checkpoints are evaluated with.
            sampling: Sampling::QwenVlUtils,
        }
    }
}

/// The rate the official code's Qwen2.5-VL processor assumes for every video (transformers'
/// `Qwen2VLVideoProcessor.fps` default): its `second_per_grid_ts` is `temporal_patch_size / 2.0`
/// (`motion/src/uav/data/data_processor.py:575-578`; evaluation passes no `fps`, so the
/// processor's default applies), whatever the clip's real rate.
pub const OFFICIAL_PROCESSOR_FPS: f64 = 2.0;

/// The official code's frame cap (`--max_frames 32` / `video_max_frames`).
pub const OFFICIAL_MAX_FRAMES: usize = 32;

fn official_max_frames() -> usize {
    OFFICIAL_MAX_FRAMES
}

/// A plan choice, as written in recipes (`kind = "training" | "sisbench_eval" | "uniform" |
/// "official"`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FramePolicy {
    Training(TrainingPlan),
    SisbenchEval(EvalProtocol),
    Uniform {
        frames: usize,
    },
    /// The official SIS-Motion code's plan, for training and evaluation alike: see
    /// [`official_plan`].
    Official {
        #[serde(default = "official_max_frames")]
        max_frames: usize,
    },
}

impl FramePolicy {
    /// Whether this policy hands its frames to the processor already sampled, timed by their
    /// position at the processor's rate (the official code's `frames_indices = 0..n`), rather
    /// than by their time in the clip; see [`FramePlan::grid_seconds`].
    pub fn presamples(&self) -> bool {
        matches!(self, Self::Official { .. })
    }

    /// The frames this policy keeps, chosen by its sampler (see [`crate::sampling`]).
    pub fn plan(&self, clip: ClipTiming) -> Result<FramePlan, PlanError> {
        self.plan_with(self.sampling(), clip)
    }

    /// The frames `sampling` keeps under this policy; the rate is the one sampled,
    /// `n / total × clip fps`, which makes `second_per_grid_ts = 2 / (n / total × fps)`. The
    /// official plan is its own whatever resizes its frames: `sampling` only picks the kernel.
    pub fn plan_with(&self, sampling: Sampling, clip: ClipTiming) -> Result<FramePlan, PlanError> {
        clip.validate()?;
        if let FramePolicy::Official { max_frames } = self {
            return official_plan(clip, *max_frames);
        }
        let Some(indices) = crate::sampling::sampled_indices(sampling, self.element(clip), clip.frame_count, clip.fps) else {
            return self.rate_exact_plan(clip);
        };
        let indices = indices.map_err(|n| PlanError::TooFewFrames { frames: clip.frame_count, min_frames: n.max(2) })?;
        let fps = indices.len() as f64 / clip.frame_count as f64 * clip.fps;
        Ok(with_frame_times(clip, indices, fps))
    }

    /// What this policy asks qwen-vl-utils' and transformers' samplers for: the training
    /// plan's rate and bounds; the SIS-Bench protocol's rate by clip length (`max_frames` a
    /// cap), or `max_frames` frames beyond `medium_up_to_s`; a uniform plan's count; the
    /// official plan's cap.
    fn element(&self, clip: ClipTiming) -> Element {
        match self {
            FramePolicy::Training(p) => Element::Fps { fps: p.fps, min_frames: p.min_frames, max_frames: Some(p.max_frames) },
            FramePolicy::SisbenchEval(p) => {
                let seconds = clip.duration_s();
                let fps = if seconds < p.short_below_s {
                    p.short_fps
                } else if seconds <= p.medium_up_to_s {
                    p.medium_fps
                } else {
                    return Element::Frames(p.max_frames);
                };
                Element::Fps { fps, min_frames: FPS_MIN_FRAMES, max_frames: Some(p.max_frames) }
            }
            FramePolicy::Uniform { frames } => Element::Frames(*frames),
            FramePolicy::Official { max_frames } => Element::Frames(*max_frames),
        }
    }

    /// The sampler and resize of this policy; a uniform plan is motionvl's own. The official
    /// code hands its frames to transformers' Qwen2-VL video processor, which resizes them
    /// with its own kernel and pixel bounds and samples nothing more (`do_sample_frames` is
    /// off by default).
    pub fn sampling(&self) -> Sampling {
        match self {
            FramePolicy::Training(p) => p.sampling,
            FramePolicy::SisbenchEval(p) => p.sampling,
            FramePolicy::Uniform { .. } => Sampling::RateExact,
            FramePolicy::Official { .. } => Sampling::Transformers,
        }
    }

    /// motionvl's rate-exact plans.
    fn rate_exact_plan(&self, clip: ClipTiming) -> Result<FramePlan, PlanError> {
        match self {
            FramePolicy::Training(p) => training_plan(clip, p),
            FramePolicy::SisbenchEval(p) => eval_plan(clip, p),
            FramePolicy::Uniform { frames } => uniform_plan(clip, *frames),
            FramePolicy::Official { max_frames } => official_plan(clip, *max_frames),
        }
    }

    /// The most frames a plan keeps.
    pub fn max_frames(&self) -> Option<usize> {
        match self {
            FramePolicy::Training(p) => Some(p.max_frames),
            FramePolicy::SisbenchEval(p) => Some(p.max_frames),
            FramePolicy::Uniform { frames } => Some(*frames),
            FramePolicy::Official { max_frames } => Some(*max_frames),
        }
    }

    /// The fewest frames a plan may be lowered to when a sample must shrink: the training
    /// plan's floor; evaluation, fixed counts and the official plan (which never shrinks a
    /// sample) never drop frames.
    pub fn min_frames(&self) -> Option<usize> {
        match self {
            FramePolicy::Training(p) => Some(p.min_frames),
            FramePolicy::SisbenchEval(_) | FramePolicy::Uniform { .. } | FramePolicy::Official { .. } => None,
        }
    }

    /// The same policy keeping at most `max_frames` frames.
    pub fn with_max_frames(&self, max_frames: usize) -> FramePolicy {
        match *self {
            FramePolicy::Training(p) => {
                FramePolicy::Training(TrainingPlan { max_frames: p.max_frames.min(max_frames), min_frames: p.min_frames.min(max_frames), ..p })
            }
            FramePolicy::SisbenchEval(p) => FramePolicy::SisbenchEval(EvalProtocol { max_frames: p.max_frames.min(max_frames), ..p }),
            FramePolicy::Uniform { frames } => FramePolicy::Uniform { frames: frames.min(max_frames) },
            FramePolicy::Official { max_frames: own } => FramePolicy::Official { max_frames: own.min(max_frames) },
        }
    }

    /// Whether the plan counts a video file's frames as the official code does (the header's
    /// count, else the stream's duration × average rate, floored) rather than motionvl's
    /// estimate; see `VideoInfo::timing_for`.
    pub fn counts_frames_officially(&self) -> bool {
        matches!(self, FramePolicy::Official { .. })
    }
}

/// How many frames fit at `fps` starting at t = 0 strictly before the clip ends:
/// `ceil(duration * fps)`, with a small slack so that 10.0 s at 2 FPS is 20, not 21.
fn frames_at_rate(clip: ClipTiming, fps: f64) -> usize {
    let exact = clip.duration_s() * fps;
    ((exact - 1e-9).ceil().max(1.0)) as usize
}

/// Frame k nearest to `k / fps`, clamped to the last frame.
fn rate_steps(clip: ClipTiming, fps: f64, n: usize) -> FramePlan {
    let last = clip.frame_count - 1;
    let indices = (0..n).map(|k| ((k as f64 / fps * clip.fps).round() as usize).min(last)).collect();
    with_frame_times(clip, indices, fps)
}

/// `n` frames evenly from the first to the last frame (qwen-vl-utils' `linspace(...).round()`).
fn spread(clip: ClipTiming, n: usize) -> FramePlan {
    let last = clip.frame_count - 1;
    if n <= 1 || last == 0 {
        // One position only: the plan's rate is the clip's own.
        return with_frame_times(clip, vec![0; n], clip.fps);
    }
    let step = last as f64 / (n - 1) as f64; // in frames
    let indices = (0..n).map(|k| ((k as f64 * step).round() as usize).min(last)).collect();
    with_frame_times(clip, indices, clip.fps / step)
}

/// Timestamps are those of the chosen frames (`index / clip fps`), not the ideal sampling
/// instants: a decoder matching them to presentation times then finds exactly these frames on
/// constant-rate files instead of facing rounding ties.
fn with_frame_times(clip: ClipTiming, indices: Vec<usize>, fps: f64) -> FramePlan {
    let timestamps = indices.iter().map(|i| *i as f64 / clip.fps).collect();
    FramePlan { indices, timestamps, fps }
}

/// The training plan. `n = ceil(duration * fps)` frames would keep the requested rate; it is
/// clamped to `[min_frames, max_frames]` (both rounded to even: up and down respectively),
/// rounded down to even, and never exceeds the clip's own frames (rounded down to even, but at
/// least 2, so a one-frame clip yields its frame twice). Unclamped plans keep the exact rate;
/// clamped ones spread the frames over the clip and report the rate that results.
pub fn training_plan(clip: ClipTiming, plan: &TrainingPlan) -> Result<FramePlan, PlanError> {
    clip.validate()?;
    if !(plan.fps.is_finite() && plan.fps > 0.0) {
        return Err(PlanError::TrainingFps(plan.fps));
    }
    let min_even = plan.min_frames.div_ceil(2) * 2;
    let max_even = plan.max_frames / 2 * 2;
    if max_even < 2 || min_even > max_even {
        return Err(PlanError::TrainingFrames { min_frames: plan.min_frames, max_frames: plan.max_frames });
    }
    if clip.frame_count < plan.min_frames {
        return Err(PlanError::TooFewFrames { frames: clip.frame_count, min_frames: plan.min_frames });
    }
    let at_rate = frames_at_rate(clip, plan.fps);
    let clip_cap = (clip.frame_count / 2 * 2).max(2);
    let n = (at_rate.clamp(min_even, max_even) / 2 * 2).min(clip_cap);
    // The exact rate survives when only the odd tail frame was dropped and the clip holds
    // those frames; otherwise spread.
    if (n == at_rate || n + 1 == at_rate) && n <= clip.frame_count && plan.fps <= clip.fps {
        Ok(rate_steps(clip, plan.fps, n))
    } else {
        Ok(spread(clip, n))
    }
}

/// The fewest frames a video under evaluation may have: one temporal patch.
pub const EVAL_MIN_FRAMES: usize = 2;

/// The SIS-Bench evaluation plan. Rate-based regimes take `ceil(duration * fps)`
/// frames at exactly that rate (capped at `max_frames` and at the clip's frame count, in which
/// case they spread); clips longer than `medium_up_to_s` get `max_frames` spread frames. Counts
/// are not forced even: the preprocessor repeats the last frame like the reference does.
pub fn eval_plan(clip: ClipTiming, protocol: &EvalProtocol) -> Result<FramePlan, PlanError> {
    clip.validate()?;
    // qwen-vl-utils refuses a video of fewer frames than one temporal patch (`FRAME_FACTOR`).
    if clip.frame_count < EVAL_MIN_FRAMES {
        return Err(PlanError::TooFewFrames { frames: clip.frame_count, min_frames: EVAL_MIN_FRAMES });
    }
    if protocol.max_frames == 0 || !(protocol.short_fps > 0.0 && protocol.medium_fps > 0.0) {
        return Err(PlanError::EvalKeepsNothing { max_frames: protocol.max_frames, short_fps: protocol.short_fps, medium_fps: protocol.medium_fps });
    }
    let d = clip.duration_s();
    let fps = if d < protocol.short_below_s {
        protocol.short_fps
    } else if d <= protocol.medium_up_to_s {
        protocol.medium_fps
    } else {
        return Ok(spread(clip, protocol.max_frames.min(clip.frame_count)));
    };
    let at_rate = frames_at_rate(clip, fps);
    let n = at_rate.min(protocol.max_frames).min(clip.frame_count);
    if n == at_rate && fps <= clip.fps { Ok(rate_steps(clip, fps, n)) } else { Ok(spread(clip, n)) }
}

/// The official code's frame indices of a clip of `total` frames: every frame when
/// `total <= max_frames`, else `sorted(set(numpy.linspace(0, total - 1, max_frames,
/// dtype=int)))` (`motion/src/eval/dataset_utils.py:139-189`,
/// `motion/src/uav/data/data_processor.py:205-241`). numpy computes `i × ((total − 1) /
/// (max_frames − 1))` in f64, sets the last value to `total − 1` and floors; the f64 product
/// sometimes lands just under a whole number (15 of 123 frames: index 60 where the exact
/// quotient is 61), so the same f64 arithmetic is used here, not integer division. With
/// `total > max_frames` the step exceeds one frame, so `set()` never merges two indices; the
/// result is sorted and unique either way.
pub fn official_indices(total: usize, max_frames: usize) -> Vec<usize> {
    if total <= max_frames {
        return (0..total).collect();
    }
    if max_frames <= 1 {
        // numpy's one-point linspace is its start.
        return vec![0; max_frames];
    }
    let last = total - 1;
    let step = last as f64 / (max_frames - 1) as f64;
    let mut indices: Vec<usize> = (0..max_frames).map(|i| if i + 1 == max_frames { last } else { (i as f64 * step).floor() as usize }).collect();
    indices.dedup();
    indices
}

/// The official plan: [`official_indices`] of the clip, timestamps of those frames (for the
/// decoder), and [`OFFICIAL_PROCESSOR_FPS`] as the rate, so that `second_per_grid_ts` is
/// `temporal_patch_size / 2.0` = 1.0 whatever the clip's rate or length.
pub fn official_plan(clip: ClipTiming, max_frames: usize) -> Result<FramePlan, PlanError> {
    clip.validate()?;
    if max_frames == 0 {
        return Err(PlanError::NoFramesAsked { plan: "official" });
    }
    Ok(with_frame_times(clip, official_indices(clip.frame_count, max_frames), OFFICIAL_PROCESSOR_FPS))
}

/// Exactly `frames` frames spread evenly over the clip. When the clip has fewer frames some
/// repeat (the caller asked for a fixed count); the reported rate is that of the spread.
pub fn uniform_plan(clip: ClipTiming, frames: usize) -> Result<FramePlan, PlanError> {
    clip.validate()?;
    if frames == 0 {
        return Err(PlanError::NoFramesAsked { plan: "uniform" });
    }
    Ok(spread(clip, frames))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn training_keeps_rate_when_it_fits() {
        // 10 s at 30 FPS -> 20 frames at exactly 2 FPS.
        let p = training_plan(ClipTiming::new(300, 30.0), &TrainingPlan::default()).unwrap();
        assert_eq!(p.len(), 20);
        assert_close(p.fps, 2.0);
        assert_eq!(&p.indices[..4], &[0, 15, 30, 45]);
        assert_close(p.timestamps[19], 9.5);
        assert_close(p.second_per_grid(2), 1.0);
    }

    #[test]
    fn training_caps_long_video_and_reports_actual_fps() {
        // 60 s at 25 FPS: 120 frames at 2 FPS, capped to 32 spread over the clip.
        let clip = ClipTiming::new(1500, 25.0);
        let p = training_plan(clip, &TrainingPlan::default()).unwrap();
        assert_eq!(p.len(), 32);
        assert_eq!(p.indices[0], 0);
        assert_eq!(*p.indices.last().unwrap(), 1499);
        // 31 gaps over 1499 frames: 0.517 FPS, not the nominal 2.
        assert_close(p.fps, 31.0 * 25.0 / 1499.0);
        assert!(p.second_per_grid(2) > 3.8);
        // Timestamps agree with the reported rate on average.
        assert_close((p.timestamps[31] - p.timestamps[0]) / 31.0, 1.0 / p.fps);
        assert_close(p.timestamps[1], 48.0 / 25.0);
    }

    #[test]
    fn training_floors_short_video_to_min_frames() {
        // 2 s at 30 FPS: 4 frames at 2 FPS, raised to 8 -> 8 spread, ~3.6 FPS.
        let p = training_plan(ClipTiming::new(60, 30.0), &TrainingPlan::default()).unwrap();
        assert_eq!(p.len(), 8);
        assert_close(p.fps, 7.0 * 30.0 / 59.0);
        assert_eq!(*p.indices.last().unwrap(), 59);
    }

    #[test]
    fn training_count_is_even_and_bounded_by_clip() {
        // 10.5 s -> 21 at rate -> 20, still exact 2 FPS.
        let p = training_plan(ClipTiming::new(315, 30.0), &TrainingPlan::default()).unwrap();
        assert_eq!(p.len(), 20);
        assert_close(p.fps, 2.0);
        // Fewer frames than the plan's minimum: an error, not a clip padded with copies.
        let few = TrainingPlan { min_frames: 4, ..TrainingPlan::default() };
        for frames in [1, 3] {
            let err = training_plan(ClipTiming::new(frames, 30.0), &few).unwrap_err();
            assert_eq!(err, PlanError::TooFewFrames { frames, min_frames: 4 });
        }
        // Five frames at 10 FPS (0.5 s): 1 frame at rate, raised to 4 spread over the clip.
        let p = training_plan(ClipTiming::new(5, 10.0), &few).unwrap();
        assert_eq!(p.indices, vec![0, 1, 3, 4]);
        assert_close(p.fps, 3.0 * 10.0 / 4.0);
        for frames in 8..200 {
            let p = training_plan(ClipTiming::new(frames, 7.0), &TrainingPlan::default()).unwrap();
            assert_eq!(p.len() % 2, 0, "{frames} frames");
            assert!(p.len() <= 32 && p.indices.iter().all(|i| *i < frames));
            assert!(p.indices.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn training_rate_above_clip_rate_spreads() {
        // A 1 FPS slideshow of 10 frames at a 2 FPS plan: 20 at rate, but the clip has 10.
        let p = training_plan(ClipTiming::new(10, 1.0), &TrainingPlan::default()).unwrap();
        assert_eq!(p.indices, (0..10).collect::<Vec<_>>());
        assert_close(p.fps, 1.0);
    }

    #[test]
    fn training_rejects_bad_settings() {
        let bad = TrainingPlan { fps: 2.0, min_frames: 9, max_frames: 9, ..TrainingPlan::default() };
        assert_eq!(training_plan(ClipTiming::new(100, 10.0), &bad), Err(PlanError::TrainingFrames { min_frames: 9, max_frames: 9 }));
        assert_eq!(training_plan(ClipTiming::new(0, 10.0), &TrainingPlan::default()), Err(PlanError::EmptyClip));
        assert!(matches!(training_plan(ClipTiming::new(10, 0.0), &TrainingPlan::default()), Err(PlanError::BadClipFps(_))));
    }

    #[test]
    fn eval_protocol_regimes() {
        let proto = EvalProtocol::default();
        // 10 s -> 2 FPS, 20 frames.
        let p = eval_plan(ClipTiming::new(150, 15.0), &proto).unwrap();
        assert_eq!(p.len(), 20);
        assert_close(p.fps, 2.0);
        // 15.9 s -> still 2 FPS: 32 frames (t = 0 .. 15.5).
        let p = eval_plan(ClipTiming::new(159, 10.0), &proto).unwrap();
        assert_eq!(p.len(), 32);
        assert_close(p.fps, 2.0);
        // Exactly 16 s -> 1 FPS, 16 frames.
        let p = eval_plan(ClipTiming::new(160, 10.0), &proto).unwrap();
        assert_eq!(p.len(), 16);
        assert_close(p.fps, 1.0);
        // 25 s -> 25 frames at 1 FPS (odd counts allowed; the processor pads).
        let p = eval_plan(ClipTiming::new(375, 15.0), &proto).unwrap();
        assert_eq!(p.len(), 25);
        assert_eq!(p.indices[1], 15);
        // Exactly 32 s -> 32 frames at 1 FPS.
        let p = eval_plan(ClipTiming::new(320, 10.0), &proto).unwrap();
        assert_eq!(p.len(), 32);
        assert_close(p.fps, 1.0);
        // 100 s -> 32 uniform frames, actual rate 31 / 99.9 s.
        let p = eval_plan(ClipTiming::new(1000, 10.0), &proto).unwrap();
        assert_eq!(p.len(), 32);
        assert_eq!((p.indices[0], p.indices[31]), (0, 999));
        assert_close(p.fps, 31.0 * 10.0 / 999.0);
    }

    #[test]
    fn eval_protocol_short_and_sparse_clips() {
        let proto = EvalProtocol::default();
        // 0.3 s clip: one frame at t = 0.
        let p = eval_plan(ClipTiming::new(9, 30.0), &proto).unwrap();
        assert_eq!(p.indices, vec![0]);
        // A one-frame "video" is refused, as qwen-vl-utils refuses it.
        assert_eq!(eval_plan(ClipTiming::new(1, 30.0), &proto), Err(PlanError::TooFewFrames { frames: 1, min_frames: 2 }));
        // 8 s at 1 FPS source: 16 wanted at 2 FPS, 8 available -> every frame, 1 FPS.
        let p = eval_plan(ClipTiming::new(8, 1.0), &proto).unwrap();
        assert_eq!(p.indices, (0..8).collect::<Vec<_>>());
        assert_close(p.fps, 1.0);
    }

    #[test]
    fn uniform_plan_counts() {
        let p = uniform_plan(ClipTiming::new(100, 25.0), 8).unwrap();
        assert_eq!(p.indices, vec![0, 14, 28, 42, 57, 71, 85, 99]);
        assert_close(p.fps, 7.0 * 25.0 / 99.0);
        // More frames than the clip: repeats, count kept.
        let p = uniform_plan(ClipTiming::new(3, 25.0), 5).unwrap();
        assert_eq!(p.indices, vec![0, 1, 1, 2, 2]);
        assert!(uniform_plan(ClipTiming::new(3, 25.0), 0).is_err());
    }

    /// Indices printed by numpy 2.2.6 (the official environment's pin):
    /// `sorted(set(np.linspace(0, total - 1, m, dtype=int)))`.
    #[test]
    fn official_indices_match_numpy() {
        let numpy: [(usize, usize, &[usize]); 6] = [
            (40, 32, &[0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 15, 16, 17, 18, 20, 21, 22, 23, 25, 26, 27, 28, 30, 31, 32, 33, 35, 36, 37, 39]),
            (33, 32, &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 32]),
            (100, 32, &[0, 3, 6, 9, 12, 15, 19, 22, 25, 28, 31, 35, 38, 41, 44, 47, 51, 54, 57, 60, 63, 67, 70, 73, 76, 79, 83, 86, 89, 92, 95, 99]),
            (
                1500,
                32,
                &[
                    0, 48, 96, 145, 193, 241, 290, 338, 386, 435, 483, 531, 580, 628, 676, 725, 773, 822, 870, 918, 967, 1015, 1063, 1112, 1160,
                    1208, 1257, 1305, 1353, 1402, 1450, 1499,
                ],
            ),
            // f64 rounding: 7 × (122 / 14) lands under 61, and numpy floors it to 60.
            (123, 15, &[0, 8, 17, 26, 34, 43, 52, 60, 69, 78, 87, 95, 104, 113, 122]),
            (31, 23, &[0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 19, 20, 21, 23, 24, 25, 27, 28, 30]),
        ];
        for (total, m, want) in numpy {
            assert_eq!(official_indices(total, m), want, "{total} frames, max {m}");
        }
        // At or under the cap: every frame, none repeated or padded.
        assert_eq!(official_indices(32, 32), (0..32).collect::<Vec<_>>());
        assert_eq!(official_indices(5, 32), vec![0, 1, 2, 3, 4]);
        assert_eq!(official_indices(1, 32), vec![0]);
        assert_eq!(official_indices(9, 1), vec![0]);
    }

    #[test]
    fn official_plan_reports_one_second_per_grid_whatever_the_clip() {
        let policy = FramePolicy::Official { max_frames: 32 };
        // 50 s at 30 FPS and 1.3 s at 25 FPS: the real rates of the kept frames (0.62 and 25
        // FPS) would give 3.2 s and 0.08 s per grid; the official code uses 2 / 2.0.
        for clip in [ClipTiming::new(1500, 30.0), ClipTiming::new(33, 25.0), ClipTiming::new(7, 1.0)] {
            let plan = policy.plan(clip).unwrap();
            assert_eq!(plan.indices, official_indices(clip.frame_count, 32));
            assert_close(plan.second_per_grid(2), 1.0);
            // Timestamps are those of the chosen frames, for the decoder to find them.
            for (i, t) in plan.indices.iter().zip(&plan.timestamps) {
                assert_close(*t, *i as f64 / clip.fps);
            }
        }
        // The sampler only picks the resize kernel; the frames stay the official ones.
        let clip = ClipTiming::new(100, 30.0);
        assert_eq!(policy.plan_with(Sampling::QwenVlUtils, clip).unwrap().indices, official_indices(100, 32));
        assert_eq!(policy.sampling(), Sampling::Transformers);
        assert_eq!(policy.with_max_frames(8), FramePolicy::Official { max_frames: 8 });
        assert_eq!(policy.min_frames(), None);
        assert_eq!(FramePolicy::Official { max_frames: 0 }.plan(clip), Err(PlanError::NoFramesAsked { plan: "official" }));
        assert_eq!(policy.plan(ClipTiming::new(0, 30.0)), Err(PlanError::EmptyClip));
    }

    #[test]
    fn policy_parses_from_recipe() {
        let p: FramePolicy = serde_json::from_str(r#"{"kind": "training", "fps": 1.0}"#).unwrap();
        assert_eq!(p, FramePolicy::Training(TrainingPlan { fps: 1.0, min_frames: 8, max_frames: 32, sampling: Sampling::RateExact }));
        let p: FramePolicy = serde_json::from_str(r#"{"kind": "uniform", "frames": 16}"#).unwrap();
        assert_eq!(p.plan(ClipTiming::new(100, 10.0)).unwrap().len(), 16);
        let p: FramePolicy = serde_json::from_str(r#"{"kind": "sisbench_eval"}"#).unwrap();
        assert_eq!(p, FramePolicy::SisbenchEval(EvalProtocol::default()));
        let p: FramePolicy = serde_json::from_str(r#"{"kind": "official"}"#).unwrap();
        assert_eq!(p, FramePolicy::Official { max_frames: 32 });
        let p: FramePolicy = serde_json::from_str(r#"{"kind": "official", "max_frames": 16}"#).unwrap();
        assert_eq!(p, FramePolicy::Official { max_frames: 16 });
    }
}
