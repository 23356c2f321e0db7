//! RAFT (Teed & Deng, "RAFT: Recurrent All-Pairs Field Transforms for Optical Flow", ECCV
//! 2020) in Candle, small and large, frozen (forward only), loading torchvision's and
//! princeton-vl's checkpoints.
//!
//! The model files follow the paper: [`encoder`] (feature and context networks), [`corr`]
//! (all-pairs correlation pyramid and its lookup kernel), [`update`] (motion encoder, ConvGRU,
//! flow head, convex upsampling), [`model`] (the iteration). [`weights`] reads checkpoints and
//! maps princeton-vl names to torchvision's, which the code uses.

pub mod config;
pub mod corr;
pub mod encoder;
pub mod layers;
pub mod model;
pub mod update;
pub mod weights;

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use ndarray::{Array4, ArrayView4};

pub use config::{RaftArch, RaftConfig};
pub use model::Raft;

use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, Flows};
use crate::name::EstimatorName;
use crate::state_dict::weights_id;

/// Frames whose features are computed in one batch: bounds memory on long clips.
const FEATURE_BATCH: usize = 8;

/// RAFT as a [`FlowEstimator`]: frames are normalised to [−1, 1] as both references do
/// (`2·x/255 − 1`), features are computed once per frame and shared by the two pairs that
/// use it, and each pair runs `iters` updates.
pub struct RaftEstimator {
    model: Raft,
    iters: usize,
    device: Device,
    name: String,
    /// Names the weights in cache keys ([`crate::state_dict::weights_id`]).
    weights_id: String,
}

impl RaftEstimator {
    /// `raft-small` or `raft-large` with `spec.weights` (torchvision or princeton-vl), 12
    /// refinement iterations unless `spec.iters` says otherwise (torchvision's default).
    pub fn from_spec(spec: &EstimatorSpec, device: &Device) -> Result<Self> {
        let arch = match spec.name {
            EstimatorName::RaftSmall => RaftArch::Small,
            EstimatorName::RaftLarge => RaftArch::Large,
            other => return Err(FlowError::UnknownEstimator { name: other.to_string(), known: "raft-small, raft-large".into() }),
        };
        let Some(weights) = spec.weights else {
            return Err(FlowError::MissingWeights { name: spec.name.to_string(), expected: arch.expected_weights().to_string() });
        };
        Self::from_checkpoint(weights, arch.config(), spec.iters.unwrap_or(12), device)
    }

    /// Loads a checkpoint (`.safetensors` or `.pth`, torchvision or princeton-vl names).
    pub fn from_checkpoint(path: &Path, cfg: RaftConfig, iters: usize, device: &Device) -> Result<Self> {
        let tensors = weights::load_checkpoint(path, device)?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, device);
        let model = Raft::new(vb, &cfg)
            .map_err(|e| FlowError::Checkpoint { path: path.to_path_buf(), reason: format!("does not fit {:?}: {e}", cfg.arch) })?;
        Ok(Self::from_model(model, iters, device, weights_id(path)?))
    }

    /// Wraps a built model; `weights_id` names its weights in cache keys.
    pub fn from_model(model: Raft, iters: usize, device: &Device, weights_id: String) -> Self {
        let name = match model.config().arch {
            RaftArch::Small => "raft-small",
            RaftArch::Large => "raft-large",
        };
        RaftEstimator { model, iters, device: device.clone(), name: name.to_string(), weights_id }
    }

    pub fn model(&self) -> &Raft {
        &self.model
    }

    /// `[N,H,W,3]` u8 → `[N,3,H,W]` f32 in [−1, 1] on the device.
    fn to_tensor(&self, frames: ArrayView4<u8>) -> Result<Tensor> {
        let (n, h, w, _) = frames.dim();
        let data: Vec<f32> = frames.iter().map(|&v| v as f32 * (2.0 / 255.0) - 1.0).collect();
        Ok(Tensor::from_vec(data, (n, h, w, 3), &self.device)?.permute((0, 3, 1, 2))?.contiguous()?)
    }
}

impl FlowEstimator for RaftEstimator {
    fn name(&self) -> &str {
        &self.name
    }

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "iters": self.iters, "weights": self.weights_id, "config": format!("{:?}", self.model.config()) })
    }

    fn size_multiple(&self) -> usize {
        8
    }

    fn estimate_padded(&self, frames: ArrayView4<u8>) -> Result<Flows> {
        let (n, h, w, _) = frames.dim();
        let images = self.to_tensor(frames)?;
        let mut fmaps = Vec::with_capacity(n.div_ceil(FEATURE_BATCH));
        for start in (0..n).step_by(FEATURE_BATCH) {
            let len = FEATURE_BATCH.min(n - start);
            fmaps.push(self.model.features(&images.narrow(0, start, len)?)?);
        }
        let fmaps = Tensor::cat(&fmaps, 0)?;
        let mut out = Array4::<f32>::zeros((n - 1, 2, h, w));
        for t in 0..n - 1 {
            let flow = self.model.flow_from_features(&images.narrow(0, t, 1)?, &fmaps.narrow(0, t, 1)?, &fmaps.narrow(0, t + 1, 1)?, self.iters)?;
            let values = flow.flatten_all()?.to_vec1::<f32>()?;
            let mut dst = out.index_axis_mut(ndarray::Axis(0), t);
            for (d, v) in dst.iter_mut().zip(values) {
                *d = v;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published sizes wire up (channel arithmetic of both presets); the numbers are
    /// checked against torchvision by the parity test.
    #[test]
    fn published_presets_build_and_run() -> Result<()> {
        let dev = Device::Cpu;
        for arch in [RaftArch::Small, RaftArch::Large] {
            let model = Raft::new(VarBuilder::zeros(DType::F32, &dev), &arch.config())?;
            let images = Tensor::zeros((1, 3, 128, 128), DType::F32, &dev)?;
            let flow = model.forward(&images, &images, 1)?;
            assert_eq!(flow.dims(), &[1, 2, 128, 128], "{arch:?}");
        }
        Ok(())
    }
}
