//! Frame sampling and resizing, named after the pipeline each reproduces.
//!
//! - [`Sampling::QwenVlUtils`]: qwen-vl-utils' `fetch_video`, what the released Qwen2.5-VL
//!   checkpoints are evaluated with. `smart_nframes` picks an even count (`fps` × duration
//!   clamped to `[min_frames, max_frames]`, or a fixed `nframes` rounded to even), the frames
//!   are `linspace(0, total - 1, n).round()`, the sampled rate is `n / total × fps` (so
//!   `second_per_grid_ts = 2 / (n / total × fps)`), the per-frame pixel cap is its own
//!   (`VIDEO_MAX_TOKEN_NUM` and the total-pixel share) and frames are resized by torchvision's
//!   float path: antialiased bicubic in f32, rounded once at the end ([`resize_frames_f32`]).
//! - [`Sampling::Transformers`]: the Qwen2-VL video processor's own `sample_frames`
//!   (`arange(0, total, total / n).int()`, the count from `fps` like `smart_nframes` but with
//!   `min_frames` not rounded to even) and its uint8 resize kernel.
//! - [`Sampling::Qwen3Vl`]: the Qwen3-VL video processor's `sample_frames` (transformers 4.57
//!   and 5 alike): `int(total / video_fps × fps)` clamped to `[min_frames, max_frames]` and the
//!   clip, not rounded to even (the processor repeats the last frame to fill a temporal pair),
//!   or a fixed count as given; the frames are numpy's `linspace(0, total - 1, n).round()`; the
//!   uint8 resize of transformers' video processors.
//! - [`Sampling::RateExact`]: motionvl's own plans ([`crate::frames`]): frame k at `k / fps`
//!   when the rate fits, spread otherwise, the actual rate reported; the uint8 resize.
//!
//! A frame policy means the same numbers to every sampler: the training plan's
//! `fps`/`min_frames`/`max_frames`; the SIS-Bench protocol's rate by clip length (`max_frames`
//! a cap) and a fixed `max_frames` beyond `medium_up_to_s`; a uniform plan's frame count.

use ndarray::{Array3, Array4, ArrayView3, ArrayView4};
use serde::{Deserialize, Serialize};

use crate::preprocess::{
    PreprocessConfig, PreprocessError, VideoBound, bicubic_aa_kernel, resize_each, resize_frames, smart_resize, smart_resize_clip,
};

/// Which pipeline's frame choice and resize a video gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sampling {
    QwenVlUtils,
    Transformers,
    #[serde(rename = "qwen3-vl")]
    Qwen3Vl,
    RateExact,
}

/// qwen-vl-utils' and transformers' default `min_frames` when sampling by rate.
pub const FPS_MIN_FRAMES: usize = 4;
/// Their default `max_frames`.
const FPS_MAX_FRAMES: usize = 768;
/// qwen-vl-utils' `VIDEO_MAX_TOKEN_NUM`: merged tokens per frame.
const VIDEO_MAX_TOKEN_NUM: usize = 768;
/// qwen-vl-utils' total-pixel budget: `MODEL_SEQ_LEN (128000) × factor² × 0.9`.
const MODEL_SEQ_LEN: f64 = 128_000.0;
/// One temporal patch: both samplers count frames in pairs.
const FRAME_FACTOR: usize = 2;

/// What a frame policy asks a sampler for on one clip (qwen-vl-utils' video element): a rate
/// with bounds, or a frame count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Element {
    Fps { fps: f64, min_frames: usize, max_frames: Option<usize> },
    Frames(usize),
}

/// Python's `round(x / f) * f`, `math.floor`, `math.ceil` by a factor.
fn round_by(x: f64, f: usize) -> usize {
    ((x / f as f64).round_ties_even() as usize) * f
}
fn floor_by(x: f64, f: usize) -> usize {
    ((x / f as f64).floor().max(0.0) as usize) * f
}
fn ceil_by(x: f64, f: usize) -> usize {
    ((x / f as f64).ceil().max(0.0) as usize) * f
}

