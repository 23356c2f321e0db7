//! MemFlow as a [`FlowEstimator`] over a whole clip, as `inference.py` runs it: the clip is
//! replicate-padded to a multiple of 8 (the trait's [`FlowEstimator::estimate`], the same
//! centred `InputPadder`), normalised `2·x/255 − 1`, then stepped pair by pair front to back with
//! a fresh memory per clip; every `mem_every` steps (not on the last) the step's key and value
//! enter the memory.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use ndarray::{Array4, ArrayView4, Axis};

use super::config::MemFlowConfig;
use super::memory::WorkingMemory;
use super::model::MemFlowNet;
use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, Flows};
use crate::raft::weights::rename_checkpoint;
use crate::sea_raft::weights::load_state_dict;
use crate::state_dict::weights_id;

/// Frames whose features are computed in one batch: bounds memory on long clips.
const FEATURE_BATCH: usize = 8;

/// What `--weights` should point at, for the missing-weights error.
pub const EXPECTED_WEIGHTS: &str = "a MemFlow checkpoint from DQiaole/MemFlow release v1.0.0, e.g. `MemFlowNet_sintel.pth` (also `_things`, `_kitti`, `_spring`; not the Twins `MemFlowNet_T_*`), or the same as .safetensors";

pub struct MemFlowEstimator {
    model: MemFlowNet,
    cfg: MemFlowConfig,
    device: Device,
    /// Names the weights in cache keys ([`crate::state_dict::weights_id`]).
    weights_id: String,
}

impl MemFlowEstimator {
    /// Loads a released checkpoint: `.pth` (bare, or `{'model': …}`, with or without `module.`)
    /// or `.safetensors`, official names.
    pub fn from_checkpoint(path: &Path, cfg: MemFlowConfig, device: &Device) -> Result<Self> {
        cfg.validate()?;
        let fail = |reason: String| FlowError::Checkpoint { path: path.to_path_buf(), reason };
        let tensors = load_state_dict(path, device, "MemFlow", "update_block.aggregator.to_v.weight")?;
        if tensors.contains_key("channel_convertor.weight") || tensors.contains_key("proj.weight") {
            return Err(fail(
                "this is MemFlowNet-T (Twins encoders), which is not ported; use a MemFlowNet_{sintel,things,kitti,spring}.pth checkpoint".into(),
            ));
        }
        let vb = VarBuilder::from_tensors(encoder_names(tensors), DType::F32, device);
        let model = MemFlowNet::new(vb).map_err(|e| fail(format!("does not fit MemFlowNet ({e})")))?;
        Ok(MemFlowEstimator { model, cfg, device: device.clone(), weights_id: weights_id(path)? })
    }

    /// The registry's constructor: `--motion memflow` with `--weights` (required) and an optional
    /// iteration override; the sintel config's memory settings.
    pub fn from_spec(spec: &EstimatorSpec, device: &Device) -> Result<Self> {
        let Some(weights) = spec.weights else {
            return Err(FlowError::MissingWeights { name: spec.name.to_string(), expected: EXPECTED_WEIGHTS.to_string() });
        };
        let mut cfg = MemFlowConfig::default();
        if let Some(iters) = spec.iters {
            cfg.val_decoder_depth = iters;
        }
        Self::from_checkpoint(weights, cfg, device)
    }

    pub fn model(&self) -> &MemFlowNet {
        &self.model
    }

    pub fn config(&self) -> &MemFlowConfig {
        &self.cfg
    }

    /// `[N,H,W,3]` u8 → `[N,3,H,W]` f32 in [−1, 1] on the device.
    fn to_tensor(&self, frames: ArrayView4<u8>) -> Result<Tensor> {
        let (n, h, w, _) = frames.dim();
        let data: Vec<f32> = frames.iter().map(|&v| 2.0 * (v as f32 / 255.0) - 1.0).collect();
        Ok(Tensor::from_vec(data, (n, h, w, 3), &self.device)?.permute((0, 3, 1, 2))?.contiguous()?)
    }
}

/// The encoders are RAFT's BasicEncoder under princeton-vl's names (`fnet.*`, `cnet.*`): renamed
/// to the torchvision names [`crate::raft::encoder`] reads. Everything else keeps its name.
fn encoder_names(tensors: HashMap<String, Tensor>) -> HashMap<String, Tensor> {
    let (encoders, rest): (Vec<_>, Vec<_>) = tensors.into_iter().partition(|(k, _)| k.starts_with("fnet.") || k.starts_with("cnet."));
    rename_checkpoint(encoders).into_iter().chain(rest).collect()
}

impl FlowEstimator for MemFlowEstimator {
    fn name(&self) -> &str {
        "memflow"
    }

    fn settings(&self) -> serde_json::Value {
        serde_json::json!({ "config": self.cfg, "weights": self.weights_id })
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
        let mut memory = WorkingMemory::new(&self.cfg);
        let mut last_mem: isize = -(self.cfg.mem_every as isize);
        let mut out = Array4::<f32>::zeros((n - 1, 2, h, w));
        for t in 0..n - 1 {
            let ctx = self.model.context(&images.narrow(0, t, 1)?)?;
            let step = self.model.step(&ctx, &fmaps.narrow(0, t, 1)?, &fmaps.narrow(0, t + 1, 1)?, &memory, self.cfg.val_decoder_depth)?;
            let last = t == n - 2;
            if t as isize - last_mem >= self.cfg.mem_every as isize && !last {
                memory.add(&ctx.key, &step.value)?;
                last_mem = t as isize;
            }
            let values = step.flow.flatten_all()?.to_vec1::<f32>()?;
            for (d, v) in out.index_axis_mut(Axis(0), t).iter_mut().zip(values) {
                *d = v;
            }
        }
        Ok(out)
    }
}
