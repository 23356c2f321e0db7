//! Dense Inverse Search (Kroeger, Timofte, Dai, Van Gool, "Fast Optical Flow using Dense
//! Inverse Search", ECCV 2016), the classical estimator that needs no weights.
//!
//! Coarse to fine over an image pyramid, each level runs: patch inverse search on a strided
//! grid ([`search`]), densification by weighted averaging ([`densify`]), and variational
//! refinement ([`variational`]); the result seeds the next finer level. The presets follow
//! OpenCV's `DISOpticalFlow` (patch 8; finest scale 2/2/1; stride 4/4/3; 12/16/25 descent
//! iterations; 0/5/5 refinement iterations), with two corrections that make each Gauss-Newton
//! step a full one (per-pixel gradients and a mean-normalised Hessian) — see the benchmark in
//! `docs/BENCHMARKS.md` for what that buys.

pub mod densify;
pub mod image;
pub mod search;
pub mod variational;

use ndarray::{Array4, ArrayView3, ArrayView4, Axis};
use rayon::prelude::*;
use serde::Serialize;

use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, Flows};
use crate::name::EstimatorName;
use image::Plane;
pub use variational::VariationalParams;

/// Whether the CPU can run the AVX2+FMA copies of the hot loops. Builds target the x86-64
/// baseline (SSE2, 4 lanes); these loops are written to vectorise and run 8 lanes wide with
/// fused multiply-adds when compiled for the wider units, so they are compiled twice and
/// picked at run time.
#[inline]
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// OpenCV's three DIS presets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DisPreset {
    UltraFast,
    Fast,
    Medium,
}

impl DisPreset {
    pub fn params(self) -> DisParams {
        let (finest_scale, patch_stride, descent_iterations, refine) = match self {
            DisPreset::UltraFast => (2, 4, 12, 0),
            DisPreset::Fast => (2, 4, 16, 5),
            DisPreset::Medium => (1, 3, 25, 5),
        };
        DisParams {
            finest_scale,
            patch_size: 8,
            patch_stride,
            descent_iterations,
            variational: VariationalParams { iterations: refine, ..VariationalParams::default() },
        }
    }
}

/// Every knob of the method. Serialised into the flow-cache key.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DisParams {
    /// Pyramid level whose flow is upsampled to full size (0 = full resolution).
    pub finest_scale: usize,
    /// Side of the square patches (8, 12 or 16).
    pub patch_size: usize,
    /// Spacing of the patch grid; smaller is denser and slower.
    pub patch_stride: usize,
    /// Gauss-Newton iterations per patch, split over the two propagation passes.
    pub descent_iterations: usize,
    pub variational: VariationalParams,
}

/// The DIS estimator.
#[derive(Debug, Clone)]
pub struct Dis {
    params: DisParams,
    name: String,
}

impl Dis {
    pub fn new(params: DisParams) -> Result<Self> {
        if !search::PATCH_SIZES.contains(&params.patch_size) {
            return Err(FlowError::BadSetting {
                key: "DIS patch size",
                problem: format!("must be one of {:?}, got {}", search::PATCH_SIZES, params.patch_size),
            });
        }
        if params.patch_stride == 0 || params.patch_stride > params.patch_size {
            return Err(FlowError::BadSetting {
                key: "DIS patch stride",
                problem: format!("must be in 1..={}, got {}", params.patch_size, params.patch_stride),
            });
        }
        Ok(Dis { params, name: "dis".to_string() })
    }

    /// `dis`/`classic`/`dis-medium`, `dis-fast` or `dis-ultrafast`; DIS takes no weights.
    pub fn from_spec(spec: &EstimatorSpec) -> Result<Self> {
        let preset = match spec.name {
            EstimatorName::Dis | EstimatorName::Classic | EstimatorName::DisMedium => DisPreset::Medium,
            EstimatorName::DisFast => DisPreset::Fast,
            EstimatorName::DisUltrafast => DisPreset::UltraFast,
            other => {
                return Err(FlowError::UnknownEstimator {
                    name: other.to_string(),
                    known: "dis, classic, dis-medium, dis-fast, dis-ultrafast".into(),
                });
            }
        };
        if let Some(path) = spec.weights {
            return Err(FlowError::UnexpectedWeights { name: spec.name.to_string(), path: path.to_path_buf() });
        }
        Ok(Dis::new(preset.params())?.with_name(spec.name.as_str()))
    }

