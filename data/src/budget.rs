//! Fitting video samples to `max_seq_len` instead of dropping them.
//!
//! A SIS-Motion sample at 2 FPS, 8–32 frames and up to 512·28² pixels per frame needs up to
//! 8k vision tokens; under the paper's 2048 most long clips would be left out. qwen-vl-utils
//! handles the same pressure with a total-pixel budget: it first lowers the pixels per frame,
//! never below `min_pixels`. Here the budget is the sequence itself: a sample that does not fit
//! first has its per-frame pixel bound lowered step by step (one `factor²` at a time) toward
//! `min_pixels`, then its frame count lowered (one temporal patch at a time) toward
//! `min_frames`. Fewer frames are spread over the whole clip by the frame plan, which reports
//! the rate that results, so `second_per_grid_ts` keeps the clip's real timing. Only a sample
//! that does not fit at the minimum of both is dropped.
//!
//! The search needs no decoding: grids follow from the container header, and token counts
//! are linear in the vision tokens of each video (one pad token per merged patch).

use crate::frames::{ClipTiming, FramePolicy};
use crate::preprocess::PreprocessConfig;
use crate::sampling::video_size;

/// Per-sample bounds on its videos, found so that the sample fits `max_seq_len`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VideoLimits {
    /// Upper bound on `height × width` of every frame.
    pub max_pixels: usize,
    /// Upper bound on the frames of every video.
    pub max_frames: usize,
}

/// What a media processor knows about a sample's videos from their headers: enough to predict
/// their grids under any [`VideoLimits`].
#[derive(Debug, Clone, PartialEq)]
pub struct VideoBudget {
    /// `(height, width, timing)` of each video, in the sample's order.
    pub videos: Vec<(usize, usize, ClipTiming)>,
    pub policy: FramePolicy,
    pub config: PreprocessConfig,
}

impl VideoBudget {
    /// The limits the processor uses when nothing is fitted.
    pub fn unlimited(&self) -> VideoLimits {
        VideoLimits { max_pixels: self.config.max_pixels, max_frames: self.policy.max_frames().unwrap_or(usize::MAX) }
    }

    /// Video grids `[t, h, w]` (in patches) under `limits`.
    pub fn grids(&self, limits: VideoLimits) -> Result<Vec<[usize; 3]>, String> {
        let policy = self.policy.with_max_frames(limits.max_frames);
        let cfg = PreprocessConfig { max_pixels: limits.max_pixels.max(self.config.min_pixels), ..self.config.clone() };
        self.videos
            .iter()
            .map(|&(height, width, timing)| {
                let plan = policy.plan(timing).map_err(|e| e.to_string())?;
                let (h, w) = video_size(policy.sampling(), height, width, plan.len(), &cfg).map_err(|e| e.to_string())?;
                Ok([plan.len().div_ceil(cfg.temporal_patch_size), h / cfg.patch_size, w / cfg.patch_size])
            })
            .collect()
    }

    /// The `<t seconds>` of every temporal step of each video under `limits` (see
    /// [`crate::frames::FramePlan::grid_seconds`]).
    pub fn grid_seconds(&self, limits: VideoLimits) -> Result<Vec<Vec<f64>>, String> {
        let policy = self.policy.with_max_frames(limits.max_frames);
        self.videos
            .iter()
            .map(|&(_, _, timing)| {
                let plan = policy.plan(timing).map_err(|e| e.to_string())?;
                Ok(plan.grid_seconds(self.config.temporal_patch_size, policy.presamples()))
            })
            .collect()
    }

    /// Candidate limits from the processor's own down to the smallest allowed, in the order
    /// they are tried: pixels first (full frames), then frames (at `min_pixels`).
    pub fn candidates(&self) -> Vec<VideoLimits> {
        let cfg = &self.config;
        let step = cfg.factor() * cfg.factor();
        let full = self.unlimited();
        let mut out: Vec<VideoLimits> = Vec::new();
        let mut pixels = cfg.max_pixels;
        loop {
            out.push(VideoLimits { max_pixels: pixels, max_frames: full.max_frames });
            if pixels <= cfg.min_pixels {
                break;
            }
            pixels = pixels.saturating_sub(step).max(cfg.min_pixels);
        }
        if let (Some(max), Some(min)) = (self.policy.max_frames(), self.policy.min_frames()) {
            let tp = cfg.temporal_patch_size.max(1);
            let mut frames = max;
            while frames > min.max(tp) {
                frames = frames.saturating_sub(tp).max(min.max(tp));
                out.push(VideoLimits { max_pixels: cfg.min_pixels, max_frames: frames });
            }
        }
        out
    }
}