/// qwen-vl-utils' `smart_nframes`; `Err` holds the count it refuses.
fn smart_nframes(element: Element, total: usize, video_fps: f64) -> Result<usize, usize> {
    let n = match element {
        Element::Frames(n) => round_by(n as f64, FRAME_FACTOR),
        Element::Fps { fps, min_frames, max_frames } => {
            let min = ceil_by(min_frames as f64, FRAME_FACTOR) as f64;
            let max = floor_by(max_frames.unwrap_or(FPS_MAX_FRAMES.min(total)) as f64, FRAME_FACTOR) as f64;
            let n = (total as f64 / video_fps * fps).max(min).min(max).min(total as f64);
            floor_by(n, FRAME_FACTOR)
        }
    };
    if n < FRAME_FACTOR || n > total { Err(n) } else { Ok(n) }
}

/// transformers' `Qwen2VLVideoProcessor.sample_frames` frame count; `Err` holds the count it
/// refuses.
fn transformers_nframes(element: Element, total: usize, video_fps: f64) -> Result<usize, usize> {
    let n = match element {
        Element::Frames(n) => round_by(n as f64, FRAME_FACTOR),
        Element::Fps { fps, min_frames, max_frames } => {
            let max = floor_by(max_frames.unwrap_or(FPS_MAX_FRAMES).min(total) as f64, FRAME_FACTOR) as f64;
            let n = (total as f64 / video_fps * fps).max(min_frames as f64).min(max).min(total as f64);
            floor_by(n, FRAME_FACTOR)
        }
    };
    if n == 0 || n > total { Err(n) } else { Ok(n) }
}

/// transformers' `Qwen3VLVideoProcessor.sample_frames` frame count; `Err` holds the count it
/// refuses (none: a clip of one frame gives it once).
fn qwen3_nframes(element: Element, total: usize, video_fps: f64) -> Result<usize, usize> {
    let n = match element {
        Element::Frames(n) => n,
        Element::Fps { fps, min_frames, max_frames } => {
            // Python's `int()` of a non-negative float: truncation.
            let n = (total as f64 / video_fps * fps) as usize;
            n.max(min_frames).min(max_frames.unwrap_or(FPS_MAX_FRAMES)).min(total)
        }
    };
    if n == 0 { Err(n) } else { Ok(n) }
}

/// `np.linspace(0, last, n).round()`: float64 `i × (last / (n − 1))`, the last value `last`
/// exactly, rounded half to even (`4.5` → 4).
fn linspace_round_f64(last: usize, n: usize) -> Vec<usize> {
    if n == 1 {
        return vec![0];
    }
    let step = last as f64 / (n - 1) as f64;
    (0..n).map(|i| if i == n - 1 { last } else { (i as f64 * step).round_ties_even() as usize }).collect()
}

/// `torch.linspace(0, last, n)` (float32, its two-sided scalar formula) then `.round()`
/// (half to even). With `n` even the exact values have an odd denominator, so no value sits
/// on a tie and the last-bit differences of torch's vectorised path cannot change an index.
fn linspace_round(last: usize, n: usize) -> Vec<usize> {
    if n == 1 {
        return vec![0];
    }
    let (start, end) = (0f32, last as f32);
    let step = (end - start) / (n - 1) as f32;
    let halfway = n / 2;
    (0..n)
        .map(|i| {
            let v = if i < halfway { start + step * i as f32 } else { end - step * (n - i - 1) as f32 };
            v.round_ties_even().max(0.0) as usize
        })
        .collect()
}

/// `torch.arange(0, total, total / n).int()`: values in f64 stored as f32, truncated.
fn arange_int(total: usize, n: usize) -> Vec<usize> {
    let step = total as f64 / n as f64;
    let size = (total as f64 / step).ceil() as usize;
    (0..size).map(|i| (i as f64 * step) as f32 as usize).collect()
}

/// The frames qwen-vl-utils or transformers keeps of a clip of `total` frames at `video_fps`
/// (`None` for [`Sampling::RateExact`], whose plans are [`crate::frames`]' own). `Err` holds the
/// frame count the sampler refuses (fewer than a temporal pair, or more than the clip has).
pub fn sampled_indices(sampling: Sampling, element: Element, total: usize, video_fps: f64) -> Option<Result<Vec<usize>, usize>> {
    match sampling {
        Sampling::QwenVlUtils => Some(smart_nframes(element, total, video_fps).map(|n| linspace_round(total.saturating_sub(1), n))),
        Sampling::Transformers => Some(transformers_nframes(element, total, video_fps).map(|n| arange_int(total, n))),
        Sampling::Qwen3Vl => Some(qwen3_nframes(element, total, video_fps).map(|n| linspace_round_f64(total.saturating_sub(1), n))),
        Sampling::RateExact => None,
    }
}

