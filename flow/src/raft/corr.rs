//! All-pairs correlation (RAFT §3.2): the 4-D volume of feature dot products, pooled into a
//! pyramid over the second frame's axes, and looked up in a (2r+1)² window around each pixel's
//! current match at every level.
//!
//! The lookup is bilinear sampling with zero padding at absolute pixel coordinates —
//! `grid_sample(align_corners=True)`, which Candle lacks — written as a forward-only kernel
//! ([`CorrLookup`]), the CPU counterpart of RAFT's `alt_cuda_corr`. Channel order follows the
//! references: window index `(dx + r)·(2r+1) + (dy + r)`, x-offset-major.

use candle_core::{CpuStorage, CustomOp2, DType, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::error::Result;

/// The correlation pyramid of one frame pair.
pub struct CorrPyramid {
    /// Level l: `[B·H·W, H/2^l, W/2^l]`.
    levels: Vec<Tensor>,
    radius: usize,
    batch: usize,
    h: usize,
    w: usize,
}

impl CorrPyramid {
    /// `fmap1`, `fmap2`: `[B,C,H,W]` features at 1/8 resolution.
    pub fn new(fmap1: &Tensor, fmap2: &Tensor, levels: usize, radius: usize) -> Result<Self> {
        let (b, c, h, w) = fmap1.dims4()?;
        let f1 = fmap1.reshape((b, c, h * w))?.transpose(1, 2)?.contiguous()?; // [B,HW,C]
        let f2 = fmap2.reshape((b, c, h * w))?.contiguous()?; // [B,C,HW]
        let corr = (f1.matmul(&f2)? / (c as f64).sqrt())?; // [B,HW,HW]
        let mut volume = corr.reshape((b * h * w, 1, h, w))?;
        let mut pyramid = Vec::with_capacity(levels);
        for l in 0..levels {
            if l > 0 {
                volume = volume.avg_pool2d(2)?;
            }
            let (_, _, hl, wl) = volume.dims4()?;
            pyramid.push(volume.reshape((b * h * w, hl, wl))?);
        }
        Ok(CorrPyramid { levels: pyramid, radius, batch: b, h, w })
    }

    /// Correlation features `[B, L·(2r+1)², H, W]` around `coords` `[B,2,H,W]` (x, y in
    /// level-0 pixels of the second frame).
    pub fn lookup(&self, coords: &Tensor) -> Result<Tensor> {
        let (b, h, w) = (self.batch, self.h, self.w);
        let centres = coords.permute((0, 2, 3, 1))?.reshape((b * h * w, 2))?.contiguous()?;
        let mut feats = Vec::with_capacity(self.levels.len());
        for (l, level) in self.levels.iter().enumerate() {
            let scaled = (&centres / (1u32 << l) as f64)?;
            let feat = if level.device().is_cpu() {
                level.apply_op2_no_bwd(&scaled, &CorrLookup { radius: self.radius })?
            } else {
                lookup_reference(level, &scaled, self.radius)?
            };
            feats.push(feat);
        }
        let k = feats.len() * (2 * self.radius + 1).pow(2);
        Ok(Tensor::cat(&feats, 1)?.reshape((b, h, w, k))?.permute((0, 3, 1, 2))?.contiguous()?)
    }
}

/// Bilinear lookup of a `(2r+1)²` window: `volume` `[N, Hl, Wl]` f32, `centres` `[N, 2]`
/// (x, y) → `[N, (2r+1)²]`. Samples outside the volume read as zero.
pub struct CorrLookup {
    pub radius: usize,
}

impl CustomOp2 for CorrLookup {
    fn name(&self) -> &'static str {
        "raft-corr-lookup"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, hl, wl) = l1.shape().dims3()?;
        let (n2, two) = l2.shape().dims2()?;
        if n2 != n || two != 2 {
            candle_core::bail!("corr lookup: centres {:?} do not match volume {:?}", l2.shape(), l1.shape());
        }
        let (Some((v0, v1)), Some((c0, c1))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("corr lookup needs contiguous inputs");
        };
        let volume = &s1.as_slice::<f32>()?[v0..v1];
        let centres = &s2.as_slice::<f32>()?[c0..c1];
        let side = 2 * self.radius + 1;
        let r = self.radius as f32;
        let mut out = vec![0f32; n * side * side];
        out.par_chunks_mut(side * side).enumerate().for_each(|(i, window)| {
            let plane = &volume[i * hl * wl..(i + 1) * hl * wl];
            let (cx, cy) = (centres[2 * i], centres[2 * i + 1]);
            // Neighbouring samples share their fractional part: compute it once.
            let (x0, y0) = ((cx - r).floor(), (cy - r).floor());
            let (fx, fy) = (cx - r - x0, cy - r - y0);
            let (x0, y0) = (x0 as i64, y0 as i64);
            let at = |x: i64, y: i64| -> f32 {
                if x >= 0 && y >= 0 && (x as usize) < wl && (y as usize) < hl { plane[y as usize * wl + x as usize] } else { 0.0 }
            };
            for a in 0..side {
                let x = x0 + a as i64;
                for b in 0..side {
                    let y = y0 + b as i64;
                    let top = (1.0 - fx) * at(x, y) + fx * at(x + 1, y);
                    let bottom = (1.0 - fx) * at(x, y + 1) + fx * at(x + 1, y + 1);
                    window[a * side + b] = (1.0 - fy) * top + fy * bottom;
                }
            }
        });
        Ok((CpuStorage::F32(out), Shape::from((n, side * side))))
    }
}