    /// The same estimator under another registry name (`classic`, `dis-fast`...).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    pub fn params(&self) -> &DisParams {
        &self.params
    }

    /// Forward flow between two RGB frames `[H,W,3]`, as `[2,H,W]`.
    pub fn pair(&self, f0: ArrayView3<u8>, f1: ArrayView3<u8>) -> Result<ndarray::Array3<f32>> {
        let (u, v) = self.flow_grey(&Plane::grey(f0), &Plane::grey(f1))?;
        Ok(stack_uv(u, v))
    }

    /// Forward flow between two grey planes (0..255), as `(u, v)` planes.
    pub fn flow_grey(&self, i0: &Plane, i1: &Plane) -> Result<(Plane, Plane)> {
        // Run on a pool thread: the many small parallel loops below then fork by cheap joins
        // instead of each waking the pool from outside.
        rayon::scope(|_| self.flow_grey_in_pool(i0, i1))
    }

    fn flow_grey_in_pool(&self, i0: &Plane, i1: &Plane) -> Result<(Plane, Plane)> {
        let p = &self.params;
        let (w, h) = (i0.w, i0.h);
        if (i1.w, i1.h) != (w, h) {
            return Err(FlowError::Clip { what: "DIS", needs: format!("frames of one size, {w}x{h}"), got: format!("{}x{}", i1.w, i1.h) });
        }
        if w.min(h) < p.patch_size {
            return Err(FlowError::FramesTooSmall { what: "the DIS patch".into(), min_side: p.patch_size, width: w, height: h });
        }
        // Deepest level: about a quarter of the larger side per 4 patches (OpenCV's rule, so the
        // search range covers motions up to ~W/4), but never smaller than one patch.
        let ps = p.patch_size as f64;
        let fits = (w.min(h) as f64 / ps).log2().floor() as usize;
        let coarsest = (((w.max(h) as f64 / (4.0 * ps)).log2() + 0.5).floor().max(0.0) as usize).min(fits);
        let finest = p.finest_scale.min(fits);
        let coarsest = coarsest.max(finest);

        let mut pyr0 = vec![i0.clone()];
        let mut pyr1 = vec![i1.clone()];
        for l in 1..=coarsest {
            pyr0.push(pyr0[l - 1].half());
            pyr1.push(pyr1[l - 1].half());
        }
        let (mut u, mut v) = (Plane::zeros(pyr0[coarsest].w, pyr0[coarsest].h), Plane::zeros(pyr0[coarsest].w, pyr0[coarsest].h));
        for l in (finest..=coarsest).rev() {
            let (a, b) = (&pyr0[l], &pyr1[l]);
            let (ax, ay) = a.gradients();
            let b_ext = b.with_border(search::border(p.patch_size));
            let level = search::Level { i0: a, i0x: &ax, i0y: &ay, i1_ext: &b_ext, u: &u, v: &v };
            let sparse = search::inverse_search(&level, p.patch_size, p.patch_stride, p.descent_iterations);
            let (mut du, mut dv) = densify::densify(&sparse, a, &b_ext);
            variational::refine(a, b, &mut du, &mut dv, &p.variational);
            if l > finest {
                let (nw, nh) = (pyr0[l - 1].w, pyr0[l - 1].h);
                u = du.resized(nw, nh, 2.0);
                v = dv.resized(nw, nh, 2.0);
            } else {
                u = du;
                v = dv;
            }
        }
        if finest > 0 {
            let s = (1usize << finest) as f32;
            u = u.resized(w, h, s);
            v = v.resized(w, h, s);
        }
        Ok((u, v))
    }
}

impl FlowEstimator for Dis {
    fn name(&self) -> &str {
        &self.name
    }

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "method": "dis", "params": self.params })
    }

    fn estimate_padded(&self, frames: ArrayView4<u8>) -> Result<Flows> {
        let (n, h, w, _) = frames.dim();
        let grey: Vec<Plane> = (0..n).into_par_iter().map(|t| Plane::grey(frames.index_axis(Axis(0), t))).collect();
        let pairs: Vec<(Plane, Plane)> = (0..n - 1).into_par_iter().map(|t| self.flow_grey(&grey[t], &grey[t + 1])).collect::<Result<_>>()?;
        let mut out = Array4::zeros((n - 1, 2, h, w));
        for (t, (u, v)) in pairs.into_iter().enumerate() {
            out.index_axis_mut(Axis(0), t).assign(&stack_uv(u, v));
        }
        Ok(out)
    }
}

