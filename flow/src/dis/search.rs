//! Patch inverse search (Kroeger et al. 2016, §2.1): one flow vector per patch on a strided
//! grid, found by inverse-compositional Gauss-Newton on the mean-normalised patch SSD, seeded
//! by the coarser level and by already-solved neighbours (spatial propagation).

use rayon::prelude::*;

use super::image::Plane;

/// Stripes of patch rows searched in parallel. Propagation stays inside a stripe, so the
/// result does not depend on the thread count (OpenCV fixes 8 for the same reason).
const STRIPES: usize = 8;

/// Patch sizes with a specialised kernel (the loops unroll and vectorise for a fixed size).
pub const PATCH_SIZES: &[usize] = &[8, 12, 16];

/// Replicated border of the second frame: clamped patch origins stay inside it.
pub fn border(patch: usize) -> usize {
    patch.max(16)
}

/// Per-level inputs of the search.
pub struct Level<'a> {
    pub i0: &'a Plane,
    pub i0x: &'a Plane,
    pub i0y: &'a Plane,
    /// Second frame with [`border`] replicated pixels on each side.
    pub i1_ext: &'a Plane,
    /// Dense flow from the coarser level (the initial guess at patch centres).
    pub u: &'a Plane,
    pub v: &'a Plane,
}

/// The sparse flow: one `[u, v]` per patch, `rows × cols`, patch `(r, c)` at `(c·s, r·s)`.
pub struct SparseFlow {
    pub rows: usize,
    pub cols: usize,
    pub stride: usize,
    pub patch: usize,
    pub uv: Vec<[f32; 2]>,
}

/// Mean-normalised structure tensor of one patch: `Σ(g-ḡ)(g-ḡ)ᵀ` inverted, plus `Σg`.
#[derive(Clone, Copy, Default)]
struct PatchTensor {
    inv: [f32; 3],
    gx_sum: f32,
    gy_sum: f32,
}

pub fn inverse_search(level: &Level, patch: usize, stride: usize, iterations: usize) -> SparseFlow {
    match patch {
        8 => search::<8>(level, stride, iterations),
        12 => search::<12>(level, stride, iterations),
        _ => search::<16>(level, stride, iterations),
    }
}

fn search<const P: usize>(level: &Level, stride: usize, iterations: usize) -> SparseFlow {
    let (w, h) = (level.i0.w, level.i0.h);
    let cols = 1 + (w - P) / stride;
    let rows = 1 + (h - P) / stride;
    let tensors = structure_tensors::<P>(level, rows, cols, stride);
    let mut uv = vec![[0f32; 2]; rows * cols];
    let stripe_rows = rows.div_ceil(STRIPES);
    // The Gauss-Newton budget is split between the two passes, as in OpenCV.
    let inner = (iterations / 2).max(1);
    uv.par_chunks_mut(stripe_rows * cols).enumerate().for_each(|(stripe, chunk)| {
        let job = Stripe { level, tensors: &tensors, stride, iterations: inner, cols, first_row: stripe * stripe_rows };
        #[cfg(target_arch = "x86_64")]
        if super::has_avx2_fma() {
            // SAFETY: the CPU has the features this copy of the loop is compiled for.
            unsafe { search_stripe_avx2::<P>(&job, chunk) };
            return;
        }
        search_stripe::<P>(&job, chunk);
    });
    SparseFlow { rows, cols, stride, patch: P, uv }
}

/// One stripe of patch rows and what its search needs.
struct Stripe<'a> {
    level: &'a Level<'a>,
    tensors: &'a [PatchTensor],
    stride: usize,
    iterations: usize,
    cols: usize,
    first_row: usize,
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn search_stripe_avx2<const P: usize>(job: &Stripe, chunk: &mut [[f32; 2]]) {
    search_stripe::<P>(job, chunk)
}