/// The same lookup composed of Candle ops (gathers), for devices without the kernel and as its
/// independent check in the tests.
pub fn lookup_reference(volume: &Tensor, centres: &Tensor, radius: usize) -> Result<Tensor> {
    let (n, hl, wl) = volume.dims3()?;
    let dev = volume.device();
    let side = 2 * radius + 1;
    let offsets: Vec<f32> = (0..side).map(|k| k as f32 - radius as f32).collect();
    let offsets = Tensor::new(offsets.as_slice(), dev)?;
    let x = centres.narrow(1, 0, 1)?.broadcast_add(&offsets.unsqueeze(0)?)?; // [N, side] by a
    let y = centres.narrow(1, 1, 1)?.broadcast_add(&offsets.unsqueeze(0)?)?; // [N, side] by b
    let x = x.unsqueeze(2)?.broadcast_as((n, side, side))?.reshape((n, side * side))?;
    let y = y.unsqueeze(1)?.broadcast_as((n, side, side))?.reshape((n, side * side))?;
    let (x0, y0) = (x.floor()?, y.floor()?);
    let (fx, fy) = ((&x - &x0)?, (&y - &y0)?);
    let flat = volume.reshape((n, hl * wl))?;
    let corner = |dx: f64, dy: f64| -> Result<Tensor> {
        let (cx, cy) = ((&x0 + dx)?, (&y0 + dy)?);
        let inside = cx.ge(0.0)?.mul(&cx.le((wl - 1) as f64)?)?.mul(&cy.ge(0.0)?)?.mul(&cy.le((hl - 1) as f64)?)?;
        let idx = (cy.clamp(0.0, (hl - 1) as f64)? * wl as f64)?.add(&cx.clamp(0.0, (wl - 1) as f64)?)?;
        let vals = flat.gather(&idx.to_dtype(DType::U32)?.contiguous()?, 1)?;
        Ok(vals.mul(&inside.to_dtype(DType::F32)?)?)
    };
    let one = |t: &Tensor| t.affine(-1.0, 1.0);
    let top = (corner(0.0, 0.0)?.mul(&one(&fx)?)? + corner(1.0, 0.0)?.mul(&fx)?)?;
    let bottom = (corner(0.0, 1.0)?.mul(&one(&fx)?)? + corner(1.0, 1.0)?.mul(&fx)?)?;
    Ok((top.mul(&one(&fy)?)? + bottom.mul(&fy)?)?)
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
        let (n, hl, wl) = (37, 5, 7);
        let mut rng = SynthRng::new(5);
        let volume = seeded_randn(&mut rng, (n, hl, wl))?;
        // Centres inside, on the edges and well outside the plane: uniform in [-4, 10).
        let centres: Vec<f32> = (0..n * 2).map(|_| rng.range(-4.0, 10.0) as f32).collect();
        let centres = Tensor::from_vec(centres, (n, 2), &dev)?;
        for radius in [1, 3, 4] {
            let fast = volume.apply_op2_no_bwd(&centres, &CorrLookup { radius })?;
            let slow = lookup_reference(&volume, &centres, radius)?;
            let diff = (fast - slow)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff < 1e-5, "radius {radius}: max diff {diff}");
        }
        Ok(())
    }

    #[test]
    fn integer_centre_reads_the_window_in_x_major_order() -> Result<()> {
        let dev = Device::Cpu;
        // value = 10·y + x, so a sample tells which cell it read.
        let plane: Vec<f32> = (0..4 * 6).map(|i| (10 * (i / 6) + i % 6) as f32).collect();
        let volume = Tensor::from_vec(plane, (1, 4, 6), &dev)?;
        let centres = Tensor::new(&[[2f32, 1.0]], &dev)?;
        let out = volume.apply_op2_no_bwd(&centres, &CorrLookup { radius: 1 })?.flatten_all()?.to_vec1::<f32>()?;
        // a = dx+1 (major), b = dy+1 (minor); (x=1,y=0) → 1, (x=1,y=1) → 11, (x=3,y=2) → 23.
        assert_eq!(out, vec![1.0, 11.0, 21.0, 2.0, 12.0, 22.0, 3.0, 13.0, 23.0]);
        let half = Tensor::new(&[[-0.5f32, 0.0]], &dev)?;
        let out = volume.apply_op2_no_bwd(&half, &CorrLookup { radius: 0 })?.flatten_all()?.to_vec1::<f32>()?;
        assert_eq!(out, vec![0.0]); // halfway between zero padding and cell (0,0) = 0
        Ok(())
    }
}
