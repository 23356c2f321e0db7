//! Depthwise 2-D convolution (`nn.Conv2d(C, C, k, padding=p, groups=C)`), stride 1,
//! forward only.
//!
//! Candle runs a grouped convolution as one convolution per group followed by a `cat`: for a
//! depthwise layer that is C tiny im2col matmuls, and the 7×7 (SEA-RAFT's ConvNeXt) and 15×15
//! (MemFlow's and MOFNet's PCBlocks) layers dominate those networks' run time. This kernel
//! pads each plane once and accumulates `k²` shifted rows with a scalar weight each, an AXPY
//! over the row that the compiler vectorises; planes (or row bands of a plane, when there are
//! few planes) run in parallel with rayon; on a GPU the same taps are whole-tensor Candle ops.
//! The networks are frozen, so no backward pass.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::{FlowError, Result};

/// `x` `[B,C,H,W]` f32, `w` `[C,1,k,k]`, optional `bias` `[C]`, zero padding `pad` on every
/// side → `[B,C,H+2p−k+1,W+2p−k+1]`.
///
/// f32 on the CPU runs the rayon kernel; other devices and dtypes sum shifted taps in Candle
/// ops ([`shifted_taps`]), which gives the same numbers.
pub fn depthwise_conv2d(x: &Tensor, w: &Tensor, bias: Option<&Tensor>, pad: usize) -> Result<Tensor> {
    let (_, c, h, wd) = x.dims4()?;
    let (cw, one, kh, kw) = w.dims4()?;
    if cw != c || one != 1 || kh != kw {
        return Err(FlowError::KernelShapes {
            kernel: "depthwise conv",
            problem: format!("weight {:?} does not fit input {:?} (expected [{c},1,k,k])", w.dims(), x.dims()),
        });
    }
    if h + 2 * pad < kh || wd + 2 * pad < kw {
        return Err(FlowError::KernelShapes {
            kernel: "depthwise conv",
            problem: format!("{kh}×{kw} kernel larger than the padded {h}×{wd} input (pad {pad})"),
        });
    }
    let y = if x.device().is_cpu() && x.dtype() == DType::F32 && w.dtype() == DType::F32 {
        x.contiguous()?.apply_op2_no_bwd(&w.contiguous()?, &Depthwise { pad })?
    } else {
        shifted_taps(x, w, pad)?
    };
    Ok(match bias {
        Some(b) => super::bias::add_bias(&y, b, 1)?,
        None => y,
    })
}

/// [`depthwise_conv2d`] (without bias) in Candle ops for every other device and dtype: the sum
/// over the `k²` taps of the zero-padded input shifted by the tap, times the tap's weight per
/// channel — `2k²` elementwise kernels over the whole batch, where Candle's grouped convolution
/// runs one convolution per channel and concatenates them (hundreds of tiny launches per layer
/// on a GPU). Taps are added in the CPU kernel's order (rows of the kernel, then columns), in f32
/// whatever the dtype, as the CPU kernel and cuDNN accumulate.
fn shifted_taps(x: &Tensor, w: &Tensor, pad: usize) -> candle_core::Result<Tensor> {
    let (_, c, h, wd) = x.dims4()?;
    let k = w.dim(2)?;
    let (ho, wo) = (h + 2 * pad + 1 - k, wd + 2 * pad + 1 - k);
    let padded = x.to_dtype(DType::F32)?.pad_with_zeros(2, pad, pad)?.pad_with_zeros(3, pad, pad)?;
    // [k², C, 1, 1]: tap t's weight of every channel.
    let taps = w.to_dtype(DType::F32)?.reshape((c, k * k))?.t()?.contiguous()?.reshape((k * k, c, 1, 1))?;
    let mut sum: Option<Tensor> = None;
    for ky in 0..k {
        for kx in 0..k {
            let term = padded.narrow(2, ky, ho)?.narrow(3, kx, wo)?.broadcast_mul(&taps.get(ky * k + kx)?)?;
            sum = Some(match sum {
                Some(acc) => (acc + term)?,
                None => term,
            });
        }
    }
    sum.ok_or_else(|| candle_core::Error::Msg("depthwise conv: a kernel without taps".into()))?.to_dtype(x.dtype())
}