/// `(u, v)` planes as one `[2,H,W]` array.
fn stack_uv(u: Plane, v: Plane) -> ndarray::Array3<f32> {
    let (w, h) = (u.w, u.h);
    let mut data = u.data;
    data.extend_from_slice(&v.data);
    ndarray::Array3::from_shape_vec((2, h, w), data).expect("two w*h planes fill a [2,h,w] array")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic::{Motion, average_epe, synthetic_pair};
    use ndarray::{Array3, s};

    fn epe_of(preset: DisPreset, h: usize, w: usize, motion: Motion) -> (f32, f32) {
        let pair = synthetic_pair(h, w, motion, 11);
        let dis = Dis::new(preset.params()).expect("valid preset");
        let flow = dis.pair(pair.frames.slice(s![0, .., .., ..]), pair.frames.slice(s![1, .., .., ..])).expect("flow");
        let zero = Array3::zeros(pair.flow.raw_dim());
        (average_epe(flow.view(), pair.flow.view()), average_epe(zero.view(), pair.flow.view()))
    }

    #[test]
    fn medium_recovers_known_motions() {
        // 128x160 frames, motions of 2-5 px. Bounds are about twice what this implementation
        // measures; a zero field scores 2.2-3.9 px.
        let cases = [
            ("translation", Motion::Translation { dx: 3.3, dy: -2.1 }, 0.05),
            ("rotation", Motion::Rotation { degrees: 3.0 }, 0.2),
            ("zoom", Motion::Zoom { scale: 1.04 }, 0.2),
            ("smooth", Motion::Smooth { amplitude: 4.0, seed: 3 }, 0.2),
        ];
        for (name, motion, bound) in cases {
            let (epe, zero) = epe_of(DisPreset::Medium, 128, 160, motion);
            eprintln!("{name}: EPE {epe:.3} (zero field {zero:.3})");
            assert!(epe < bound && zero > 1.0, "{name}: EPE {epe} ≥ {bound} (zero field: {zero})");
        }
    }

    #[test]
    fn presets_order_by_accuracy_on_a_large_translation() {
        // 9 px needs the coarse levels; every preset must find it, MEDIUM most precisely.
        let motion = Motion::Translation { dx: 9.0, dy: 4.5 };
        let (ultra, zero) = epe_of(DisPreset::UltraFast, 128, 128, motion);
        let (medium, _) = epe_of(DisPreset::Medium, 128, 128, motion);
        assert!(ultra < 0.1 * zero, "ultrafast EPE {ultra} vs zero field {zero}");
        assert!(medium < 0.1 && medium <= ultra, "medium EPE {medium}, ultrafast {ultra}");
    }

    #[test]
    fn clip_of_odd_size_gives_one_flow_per_pair() {
        let pair = synthetic_pair(45, 67, Motion::Translation { dx: 1.0, dy: 0.5 }, 2);
        let mut clip = ndarray::Array4::<u8>::zeros((3, 45, 67, 3));
        clip.slice_mut(s![0..2, .., .., ..]).assign(&pair.frames);
        clip.slice_mut(s![2, .., .., ..]).assign(&pair.frames.slice(s![1, .., .., ..]));
        let dis = Dis::new(DisPreset::Fast.params()).expect("valid preset");
        let flows = dis.estimate(clip.view()).expect("flow");
        assert_eq!(flows.dim(), (2, 2, 45, 67));
        let mean_u = flows.slice(s![0, 0, 10..35, 10..57]).mean().unwrap_or(f32::NAN);
        let still = flows.slice(s![1, .., .., ..]).iter().map(|v| v.abs()).fold(0f32, f32::max);
        assert!((mean_u - 1.0).abs() < 0.2, "mean u {mean_u}");
        assert!(still < 1e-3, "identical frames must give zero flow, max |u| {still}");
    }

    #[test]
    fn rejects_bad_params_and_tiny_frames() {
        assert!(Dis::new(DisParams { patch_size: 9, ..DisPreset::Fast.params() }).is_err());
        assert!(Dis::new(DisParams { patch_stride: 0, ..DisPreset::Fast.params() }).is_err());
        let dis = Dis::new(DisPreset::Fast.params()).expect("valid preset");
        let tiny = ndarray::Array4::<u8>::zeros((2, 6, 40, 3));
        assert!(dis.estimate(tiny.view()).is_err());
    }
}
