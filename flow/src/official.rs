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

use ndarray::{Array2, Array4, ArrayView4, Axis, s};

use motionvl_data::preprocess::PreprocessConfig;

use crate::error::{FlowError, Result};

/// The size MOFNet sees every clip at (`motion_encoder.py:126`), aspect ratio not kept.
pub const MOFNET_HEIGHT: usize = 320;
pub const MOFNET_WIDTH: usize = 480;
/// Flows are clamped to ±400 (1/8-grid pixels) before the pseudo-images (`motion_mllm.py:281`).
pub const FLOW_CLAMP: f32 = 400.0;
/// The pseudo-images' CLIP normalisation (`motion_mllm.py:12-13`), written as the reference's
/// Python floats: `torch.tensor(..., dtype=float32)` rounds them from f64. A Qwen2.5-VL
/// processor's mean and std are these (a test holds them equal); the pipeline normalises with
/// the processor's, so that on Qwen3-VL (mean and std 0.5) the pseudo-images are normalised as
/// its frames are — the official code, written for Qwen2.5-VL alone, hard-codes CLIP's.
#[cfg(test)]
const CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
#[cfg(test)]
const CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];
/// The magnitude's ε (`motion_mllm.py:117`) and the smallest value range min-max normalises
/// (`motion_mllm.py:125`); both are f32 in the reference's arithmetic.
const MAGNITUDE_EPS: f64 = 1e-8;
const MIN_RANGE: f64 = 1e-6;