/// The size frames are resized to: qwen-vl-utils bounds a frame by its token cap and an even
/// share of its total-pixel budget (never below 1.05 × `min_pixels`) besides `max_pixels`; the
/// processor's paths take the config's bounds as they are.
pub fn video_size(sampling: Sampling, height: usize, width: usize, frames: usize, cfg: &PreprocessConfig) -> Result<(usize, usize), PreprocessError> {
    let factor = cfg.factor();
    if cfg.video_bound == VideoBound::Clip {
        // Qwen3-VL's processor resizes the frames it is given (`do_sample_frames` false), with
        // its own rule over the whole clip.
        return smart_resize_clip(frames, height, width, cfg.temporal_patch_size, factor, cfg.min_pixels, cfg.max_pixels);
    }
    let max_pixels = match sampling {
        Sampling::QwenVlUtils => {
            let f2 = (factor * factor) as f64;
            let share = MODEL_SEQ_LEN * f2 * 0.9 / frames.max(1) as f64 * FRAME_FACTOR as f64;
            let cap = ((VIDEO_MAX_TOKEN_NUM as f64 * f2).min(share)).max((cfg.min_pixels as f64 * 1.05).floor());
            (cfg.max_pixels as f64).min(cap) as usize
        }
        Sampling::Transformers | Sampling::Qwen3Vl | Sampling::RateExact => cfg.max_pixels,
    };
    smart_resize(height, width, factor, cfg.min_pixels, max_pixels)
}

/// Resizes `[T, H, W, C]` frames with the kernel of `sampling`'s pipeline.
pub fn resize_video(sampling: Sampling, frames: ArrayView4<u8>, out_h: usize, out_w: usize) -> Array4<u8> {
    match sampling {
        Sampling::QwenVlUtils => resize_frames_f32(frames, out_h, out_w),
        Sampling::Transformers | Sampling::Qwen3Vl | Sampling::RateExact => resize_frames(frames, out_h, out_w),
    }
}

/// Taps of ATen's antialiased bicubic filter along one axis, computed in f32 as its float
/// kernel does (`_compute_weights_aa` with `scalar_t = float`).
struct AxisTaps {
    /// `(first input index, tap count)` per output index.
    bounds: Vec<(usize, usize)>,
    weights: Vec<f32>,
    ksize: usize,
}

impl AxisTaps {
    fn new(in_size: usize, out_size: usize) -> Self {
        let scale = in_size as f32 / out_size as f32;
        // Each C++ expression mixes f32 with double literals; the casts follow its promotions.
        let support = if scale >= 1.0 { (2.0 * f64::from(scale)) as f32 } else { 2.0 };
        let ksize = f64::from(support).ceil() as usize * 2 + 1;
        let invscale = if scale >= 1.0 { (1.0 / f64::from(scale)) as f32 } else { 1.0 };
        let mut bounds = Vec::with_capacity(out_size);
        let mut weights = vec![0f32; out_size * ksize];
        for i in 0..out_size {
            let center = (f64::from(scale) * (i as f64 + 0.5)) as f32;
            let xmin = ((f64::from(center - support) + 0.5) as i64).max(0);
            let xend = ((f64::from(center + support) + 0.5) as i64).min(in_size as i64);
            let xsize = (xend - xmin).clamp(0, ksize as i64) as usize;
            let xmin = xmin as usize;
            let w = &mut weights[i * ksize..(i + 1) * ksize];
            let mut total = 0f32;
            for (j, wj) in w.iter_mut().enumerate().take(xsize) {
                let x = ((f64::from((j + xmin) as f32 - center) + 0.5) * f64::from(invscale)) as f32;
                *wj = bicubic_aa_kernel(x);
                total += *wj;
            }
            if total != 0.0 {
                for wj in w.iter_mut().take(xsize) {
                    *wj /= total;
                }
            }
            bounds.push((xmin, xsize));
        }
        Self { bounds, weights, ksize }
    }

    fn taps(&self, i: usize) -> (usize, &[f32]) {
        let (xmin, xsize) = self.bounds[i];
        (xmin, &self.weights[i * self.ksize..i * self.ksize + xsize])
    }
}

