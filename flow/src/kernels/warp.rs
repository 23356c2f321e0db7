//! Bilinear sampling of a feature map at per-pixel positions — PyTorch's
//! `grid_sample(align_corners=True, padding_mode="zeros")` behind the usual
//! `bilinear_sampler(img, coords)` wrapper that takes pixel coordinates. Candle has no
//! `grid_sample`; flow networks use it to warp features along a flow (MOFNet carries each
//! frame's motion state to its neighbours this way). Forward only.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::{FlowError, Result};

/// `feat` `[B,C,H,W]` f32 sampled at `coords` `[B,2,Ho,Wo]` (x, y in pixels of `feat`) →
/// `[B,C,Ho,Wo]`; samples outside the map read as zero.
pub fn bilinear_sample(feat: &Tensor, coords: &Tensor) -> Result<Tensor> {
    let (b, _, _, _) = feat.dims4()?;
    let (bc, two, _, _) = coords.dims4()?;
    if bc != b || two != 2 {
        return Err(FlowError::KernelShapes {
            kernel: "bilinear_sample",
            problem: format!("coords {:?} do not fit features {:?}", coords.dims(), feat.dims()),
        });
    }
    if feat.device().is_cpu() {
        Ok(feat.contiguous()?.apply_op2_no_bwd(&coords.contiguous()?, &BilinearSample)?)
    } else {
        sample_reference(feat, coords)
    }
}

/// Source position along an axis of `size` samples, through the same normalise/unnormalise
/// round trip as `bilinear_sampler` + `grid_sample`, so rounding matches the reference.
fn source_index(p: f32, size: usize) -> f32 {
    let extent = (size as f32) - 1.0;
    let g = 2.0 * p / extent - 1.0;
    (g + 1.0) / 2.0 * extent
}

/// The four corners of a bilinear sample: flat indices and weights (weight 0 outside).
fn corners(x: f32, y: f32, h: usize, w: usize) -> [(usize, f32); 4] {
    let (ix, iy) = (source_index(x, w), source_index(y, h));
    let (x0, y0) = (ix.floor(), iy.floor());
    let (fx, fy) = (ix - x0, iy - y0);
    let (x0, y0) = (x0 as i64, y0 as i64);
    let at = |cx: i64, cy: i64, wt: f32| -> (usize, f32) {
        if cx >= 0 && cy >= 0 && (cx as usize) < w && (cy as usize) < h { (cy as usize * w + cx as usize, wt) } else { (0, 0.0) }
    };
    [at(x0, y0, (1.0 - fx) * (1.0 - fy)), at(x0 + 1, y0, fx * (1.0 - fy)), at(x0, y0 + 1, (1.0 - fx) * fy), at(x0 + 1, y0 + 1, fx * fy)]
}

struct BilinearSample;

impl CustomOp2 for BilinearSample {
    fn name(&self) -> &'static str {
        "bilinear-sample"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (b, c, h, w) = l1.shape().dims4()?;
        let (_, _, ho, wo) = l2.shape().dims4()?;
        let (Some((f0, f1)), Some((c0, c1))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("bilinear sample needs contiguous inputs");
        };
        let (CpuStorage::F32(feat), CpuStorage::F32(coords)) = (s1, s2) else {
            candle_core::bail!("bilinear sample: the CPU kernel takes f32 features and coordinates");
        };
        let (feat, coords) = (&feat[f0..f1], &coords[c0..c1]);
        let n = ho * wo;
        let mut out = vec![0f32; b * c * n];
        for (i, out_b) in out.chunks_mut(c * n).enumerate() {
            let xs = &coords[(2 * i) * n..(2 * i + 1) * n];
            let ys = &coords[(2 * i + 1) * n..(2 * i + 2) * n];
            let taps: Vec<[(usize, f32); 4]> = xs.par_iter().zip(ys).map(|(&x, &y)| corners(x, y, h, w)).collect();
            out_b.par_chunks_mut(n).enumerate().for_each(|(ch, dst)| {
                let plane = &feat[(i * c + ch) * h * w..(i * c + ch + 1) * h * w];
                for (d, tap) in dst.iter_mut().zip(&taps) {
                    *d = tap.iter().map(|&(k, wt)| wt * plane[k]).sum();
                }
            });
        }
        Ok((CpuStorage::F32(out), Shape::from((b, c, ho, wo))))
    }
}

