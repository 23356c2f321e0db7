//! SEA-RAFT as a [`FlowEstimator`]: the reference normalises (`2·x/255 − 1`) and
//! replicate-pads to a multiple of 8 inside `forward`; the trait's [`FlowEstimator::estimate`]
//! does the same padding (centred, odd pixel bottom/right, as its `InputPadder`) and crops the
//! flow back, so `estimate` equals the reference on frames of any size.

use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use ndarray::{Array4, ArrayView4, Axis};

use super::config::{SeaRaftConfig, SeaRaftPreset};
use super::model::SeaRaft;
use super::weights::load_state_dict;
use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, Flows};
use crate::state_dict::weights_id;

/// Frames whose features are computed in one batch: bounds memory on long clips.
const FEATURE_BATCH: usize = 8;

pub struct SeaRaftEstimator {
    model: SeaRaft,
    iters: usize,
    device: Device,
    name: String,
    /// Names the weights in cache keys ([`crate::state_dict::weights_id`]).
    weights_id: String,
}

impl SeaRaftEstimator {
    /// Loads a princeton-vl checkpoint (`.pth` or `.safetensors`, official names) built with
    /// `cfg`; runs `cfg.iters` refinements.
    pub fn from_checkpoint(path: &Path, cfg: &SeaRaftConfig, device: &Device) -> Result<Self> {
        let tensors = load_state_dict(path, device, "SEA-RAFT", "fnet.conv1.weight")?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, device);
        let model = SeaRaft::new(vb, cfg).map_err(|e| FlowError::Checkpoint {
            path: path.to_path_buf(),
            reason: format!("does not fit SEA-RAFT {:?} dim {} ({e}); S checkpoints are resnet18, M/L resnet34", cfg.pretrain, cfg.dim),
        })?;
        Ok(Self::from_model(model, device, weights_id(path)?))
    }

    /// The registry's constructor: `--motion sea-raft-{s,m,l}` with `--weights` (required) and
    /// an optional iteration override.
    pub fn from_spec(spec: &EstimatorSpec, device: &Device) -> Result<Self> {
        let preset = SeaRaftPreset::from_name(spec.name.as_str())
            .ok_or_else(|| FlowError::UnknownEstimator { name: spec.name.to_string(), known: "sea-raft-s, sea-raft-m, sea-raft-l".into() })?;
        let Some(weights) = spec.weights else {
            return Err(FlowError::MissingWeights { name: spec.name.to_string(), expected: preset.expected_weights().to_string() });
        };
        let cfg = preset.config();
        let est = Self::from_checkpoint(weights, &cfg, device)?.with_name(preset.name());
        Ok(est.with_iters(spec.iters.unwrap_or(cfg.iters)))
    }

    /// Wraps a built model; `weights_id` names its weights in cache keys.
    pub fn from_model(model: SeaRaft, device: &Device, weights_id: String) -> Self {
        let iters = model.config().iters;
        SeaRaftEstimator { model, iters, device: device.clone(), name: "sea-raft".to_string(), weights_id }
    }

    /// The registry name (`sea-raft-s`, ...).
    pub fn with_name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Overrides the preset's refinement count.
    pub fn with_iters(mut self, iters: usize) -> Self {
        self.iters = iters;
        self
    }

    pub fn model(&self) -> &SeaRaft {
        &self.model
    }

    /// `[N,H,W,3]` u8 → `[N,3,H,W]` f32 in [−1, 1] on the device.
    fn to_tensor(&self, frames: ArrayView4<u8>) -> Result<Tensor> {
        let (n, h, w, _) = frames.dim();
        let data: Vec<f32> = frames.iter().map(|&v| 2.0 * (v as f32 / 255.0) - 1.0).collect();
        Ok(Tensor::from_vec(data, (n, h, w, 3), &self.device)?.permute((0, 3, 1, 2))?.contiguous()?)
    }
}

impl FlowEstimator for SeaRaftEstimator {
    fn name(&self) -> &str {
        &self.name
    }

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "iters": self.iters, "weights": self.weights_id, "config": self.model.config() })
    }

    fn size_multiple(&self) -> usize {
        8
    }

    fn estimate_padded(&self, frames: ArrayView4<u8>) -> Result<Flows> {
        let (n, h, w, _) = frames.dim();
        let images = self.to_tensor(frames)?;
        let mut fmaps = Vec::with_capacity(n.div_ceil(FEATURE_BATCH));
        for start in (0..n).step_by(FEATURE_BATCH) {
            fmaps.push(self.model.features(&images.narrow(0, start, FEATURE_BATCH.min(n - start))?)?);
        }
        let fmaps = Tensor::cat(&fmaps, 0)?;
        let mut out = Array4::<f32>::zeros((n - 1, 2, h, w));
        for t in 0..n - 1 {
            let pair = |x: &Tensor, i: usize| x.narrow(0, i, 1);
            let flow =
                self.model.flow_from_features(&pair(&images, t)?, &pair(&images, t + 1)?, &pair(&fmaps, t)?, &pair(&fmaps, t + 1)?, self.iters)?;
            let values = flow.flatten_all()?.to_vec1::<f32>()?;
            for (d, v) in out.index_axis_mut(Axis(0), t).iter_mut().zip(values) {
                *d = v;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published sizes wire up (channel arithmetic of S and M); the numbers are checked
    /// against the reference by the parity test.
    #[test]
    fn published_presets_build_and_run() -> Result<()> {
        let dev = Device::Cpu;
        for preset in [SeaRaftPreset::S, SeaRaftPreset::M] {
            let model = SeaRaft::new(VarBuilder::zeros(DType::F32, &dev), &preset.config())?;
            let images = Tensor::zeros((1, 3, 64, 64), DType::F32, &dev)?;
            let flow = model.forward(&images, &images, 1)?;
            assert_eq!(flow.dims(), &[1, 2, 64, 64], "{preset:?}");
        }
        Ok(())
    }
}