/// Two passes over the stripe, forward then backward, each seeded by the previous one.
#[inline(always)]
fn search_stripe<const P: usize>(job: &Stripe, chunk: &mut [[f32; 2]]) {
    let (level, cols, stride) = (job.level, job.cols, job.stride);
    let w = level.i0.w;
    let n_rows = chunk.len() / cols;
    for pass in 0..2 {
        let forward = pass == 0;
        for k in 0..n_rows {
            let r = if forward { k } else { n_rows - 1 - k };
            for m in 0..cols {
                let c = if forward { m } else { cols - 1 - m };
                let (y, x) = ((job.first_row + r) * stride, c * stride);
                let idx = r * cols + c;
                if pass == 0 {
                    let centre = (y + P / 2) * w + x + P / 2;
                    chunk[idx] = [level.u.data[centre], level.v.data[centre]];
                }
                // Candidates: the current vector and the already-visited neighbours.
                let mut best = chunk[idx];
                let mut best_ssd = patch_ssd::<P>(level, x, y, best);
                let prev_col = if forward { c.checked_sub(1) } else { Some(c + 1).filter(|&c| c < cols) };
                let prev_row = if forward { r.checked_sub(1) } else { Some(r + 1).filter(|&r| r < n_rows) };
                let neighbours = [prev_col.map(|pc| chunk[r * cols + pc]), prev_row.map(|pr| chunk[pr * cols + c])];
                for cand in neighbours.into_iter().flatten() {
                    let ssd = patch_ssd::<P>(level, x, y, cand);
                    if ssd < best_ssd {
                        best_ssd = ssd;
                        best = cand;
                    }
                }
                let t = &job.tensors[(job.first_row + r) * cols + c];
                let refined = gauss_newton::<P>(level, x, y, best, best_ssd, t, job.iterations);
                // A vector that wandered farther than a patch from its seed is most likely a
                // wrong local minimum: keep the seed (OpenCV's robustness rule).
                let (du, dv) = (refined[0] - best[0], refined[1] - best[1]);
                chunk[idx] = if (du * du + dv * dv).sqrt() <= P as f32 { refined } else { best };
            }
        }
    }
}

fn structure_tensors<const P: usize>(level: &Level, rows: usize, cols: usize, stride: usize) -> Vec<PatchTensor> {
    let w = level.i0.w;
    let n = (P * P) as f32;
    let mut out = vec![PatchTensor::default(); rows * cols];
    out.par_chunks_mut(cols).enumerate().for_each(|(r, row)| {
        for (c, t) in row.iter_mut().enumerate() {
            let (y, x) = (r * stride, c * stride);
            let (mut xx, mut xy, mut yy, mut sx, mut sy) = (0f32, 0f32, 0f32, 0f32, 0f32);
            for i in 0..P {
                let gx = &level.i0x.data[(y + i) * w + x..][..P];
                let gy = &level.i0y.data[(y + i) * w + x..][..P];
                for j in 0..P {
                    xx += gx[j] * gx[j];
                    xy += gx[j] * gy[j];
                    yy += gy[j] * gy[j];
                    sx += gx[j];
                    sy += gy[j];
                }
            }
            // Mean normalisation removes the patch's gradient mean from the Hessian too.
            let (hxx, hxy, hyy) = (xx - sx * sx / n, xy - sx * sy / n, yy - sy * sy / n);
            let det = (hxx * hyy - hxy * hxy).max(1e-3);
            *t = PatchTensor { inv: [hyy / det, -hxy / det, hxx / det], gx_sum: sx, gy_sum: sy };
        }
    });
    out
}