/// One `[H, W, C]` frame through torchvision's float path: uint8 → f32, antialiased bicubic
/// along the width then the height (an axis that keeps its size is skipped), clamp to
/// `[0, 255]`, round half to even, back to uint8.
pub fn resize_bicubic_aa_f32(image: ArrayView3<u8>, out_h: usize, out_w: usize) -> Array3<u8> {
    let (in_h, in_w, c) = image.dim();
    let mut data: Vec<f32> = image.iter().map(|&v| f32::from(v)).collect();
    let (mut h, mut w) = (in_h, in_w);
    if out_w != in_w {
        let taps = AxisTaps::new(in_w, out_w);
        let mut out = vec![0f32; h * out_w * c];
        for y in 0..h {
            for x in 0..out_w {
                let (xmin, k) = taps.taps(x);
                for ch in 0..c {
                    let at = |j: usize| data[(y * w + xmin + j) * c + ch];
                    let mut t = at(0) * k[0];
                    for (j, kj) in k.iter().enumerate().skip(1) {
                        t += at(j) * kj;
                    }
                    out[(y * out_w + x) * c + ch] = t;
                }
            }
        }
        (data, w) = (out, out_w);
    }
    if out_h != in_h {
        let taps = AxisTaps::new(in_h, out_h);
        let row = w * c;
        let mut out = vec![0f32; out_h * row];
        for y in 0..out_h {
            let (ymin, k) = taps.taps(y);
            for i in 0..row {
                let mut t = data[ymin * row + i] * k[0];
                for (j, kj) in k.iter().enumerate().skip(1) {
                    t += data[(ymin + j) * row + i] * kj;
                }
                out[y * row + i] = t;
            }
        }
        (data, h) = (out, out_h);
    }
    let bytes = data.iter().map(|v| v.clamp(0.0, 255.0).round_ties_even() as u8).collect();
    match Array3::from_shape_vec((h, w, c), bytes) {
        Ok(a) => a,
        Err(_) => unreachable!("buffer sized h * w * c"),
    }
}

/// Every frame of a `[T, H, W, C]` clip with [`resize_bicubic_aa_f32`].
pub fn resize_frames_f32(frames: ArrayView4<u8>, out_h: usize, out_w: usize) -> Array4<u8> {
    resize_each(frames, out_h, out_w, resize_bicubic_aa_f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_each_sampler() {
        // The 5.28 s 25 FPS clip at 2 FPS: 10 frames for both samplers.
        let at_2fps = Element::Fps { fps: 2.0, min_frames: 8, max_frames: Some(32) };
        let q = sampled_indices(Sampling::QwenVlUtils, at_2fps, 132, 25.0).unwrap().unwrap();
        assert_eq!(q, [0, 15, 29, 44, 58, 73, 87, 102, 116, 131]);
        let t = sampled_indices(Sampling::Transformers, at_2fps, 132, 25.0).unwrap().unwrap();
        assert_eq!(t, [0, 13, 26, 39, 52, 66, 79, 92, 105, 118]);
        // Odd counts round to even as Python's round does (5 → 4, 7 → 8).
        assert_eq!(sampled_indices(Sampling::QwenVlUtils, Element::Frames(5), 100, 10.0).unwrap().unwrap().len(), 4);
        assert_eq!(sampled_indices(Sampling::QwenVlUtils, Element::Frames(7), 100, 10.0).unwrap().unwrap().len(), 8);
        // A clip of one frame cannot hold a temporal pair.
        assert_eq!(sampled_indices(Sampling::QwenVlUtils, at_2fps, 1, 25.0), Some(Err(0)));
        assert_eq!(sampled_indices(Sampling::RateExact, at_2fps, 132, 25.0), None);
    }

    #[test]
    fn float_resize_keeps_constants_and_identity() {
        let flat = Array3::<u8>::from_elem((9, 13, 3), 77);
        assert!(resize_bicubic_aa_f32(flat.view(), 4, 6).iter().all(|&v| v == 77));
        let ramp = Array3::from_shape_fn((5, 7, 1), |(y, x, _)| (y * 7 + x) as u8);
        assert_eq!(resize_bicubic_aa_f32(ramp.view(), 5, 7), ramp);
    }
}
