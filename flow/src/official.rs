//! The SIS-Motion authors' motion pipeline (`IntelliSensing/Self-in-Space` at `b123237`),
//! selected with `pipeline = "official"` ([`crate::pseudo::MotionPipeline`]). Per video, in the
//! reference's order and f32 arithmetic:
//!
//! 1. [`mofnet_frames`]: the planned frames at their decoded size, as f32, resized once to
//!    320×480 with `F.interpolate(bilinear, align_corners=False)` ([`resize_bilinear`]). The
//!    dataset resizes (`data_processor.py:290-298`, eval `dataset_utils.py:196-202`); the
//!    encoder's own resize (`motion_encoder.py:142-143`) is then skipped because the size
//!    already fits. A clip with an odd frame count is resampled to the processor's 2·grid_t
//!    frames with numpy's floor `linspace`, which repeats frame 0 (`data_processor.py:350-361`,
//!    `eval.py:255-262`).
//! 2. One MOFNet pass over the whole clip, `2·(x/255) − 1`, the forward flows of its N−2 middle
//!    frames at 1/8 resolution, not upsampled ([`crate::FlowEstimator::coarse_clip_flows`];
//!    `motion_encoder.py:164-237`).
//! 3. [`clip_flows`]: the first and last flows replicated, N−2 → N (`motion_encoder.py:148`),
//!    then `clamp(±400)` and `nan_to_num` (`motion_mllm.py:281-282`).
//! 4. [`pixel_values_flow`]: pseudo-images `[√(dx²+dy²+1e-8), dx, dy]`, one min-max over the
//!    whole video, CLIP mean/std, bilinear resize to the vision grid, temporal alignment,
//!    Qwen2.5-VL patch order (`motion_mllm.py:112-173`). Nothing is quantised.

use ndarray::{s, Array2, Array4, ArrayView4, Axis};

use motionvl_data::preprocess::PreprocessConfig;

use crate::error::{FlowError, Result};

/// The size MOFNet sees every clip at (`motion_encoder.py:126`), aspect ratio not kept.
pub const MOFNET_HEIGHT: usize = 320;
pub const MOFNET_WIDTH: usize = 480;
/// Flows are clamped to ±400 (1/8-grid pixels) before the pseudo-images (`motion_mllm.py:281`).
pub const FLOW_CLAMP: f32 = 400.0;
/// The pseudo-images' CLIP normalisation (`motion_mllm.py:12-13`), written as the reference's
/// Python floats: `torch.tensor(..., dtype=float32)` rounds them from f64.
const CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];
/// The magnitude's ε (`motion_mllm.py:117`) and the smallest value range min-max normalises
/// (`motion_mllm.py:125`); both are f32 in the reference's arithmetic.
const MAGNITUDE_EPS: f64 = 1e-8;
const MIN_RANGE: f64 = 1e-6;

/// `F.interpolate(x, (out_h, out_w), mode="bilinear", align_corners=False)` of `[N,C,H,W]`, as
/// ATen's CPU kernel for contiguous float tensors whose output sides sum to more than 128
/// computes it (`upsample_generic_Nd_kernel_impl`): source index `scale·(o+0.5)−0.5` in f32
/// with `scale = H/out_h`, clamped at 0; the two taps of a row combined as `fma(v0, w0, v1·w1)`,
/// then the two rows the same way. Identical bits on those sizes; smaller outputs (a different
/// ATen kernel) and CUDA differ by at most a few ulps.
pub fn resize_bilinear(input: ArrayView4<f32>, out_h: usize, out_w: usize) -> Array4<f32> {
    let (n, c, h, w) = input.dim();
    let (rows, cols) = (taps(h, out_h), taps(w, out_w));
    let mut out = Array4::<f32>::zeros((n, c, out_h, out_w));
    for (frame, ch) in (0..n).flat_map(|f| (0..c).map(move |ch| (f, ch))) {
        let src = input.slice(s![frame, ch, .., ..]);
        let mut dst = out.slice_mut(s![frame, ch, .., ..]);
        for (oy, row) in rows.iter().enumerate() {
            for (ox, col) in cols.iter().enumerate() {
                let at = |y: usize| src[[y, col.lo]].mul_add(col.w_lo, src[[y, col.hi]] * col.w_hi);
                dst[[oy, ox]] = at(row.lo).mul_add(row.w_lo, at(row.hi) * row.w_hi);
            }
        }
    }
    out
}

/// The two source samples of one output position and their weights.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Tap {
    lo: usize,
    hi: usize,
    w_lo: f32,
    w_hi: f32,
}

