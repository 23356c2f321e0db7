//! Qwen2.5-VL pixel preprocessing, equal to Hugging Face's `Qwen2VLImageProcessor` /
//! `Qwen2VLVideoProcessor` (torchvision backend).
//!
//! The pipeline, in the order the processor runs it:
//! 1. [`smart_resize`] picks a size that is a multiple of `patch_size * merge_size` (28) and
//!    whose area lies in `[min_pixels, max_pixels]`, keeping the aspect ratio.
//! 2. [`resize_bicubic_aa`] resamples the uint8 frame to that size exactly as torchvision's
//!    `resize(..., InterpolationMode.BICUBIC, antialias=True)` does on a uint8 tensor
//!    (ATen's PIL-derived separable filter with int16 fixed-point coefficients).
//! 3. [`normalize_patchify`] rescales by 1/255, normalises with the CLIP mean/std, pads the
//!    frame count to a multiple of `temporal_patch_size` by repeating the last frame, and
//!    flattens patches in the order the vision tower's Conv3d and 2×2 merger expect.
//!
//! Everything here is plain `ndarray`: no Candle, so loader threads never touch a device.

use std::path::Path;

use ndarray::{Array2, Array3, Array4, ArrayView3, ArrayView4, Axis};
use serde::{Deserialize, Serialize};

/// The CLIP mean Qwen2.5-VL was trained with (`OPENAI_CLIP_MEAN` in transformers).
/// Spelled with transformers' digits; f32 rounding happens exactly as in torch.
#[allow(clippy::excessive_precision)]
pub const OPENAI_CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
/// The CLIP std Qwen2.5-VL was trained with (`OPENAI_CLIP_STD` in transformers).
#[allow(clippy::excessive_precision)]
pub const OPENAI_CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];

/// Largest allowed ratio between the long and the short side, as in Qwen's `smart_resize`.
pub const MAX_ASPECT_RATIO: f64 = 200.0;

/// Errors of the pixel pipeline. Each names the offending sizes or file so that the caller
/// can tell which sample is bad without re-running it.
#[derive(Debug, thiserror::Error)]
pub enum PreprocessError {
    #[error("image of {height}x{width} has an aspect ratio above {MAX_ASPECT_RATIO}; Qwen2.5-VL refuses it")]
    AspectRatio { height: usize, width: usize },
    #[error("image of {height}x{width} is empty; nothing to resize")]
    Empty { height: usize, width: usize },
    #[error("frames of {height}x{width} are not multiples of {factor} (patch_size * merge_size); call smart_resize + resize first")]
    NotAligned { height: usize, width: usize, factor: usize },
    #[error("expected 3 colour channels (RGB), got {channels}")]
    Channels { channels: usize },
    #[error("a video needs at least one frame")]
    NoFrames,
    /// A setting (`key`, as `preprocessor_config.json` names it) the pipeline cannot run with.
    #[error("invalid preprocessor config: `{key}` {problem}")]
    Config { key: &'static str, problem: String },
    #[error("a clip of {frames} frame(s) is shorter than one temporal patch of {temporal_patch_size}")]
    ClipShorterThanPatch { frames: usize, temporal_patch_size: usize },
    #[error("cannot read preprocessor config {path}: {source}")]
    ConfigIo { path: String, source: std::io::Error },
    #[error("cannot parse preprocessor config {path}: {source}")]
    ConfigParse { path: String, source: serde_json::Error },
}

/// Settings of the Qwen2.5-VL image/video processor.
///
/// Deserialises from a checkpoint's `preprocessor_config.json` (see [`PreprocessConfig::from_json_file`]),
/// which spells the pixel bounds either as `min_pixels`/`max_pixels` or as
/// `size: {shortest_edge, longest_edge}`; both are accepted, the explicit keys winning as in
/// transformers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreprocessConfig {
    /// Side of a ViT patch in pixels (14).
    pub patch_size: usize,
    /// Frames per temporal patch (2): videos are padded to a multiple of it, images repeated.
    pub temporal_patch_size: usize,
    /// Side of the spatial merge block (2): grids are multiples of it.
    pub merge_size: usize,
    /// Lower bound on `height * width` after resizing.
    pub min_pixels: usize,
    /// Upper bound on `height * width` after resizing.
    pub max_pixels: usize,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    /// Multiplier applied before normalisation (1/255).
    pub rescale_factor: f64,
    /// What `min_pixels`/`max_pixels` bound in a video: each frame (Qwen2-VL's processors) or
    /// the whole clip, frames × height × width (Qwen3-VL's video processor).
    pub video_bound: VideoBound,
}

