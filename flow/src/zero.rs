//! `--motion zero`: an "estimator" whose flow is zero everywhere.
//!
//! It is the control of a motion ablation: a motion-aware model trained with it has the motion
//! encoder, the connector and every trained parameter of the real one, and is fed pseudo-images
//! that carry no motion at all. Whatever it gains over the visual-only model is capacity, not
//! motion; only what the real estimator gains beyond it is.

use ndarray::{Array4, ArrayView4};

use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, Flows};

/// Zero flow for every consecutive pair.
#[derive(Debug, Clone, Copy, Default)]
pub struct ZeroFlow;

impl ZeroFlow {
    /// `--motion zero`, which takes no weights.
    pub fn from_spec(spec: &EstimatorSpec) -> Result<Self> {
        match spec.weights {
            Some(path) => Err(FlowError::UnexpectedWeights { name: spec.name.to_string(), path: path.to_path_buf() }),
            None => Ok(ZeroFlow),
        }
    }
}

impl FlowEstimator for ZeroFlow {
    fn name(&self) -> &str {
        "zero"
    }

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "method": "zero" })
    }

    fn estimate_padded(&self, frames: ArrayView4<u8>) -> Result<Flows> {
        let (n, h, w, _) = frames.dim();
        Ok(Array4::zeros((n - 1, 2, h, w)))
    }

    /// The control of the official pipeline: MOFNet's shapes, no motion.
    fn coarse_clip_flows(&self, frames: ArrayView4<f32>) -> Result<Flows> {
        let (n, _, h, w) = frames.dim();
        if n < 3 {
            return Err(FlowError::Clip { what: "a whole-clip flow", needs: "at least 3 frames".into(), got: n.to_string() });
        }
        Ok(Array4::zeros((n - 2, 2, h / 8, w / 8)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pair_gets_a_zero_field_of_the_frame_size() {
        let frames = Array4::from_shape_fn((3, 5, 7, 3), |(t, y, x, c)| (t * 31 + y * 7 + x * 3 + c) as u8);
        let flows = ZeroFlow.estimate(frames.view()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(flows.dim(), (2, 2, 5, 7));
        assert!(flows.iter().all(|&v| v == 0.0));
        assert!(ZeroFlow.estimate(frames.slice(ndarray::s![..1, .., .., ..])).is_err(), "one frame has no pair");
    }
}