/// ATen's `compute_indices_weights_linear` for `align_corners=False` and no scale factor.
fn taps(input: usize, output: usize) -> Vec<Tap> {
    if input == output {
        return (0..output).map(|o| Tap { lo: o, hi: o, w_lo: 1.0, w_hi: 0.0 }).collect();
    }
    let scale = input as f32 / output as f32;
    (0..output)
        .map(|o| {
            let real = (scale * (o as f32 + 0.5) - 0.5).max(0.0);
            let lo = (real.floor() as usize).min(input - 1);
            let w_hi = (real - lo as f32).clamp(0.0, 1.0);
            let hi = if lo < input - 1 { lo + 1 } else { lo };
            Tap { lo, hi, w_lo: 1.0 - w_hi, w_hi }
        })
        .collect()
}

/// `np.linspace(0, len − 1, count, dtype=int)`: f64 steps `i·(len−1)/(count−1)`, the last set to
/// `len − 1`, floored. Picks `count` of `len` frames; with `count > len` it repeats early ones.
pub fn numpy_linspace_indices(len: usize, count: usize) -> Vec<usize> {
    if count <= 1 || len <= 1 {
        return vec![0; count];
    }
    let step = (len - 1) as f64 / (count - 1) as f64;
    (0..count).map(|i| if i + 1 == count { len - 1 } else { (i as f64 * step).floor() as usize }).collect()
}

/// `torch.linspace(0, len − 1, count, dtype=torch.long)`: ATen fills the first half forward from
/// 0 and the second half backward from the end, `(len−1) − step·(count−1−i)`, truncating each.
pub fn torch_linspace_indices(len: usize, count: usize) -> Vec<usize> {
    if count <= 1 || len <= 1 {
        return vec![0; count];
    }
    let end = (len - 1) as f64;
    let step = end / (count - 1) as f64;
    let halfway = count / 2;
    (0..count).map(|i| if i < halfway { (step * i as f64) as usize } else { (end - step * (count - 1 - i) as f64) as usize }).collect()
}

/// MOFNet's input: `decoded` `[N,H,W,3]` (the planned frames at their decoded size) →
/// `[frames,3,320,480]` f32 in [0, 255]. `frames` is the processor's frame count, 2·grid_t;
/// when it differs from N the frames are resampled with [`numpy_linspace_indices`] (resampling
/// before resizing gives the same values: the resize is per frame).
pub fn mofnet_frames(decoded: ArrayView4<u8>, frames: usize) -> Result<Array4<f32>> {
    let (n, h, w, c) = decoded.dim();
    if c != 3 || n == 0 || h == 0 || w == 0 {
        return Err(FlowError::InvalidInput(format!("MOFNet frames need a non-empty RGB clip [N,H,W,3], got {:?}", decoded.shape())));
    }
    let indices: Vec<usize> = if n == frames { (0..n).collect() } else { numpy_linspace_indices(n, frames) };
    let chosen = decoded.select(Axis(0), &indices);
    // [T,H,W,3] u8 → [T,3,H,W] f32, as `torch.from_numpy(frame).permute(2, 0, 1).float()`.
    let planar = chosen.permuted_axes([0, 3, 1, 2]).mapv(f32::from);
    if (h, w) == (MOFNET_HEIGHT, MOFNET_WIDTH) {
        return Ok(planar.as_standard_layout().into_owned());
    }
    Ok(resize_bilinear(planar.view(), MOFNET_HEIGHT, MOFNET_WIDTH))
}

/// MOFNet's N−2 middle-frame forward flows `[N−2,2,h,w]` → one flow per frame `[N,2,h,w]`: the
/// first and last replicated, values clamped to ±[`FLOW_CLAMP`], NaN → 0.
pub fn clip_flows(middle: ArrayView4<f32>) -> Result<Array4<f32>> {
    let (m, c, h, w) = middle.dim();
    if m == 0 || c != 2 {
        return Err(FlowError::InvalidInput(format!("expected the middle frames' flows [N-2,2,h,w] with N ≥ 3, got {:?}", middle.shape())));
    }
    let mut out = Array4::<f32>::zeros((m + 2, 2, h, w));
    out.slice_mut(s![0, .., .., ..]).assign(&middle.slice(s![0, .., .., ..]));
    out.slice_mut(s![1..m + 1, .., .., ..]).assign(&middle);
    out.slice_mut(s![m + 1, .., .., ..]).assign(&middle.slice(s![m - 1, .., .., ..]));
    // `nan_to_num(f.clamp(-400, 400))`: clamp keeps NaN, which then becomes 0.
    out.mapv_inplace(|v| if v.is_nan() { 0.0 } else { v.clamp(-FLOW_CLAMP, FLOW_CLAMP) });
    Ok(out)
}