/// What a video's pixel bounds apply to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VideoBound {
    #[default]
    PerFrame,
    /// `t̄ · h · w` with `t̄` the frame count rounded to temporal pairs (Qwen3-VL).
    Clip,
}

impl Default for PreprocessConfig {
    /// The transformers defaults of `Qwen2VLImageProcessor` (56·56 to 28·28·1280 pixels).
    fn default() -> Self {
        Self {
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            image_mean: OPENAI_CLIP_MEAN,
            image_std: OPENAI_CLIP_STD,
            rescale_factor: 1.0 / 255.0,
            video_bound: VideoBound::PerFrame,
        }
    }
}

/// The raw JSON form: every key optional, both spellings of the pixel bounds.
#[derive(Deserialize)]
struct RawConfig {
    patch_size: Option<usize>,
    temporal_patch_size: Option<usize>,
    merge_size: Option<usize>,
    min_pixels: Option<usize>,
    max_pixels: Option<usize>,
    size: Option<RawSize>,
    image_mean: Option<[f32; 3]>,
    image_std: Option<[f32; 3]>,
    rescale_factor: Option<f64>,
    video_bound: Option<VideoBound>,
}

#[derive(Deserialize)]
struct RawSize {
    shortest_edge: Option<usize>,
    longest_edge: Option<usize>,
}

impl<'de> Deserialize<'de> for PreprocessConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = RawConfig::deserialize(deserializer)?;
        let d = PreprocessConfig::default();
        let size_min = raw.size.as_ref().and_then(|s| s.shortest_edge);
        let size_max = raw.size.as_ref().and_then(|s| s.longest_edge);
        let cfg = PreprocessConfig {
            patch_size: raw.patch_size.unwrap_or(d.patch_size),
            temporal_patch_size: raw.temporal_patch_size.unwrap_or(d.temporal_patch_size),
            merge_size: raw.merge_size.unwrap_or(d.merge_size),
            min_pixels: raw.min_pixels.or(size_min).unwrap_or(d.min_pixels),
            max_pixels: raw.max_pixels.or(size_max).unwrap_or(d.max_pixels),
            image_mean: raw.image_mean.unwrap_or(d.image_mean),
            image_std: raw.image_std.unwrap_or(d.image_std),
            rescale_factor: raw.rescale_factor.unwrap_or(d.rescale_factor),
            video_bound: raw.video_bound.unwrap_or(d.video_bound),
        };
        cfg.validate().map_err(serde::de::Error::custom)?;
        Ok(cfg)
    }
}

impl PreprocessConfig {
    /// The video settings of SIS-Motion training: 128·28·28 to 512·28·28 pixels per frame.
    pub fn sis_motion_training() -> Self {
        Self { min_pixels: 128 * 28 * 28, max_pixels: 512 * 28 * 28, ..Self::default() }
    }

    /// The SIS-Bench evaluation protocol: 256·28·28 to 512·28·28 pixels per frame.
    pub fn sisbench_eval() -> Self {
        Self { min_pixels: 256 * 28 * 28, max_pixels: 512 * 28 * 28, ..Self::default() }
    }

    /// Qwen3-VL's image processor (`preprocessor_config.json` of the hub checkpoints): patch 16,
    /// merge 2 (sides multiples of 32), mean and std 0.5, 65,536 to 16,777,216 pixels; its video
    /// processor bounds the whole clip.
    pub fn qwen3_vl() -> Self {
        Self {
            patch_size: 16,
            min_pixels: 65_536,
            max_pixels: 16_777_216,
            image_mean: [0.5; 3],
            image_std: [0.5; 3],
            video_bound: VideoBound::Clip,
            ..Self::default()
        }
    }

    /// Reads a checkpoint's `preprocessor_config.json`.
    pub fn from_json_file(path: &Path) -> Result<Self, PreprocessError> {
        let text = std::fs::read_to_string(path).map_err(|source| PreprocessError::ConfigIo { path: path.display().to_string(), source })?;
        serde_json::from_str(&text).map_err(|source| PreprocessError::ConfigParse { path: path.display().to_string(), source })
    }

    /// The resize granularity: sides are multiples of `patch_size * merge_size`.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }

