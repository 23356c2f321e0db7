//! Rotary embedding in the rotate-half convention as one op. The rotation is linear in `x` with
//! constant tables, so its backward is the transposed rotation of the incoming gradient and needs
//! no saved activations; the composed form keeps the halves, their negation, the concatenation
//! and both products.

use candle_core::{CpuStorage, CustomOp3, D, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::{TASK_ELEMENTS, contiguous_f32, on_kernel_device};

/// `x·cos + rotate_half(x)·sin` on the last dimension, computed in f32 and returned in the input
/// dtype; `cos`/`sin` broadcast against `xs` (the decoder's `[B, 1, L, D]` tables against
/// `[B, H, L, D]`, the vision tower's `[N, 1, D]` against `[N, H, D]`). The fused op runs on the
/// CPU and CUDA for a contiguous `xs` of any float dtype and constant f32 tables whose last
/// dimension is the head's; everything else takes the composed path.
pub fn apply_rotary(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    match broadcast_tables(xs, cos, sin) {
        Some((cos, sin)) => {
            let dtype = xs.dtype();
            xs.to_dtype(DType::F32)?.apply_op3(&cos, &sin, FusedRotary { transpose: false })?.to_dtype(dtype)
        }
        None => composed(xs, cos, sin),
    }
}

/// Whether [`apply_rotary`] runs the fused op for these tensors.
pub fn applies(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> bool {
    broadcast_tables(xs, cos, sin).is_some()
}

/// The tables broadcast to `xs`'s shape (zero strides, no copy) when the fused op applies.
fn broadcast_tables(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> Option<(Tensor, Tensor)> {
    let width = xs.dims().last().copied().unwrap_or(0);
    let tables_ok = [cos, sin].iter().all(|t| {
        // A table that is itself a variable would need a gradient the fused op does not give.
        on_kernel_device(t) && t.dtype() == DType::F32 && t.is_contiguous() && !t.track_op() && t.dims().last() == Some(&width)
    });
    if !(on_kernel_device(xs) && xs.dtype().is_float() && xs.is_contiguous() && width > 0 && width % 2 == 0 && tables_ok) {
        return None;
    }
    Some((cos.broadcast_as(xs.shape()).ok()?, sin.broadcast_as(xs.shape()).ok()?))
}

/// Rotary embedding from differentiable primitives: every dtype, device and broadcast; the
/// reference the fused op is tested against.
pub fn composed(xs: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let dtype = xs.dtype();
    let xs = xs.to_dtype(DType::F32)?;
    let rotated = rotate_half(&xs)?.broadcast_mul(sin)?;
    xs.broadcast_mul(cos)?.add(&rotated)?.to_dtype(dtype)
}

/// `[x1, x2] → [-x2, x1]` on the last dimension.
pub fn rotate_half(xs: &Tensor) -> Result<Tensor> {
    let half = xs.dim(D::Minus1)? / 2;
    let x1 = xs.narrow(D::Minus1, 0, half)?;
    let x2 = xs.narrow(D::Minus1, half, half)?;
    Tensor::cat(&[&x2.neg()?, &x1], D::Minus1)
}

/// `(x, cos, sin)` with the tables broadcast to `x`'s shape. With halves `x = [x1, x2]`:
/// forward `y1 = x1·c1 − x2·s1`, `y2 = x2·c2 + x1·s2`; its transpose (the backward)
/// `y1 = x1·c1 + x2·s2`, `y2 = x2·c2 − x1·s1`. Each is the other's backward.
struct FusedRotary {
    transpose: bool,
}

impl CustomOp3 for FusedRotary {
    fn name(&self) -> &'static str {
        if self.transpose { "fused-rotary-transpose" } else { "fused-rotary" }
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let xs = contiguous_f32(s1, l1, self.name())?;
        let width = l1.dims().last().copied().unwrap_or(0);
        let (cos, sin) = (s2.as_slice::<f32>()?, s3.as_slice::<f32>()?);
        let cos_rows = row_starts(l2, l1, cos.len(), self.name())?;
        let sin_rows = row_starts(l3, l1, sin.len(), self.name())?;
        let half = width / 2;
        let rows_per_task = (TASK_ELEMENTS / width).max(1);
        let mut out = vec![0f32; xs.len()];
        out.par_chunks_mut(width * rows_per_task)
            .zip(xs.par_chunks(width * rows_per_task))
            .zip(cos_rows.par_chunks(rows_per_task).zip(sin_rows.par_chunks(rows_per_task)))
            .for_each(|((out, xs), (cos_rows, sin_rows))| {
                for (((y, x), &c), &s) in out.chunks_exact_mut(width).zip(xs.chunks_exact(width)).zip(cos_rows).zip(sin_rows) {
                    // Every slice cut to `half` so the compiler sees the loop's bounds and drops
                    // the checks (the row is `2·half` long).
                    let (c1, c2) = (&cos[c..c + half], &cos[c + half..c + 2 * half]);
                    let (s1, s2) = (&sin[s..s + half], &sin[s + half..s + 2 * half]);
                    let (x1, x2) = (&x[..half], &x[half..2 * half]);
                    let (y1, y2) = y.split_at_mut(half);
                    let (y1, y2) = (&mut y1[..half], &mut y2[..half]);
                    // The sign of the `x2` term in `y1` and of the `x1` term in `y2` is what the
                    // transpose flips; the sine half each term reads swaps with it.
                    let (sa, sb, sign) = if self.transpose { (s2, s1, -1.0) } else { (s1, s2, 1.0) };
                    for i in 0..half {
                        y1[i] = x1[i] * c1[i] - sign * (x2[i] * sa[i]);
                        y2[i] = x2[i] * c2[i] + sign * (x1[i] * sb[i]);
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
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((super::cuda::rotary((s1, l1), (s2, l2), (s3, l3), self.transpose, self.name())?, l1.shape().clone()))
    }

    fn bwd(
        &self,
        _xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let dxs = grad.contiguous()?.apply_op3(cos, sin, FusedRotary { transpose: !self.transpose })?;
        Ok((Some(dxs), None, None))
    }
}

/// Where each `width`-long row of `xs` finds its table row in a table of `len` elements laid out
/// as `table` (the table broadcast to `xs`'s shape, so broadcast dimensions have stride 0).
fn row_starts(table: &Layout, xs: &Layout, len: usize, op: &'static str) -> Result<Vec<usize>> {
    let dims = table.dims();
    let stride = table.stride();
    let (Some((&width, outer)), Some(&1)) = (dims.split_last(), stride.last()) else {
        candle_core::bail!("{op}: the table's last dimension must be contiguous")
    };
    if dims != xs.dims() {
        candle_core::bail!("{op}: table shape {:?} is not broadcast to the input's {:?}", dims, xs.dims())
    }
    let rows: usize = outer.iter().product();
    let mut starts = Vec::with_capacity(rows);
    let mut index = vec![0usize; outer.len()];
    let mut offset = table.start_offset();
    for _ in 0..rows {
        if offset + width > len {
            candle_core::bail!("{op}: table row at {offset} runs past its {len} elements")
        }
        starts.push(offset);
        // Advance the row index like an odometer, last outer dimension fastest.
        for axis in (0..outer.len()).rev() {
            index[axis] += 1;
            offset += stride[axis];
            if index[axis] < outer[axis] {
                break;
            }
            offset -= stride[axis] * outer[axis];
            index[axis] = 0;
        }
    }
    Ok(starts)
}