/// The CPU kernel behind [`depthwise_conv2d`]: `(x [B,C,H,W], w [C,1,k,k])`, both contiguous f32.
struct Depthwise {
    pad: usize,
}

/// Below this many planes, a plane is split into row bands so both cores stay busy.
const MIN_PLANES_FOR_PLANE_PARALLELISM: usize = 16;

impl CustomOp2 for Depthwise {
    fn name(&self) -> &'static str {
        "depthwise-conv2d"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, c, h, w) = l1.shape().dims4()?;
        let (_, _, k, _) = l2.shape().dims4()?;
        let (Some((x0, x1)), Some((w0, w1))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("depthwise conv needs contiguous inputs");
        };
        let (CpuStorage::F32(xs), CpuStorage::F32(ws)) = (s1, s2) else {
            candle_core::bail!("depthwise conv: the CPU kernel takes f32 input and weight");
        };
        let (xs, ws) = (&xs[x0..x1], &ws[w0..w1]);
        let p = self.pad;
        let (ho, wo) = (h + 2 * p + 1 - k, w + 2 * p + 1 - k);
        let mut out = vec![0f32; b * c * ho * wo];
        let avx2 = crate::dis::has_avx2_fma();
        let plane = |i: usize, rows: std::ops::Range<usize>, dst: &mut [f32]| {
            let src = &xs[i * h * w..(i + 1) * h * w];
            let kernel = &ws[(i % c) * k * k..(i % c + 1) * k * k];
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU has AVX2 and FMA (checked once above).
                return unsafe { conv_rows_avx2(src, h, w, kernel, k, p, rows, wo, dst) };
            }
            conv_rows(src, h, w, kernel, k, p, rows, wo, dst);
        };
        if b * c >= MIN_PLANES_FOR_PLANE_PARALLELISM {
            out.par_chunks_mut(ho * wo).enumerate().for_each(|(i, dst)| plane(i, 0..ho, dst));
        } else {
            let band = 8usize;
            out.par_chunks_mut(ho * wo).enumerate().for_each(|(i, dst)| {
                dst.par_chunks_mut(band * wo).enumerate().for_each(|(j, d)| {
                    let start = j * band;
                    plane(i, start..(start + band).min(ho), d)
                })
            });
        }
        Ok((CpuStorage::F32(out), Shape::from((b, c, ho, wo))))
    }
}

/// [`conv_rows`] compiled for 8-lane AVX2 (builds target the x86-64 baseline, 4 lanes).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
fn conv_rows_avx2(src: &[f32], h: usize, w: usize, kernel: &[f32], k: usize, p: usize, rows: std::ops::Range<usize>, wo: usize, dst: &mut [f32]) {
    conv_rows(src, h, w, kernel, k, p, rows, wo, dst)
}