/// Vision tokens of one medium with grid `[t, h, w]`: one per merged block.
pub fn vision_tokens(grid: [usize; 3], merge_size: usize) -> usize {
    grid[0] * grid[1] * grid[2] / (merge_size * merge_size).max(1)
}

/// The first candidate under which `tokens_with(grids) <= max_seq_len`, with its token count.
/// `tokens_with` predicts a sample's length from its video grids.
pub fn fit_videos(
    budget: &VideoBudget,
    max_seq_len: usize,
    tokens_with: impl Fn(&[[usize; 3]]) -> usize,
) -> Result<Option<(VideoLimits, usize)>, String> {
    for limits in budget.candidates() {
        let tokens = tokens_with(&budget.grids(limits)?);
        if tokens <= max_seq_len {
            return Ok(Some((limits, tokens)));
        }
    }
    Ok(None)
}

/// How one sample meets `max_seq_len`.
#[derive(Debug, Clone, PartialEq)]
pub enum SampleFit {
    /// Fits as it is, in `tokens`.
    Fits { tokens: usize },
    /// Fits with its videos limited.
    Fitted { limits: VideoLimits, tokens: usize },
    /// Does not fit even at the smallest limits; `tokens` is its length there.
    TooLong { tokens: usize },
}

impl SampleFit {
    pub fn tokens(&self) -> usize {
        match self {
            SampleFit::Fits { tokens } | SampleFit::Fitted { tokens, .. } | SampleFit::TooLong { tokens } => *tokens,
        }
    }
}

/// The outcome of checking a whole training set: the counts, and each sample's fit (`None`
/// where it could not be predicted or the sample failed).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DataCheck {
    pub report: DataReport,
    pub fits: Vec<Option<SampleFit>>,
}

/// The counts `train sft --check-data` prints and every training run logs at its start.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DataReport {
    pub samples: usize,
    /// Fit as they are.
    pub kept: usize,
    /// Fit once their videos were limited.
    pub fitted: usize,
    /// Too long even at the smallest limits.
    pub dropped: usize,
    /// Samples whose media or text could not be read (left out under `skip_bad`).
    pub failed: usize,
    /// Longest and mean length of the samples that are trained on.
    pub max_tokens: usize,
    pub mean_tokens: f64,
    /// The longest sample at its smallest limits: `(id, file:line, tokens)`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub longest: Option<(String, String, usize)>,
}

impl DataReport {
    /// Samples a run trains on.
    pub fn usable(&self) -> usize {
        self.kept + self.fitted
    }

    /// The compact one-line JSON of `--check-data`.
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frames::TrainingPlan;

    fn budget(seconds: f64) -> VideoBudget {
        VideoBudget {
            videos: vec![(720, 1280, ClipTiming::new((seconds * 30.0) as usize, 30.0))],
            policy: FramePolicy::Training(TrainingPlan::default()),
            config: PreprocessConfig::sis_motion_training(),
        }
    }

    #[test]
    fn candidates_lower_pixels_before_frames() {
        let b = budget(30.0);
        let c = b.candidates();
        assert_eq!(c[0], VideoLimits { max_pixels: 512 * 784, max_frames: 32 });
        let first_frames = c.iter().position(|l| l.max_frames < 32).unwrap_or(c.len());
        assert!(c[..first_frames].iter().all(|l| l.max_frames == 32));
        assert!(c[first_frames..].iter().all(|l| l.max_pixels == 128 * 784));
        assert_eq!(c.last().map(|l| l.max_frames), Some(8));
        assert!(c.windows(2).all(|w| w[1].max_pixels <= w[0].max_pixels && w[1].max_frames <= w[0].max_frames));
    }

    #[test]
    fn fitting_stops_at_the_first_candidate_that_fits() {
        let b = budget(30.0);
        let tokens = |grids: &[[usize; 3]]| 100 + grids.iter().map(|g| vision_tokens(*g, 2)).sum::<usize>();
        let full = tokens(&b.grids(b.unlimited()).unwrap_or_default());
        assert!(full > 2048, "{full}");
        let (limits, n) = fit_videos(&b, 2048, tokens).unwrap_or_default().unwrap_or_else(|| panic!("no fit"));
        assert!(n <= 2048);
        // One step less shrinking would not fit.
        let all = b.candidates();
        let at = all.iter().position(|l| *l == limits).unwrap_or(0);
        assert!(at > 0);
        assert!(tokens(&b.grids(all[at - 1]).unwrap_or_default()) > 2048);
        assert_eq!(fit_videos(&b, 10, tokens).unwrap_or_default(), None);
    }
}