/// `F.interpolate(x, (out_h, out_w), mode="bilinear", align_corners=False)` of `[N,C,H,W]`, as
/// ATen's CPU kernel computes it for three-channel float images in a single-threaded process
/// (`cpu_upsample_linear_channels_last`): the official training's data-loader workers, and the
/// dumps. Source index `fma(H/out_h, o + 0.5, −0.5)` in f32, clamped at 0; corner weights
/// `h·w`; the four taps summed as `fma(v11, w11, fma(v10, w10, fma(v00, w00, v01·w01)))`.
/// Identical bits there. ATen's multi-threaded kernel (the official evaluation's dataset, in
/// the main process) and CUDA's (the pseudo-images on a GPU) round differently, by a few ulps.
pub fn resize_bilinear(input: ArrayView4<f32>, out_h: usize, out_w: usize) -> Array4<f32> {
    let (n, c, h, w) = input.dim();
    let (rows, cols) = (taps(h, out_h), taps(w, out_w));
    let mut out = Array4::<f32>::zeros((n, c, out_h, out_w));
    for (frame, ch) in (0..n).flat_map(|f| (0..c).map(move |ch| (f, ch))) {
        let src = input.slice(s![frame, ch, .., ..]);
        let mut dst = out.slice_mut(s![frame, ch, .., ..]);
        for (oy, row) in rows.iter().enumerate() {
            for (ox, col) in cols.iter().enumerate() {
                let (w00, w01, w10, w11) = (row.w_lo * col.w_lo, row.w_lo * col.w_hi, row.w_hi * col.w_lo, row.w_hi * col.w_hi);
                let first = src[[row.lo, col.lo]].mul_add(w00, src[[row.lo, col.hi]] * w01);
                dst[[oy, ox]] = src[[row.hi, col.hi]].mul_add(w11, src[[row.hi, col.lo]].mul_add(w10, first));
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

/// ATen's `compute_source_index_and_lambda` for `align_corners=False` and no scale factor.
fn taps(input: usize, output: usize) -> Vec<Tap> {
    if input == output {
        return (0..output).map(|o| Tap { lo: o, hi: o, w_lo: 1.0, w_hi: 0.0 }).collect();
    }
    let scale = input as f32 / output as f32;
    (0..output)
        .map(|o| {
            let real = scale.mul_add(o as f32 + 0.5, -0.5).max(0.0);
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
        return Err(FlowError::Clip {
            what: "MOFNet's frames",
            needs: "a non-empty RGB clip [N,H,W,3]".into(),
            got: format!("{:?}", decoded.shape()),
        });
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
        return Err(FlowError::Clip {
            what: "a clip's flows",
            needs: "the middle frames' flows [N-2,2,h,w] with N ≥ 3".into(),
            got: format!("{:?}", middle.shape()),
        });
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
        return Err(FlowError::Clip { what: "a pseudo-image", needs: "flows [T,2,h,w]".into(), got: format!("{:?}", flows.shape()) });
    }
    let [grid_t, grid_h, grid_w] = grid_thw;
    let (p, tp, m) = (cfg.patch_size, cfg.temporal_patch_size, cfg.merge_size);
    if grid_t == 0 || grid_h == 0 || grid_w == 0 || grid_h % m != 0 || grid_w % m != 0 {
        return Err(FlowError::Clip { what: "a pseudo-image", needs: format!("a video grid of merge size {m}"), got: format!("grid {grid_thw:?}") });
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
        let (mean, std) = (cfg.image_mean[ch], cfg.image_std[ch]);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `((c·7 + y·13 + x·29) mod 17 − 8) / 3` in f32: no symmetry, thirds that f32 rounds.
    fn pattern(c: usize, h: usize, w: usize) -> Array4<f32> {
        Array4::from_shape_fn((1, c, h, w), |(_, ch, y, x)| ((ch * 7 + y * 13 + x * 29) % 17) as f32 - 8.0).mapv(|v| v / 3.0)
    }

    /// Sum in f64 in memory order: the checksum the Python side computed the same way.
    fn checksum(a: &Array4<f32>) -> f64 {
        a.iter().fold(0.0, |acc, &v| acc + f64::from(v))
    }

    /// References from torch 2.6.0 on the CPU with one thread: `F.interpolate(x, size,
    /// mode="bilinear", align_corners=False)` of [`pattern`], an upsampling and a mixed
    /// down/upsampling.
    #[test]
    fn resize_matches_torch_bit_for_bit() {
        let up = resize_bilinear(pattern(3, 5, 7).view(), 61, 90);
        assert_eq!(up.dim(), (1, 3, 61, 90));
        for ((ch, y, x), bits) in [((0, 0, 0), 0xc02aaaab_u32), ((1, 30, 45), 0xc00b60b5), ((2, 60, 89), 0xc0000000), ((1, 17, 3), 0xbfca245e)] {
            assert_eq!(up[[0, ch, y, x]].to_bits(), bits, "({ch},{y},{x}): {}", up[[0, ch, y, x]]);
        }
        assert_eq!(checksum(&up), -208.7746701948846);

        let mixed = resize_bilinear(pattern(3, 23, 37).view(), 16, 120);
        for ((ch, y, x), bits) in [((0, 0, 0), 0xbfdc0001_u32), ((2, 7, 61), 0x3f2a3bac), ((1, 15, 119), 0x3fa55555)] {
            assert_eq!(mixed[[0, ch, y, x]].to_bits(), bits, "({ch},{y},{x}): {}", mixed[[0, ch, y, x]]);
        }
        assert_eq!(checksum(&mixed), -6.717583192046732);

        // Same size: the input itself.
        let same = pattern(3, 5, 7);
        assert_eq!(resize_bilinear(same.view(), 5, 7), same);
    }

    /// `np.linspace(0, n−1, k, dtype=int)` and `torch.linspace(0, n−1, k, dtype=torch.long)`,
    /// values printed by numpy 2 / torch 2.6.0. They differ where torch counts back from the end.
    #[test]
    fn linspace_indices_match_numpy_and_torch() {
        assert_eq!(numpy_linspace_indices(3, 4), vec![0, 0, 1, 2]);
        assert_eq!(numpy_linspace_indices(5, 6), vec![0, 0, 1, 2, 3, 4]);
        assert_eq!(numpy_linspace_indices(10, 4), vec![0, 3, 6, 9]);
        let mut odd: Vec<usize> = vec![0];
        odd.extend(0..31);
        assert_eq!(numpy_linspace_indices(31, 32), odd, "an odd clip repeats frame 0");
        assert_eq!(numpy_linspace_indices(32, 32), (0..32).collect::<Vec<_>>());

        assert_eq!(torch_linspace_indices(7, 5), vec![0, 1, 3, 4, 6]);
        assert_eq!(torch_linspace_indices(10, 4), vec![0, 3, 6, 9]);
        assert_eq!(torch_linspace_indices(100, 7), vec![0, 16, 33, 49, 66, 82, 99]);
        assert_eq!(torch_linspace_indices(3, 2), vec![0, 2]);
        let mut long: Vec<usize> = (0..31).collect();
        long.push(32);
        assert_eq!(torch_linspace_indices(33, 32), long);
    }

    /// An odd clip of 3 decoded 4×6 frames becomes 4 MOFNet frames `[0,0,1,2]` at 320×480;
    /// values and checksum from torch 2.6.0, one thread (`stack(permute(2,0,1).float())`, then
    /// `F.interpolate`, then `[np.linspace(0, 2, 4, dtype=int)]`).
    #[test]
    fn mofnet_frames_resample_odd_clips_and_resize_once() {
        let decoded = Array4::from_shape_fn((3, 4, 6, 3), |(t, y, x, c)| ((t * 50 + y * 7 + x * 3 + c * 11) % 256) as u8);
        let frames = mofnet_frames(decoded.view(), 4).expect("frames");
        assert_eq!(frames.dim(), (4, 3, MOFNET_HEIGHT, MOFNET_WIDTH));
        assert_eq!(frames.slice(s![0, .., .., ..]), frames.slice(s![1, .., .., ..]));
        assert_eq!(frames[[2, 1, 100, 200]].to_bits(), 0x4290a000, "{}", frames[[2, 1, 100, 200]]);
        assert_eq!(frames[[3, 2, 319, 3]], 143.0);
        assert_eq!(checksum(&frames), 122572800.54233807);

        // Already at 320×480: taken as is, no resampling when the count fits.
        let native = Array4::from_shape_fn((2, MOFNET_HEIGHT, MOFNET_WIDTH, 3), |(t, y, x, c)| ((t * 3 + y + 2 * x + c) % 256) as u8);
        let frames = mofnet_frames(native.view(), 2).expect("frames");
        assert_eq!(frames[[1, 2, 10, 20]], f32::from(native[[1, 10, 20, 2]]));
        assert!(mofnet_frames(Array4::<u8>::zeros((2, 4, 4, 1)).view(), 2).is_err());
    }

    #[test]
    fn clip_flows_replicate_the_ends_clamp_and_zero_nan() {
        let mut middle = Array4::from_shape_fn((2, 2, 3, 4), |(t, c, y, x)| (t * 100 + c * 10 + y * 4 + x) as f32 - 5.5);
        middle[[0, 0, 0, 0]] = f32::NAN;
        middle[[1, 1, 2, 3]] = 900.0;
        middle[[1, 0, 1, 1]] = f32::NEG_INFINITY;
        let flows = clip_flows(middle.view()).expect("flows");
        assert_eq!(flows.dim(), (4, 2, 3, 4));
        assert_eq!(flows.slice(s![0, .., .., ..]), flows.slice(s![1, .., .., ..]));
        assert_eq!(flows.slice(s![3, .., .., ..]), flows.slice(s![2, .., .., ..]));
        assert_eq!(flows[[1, 0, 0, 0]], 0.0);
        assert_eq!(flows[[2, 1, 2, 3]], 400.0);
        assert_eq!(flows[[2, 0, 1, 1]], -400.0);
        assert_eq!(flows[[2, 0, 0, 1]], 100.0 + 1.0 - 5.5);
        assert!(clip_flows(Array4::zeros((0, 2, 3, 4)).view()).is_err());
    }

    /// 28×28 flows on a 1×2×2 grid (no resize): frame 0 moves by (3, −4) everywhere, frame 1
    /// is still but for one pixel moving by (−12, 0). One min-max over both frames and all
    /// three channels: min −12 (that dx), max 12 (its magnitude).
    #[test]
    fn pseudo_images_are_min_maxed_over_the_video_then_clip_normalised() {
        let mut flows = Array4::<f32>::zeros((2, 2, 28, 28));
        flows.slice_mut(s![0, 0, .., ..]).fill(3.0);
        flows.slice_mut(s![0, 1, .., ..]).fill(-4.0);
        flows[[1, 0, 5, 9]] = -12.0;
        let cfg = PreprocessConfig::default();
        let pixels = pixel_values_flow(flows.view(), [1, 2, 2], &cfg).expect("pixels");
        assert_eq!(pixels.dim(), (4, 3 * 2 * 14 * 14));
        let clip = |v: f32, ch: usize| (v - CLIP_MEAN[ch] as f32) / CLIP_STD[ch] as f32;
        let col = |ch: usize, tp: usize, py: usize, px: usize| ((ch * 2 + tp) * 14 + py) * 14 + px;
        let range = 12.0f32 - -12.0;
        // Frame 0, magnitude 5 at (0, 0): row 0 (first merge block, first patch).
        assert_eq!(pixels[[0, col(0, 0, 0, 0)]], clip((5.0 - -12.0) / range, 0));
        // Frame 1's moving pixel: dx −12 is the minimum.
        assert_eq!(pixels[[0, col(1, 1, 5, 9)]], clip(0.0, 1));
        assert_eq!(pixels[[0, col(0, 1, 5, 9)]], clip(1.0, 0));
        // Frame 1 at (20, 16) is still: dy 0 → 0.5; patch (1, 1) of the block is row 3.
        assert_eq!(pixels[[3, col(2, 1, 6, 2)]], clip((0.0 - -12.0) / range, 2));
        // Magnitude of zero flow is √1e-8, not 0.
        let still = ((0.0f32 + 0.0) + 1e-8f32).sqrt();
        assert_eq!(pixels[[3, col(0, 1, 6, 2)]], clip((still - -12.0) / range, 0));

        // No motion anywhere: every value becomes 0 before CLIP.
        let calm = pixel_values_flow(Array4::zeros((2, 2, 28, 28)).view(), [1, 2, 2], &cfg).expect("pixels");
        assert_eq!(calm[[2, col(1, 0, 3, 3)]], clip(0.0, 1));
        assert!(pixel_values_flow(flows.view(), [1, 3, 2], &cfg).is_err(), "a grid side not a multiple of the merge size");
    }

    /// The processor's normalisation: Qwen2.5-VL's is the reference's CLIP constants, bit for
    /// bit; on Qwen3-VL (patch 16, mean and std 0.5) the same min-maxed values are normalised
    /// with 0.5, on its 16-pixel patches.
    #[test]
    fn pseudo_images_take_the_processors_normalisation() {
        let default = PreprocessConfig::default();
        assert_eq!(default.image_mean, CLIP_MEAN.map(|v| v as f32));
        assert_eq!(default.image_std, CLIP_STD.map(|v| v as f32));
        let mut flows = Array4::<f32>::zeros((2, 2, 32, 32));
        flows.slice_mut(s![0, 0, .., ..]).fill(3.0);
        flows.slice_mut(s![0, 1, .., ..]).fill(-4.0);
        flows[[1, 1, 20, 3]] = 8.0;
        let cfg = PreprocessConfig::qwen3_vl();
        let pixels = pixel_values_flow(flows.view(), [1, 2, 2], &cfg).expect("pixels");
        assert_eq!(pixels.dim(), (4, 3 * 2 * 16 * 16));
        let half = |v: f32| (v - 0.5) / 0.5;
        let col = |ch: usize, tp: usize, py: usize, px: usize| ((ch * 2 + tp) * 16 + py) * 16 + px;
        // min −4 (frame 0's dy), max 8 (frame 1's dy and its magnitude).
        let range = 8.0f32 - -4.0;
        assert_eq!(pixels[[0, col(0, 0, 0, 0)]], half((5.0 - -4.0) / range));
        assert_eq!(pixels[[0, col(2, 0, 7, 7)]], half(0.0));
        // Frame 1 at (20, 3): patch row 1, column 0 of the block is row 2.
        assert_eq!(pixels[[2, col(2, 1, 4, 3)]], half(1.0));
        assert_eq!(pixels[[2, col(1, 1, 4, 3)]], half((0.0 - -4.0) / range));
    }

    /// More frames than grid slots are subsampled with torch's linspace (3 → 2 takes frames 0
    /// and 2); fewer repeat the last.
    #[test]
    fn temporal_alignment_follows_the_reference() {
        let flows = Array4::from_shape_fn((3, 2, 28, 28), |(t, c, _, _)| if c == 0 { [1.0, 5.0, 9.0][t] } else { 0.0 });
        let cfg = PreprocessConfig::default();
        let col = |tp: usize| (2 + tp) * 14 * 14;
        let dx = |p: &Array2<f32>, tp: usize| p[[0, col(tp)]];
        let three = pixel_values_flow(flows.view(), [1, 2, 2], &cfg).expect("pixels");
        assert!(dx(&three, 0) < dx(&three, 1));
        let reference = pixel_values_flow(flows.select(Axis(0), &[0, 2]).view(), [1, 2, 2], &cfg).expect("pixels");
        // Same min-max (frame 1 lies inside frames 0 and 2's range), same frames.
        assert_eq!(three, reference);
        let one = pixel_values_flow(flows.slice(s![2..3, .., .., ..]), [1, 2, 2], &cfg).expect("pixels");
        assert_eq!(dx(&one, 0), dx(&one, 1));
    }
}
