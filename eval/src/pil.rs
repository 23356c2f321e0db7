//! The frame path of the official zero-shot vLLM evaluation (`--protocol vllm-baseline`): each
//! decoded frame is a separate image, resized by Pillow twice before vLLM's processor sees it.
//!
//! 1. `resize_to_pixel_range(img, 256·28², 512·28²)` (`eval/src/uav/vqa/uav_dataset.py:39-73`):
//!    a frame outside the range is scaled by `sqrt(target / pixels)` to the nearer bound, each
//!    side truncated to an integer (at least 1), with `Image.resize(…, Image.BICUBIC)`;
//! 2. qwen-vl-utils' `fetch_image` (0.0.14): the misspelt `min_pixel`/`max_pixel` keys the
//!    evaluator sets are not the ones it reads, so its defaults 4·28² and 16384·28² apply and
//!    `smart_resize` only rounds each side to a multiple of 28; `Image.resize` again (bicubic
//!    by default);
//! 3. vLLM's Qwen2.5-VL image processor finds the size already grid-aligned and inside its own
//!    bounds, so it only normalises ([`motionvl_data::preprocess::normalize_image_resized`]).
//!
//! [`pil_resize_bicubic`] is Pillow's `ImagingResample` for 8-bit images (`Resample.c`): the
//! separable bicubic filter (a = −0.5, support widened by the scale when shrinking), taps
//! normalised in f64, then fixed point with 22 fractional bits (`PRECISION_BITS = 32 − 8 − 2`)
//! rounded half away from zero; horizontal pass first into uint8, then vertical; an axis that
//! keeps its size is not filtered. torchvision's antialiased kernel (the data crate's
//! `resize_bicubic_aa`) computes the same taps in int16 at a lower precision, which moves
//! some pixels by one level, hence this port.

use ndarray::{Array3, ArrayView3};

use motionvl_data::preprocess::{PreprocessError, smart_resize};

/// Pixel bounds of every frame in the official vLLM evaluation (`run_eval.sh` defaults).
pub const VLLM_MIN_PIXELS: usize = 256 * 28 * 28;
pub const VLLM_MAX_PIXELS: usize = 512 * 28 * 28;

/// qwen-vl-utils' image bounds (`IMAGE_MIN_TOKEN_NUM`, `IMAGE_MAX_TOKEN_NUM` × 28²).
const QWEN_VL_UTILS_MIN_PIXELS: usize = 4 * 28 * 28;
const QWEN_VL_UTILS_MAX_PIXELS: usize = 16384 * 28 * 28;

const PRECISION_BITS: u32 = 32 - 8 - 2;

/// Pillow's bicubic filter, `a = -0.5`.
fn bicubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// Pillow's taps along one axis: per output index the first input index and its fixed-point
/// coefficients (`precompute_coeffs` + `normalize_coeffs_8bpc`).
struct Taps {
    bounds: Vec<(usize, usize)>,
    coeffs: Vec<i64>,
    ksize: usize,
}

impl Taps {
    fn new(in_size: usize, out_size: usize) -> Self {
        const SUPPORT: f64 = 2.0;
        let scale = in_size as f64 / out_size as f64;
        let filterscale = scale.max(1.0);
        let support = SUPPORT * filterscale;
        let ksize = support.ceil() as usize * 2 + 1;
        let ss = 1.0 / filterscale;
        let mut bounds = Vec::with_capacity(out_size);
        let mut coeffs = vec![0i64; out_size * ksize];
        let mut k = vec![0f64; ksize];
        for xx in 0..out_size {
            let center = (xx as f64 + 0.5) * scale;
            // `(int)` truncates toward zero, as `as i64` does.
            let xmin = ((center - support + 0.5) as i64).max(0);
            let xmax = ((center + support + 0.5) as i64).min(in_size as i64) - xmin;
            let (xmin, xmax) = (xmin as usize, xmax.max(0) as usize);
            let mut ww = 0.0;
            for (x, kx) in k.iter_mut().enumerate().take(xmax) {
                *kx = bicubic((x as f64 + xmin as f64 - center + 0.5) * ss);
                ww += *kx;
            }
            for (x, kx) in k.iter().enumerate().take(xmax) {
                let w = if ww != 0.0 { kx / ww } else { *kx };
                let v = w * f64::from(1u32 << PRECISION_BITS);
                coeffs[xx * ksize + x] = if w < 0.0 { (-0.5 + v) as i64 } else { (0.5 + v) as i64 };
            }
            bounds.push((xmin, xmax));
        }
        Taps { bounds, coeffs, ksize }
    }