/// Output rows `rows` of one plane: `dst[y−rows.start][x] = Σ_{ky,kx} k[ky,kx]·src[y+ky−p][x+kx−p]`,
/// with rows and columns outside the source reading as zero. Each output row is accumulated as
/// `k²` AXPYs over a zero-padded copy of the source row, so the inner loop has no branches.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn conv_rows(src: &[f32], h: usize, w: usize, kernel: &[f32], k: usize, p: usize, rows: std::ops::Range<usize>, wo: usize, dst: &mut [f32]) {
    let wp = w + 2 * p;
    let mut padded_row = vec![0f32; wp];
    for (r, y) in rows.enumerate() {
        let out_row = &mut dst[r * wo..(r + 1) * wo];
        for ky in 0..k {
            // Source row y + ky − p; rows in the padding contribute nothing.
            let Some(sy) = (y + ky).checked_sub(p).filter(|&sy| sy < h) else { continue };
            padded_row[p..p + w].copy_from_slice(&src[sy * w..(sy + 1) * w]);
            let taps = &kernel[ky * k..(ky + 1) * k];
            for (kx, &tap) in taps.iter().enumerate() {
                let shifted = &padded_row[kx..kx + wo];
                for (o, &v) in out_row.iter_mut().zip(shifted) {
                    *o += tap * v;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::seeded_randn;
    use candle_core::Device;
    use motionvl_data::rng::SynthRng;

    /// Candle's grouped convolution is the reference: it is slow but independent.
    fn check(b: usize, c: usize, h: usize, w: usize, k: usize, pad: usize) -> Result<()> {
        let mut rng = SynthRng::new((b * 1000 + c) as u64);
        let x = seeded_randn(&mut rng, (b, c, h, w))?;
        let wt = seeded_randn(&mut rng, (c, 1, k, k))?;
        let bias = seeded_randn(&mut rng, c)?;
        let fast = depthwise_conv2d(&x, &wt, Some(&bias), pad)?;
        let slow = x.conv2d(&wt, pad, 1, 1, c)?.broadcast_add(&bias.reshape((1, c, 1, 1))?)?;
        assert_eq!(fast.dims(), slow.dims());
        let diff = (fast - slow)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-4, "b{b} c{c} {h}×{w} k{k} p{pad}: max diff {diff}");
        Ok(())
    }

    #[test]
    fn matches_grouped_conv2d_for_7x7_and_15x15() -> Result<()> {
        check(2, 20, 13, 11, 7, 3)?; // plane-parallel path
        check(1, 3, 17, 9, 15, 7)?; // row-band path, kernel wider than the input
        check(1, 4, 6, 5, 3, 0)?; // no padding: output shrinks
        check(2, 9, 16, 18, 15, 2)?; // partial padding
        Ok(())
    }

    /// What GPUs run: the shifted taps against the CPU kernel, in f32 and in bf16 (within bf16's
    /// rounding of the inputs and of each partial sum).
    #[test]
    fn shifted_taps_match_the_cpu_kernel() -> Result<()> {
        let mut rng = SynthRng::new(5);
        for (b, c, h, w, k, pad) in [(2, 20, 13, 11, 7, 3), (1, 3, 17, 9, 15, 7), (1, 4, 6, 5, 3, 0), (2, 6, 5, 8, 1, 0)] {
            let x = seeded_randn(&mut rng, (b, c, h, w))?;
            let wt = seeded_randn(&mut rng, (c, 1, k, k))?;
            let kernel = depthwise_conv2d(&x, &wt, None, pad)?;
            let shifted = shifted_taps(&x, &wt, pad)?;
            assert_eq!(kernel.dims(), shifted.dims());
            let scale = kernel.abs()?.max_all()?.to_scalar::<f32>()?;
            let diff = (&kernel - &shifted)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff <= 1e-6 * scale, "k{k}: f32 differs by {diff}");
            let bf16 = |t: &Tensor| t.to_dtype(DType::BF16);
            let half = depthwise_conv2d(&bf16(&x)?, &bf16(&wt)?, None, pad)?.to_dtype(DType::F32)?;
            let diff = (&kernel - &half)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff <= 0.03 * scale, "k{k}: bf16 differs by {diff} (scale {scale})");
        }
        Ok(())
    }

    #[test]
    fn rejects_weights_of_another_shape() {
        let dev = Device::Cpu;
        let x = Tensor::zeros((1, 4, 8, 8), candle_core::DType::F32, &dev).map_err(FlowError::from);
        let w = Tensor::zeros((3, 1, 3, 3), candle_core::DType::F32, &dev).map_err(FlowError::from);
        let err = x.and_then(|x| w.and_then(|w| depthwise_conv2d(&x, &w, None, 1))).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("does not fit"), "{err}");
    }
}
