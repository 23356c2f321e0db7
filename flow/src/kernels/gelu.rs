//! Exact (erf) GELU, and GELU of a sum, as parallel vectorised CPU kernels. Forward only.
//!
//! The PCBlocks of MOFNet and MemFlow apply GELU to every intermediate activation, and
//! Candle's `gelu_erf` is a single-threaded scalar `erf` (about 10 ns per value): at 448×448
//! that was a third of a MOFNet iteration. Here `erf` is the rational approximation Eigen and
//! XLA use for f32 (clamped to ±4, odd/even polynomials; within 5e-7 of the true erf), which
//! compiles to straight-line multiply-adds and a division, so it vectorises; values are
//! processed in parallel chunks.

use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::{FlowError, Result};

/// Values per parallel task.
const CHUNK: usize = 1 << 14;

/// `x·Φ(x)` with the exact normal CDF, as `nn.GELU()`.
pub fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    if x.device().is_cpu() && x.dtype() == candle_core::DType::F32 { Ok(x.contiguous()?.apply_op1_no_bwd(&Gelu)?) } else { Ok(x.gelu_erf()?) }
}

/// `gelu(x + y)` in one pass (the residual connections of a PCBlock); `x` and `y` of one shape.
pub fn add_gelu(x: &Tensor, y: &Tensor) -> Result<Tensor> {
    if x.dims() != y.dims() {
        return Err(FlowError::KernelShapes { kernel: "add_gelu", problem: format!("shapes {:?} and {:?} differ", x.dims(), y.dims()) });
    }
    if x.device().is_cpu() && x.dtype() == candle_core::DType::F32 && y.dtype() == candle_core::DType::F32 {
        Ok(x.contiguous()?.apply_op2_no_bwd(&y.contiguous()?, &AddGelu)?)
    } else {
        Ok((x + y)?.gelu_erf()?)
    }
}

/// erf for f32 (Eigen's `generic_fast_erf_float`; its coefficients as published).
#[inline(always)]
#[allow(clippy::excessive_precision)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = x2 * -2.72614225801306e-10 + 2.77068142495902e-08;
    p = x2 * p + -2.10102402082508e-06;
    p = x2 * p + -5.69250639462346e-05;
    p = x2 * p + -7.34990630326855e-04;
    p = x2 * p + -2.95459980854025e-03;
    p = x2 * p + -1.60960333262415e-02;
    let mut q = x2 * -1.45660718464996e-05 + -2.13374055278905e-04;
    q = x2 * q + -1.68282697438203e-03;
    q = x2 * q + -7.37332916720468e-03;
    q = x2 * q + -1.42647390514189e-02;
    x * p / q
}

#[inline(always)]
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

#[inline(always)]
fn gelu_slice(src: &[f32], dst: &mut [f32]) {
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = gelu(s);
    }
}

#[inline(always)]
fn add_gelu_slice(a: &[f32], b: &[f32], dst: &mut [f32]) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = gelu(x + y);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn gelu_slice_avx2(src: &[f32], dst: &mut [f32]) {
    gelu_slice(src, dst)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn add_gelu_slice_avx2(a: &[f32], b: &[f32], dst: &mut [f32]) {
    add_gelu_slice(a, b, dst)
}

fn contiguous_f32<'a>(s: &'a CpuStorage, l: &Layout) -> candle_core::Result<&'a [f32]> {
    let Some((start, end)) = l.contiguous_offsets() else { candle_core::bail!("gelu kernels need contiguous input") };
    let CpuStorage::F32(v) = s else { candle_core::bail!("gelu kernels take f32") };
    Ok(&v[start..end])
}

struct Gelu;

impl CustomOp1 for Gelu {
    fn name(&self) -> &'static str {
        "gelu-erf-fast"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let src = contiguous_f32(s, l)?;
        let mut out = vec![0f32; src.len()];
        let avx2 = crate::dis::has_avx2_fma();
        out.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| {
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                return unsafe { gelu_slice_avx2(s, d) };
            }
            gelu_slice(s, d)
        });
        Ok((CpuStorage::F32(out), l.shape().clone()))
    }
}

struct AddGelu;

impl CustomOp2 for AddGelu {
    fn name(&self) -> &'static str {
        "add-gelu-erf-fast"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (a, b) = (contiguous_f32(s1, l1)?, contiguous_f32(s2, l2)?);
        let mut out = vec![0f32; a.len()];
        let avx2 = crate::dis::has_avx2_fma();
        out.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK))).for_each(|(d, (a, b))| {
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: the CPU has AVX2 and FMA (checked above).
                return unsafe { add_gelu_slice_avx2(a, b, d) };
            }
            add_gelu_slice(a, b, d)
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::seeded_randn;
    use motionvl_data::rng::SynthRng;

    #[test]
    fn matches_candles_exact_gelu() -> Result<()> {
        // Covers the clamp (|x/√2| > 4) and both signs; more than one chunk.
        let mut rng = SynthRng::new(3);
        let x = (seeded_randn(&mut rng, (3, 7, 41, 53))? * 4.0)?;
        let y = seeded_randn(&mut rng, (3, 7, 41, 53))?;
        let diff = (gelu_erf(&x)? - x.gelu_erf()?)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 5e-6, "gelu max diff {diff}");
        let diff = (add_gelu(&x, &y)? - (&x + &y)?.gelu_erf()?)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 5e-6, "add_gelu max diff {diff}");
        let wrong = add_gelu(&x, &y.narrow(0, 0, 2)?).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(wrong.contains("differ"), "{wrong}");
        Ok(())
    }
}
