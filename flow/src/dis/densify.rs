//! Densification (Kroeger et al. 2016, §2.2): every pixel averages the vectors of the patches
//! that cover it, each weighted by how well it explains that pixel,
//! `1 / max(1, |I1(x + u_patch) − I0(x)|)`, so a patch straddling a motion boundary gives way
//! to its neighbours on the side it does not fit.
//!
//! Work is organised per patch row segment: a patch moves all its pixels by the same vector,
//! so the eight (or twelve, sixteen) warped samples of one row share their bilinear weights and
//! vectorise, exactly as in the inverse search.

use rayon::prelude::*;

use super::image::Plane;
use super::search::{SparseFlow, landing};

/// Dense `(u, v)` planes from the sparse patch flow. `i1_ext` is frame 1 with the search's
/// replicated border.
pub fn densify(sparse: &SparseFlow, i0: &Plane, i1_ext: &Plane) -> (Plane, Plane) {
    match sparse.patch {
        8 => densify_p::<8>(sparse, i0, i1_ext),
        12 => densify_p::<12>(sparse, i0, i1_ext),
        _ => densify_p::<16>(sparse, i0, i1_ext),
    }
}

fn densify_p<const P: usize>(sparse: &SparseFlow, i0: &Plane, i1_ext: &Plane) -> (Plane, Plane) {
    let (w, h) = (i0.w, i0.h);
    let s = sparse.stride;
    let mut u = Plane::zeros(w, h);
    let mut v = Plane::zeros(w, h);
    // Pixels past the last patch (when (side − P) is not a multiple of the stride) are covered
    // by no patch; they take the nearest patch's vector, like OpenCV.
    let covered = |count: usize| (count - 1) * s + P;
    let (cover_w, cover_h) = (covered(sparse.cols), covered(sparse.rows));
    u.data.par_chunks_mut(w).zip(v.data.par_chunks_mut(w)).enumerate().for_each(|(y, (ru, rv))| {
        let yc = y.min(cover_h - 1);
        let last = (yc / s).min(sparse.rows - 1);
        let first = (yc + 1).saturating_sub(P).div_ceil(s).min(last);
        let (mut su, mut sv, mut sw) = (vec![0f32; cover_w], vec![0f32; cover_w], vec![0f32; cover_w]);
        let a = i0.row(yc);
        for r in first..=last {
            let dy = yc - r * s; // row inside the patch
            for c in 0..sparse.cols {
                let uv = sparse.uv[r * sparse.cols + c];
                let x0 = c * s;
                let (origin, [w00, w01, w10, w11]) = landing::<P>(i0.w, i0.h, i1_ext.w, x0, r * s, uv);
                let r0 = &i1_ext.data[origin + dy * i1_ext.w..][..P + 1];
                let r1 = &i1_ext.data[origin + (dy + 1) * i1_ext.w..][..P + 1];
                let (a, su, sv, sw) = (&a[x0..][..P], &mut su[x0..][..P], &mut sv[x0..][..P], &mut sw[x0..][..P]);
                for j in 0..P {
                    let d = w00 * r0[j] + w01 * r0[j + 1] + w10 * r1[j] + w11 * r1[j + 1] - a[j];
                    let weight = 1.0 / d.abs().max(1.0);
                    su[j] += weight * uv[0];
                    sv[j] += weight * uv[1];
                    sw[j] += weight;
                }
            }
        }
        for x in 0..w {
            let xc = x.min(cover_w - 1);
            ru[x] = su[xc] / sw[xc];
            rv[x] = sv[xc] / sw[xc];
        }
    });
    (u, v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dis::search::border;

    #[test]
    fn constant_sparse_flow_densifies_to_itself_and_covers_every_pixel() {
        let (w, h) = (23, 17); // (side − 8) not a multiple of the stride 3: uncovered tails
        let i0 = Plane { w, h, data: (0..w * h).map(|i| (i % 7) as f32 * 10.0).collect() };
        let rows = 1 + (h - 8) / 3;
        let cols = 1 + (w - 8) / 3;
        let sparse = SparseFlow { rows, cols, stride: 3, patch: 8, uv: vec![[1.5, -0.5]; rows * cols] };
        let (u, v) = densify(&sparse, &i0, &i0.with_border(border(8)));
        assert!(u.data.iter().all(|&x| (x - 1.5).abs() < 1e-6));
        assert!(v.data.iter().all(|&x| (x + 0.5).abs() < 1e-6));
    }

    #[test]
    fn the_patch_that_explains_a_pixel_dominates() {
        // Frame 1 = frame 0 shifted right by 2 px: the correct vector (2, 0) predicts every
        // pixel, a wrong one (−3, 0) almost none, so each pixel lands close to 2.
        let (w, h) = (32, 16);
        let i0 = Plane { w, h, data: (0..w * h).map(|i| ((i % w) * 37 % 23) as f32 * 9.0).collect() };
        let i1 = Plane { w, h, data: (0..w * h).map(|i| (((i % w).saturating_sub(2)) * 37 % 23) as f32 * 9.0).collect() };
        let (rows, cols) = (1 + (h - 8) / 4, 1 + (w - 8) / 4);
        let uv = (0..rows * cols).map(|k| if k % 2 == 0 { [2.0, 0.0] } else { [-3.0, 0.0] }).collect();
        let sparse = SparseFlow { rows, cols, stride: 4, patch: 8, uv };
        let (u, _) = densify(&sparse, &i0, &i1.with_border(border(8)));
        let mean = u.data[(8 * w + 6)..(8 * w + 26)].iter().sum::<f32>() / 20.0;
        assert!(mean > 1.5, "mean u {mean}: the explaining vector should dominate the average of 2 and −3");
    }
}