    fn taps(&self, i: usize) -> (usize, &[i64]) {
        let (xmin, n) = self.bounds[i];
        (xmin, &self.coeffs[i * self.ksize..i * self.ksize + n])
    }
}

/// `clip8`: back from fixed point, saturated to a byte.
fn clip8(acc: i64) -> u8 {
    (acc >> PRECISION_BITS).clamp(0, 255) as u8
}

/// Pillow's `Image.resize((out_w, out_h), Image.BICUBIC)` of an `[H, W, C]` uint8 image.
pub fn pil_resize_bicubic(image: ArrayView3<u8>, out_h: usize, out_w: usize) -> Array3<u8> {
    let (in_h, in_w, c) = image.dim();
    if (out_h, out_w) == (in_h, in_w) || out_h == 0 || out_w == 0 || in_h == 0 || in_w == 0 {
        return if (out_h, out_w) == (in_h, in_w) { image.to_owned() } else { Array3::zeros((out_h, out_w, c)) };
    }
    let half = 1i64 << (PRECISION_BITS - 1);
    let mut data: Vec<u8> = image.iter().copied().collect();
    let mut w = in_w;
    if out_w != in_w {
        let taps = Taps::new(in_w, out_w);
        let mut out = vec![0u8; in_h * out_w * c];
        for y in 0..in_h {
            for x in 0..out_w {
                let (xmin, k) = taps.taps(x);
                for ch in 0..c {
                    let mut acc = half;
                    for (j, kj) in k.iter().enumerate() {
                        acc += i64::from(data[(y * w + xmin + j) * c + ch]) * kj;
                    }
                    out[(y * out_w + x) * c + ch] = clip8(acc);
                }
            }
        }
        (data, w) = (out, out_w);
    }
    if out_h != in_h {
        let taps = Taps::new(in_h, out_h);
        let row = w * c;
        let mut out = vec![0u8; out_h * row];
        for y in 0..out_h {
            let (ymin, k) = taps.taps(y);
            for i in 0..row {
                let mut acc = half;
                for (j, kj) in k.iter().enumerate() {
                    acc += i64::from(data[(ymin + j) * row + i]) * kj;
                }
                out[y * row + i] = clip8(acc);
            }
        }
        data = out;
    }
    match Array3::from_shape_vec((out_h, out_w, c), data) {
        Ok(a) => a,
        Err(_) => unreachable!("buffer sized out_h * out_w * c"),
    }
}

/// The official `resize_to_pixel_range`: the frame as it is when its pixel count is inside
/// `[min_pixels, max_pixels]`, else scaled towards the nearer bound (sides truncated).
pub fn resize_to_pixel_range(image: ArrayView3<u8>, min_pixels: usize, max_pixels: usize) -> Array3<u8> {
    let (h, w, _) = image.dim();
    let pixels = h * w;
    if (min_pixels..=max_pixels).contains(&pixels) {
        return image.to_owned();
    }
    let target = if pixels < min_pixels { min_pixels } else { max_pixels };
    let scale = (target as f64 / pixels as f64).sqrt();
    let new_w = ((w as f64 * scale) as usize).max(1);
    let new_h = ((h as f64 * scale) as usize).max(1);
    pil_resize_bicubic(image, new_h, new_w)
}

/// One frame as the official vLLM evaluation hands it to vLLM: [`resize_to_pixel_range`] with
/// the evaluation's bounds, then qwen-vl-utils' `fetch_image` (module docs).
pub fn vllm_frame(frame: ArrayView3<u8>) -> Result<Array3<u8>, PreprocessError> {
    let ranged = resize_to_pixel_range(frame, VLLM_MIN_PIXELS, VLLM_MAX_PIXELS);
    let (h, w, _) = ranged.dim();
    let (rh, rw) = smart_resize(h, w, 28, QWEN_VL_UTILS_MIN_PIXELS, QWEN_VL_UTILS_MAX_PIXELS)?;
    Ok(pil_resize_bicubic(ranged.view(), rh, rw))
}