/// Where patch `(x, y)` of a `w×h` frame displaced by `uv` lands in the bordered second frame
/// (row length `ext_w`): the index of its top-left sample and the bilinear weights, shared by
/// the whole patch. The origin is clamped so the patch stays inside the border.
#[inline(always)]
pub(super) fn landing<const P: usize>(w: usize, h: usize, ext_w: usize, x: usize, y: usize, uv: [f32; 2]) -> (usize, [f32; 4]) {
    let b = border(P) as f32;
    let fy = (y as f32 + uv[1] + b).clamp(b - P as f32 + 1.0, b + h as f32 - 1.0);
    let fx = (x as f32 + uv[0] + b).clamp(b - P as f32 + 1.0, b + w as f32 - 1.0);
    let (y0, x0) = (fy as usize, fx as usize); // clamped positive: truncation is floor
    let (ty, tx) = (fy - y0 as f32, fx - x0 as f32);
    let weights = [(1.0 - ty) * (1.0 - tx), (1.0 - ty) * tx, ty * (1.0 - tx), ty * tx];
    (y0 * ext_w + x0, weights)
}

/// Mean-normalised SSD between patch `(x, y)` of frame 0 and frame 1 displaced by `uv`.
#[inline(always)]
fn patch_ssd<const P: usize>(level: &Level, x: usize, y: usize, uv: [f32; 2]) -> f32 {
    let (origin, [w00, w01, w10, w11]) = landing::<P>(level.i0.w, level.i0.h, level.i1_ext.w, x, y, uv);
    let (s1, w) = (level.i1_ext.w, level.i0.w);
    let (mut sum, mut sum_sq) = (0f32, 0f32);
    for i in 0..P {
        let r0 = &level.i1_ext.data[origin + i * s1..][..P + 1];
        let r1 = &level.i1_ext.data[origin + (i + 1) * s1..][..P + 1];
        let a = &level.i0.data[(y + i) * w + x..][..P];
        for j in 0..P {
            let d = w00 * r0[j] + w01 * r0[j + 1] + w10 * r1[j] + w11 * r1[j + 1] - a[j];
            sum += d;
            sum_sq += d * d;
        }
    }
    sum_sq - sum * sum / (P * P) as f32
}

/// Inverse-compositional Gauss-Newton from `start` (whose SSD is `start_ssd`): each step is
/// `H⁻¹ Σ ∇I0 (I1(x+u) - I0(x))` with the Hessian fixed on frame 0. Stops when the SSD stops
/// falling and returns the best vector seen.
#[inline(always)]
fn gauss_newton<const P: usize>(level: &Level, x: usize, y: usize, start: [f32; 2], start_ssd: f32, t: &PatchTensor, iterations: usize) -> [f32; 2] {
    let (s1, w) = (level.i1_ext.w, level.i0.w);
    let n = (P * P) as f32;
    let (mut best, mut best_ssd) = (start, start_ssd);
    let mut cur = start;
    for it in 0..iterations {
        let (origin, [w00, w01, w10, w11]) = landing::<P>(level.i0.w, level.i0.h, level.i1_ext.w, x, y, cur);
        let (mut sum, mut sum_sq, mut bx, mut by) = (0f32, 0f32, 0f32, 0f32);
        for i in 0..P {
            let r0 = &level.i1_ext.data[origin + i * s1..][..P + 1];
            let r1 = &level.i1_ext.data[origin + (i + 1) * s1..][..P + 1];
            let off = (y + i) * w + x;
            let a = &level.i0.data[off..][..P];
            let gx = &level.i0x.data[off..][..P];
            let gy = &level.i0y.data[off..][..P];
            for j in 0..P {
                let d = w00 * r0[j] + w01 * r0[j + 1] + w10 * r1[j] + w11 * r1[j + 1] - a[j];
                sum += d;
                sum_sq += d * d;
                bx += d * gx[j];
                by += d * gy[j];
            }
        }
        let ssd = sum_sq - sum * sum / n;
        if it > 0 {
            if ssd >= best_ssd {
                break;
            }
            best = cur;
            best_ssd = ssd;
        }
        let (bx, by) = (bx - sum * t.gx_sum / n, by - sum * t.gy_sum / n);
        cur = [cur[0] - (t.inv[0] * bx + t.inv[1] * by), cur[1] - (t.inv[1] * bx + t.inv[2] * by)];
    }
    best
}
