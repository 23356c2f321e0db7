//! RMSNorm as one op. The composed form keeps x², the mean, the root, its reciprocal and the
//! normalised rows for backprop; the fused op keeps nothing but its inputs and recomputes each
//! row's `inv_rms` (one pass over the row) in the backward pass.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, D, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::{TASK_ELEMENTS, contiguous_f32, on_kernel_device};

/// `x · inv_rms(x) · weight` over the last dimension, Qwen2's RMSNorm: the fused op on the CPU
/// and CUDA for contiguous f32 inputs, the composed one otherwise.
pub fn rms_norm(xs: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    if applies(xs, weight) { xs.apply_op2(weight, FusedRmsNorm { eps: eps as f32 }) } else { composed(xs, weight, eps) }
}

/// Whether [`rms_norm`] runs the fused op for these tensors.
pub fn applies(xs: &Tensor, weight: &Tensor) -> bool {
    let width = xs.dims().last().copied().unwrap_or(0);
    width > 0 && weight.dims() == [width] && [xs, weight].iter().all(|t| on_kernel_device(t) && t.dtype() == DType::F32 && t.is_contiguous())
}

/// RMSNorm from differentiable primitives, as Qwen2 computes it: statistics in f32, the scale in
/// the input dtype. Every dtype and device; the reference the fused op is tested against.
pub fn composed(xs: &Tensor, weight: &Tensor, eps: f64) -> Result<Tensor> {
    let dtype = xs.dtype();
    let xs = xs.to_dtype(DType::F32)?;
    let inv_rms = (xs.sqr()?.mean_keepdim(D::Minus1)? + eps)?.sqrt()?.recip()?;
    xs.broadcast_mul(&inv_rms)?.to_dtype(dtype)?.broadcast_mul(weight)
}

/// Forward: `y = x · r · w` with `r = 1/√(mean(x²) + eps)` per row.
struct FusedRmsNorm {
    eps: f32,
}

impl CustomOp2 for FusedRmsNorm {
    fn name(&self) -> &'static str {
        "fused-rms-norm"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(s1, l1, self.name())?;
        let weight = contiguous_f32(s2, l2, self.name())?;
        let width = weight.len();
        let task = width * (TASK_ELEMENTS / width).max(1);
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(task).zip(xs.par_chunks(task)).for_each(|(out, xs)| {
            for (y, x) in out.chunks_exact_mut(width).zip(xs.chunks_exact(width)) {
                let r = inv_rms(x, self.eps);
                for ((y, &x), &w) in y.iter_mut().zip(x).zip(weight) {
                    *y = x * r * w;
                }
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((super::cuda::rms_norm((s1, l1), (s2, l2), self.eps, self.name())?, l1.shape().clone()))
    }

    fn bwd(&self, xs: &Tensor, weight: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let rows = xs.elem_count() / weight.elem_count();
        // One pass yields both gradients; a custom op has one output, so they share a buffer:
        // `rows` rows of dx, then dweight as the last row.
        let both = xs.apply_op3_no_bwd(weight, &grad.contiguous()?, &RmsNormBackward { eps: self.eps })?;
        let dxs = both.narrow(0, 0, rows)?.reshape(xs.shape())?;
        let dweight = both.narrow(0, rows, 1)?.reshape(weight.shape())?;
        Ok((Some(dxs), Some(dweight)))
    }
}

/// Backward of [`FusedRmsNorm`] for `(x, w, dy)`: with `n = x·r` and `gw = dy·w`,
/// `dx = r·(gw − n·mean(gw·n))` per row and `dw = Σ_rows dy·n`; output `[rows + 1, width]`.
struct RmsNormBackward {
    eps: f32,
}

impl CustomOp3 for RmsNormBackward {
    fn name(&self) -> &'static str {
        "fused-rms-norm-backward"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(s1, l1, self.name())?;
        let weight = contiguous_f32(s2, l2, self.name())?;
        let grad = contiguous_f32(s3, l3, self.name())?;
        let width = weight.len();
        let rows = xs.len() / width;
        let task = width * (TASK_ELEMENTS / width).max(1);
        let mut out = vec![0f32; (rows + 1) * width];
        let (dxs, dweight) = out.split_at_mut(rows * width);
        // Each task sums its rows' dweight; the partials are added in task order afterwards, so
        // the result does not depend on how rayon scheduled the tasks.
        let partials: Vec<Vec<f32>> = dxs
            .par_chunks_mut(task)
            .zip(xs.par_chunks(task))
            .zip(grad.par_chunks(task))
            .map(|((dxs, xs), grad)| {
                let mut dweight = vec![0f32; width];
                for ((dx, x), dy) in dxs.chunks_exact_mut(width).zip(xs.chunks_exact(width)).zip(grad.chunks_exact(width)) {
                    let r = inv_rms(x, self.eps);
                    // mean(gw·n) = r·Σ(dy·w·x)/width, so dx = r·dy·w − x·r³·Σ(dy·w·x)/width.
                    let c = r * r * r * dot3(dy, weight, x) / width as f32;
                    for ((((dx, &x), &dy), &w), dw) in dx.iter_mut().zip(x).zip(dy).zip(weight).zip(dweight.iter_mut()) {
                        *dx = r * dy * w - x * c;
                        *dw += dy * x * r;
                    }
                }
                dweight
            })
            .collect();
        for partial in partials {
            for (dw, p) in dweight.iter_mut().zip(partial) {
                *dw += p;
            }
        }
        Ok((CpuStorage::F32(out), Shape::from((rows + 1, width))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        let (width, rows) = (l2.shape().elem_count(), l1.shape().elem_count() / l2.shape().elem_count().max(1));
        Ok((super::cuda::rms_norm_backward((s1, l1), (s2, l2), (s3, l3), self.eps, self.name())?, Shape::from((rows + 1, width))))
    }
}

/// Lanes of the reductions: independent accumulators let the compiler keep them in one vector
/// register (a single running sum would serialise on the add latency and stay scalar).
const LANES: usize = 8;

fn inv_rms(x: &[f32], eps: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
    for chunk in chunks {
        for (a, v) in acc.iter_mut().zip(chunk) {
            *a += v * v;
        }
    }
    1.0 / ((acc.iter().sum::<f32>() + tail) / x.len() as f32 + eps).sqrt()
}

/// `Σ a·b·c`.
fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (a_chunks, b_chunks, c_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES), c.chunks_exact(LANES));
    let tail: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).zip(c_chunks.remainder()).map(|((a, b), c)| a * b * c).sum();
    for ((a, b), c) in a_chunks.zip(b_chunks).zip(c_chunks) {
        for (((acc, a), b), c) in acc.iter_mut().zip(a).zip(b).zip(c) {
            *acc += a * b * c;
        }
    }
    acc.iter().sum::<f32>() + tail
}