/// The same sampling composed of Candle ops (gathers): for devices without the kernel, and as
/// its independent check in the tests.
pub fn sample_reference(feat: &Tensor, coords: &Tensor) -> Result<Tensor> {
    let (b, c, h, w) = feat.dims4()?;
    let (_, _, ho, wo) = coords.dims4()?;
    let flat = feat.reshape((b, c, h * w))?;
    let x = coords.narrow(1, 0, 1)?.reshape((b, 1, ho * wo))?;
    let y = coords.narrow(1, 1, 1)?.reshape((b, 1, ho * wo))?;
    let (x0, y0) = (x.floor()?, y.floor()?);
    let (fx, fy) = ((&x - &x0)?, (&y - &y0)?);
    let corner = |dx: f64, dy: f64, wt: Tensor| -> Result<Tensor> {
        let (cx, cy) = ((&x0 + dx)?, (&y0 + dy)?);
        let inside = cx.ge(0.0)?.mul(&cx.le((w - 1) as f64)?)?.mul(&cy.ge(0.0)?)?.mul(&cy.le((h - 1) as f64)?)?;
        let idx = (cy.clamp(0.0, (h - 1) as f64)? * w as f64)?.add(&cx.clamp(0.0, (w - 1) as f64)?)?;
        let idx = idx.to_dtype(DType::U32)?.broadcast_as((b, c, ho * wo))?.contiguous()?;
        let wt = wt.mul(&inside.to_dtype(DType::F32)?)?;
        Ok(flat.gather(&idx, 2)?.broadcast_mul(&wt)?)
    };
    let one = |t: &Tensor| t.affine(-1.0, 1.0);
    let sum = (corner(0.0, 0.0, one(&fx)?.mul(&one(&fy)?)?)? + corner(1.0, 0.0, fx.mul(&one(&fy)?)?)?)?;
    let sum = (sum + corner(0.0, 1.0, one(&fx)?.mul(&fy)?)?)?;
    let sum = (sum + corner(1.0, 1.0, fx.mul(&fy)?)?)?;
    Ok(sum.reshape((b, c, ho, wo))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::seeded_randn;
    use candle_core::Device;
    use motionvl_data::rng::SynthRng;

    #[test]
    fn kernel_matches_the_gather_reference_including_borders() -> Result<()> {
        let dev = Device::Cpu;
        let mut rng = SynthRng::new(2);
        let feat = seeded_randn(&mut rng, (2, 5, 6, 9))?;
        // Positions inside, on the edges and outside the map: uniform in [-3, 11).
        let coords: Vec<f32> = (0..2 * 2 * 4 * 7).map(|_| rng.range(-3.0, 11.0) as f32).collect();
        let coords = Tensor::from_vec(coords, (2, 2, 4, 7), &dev)?;
        let fast = bilinear_sample(&feat, &coords)?;
        let slow = sample_reference(&feat, &coords)?;
        let diff = (fast - slow)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-5, "max diff {diff}");
        Ok(())
    }

    #[test]
    fn integer_positions_read_cells_and_outside_reads_zero() -> Result<()> {
        let dev = Device::Cpu;
        // value = 10·y + x
        let plane: Vec<f32> = (0..3 * 4).map(|i| (10 * (i / 4) + i % 4) as f32).collect();
        let feat = Tensor::from_vec(plane, (1, 1, 3, 4), &dev)?;
        // Three positions: (x=3,y=2) → 23, (x=1.5,y=0) → 1.5, (x=-1,y=0) → 0.
        let coords = Tensor::from_vec(vec![3f32, 1.5, -1.0, 2.0, 0.0, 0.0], (1, 2, 1, 3), &dev)?;
        let out = bilinear_sample(&feat, &coords)?.flatten_all()?.to_vec1::<f32>()?;
        assert_eq!(out, vec![23.0, 1.5, 0.0]);
        Ok(())
    }
}