/// The motion encoder's pixels of one video: `flows` `[T,2,h,w]` ([`clip_flows`]) → rows of
/// `[grid_t·grid_h·grid_w, 3·temporal_patch·patch²]` on the video's grid, in the processor's
/// merge-block order (`_flow_to_visual_input`).
pub fn pixel_values_flow(flows: ArrayView4<f32>, grid_thw: [usize; 3], cfg: &PreprocessConfig) -> Result<Array2<f32>> {
    let (t, c, h, w) = flows.dim();
    if t == 0 || c != 2 || h == 0 || w == 0 {
        return Err(FlowError::InvalidInput(format!("pseudo-images need flows [T,2,h,w], got {:?}", flows.shape())));
    }
    let [grid_t, grid_h, grid_w] = grid_thw;
    let (p, tp, m) = (cfg.patch_size, cfg.temporal_patch_size, cfg.merge_size);
    if grid_t == 0 || grid_h == 0 || grid_w == 0 || grid_h % m != 0 || grid_w % m != 0 {
        return Err(FlowError::InvalidInput(format!("grid {grid_thw:?} is not a video grid of merge size {m}")));
    }

    // [magnitude, dx, dy] per frame, then one min-max over the whole video.
    let eps = MAGNITUDE_EPS as f32;
    let mut pseudo = Array4::<f32>::zeros((t, 3, h, w));
    for (mut dst, src) in pseudo.outer_iter_mut().zip(flows.outer_iter()) {
        ndarray::Zip::from(dst.slice_mut(s![0, .., ..]))
            .and(src.slice(s![0, .., ..]))
            .and(src.slice(s![1, .., ..]))
            .for_each(|mag, &dx, &dy| *mag = ((dx * dx + dy * dy) + eps).sqrt());
        dst.slice_mut(s![1..3, .., ..]).assign(&src);
    }
    let (lo, hi) = pseudo.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let range = hi - lo;
    if range > MIN_RANGE as f32 {
        pseudo.mapv_inplace(|v| (v - lo) / range);
    } else {
        pseudo.fill(0.0);
    }
    for (ch, mut plane) in pseudo.axis_iter_mut(Axis(1)).enumerate() {
        let (mean, std) = (CLIP_MEAN[ch] as f32, CLIP_STD[ch] as f32);
        plane.mapv_inplace(|v| (v - mean) / std);
    }

    let resized = resize_bilinear(pseudo.view(), grid_h * p, grid_w * p);
    let frames = grid_t * tp;
    let order: Vec<usize> = if t <= frames { (0..frames).map(|k| k.min(t - 1)).collect() } else { torch_linspace_indices(t, frames) };
    Ok(patchify(resized.select(Axis(0), &order).view(), grid_thw, cfg))
}

/// `[grid_t·tp,3,grid_h·p,grid_w·p]` → rows `[grid_t, grid_h/m, grid_w/m, m, m]`, columns
/// `[3, tp, p, p]` (`motion_mllm.py:163-173`, the processor's order).
fn patchify(frames: ArrayView4<f32>, grid_thw: [usize; 3], cfg: &PreprocessConfig) -> Array2<f32> {
    let [grid_t, grid_h, grid_w] = grid_thw;
    let (p, tp, m) = (cfg.patch_size, cfg.temporal_patch_size, cfg.merge_size);
    let mut out = Array2::<f32>::zeros((grid_t * grid_h * grid_w, 3 * tp * p * p));
    let mut rows = out.outer_iter_mut();
    for gt in 0..grid_t {
        for hb in 0..grid_h / m {
            for wb in 0..grid_w / m {
                for mh in 0..m {
                    for mw in 0..m {
                        let Some(mut row) = rows.next() else { unreachable!("one row per patch is allocated") };
                        let (y0, x0) = ((hb * m + mh) * p, (wb * m + mw) * p);
                        for ch in 0..3 {
                            for k in 0..tp {
                                let patch = frames.slice(s![gt * tp + k, ch, y0..y0 + p, x0..x0 + p]);
                                let base = (ch * tp + k) * p * p;
                                row.slice_mut(s![base..base + p * p]).iter_mut().zip(patch.iter()).for_each(|(d, &v)| *d = v);
                            }
                        }
                    }
                }
            }
        }
    }
    out
}