    /// Width of one `pixel_values` row: `3 * temporal_patch_size * patch_size²`.
    pub fn patch_dim(&self) -> usize {
        3 * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    /// Rejects settings that would make the pipeline divide by zero or loop on nothing.
    pub fn validate(&self) -> Result<(), PreprocessError> {
        let bad = |key: &'static str, problem: String| Err(PreprocessError::Config { key, problem });
        for (key, value) in [("patch_size", self.patch_size), ("temporal_patch_size", self.temporal_patch_size), ("merge_size", self.merge_size)] {
            if value == 0 {
                return bad(key, "must be positive, not 0".into());
            }
        }
        if self.min_pixels > self.max_pixels {
            return bad("min_pixels", format!("{} exceeds max_pixels {}", self.min_pixels, self.max_pixels));
        }
        if self.image_std.iter().any(|s| *s == 0.0 || !s.is_finite()) {
            return bad("image_std", format!("{:?} must be finite and non-zero", self.image_std));
        }
        if !(self.rescale_factor.is_finite() && self.rescale_factor > 0.0) {
            return bad("rescale_factor", format!("{} must be positive", self.rescale_factor));
        }
        Ok(())
    }
}

/// Qwen's `smart_resize`: the `(height, width)` a frame is resized to.
///
/// Both sides become multiples of `factor`; the area is brought into `[min_pixels, max_pixels]`
/// keeping the aspect ratio. It reproduces the Python function operation by operation: `round()`
/// is banker's rounding (`round(2.5) == 2`), the `max_pixels` branch floors and the
/// `min_pixels` branch ceils, all in f64 like CPython's floats.
pub fn smart_resize(height: usize, width: usize, factor: usize, min_pixels: usize, max_pixels: usize) -> Result<(usize, usize), PreprocessError> {
    if height == 0 || width == 0 || factor == 0 {
        return Err(PreprocessError::Empty { height, width });
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    if h.max(w) / h.min(w) > MAX_ASPECT_RATIO {
        return Err(PreprocessError::AspectRatio { height, width });
    }
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    if h_bar * w_bar > max_pixels as f64 {
        let beta = ((h * w) / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    // Both are whole multiples of `factor` well inside f64's exact-integer range.
    Ok((h_bar as usize, w_bar as usize))
}

/// Qwen3-VL's video `smart_resize`: like [`smart_resize`], but the bounds hold `t̄ · h · w`, the
/// clip's pixels with `t̄` the frame count rounded (half to even) to `temporal_factor`; a side
/// below `factor` is first scaled up (truncating) as the reference does. Fewer frames than one
/// temporal patch are refused, as there.
pub fn smart_resize_clip(
    frames: usize,
    height: usize,
    width: usize,
    temporal_factor: usize,
    factor: usize,
    min_pixels: usize,
    max_pixels: usize,
) -> Result<(usize, usize), PreprocessError> {
    if height == 0 || width == 0 || factor == 0 || temporal_factor == 0 {
        return Err(PreprocessError::Empty { height, width });
    }
    if frames < temporal_factor {
        return Err(PreprocessError::ClipShorterThanPatch { frames, temporal_patch_size: temporal_factor });
    }
    let (mut h, mut w, f) = (height as f64, width as f64, factor as f64);
    if height < factor || width < factor {
        let scale = (f / h).max(f / w);
        h = (h * scale).trunc();
        w = (w * scale).trunc();
    }
    if h.max(w) / h.min(w) > MAX_ASPECT_RATIO {
        return Err(PreprocessError::AspectRatio { height, width });
    }
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    let t_bar = (frames as f64 / temporal_factor as f64).round_ties_even() * temporal_factor as f64;
    let t = frames as f64;
    if t_bar * h_bar * w_bar > max_pixels as f64 {
        let beta = ((t * h * w) / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if t_bar * h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (t * h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    Ok((h_bar as usize, w_bar as usize))
}

/// The separable filter along one axis: for every output index, the first input index, the
/// number of taps and their int16 fixed-point coefficients (stored widened to i32).
struct AxisFilter {
    /// `(first input index, tap count)` per output index.
    bounds: Vec<(usize, usize)>,
    /// `ksize` coefficients per output index; unused tails are zero.
    coeffs: Vec<i32>,
    ksize: usize,
    /// Coefficients are real weights times `2^precision`.
    precision: u32,
}

/// PIL's bicubic kernel with `a = -0.5`, which ATen uses whenever `antialias=True`, in the
/// precision of the kernel that calls it (f64 for the uint8 weights, f32 on the float path).
pub(crate) fn bicubic_aa_kernel<T>(x: T) -> T
where
    T: Copy + PartialOrd + From<f32> + std::ops::Add<Output = T> + std::ops::Sub<Output = T> + std::ops::Mul<Output = T> + std::ops::Neg<Output = T>,
{
    let c = T::from;
    let a = c(-0.5);
    let x = if x < c(0.0) { -x } else { x };
    if x < c(1.0) {
        ((a + c(2.0)) * x - (a + c(3.0))) * x * x + c(1.0)
    } else if x < c(2.0) {
        ((a * x - c(5.0) * a) * x + c(8.0) * a) * x - c(4.0) * a
    } else {
        c(0.0)
    }
}

impl AxisFilter {
    /// Follows ATen's `_compute_index_ranges_int16_weights` step for step (f64 weights,
    /// support `2 * scale` when shrinking, normalised taps, then the largest precision ≤ 22
    /// bits that keeps the biggest weight inside int16), because any other rounding of the
    /// coefficients moves output pixels by one level.
    fn new(in_size: usize, out_size: usize) -> Self {
        const INTERP_SIZE: f64 = 4.0; // bicubic
        let scale = in_size as f64 / out_size as f64;
        let support = if scale >= 1.0 { INTERP_SIZE * 0.5 * scale } else { INTERP_SIZE * 0.5 };
        let ksize = support.ceil() as usize * 2 + 1;
        let invscale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };

        let mut weights = vec![0.0f64; out_size * ksize];
        let mut bounds = Vec::with_capacity(out_size);
        let mut wt_max = 0.0f64;
        for i in 0..out_size {
            let center = scale * (i as f64 + 0.5);
            // `as i64` truncates toward zero like the C++ cast.
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xend = ((center + support + 0.5) as i64).min(in_size as i64);
            let xsize = (xend - xmin).clamp(0, ksize as i64) as usize;
            let xmin = xmin as usize;
            let w = &mut weights[i * ksize..(i + 1) * ksize];
            let mut total = 0.0;
            for (j, wj) in w.iter_mut().enumerate().take(xsize) {
                *wj = bicubic_aa_kernel(((j + xmin) as f64 - center + 0.5) * invscale);
                total += *wj;
            }
            if total != 0.0 {
                for wj in w.iter_mut().take(xsize) {
                    *wj /= total;
                    wt_max = wt_max.max(*wj);
                }
            }
            bounds.push((xmin, xsize));
        }

        let mut precision = 0u32;
        while precision < 22 {
            let next = (0.5 + wt_max * f64::from(1u32 << (precision + 1))) as i32;
            if next >= 1 << 15 {
                break;
            }
            precision += 1;
        }
        let unit = f64::from(1u32 << precision);
        let coeffs = weights
            .iter()
            .map(|w| {
                let v = w * unit;
                // int16 storage: the precision search keeps every coefficient in range.
                (if v < 0.0 { (-0.5 + v) as i32 } else { (0.5 + v) as i32 }) as i16 as i32
            })
            .collect();
        Self { bounds, coeffs, ksize, precision }
    }

    /// The rounding offset every fixed-point sum starts from (half of one output level).
    fn initial(&self) -> i32 {
        if self.precision > 0 { 1 << (self.precision - 1) } else { 0 }
    }

    /// Back from fixed point: arithmetic shift, then saturate to u8 — ATen's AVX2 kernel does
    /// `srai` followed by the saturating `packs`/`packus` pair, which is this clamp.
    #[inline]
    fn finish(&self, acc: i32) -> u8 {
        (acc >> self.precision).clamp(0, 255) as u8
    }

    /// Filters one interleaved row of `channels`-channel pixels along its length.
    fn horizontal(&self, row: &[u8], out: &mut [u8], channels: usize) {
        let init = self.initial();
        for (x, (xmin, xsize)) in self.bounds.iter().copied().enumerate() {
            let k = &self.coeffs[x * self.ksize..x * self.ksize + xsize];
            let window = &row[xmin * channels..(xmin + xsize) * channels];
            let out_px = &mut out[x * channels..(x + 1) * channels];
            if channels == 3 {
                // The RGB case, unrolled: three accumulators in registers.
                let (mut r, mut g, mut b) = (init, init, init);
                for (px, kj) in window.chunks_exact(3).zip(k) {
                    r += i32::from(px[0]) * kj;
                    g += i32::from(px[1]) * kj;
                    b += i32::from(px[2]) * kj;
                }
                out_px[0] = self.finish(r);
                out_px[1] = self.finish(g);
                out_px[2] = self.finish(b);
                continue;
            }
            // Other channel counts in groups of four keep the accumulators in registers.
            for group in (0..channels).step_by(4) {
                let n = (channels - group).min(4);
                let mut acc = [init; 4];
                for (px, kj) in window.chunks_exact(channels).zip(k) {
                    for i in 0..n {
                        acc[i] += i32::from(px[group + i]) * kj;
                    }
                }
                for i in 0..n {
                    out_px[group + i] = self.finish(acc[i]);
                }
            }
        }
    }

    /// Filters whole rows across the image height: output row `y` is the weighted sum of
    /// input rows `ymin..ymin + ysize`, accumulated row by row (cache-friendly, vectorisable).
    fn vertical(&self, src: &[u8], row_len: usize, out: &mut [u8]) {
        let init = self.initial();
        let mut acc = vec![0i32; row_len];
        for (y, (ymin, ysize)) in self.bounds.iter().copied().enumerate() {
            acc.fill(init);
            let k = &self.coeffs[y * self.ksize..y * self.ksize + ysize];
            for (j, kj) in k.iter().enumerate() {
                let row = &src[(ymin + j) * row_len..(ymin + j + 1) * row_len];
                for (a, p) in acc.iter_mut().zip(row) {
                    *a += i32::from(*p) * kj;
                }
            }
            for (o, a) in out[y * row_len..(y + 1) * row_len].iter_mut().zip(&acc) {
                *o = self.finish(*a);
            }
        }
    }
}

/// Antialiased bicubic resize of an `[H, W, C]` uint8 image, equal to torchvision's
/// `resize(img, [out_h, out_w], InterpolationMode.BICUBIC, antialias=True)` on a uint8 tensor.
///
/// Horizontal pass first, into a uint8 buffer, then the vertical pass — the order and the
/// intermediate rounding of ATen's uint8 kernel; an axis whose size does not change is copied,
/// not filtered. **Tolerance:** on every reference fixture and on random sizes checked against
/// torch 2.x the output is identical (max abs difference 0 levels); the parity test asserts
/// exactly that.
pub fn resize_bicubic_aa(image: ArrayView3<u8>, out_h: usize, out_w: usize) -> Array3<u8> {
    let (in_h, in_w, c) = image.dim();
    if out_h == 0 || out_w == 0 || in_h == 0 || in_w == 0 || c == 0 {
        return Array3::zeros((out_h, out_w, c));
    }
    if (out_h, out_w) == (in_h, in_w) {
        return image.to_owned();
    }
    let packed = image.as_standard_layout();
    let src: &[u8] = match packed.as_slice() {
        Some(s) => s,
        None => unreachable!("as_standard_layout yields a contiguous array"),
    };
    let horizontal: std::borrow::Cow<[u8]> = if out_w != in_w {
        let f = AxisFilter::new(in_w, out_w);
        let mut tmp = vec![0u8; in_h * out_w * c];
        for (row, out) in src.chunks_exact(in_w * c).zip(tmp.chunks_exact_mut(out_w * c)) {
            f.horizontal(row, out, c);
        }
        tmp.into()
    } else {
        src.into()
    };
    let data = if out_h != in_h {
        let f = AxisFilter::new(in_h, out_h);
        let mut out = vec![0u8; out_h * out_w * c];
        f.vertical(&horizontal, out_w * c, &mut out);
        out
    } else {
        horizontal.into_owned()
    };
    match Array3::from_shape_vec((out_h, out_w, c), data) {
        Ok(a) => a,
        Err(_) => unreachable!("buffer sized out_h * out_w * c"),
    }
}

/// Resizes every frame of a `[T, H, W, C]` clip with [`resize_bicubic_aa`].
pub fn resize_frames(frames: ArrayView4<u8>, out_h: usize, out_w: usize) -> Array4<u8> {
    resize_each(frames, out_h, out_w, resize_bicubic_aa)
}

/// Every frame of a `[T, H, W, C]` clip through one frame resize.
pub(crate) fn resize_each(frames: ArrayView4<u8>, out_h: usize, out_w: usize, resize: fn(ArrayView3<u8>, usize, usize) -> Array3<u8>) -> Array4<u8> {
    let (t, _, _, c) = frames.dim();
    let mut out = Array4::<u8>::zeros((t, out_h, out_w, c));
    for (i, frame) in frames.outer_iter().enumerate() {
        out.index_axis_mut(Axis(0), i).assign(&resize(frame, out_h, out_w));
    }
    out
}

/// What the vision tower consumes for one image or video.
#[derive(Debug, Clone, PartialEq)]
pub struct VisionInput {
    /// `[n_patches, 3 * temporal_patch_size * patch_size²]`, rows in 2×2-merge-block order.
    pub pixel_values: Array2<f32>,
    /// `[grid_t, grid_h, grid_w]` in patches.
    pub grid_thw: [usize; 3],
}

impl VisionInput {
    /// Number of `<|video_pad|>` / `<|image_pad|>` tokens: `t·h·w / merge_size²`.
    pub fn num_tokens(&self, merge_size: usize) -> usize {
        self.grid_thw.iter().product::<usize>() / (merge_size * merge_size)
    }
}

/// Rescale + normalise + patch flattening of frames already resized to multiples of
/// `patch_size * merge_size`.
///
/// Frames are `[T, H, W, 3]` uint8; T is padded to a multiple of `temporal_patch_size` by
/// repeating the last frame (what the HF video processor does). Values are computed as
/// transformers fuses them, `(x - mean/rescale) / (std/rescale)` in f32, so they match the
/// reference bit for bit rather than to 2.4e-7. Output rows are
/// `((t·gh/m + hb)·gw/m + wb)·m² + mh·m + mw` and columns `((c·Tp + tp)·P + py)·P + px`,
/// with `h = hb·m + mh`, `w = wb·m + mw`: each run of m² rows is one merge block and a row
/// reshapes to the Conv3d input `[3, Tp, P, P]`.
pub fn normalize_patchify(frames: ArrayView4<u8>, cfg: &PreprocessConfig) -> Result<VisionInput, PreprocessError> {
    cfg.validate()?;
    let (t, h, w, c) = frames.dim();
    if c != 3 {
        return Err(PreprocessError::Channels { channels: c });
    }
    if t == 0 {
        return Err(PreprocessError::NoFrames);
    }
    let factor = cfg.factor();
    if h == 0 || w == 0 || h % factor != 0 || w % factor != 0 {
        return Err(PreprocessError::NotAligned { height: h, width: w, factor });
    }
    let (p, tp_size, m) = (cfg.patch_size, cfg.temporal_patch_size, cfg.merge_size);
    let grid_t = t.div_ceil(tp_size);
    let (grid_h, grid_w) = (h / p, w / p);

    // uint8 → f32 lookup per channel, computed exactly like transformers' fused
    // rescale+normalise (mean and std scaled by 1/rescale_factor in f32).
    let inv = (1.0 / cfg.rescale_factor) as f32;
    let mut lut = [[0f32; 256]; 3];
    for (ch, table) in lut.iter_mut().enumerate() {
        let mean = cfg.image_mean[ch] * inv;
        let std = cfg.image_std[ch] * inv;
        for (v, slot) in table.iter_mut().enumerate() {
            *slot = (v as f32 - mean) / std;
        }
    }

    let n_patches = grid_t * grid_h * grid_w;
    let dim = cfg.patch_dim();
    let mut data = vec![0f32; n_patches * dim];
    let packed = frames.as_standard_layout();
    let owned;
    let src: &[u8] = match packed.as_slice() {
        Some(s) => s,
        None => {
            owned = packed.iter().copied().collect::<Vec<u8>>();
            &owned
        }
    };
    let frame_len = h * w * 3;
    let (mh_blocks, mw_blocks) = (grid_h / m, grid_w / m);
    // Rows are visited in output order, so `dst` walks `data` front to back.
    let mut rows = data.chunks_exact_mut(dim);
    for gt in 0..grid_t {
        for hb in 0..mh_blocks {
            for wb in 0..mw_blocks {
                for mh in 0..m {
                    for mw in 0..m {
                        let Some(dst) = rows.next() else { unreachable!("n_patches rows are allocated") };
                        let y0 = (hb * m + mh) * p;
                        let x0 = (wb * m + mw) * p;
                        for tp in 0..tp_size {
                            // Padding frames repeat the last real one.
                            let fi = (gt * tp_size + tp).min(t - 1);
                            let frame = &src[fi * frame_len..(fi + 1) * frame_len];
                            for py in 0..p {
                                let start = ((y0 + py) * w + x0) * 3;
                                let line = &frame[start..start + p * 3];
                                for (ch, table) in lut.iter().enumerate() {
                                    let base = ((ch * tp_size + tp) * p + py) * p;
                                    for (d, px) in dst[base..base + p].iter_mut().zip(line.chunks_exact(3)) {
                                        *d = table[px[ch] as usize];
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    let out = match Array2::from_shape_vec((n_patches, dim), data) {
        Ok(a) => a,
        Err(_) => unreachable!("buffer sized n_patches * patch_dim"),
    };
    Ok(VisionInput { pixel_values: out, grid_thw: [grid_t, grid_h, grid_w] })
}

/// The whole video path of the HF processor: smart resize, bicubic resize, normalise, patchify.
/// `frames` is `[T, H, W, 3]` uint8 RGB.
pub fn preprocess_video(frames: ArrayView4<u8>, cfg: &PreprocessConfig) -> Result<VisionInput, PreprocessError> {
    let (t, h, w, c) = frames.dim();
    if c != 3 {
        return Err(PreprocessError::Channels { channels: c });
    }
    if t == 0 {
        return Err(PreprocessError::NoFrames);
    }
    cfg.validate()?;
    let (rh, rw) = smart_resize(h, w, cfg.factor(), cfg.min_pixels, cfg.max_pixels)?;
    let resized = resize_frames(frames, rh, rw);
    normalize_patchify(resized.view(), cfg)
}

/// The whole image path of the HF processor. `image` is `[H, W, 3]` uint8 RGB; it fills every
/// temporal slot of its single temporal patch (grid_t = 1).
pub fn preprocess_image(image: ArrayView3<u8>, cfg: &PreprocessConfig) -> Result<VisionInput, PreprocessError> {
    let (h, w, c) = image.dim();
    if c != 3 {
        return Err(PreprocessError::Channels { channels: c });
    }
    cfg.validate()?;
    let (rh, rw) = smart_resize(h, w, cfg.factor(), cfg.min_pixels, cfg.max_pixels)?;
    let resized = resize_bicubic_aa(image, rh, rw);
    normalize_image_resized(resized.view(), cfg)
}

/// Normalise + patchify an image already at a grid-aligned size: the frame is repeated over
/// the `temporal_patch_size` slots, giving grid `[1, h/P, w/P]`.
pub fn normalize_image_resized(image: ArrayView3<u8>, cfg: &PreprocessConfig) -> Result<VisionInput, PreprocessError> {
    // A single frame pads to `temporal_patch_size` copies of itself: exactly the image rule.
    normalize_patchify(image.insert_axis(Axis(0)), cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smart_resize_banker_rounding() {
        // 70 / 28 = 2.5 rounds to 2 (Python round), not 3.
        assert_eq!(smart_resize(70, 45, 28, 3136, 1_003_520).unwrap(), (56, 56));
        // 3.5 rounds to 4.
        assert_eq!(smart_resize(98, 28, 28, 28 * 28, 1_003_520).unwrap(), (112, 28));
    }

    #[test]
    fn smart_resize_max_branch_floors() {
        // 75x101 with max 9000: beta = sqrt(7575/9000); floor(2.92)=2, floor(3.93)=3.
        assert_eq!(smart_resize(75, 101, 28, 3136, 9000).unwrap(), (56, 84));
        // 1080p at 512·28·28 stays under the cap.
        let (h, w) = smart_resize(1080, 1920, 28, 128 * 784, 512 * 784).unwrap();
        assert!(h * w <= 512 * 784 && h % 28 == 0 && w % 28 == 0);
        assert_eq!((h, w), (448, 840)); // checked against transformers 5.23
    }

    #[test]
    fn smart_resize_min_branch_ceils() {
        // 40x130 -> rounds to 28x140 = 3920 < 5000: beta = sqrt(5000/5200), ceil branch.
        assert_eq!(smart_resize(40, 130, 28, 5000, 1_003_520).unwrap(), (56, 140));
        // Tiny inputs grow to the minimum.
        let (h, w) = smart_resize(5, 5, 28, 56 * 56, 1_003_520).unwrap();
        assert_eq!((h, w), (56, 56));
    }

    #[test]
    fn smart_resize_rejects_bad_shapes() {
        assert!(matches!(smart_resize(1, 201, 28, 3136, 1_003_520), Err(PreprocessError::AspectRatio { .. })));
        assert!(smart_resize(1, 200, 28, 3136, 1_003_520).is_ok());
        assert!(matches!(smart_resize(0, 10, 28, 3136, 1_003_520), Err(PreprocessError::Empty { .. })));
    }

    #[test]
    fn resize_identity_and_constant() {
        let img = Array3::from_shape_fn((7, 9, 3), |(y, x, c)| (y * 31 + x * 7 + c * 50) as u8);
        assert_eq!(resize_bicubic_aa(img.view(), 7, 9), img);
        // A constant image stays constant whichever way it is scaled (weights sum to one).
        let flat = Array3::from_elem((13, 17, 3), 200u8);
        for (h, w) in [(5, 40), (26, 6), (13, 3), (40, 17)] {
            let r = resize_bicubic_aa(flat.view(), h, w);
            assert!(r.iter().all(|v| *v == 200), "{h}x{w}");
        }
    }

    #[test]
    fn resize_known_values_against_torchvision() {
        // Reference: torchvision 0.29 `v2.functional.resize(x.permute(2, 0, 1), size,
        // BICUBIC, antialias=True)` of x[y, x, c] = (60y + 37x + 90c) % 256, uint8 4x6x3.
        let img = Array3::from_shape_fn((4, 6, 3), |(y, x, c)| ((y * 60 + x * 37 + c * 90) % 256) as u8);
        // Widen and shrink at once (one axis up, one down).
        let wide: Vec<u8> = resize_bicubic_aa(img.view(), 2, 9).iter().copied().collect();
        assert_eq!(
            wide,
            vec![
                34, 133, 199, 50, 152, 154, 78, 175, 114, 103, 183, 146, 135, 136, 111, 159, 100, 69, 160, 134, 99, 182, 94, 134, 201, 49, 156, 143,
                115, 90, 160, 139, 91, 189, 147, 100, 216, 84, 127, 186, 70, 157, 123, 85, 188, 65, 110, 215, 73, 144, 176, 97, 166, 131
            ]
        );
        let tall: Vec<u8> = resize_bicubic_aa(img.view(), 7, 3).iter().copied().collect();
        assert_eq!(
            tall,
            vec![
                15, 104, 220, 88, 197, 151, 160, 143, 70, 36, 131, 188, 110, 170, 119, 190, 106, 96, 75, 179, 129, 149, 120, 69, 228, 48, 144, 111,
                213, 84, 180, 83, 93, 138, 71, 187, 148, 205, 65, 192, 66, 142, 43, 121, 208, 194, 89, 104, 161, 93, 187, 60, 163, 170, 219, 20, 129,
                141, 110, 210, 78, 184, 145
            ]
        );
    }

    #[test]
    fn patchify_layout() {
        let cfg = PreprocessConfig::default();
        // 3 frames of 28x56: frame index encoded in red, y in green, x in blue.
        let frames = Array4::from_shape_fn((3, 28, 56, 3), |(t, y, x, c)| match c {
            0 => (t * 10) as u8,
            1 => y as u8,
            _ => x as u8,
        });
        let out = normalize_patchify(frames.view(), &cfg).unwrap();
        assert_eq!(out.grid_thw, [2, 2, 4]);
        assert_eq!(out.pixel_values.dim(), (16, 1176));
        assert_eq!(out.num_tokens(2), 4);
        let denorm = |v: f32, ch: usize| (v * cfg.image_std[ch] + cfg.image_mean[ch]) * 255.0;
        // Column of (channel, temporal slot, py, px) with Tp = 2, P = 14.
        let col = |ch: usize, tp: usize, py: usize, px: usize| ((ch * 2 + tp) * 14 + py) * 14 + px;
        // Row 5 = t 0, hb 0, wb 1, mh 0, mw 1 -> patch at y 0, x (1*2+1)*14 = 42.
        let row = out.pixel_values.row(5);
        assert!((denorm(row[col(2, 0, 3, 4)], 2) - 46.0).abs() < 1e-3); // blue, tp 0, py 3, px 4
        assert!((denorm(row[col(1, 0, 3, 4)], 1) - 3.0).abs() < 1e-3); // green = y
        // Second temporal grid pads frame 3 with frame 2: both tp slots read red 20.
        let row = out.pixel_values.row(8);
        assert!((denorm(row[0], 0) - 20.0).abs() < 1e-3);
        assert!((denorm(row[col(0, 1, 0, 0)], 0) - 20.0).abs() < 1e-3);
        // First temporal grid: tp 0 is frame 0, tp 1 is frame 1.
        let row = out.pixel_values.row(0);
        assert!((denorm(row[0], 0) - 0.0).abs() < 1e-3);
        assert!((denorm(row[col(0, 1, 0, 0)], 0) - 10.0).abs() < 1e-3);
    }

    #[test]
    fn patchify_rejects_unaligned() {
        let cfg = PreprocessConfig::default();
        let frames = Array4::<u8>::zeros((2, 30, 28, 3));
        assert!(matches!(normalize_patchify(frames.view(), &cfg), Err(PreprocessError::NotAligned { .. })));
        let frames = Array4::<u8>::zeros((0, 28, 28, 3));
        assert!(matches!(normalize_patchify(frames.view(), &cfg), Err(PreprocessError::NoFrames)));
    }

    #[test]
    fn config_from_json_both_spellings() {
        let a: PreprocessConfig = serde_json::from_str(
            r#"{"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2,
                "merge_size": 2, "image_mean": [0.48145466, 0.4578275, 0.40821073],
                "image_std": [0.26862954, 0.26130258, 0.27577711],
                "image_processor_type": "Qwen2VLImageProcessor"}"#,
        )
        .unwrap();
        assert_eq!(a.max_pixels, 12_845_056);
        assert_eq!(a.image_mean, OPENAI_CLIP_MEAN);
        let b: PreprocessConfig = serde_json::from_str(r#"{"size": {"shortest_edge": 100352, "longest_edge": 401408}}"#).unwrap();
        assert_eq!((b.min_pixels, b.max_pixels), (100_352, 401_408));
        assert_eq!(b.patch_size, 14);
        let bad = serde_json::from_str::<PreprocessConfig>(r#"{"min_pixels": 10, "max_pixels": 5}"#);
        assert!(bad.is_err());
    }
}
