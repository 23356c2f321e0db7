//! MOFNet, the multi-frame network of VideoFlow (Shi et al., "VideoFlow: Exploiting Temporal
//! Cues for Multi-frame Optical Flow Estimation", ICCV 2023), in Candle, frozen (forward only),
//! loading the official `MOF_*.pth` checkpoints.
//!
//! The model files follow the paper: [`twins`] (the Twins-SVT feature and context encoders),
//! [`gma`] (global motion aggregation), [`layers`] (the PCBlock), [`update`] (motion encoder
//! with motion-state propagation, update and heads), [`network`] (the window and its
//! iterations). [`MofNetEstimator`] runs whole videos the way VideoFlow's submission code does
//! ([`FlowEstimator::estimate`]), or in the single whole-clip pass of the SIS-Motion code
//! ([`FlowEstimator::coarse_clip_flows`]).

pub mod config;
pub mod gma;
pub mod layers;
pub mod network;
pub mod twins;
pub mod update;
pub mod weights;

use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use ndarray::{Array4, ArrayView4, Axis};

pub use config::{MofConfig, TwinsConfig, WINDOW, WINDOW_STRIDE};
pub use network::MofNet;

use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, Flows, WeightPrecision};
use crate::state_dict::weights_id;

/// Iterations of VideoFlow's sintel/kitti evaluation configs (its submission config uses 32).
pub const DEFAULT_ITERS: usize = 12;

/// One 5-frame window of a video and which of its forward flows the video keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    /// Frame indices into the video.
    pub frames: [usize; WINDOW],
    /// Which of the window's 3 forward flows (middle frame k → k+1) to keep.
    pub keep: Range<usize>,
}

/// VideoFlow's whole-video plan (`MpiSintel_submission`): the first frame is duplicated, so
/// the first flow has a backward neighbour; 5-frame windows slide with stride 3, each giving
/// the forward flows of its 3 middle frames; if flows remain, one more window is aligned to
/// the end and only its last flows are kept. Clips shorter than 4 frames (which the reference
/// cannot take) are completed by repeating their last frame, and only their real flows kept.
/// The kept flows are flows 0, 1, …, n−2 of the video, in order.
pub fn window_plan(n: usize) -> Vec<Window> {
    let mut list: Vec<usize> = std::iter::once(0).chain(0..n).collect();
    let flows = n.saturating_sub(1);
    if list.len() < WINDOW {
        list.resize(WINDOW, n.saturating_sub(1));
        return vec![Window { frames: window_at(&list, 0), keep: 0..flows }];
    }
    let mut plan: Vec<Window> =
        (0..=list.len() - WINDOW).step_by(WINDOW_STRIDE).map(|s| Window { frames: window_at(&list, s), keep: 0..3 }).collect();
    let remainder = (list.len() - 2) % WINDOW_STRIDE;
    if remainder > 0 {
        plan.push(Window { frames: window_at(&list, list.len() - WINDOW), keep: 3 - remainder..3 });
    }
    plan
}

/// The config of a `config.json` next to `weights` when it describes a MOFNet.
fn config_beside(weights: &Path) -> Result<Option<MofConfig>> {
    let path = weights.with_file_name("config.json");
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(None) };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| FlowError::Checkpoint { path: path.clone(), reason: e.to_string() })?;
    if value.get("arch").and_then(|a| a.as_str()) != Some("mofnet") {
        return Ok(None);
    }
    let (cfg, _) = MofConfig::from_json(&text).map_err(|e| FlowError::Checkpoint { path, reason: e.to_string() })?;
    Ok(Some(cfg))
}

fn window_at(list: &[usize], start: usize) -> [usize; WINDOW] {
    std::array::from_fn(|k| list[start + k])
}

/// MOFNet as a [`FlowEstimator`]: frames normalised to [−1, 1] as the reference does inside
/// its forward, each frame's Twins features computed once and shared by the windows that
/// overlap on it, `iters` updates per window.
pub struct MofNetEstimator {
    model: MofNet,
    iters: usize,
    device: Device,
    /// Names the weights in cache keys ([`crate::state_dict::weights_id`]).
    weights_id: String,
    /// What the weights were rounded to when loaded (part of the settings).
    precision: WeightPrecision,
}

impl MofNetEstimator {
    /// The estimator behind `--motion mofnet`: weights from `--weights` (required), the sintel
    /// config unless a `config.json` with `"arch": "mofnet"` sits beside them (reduced test
    /// models), `--iters` or [`DEFAULT_ITERS`], the spec's weight precision.
    pub fn from_spec(spec: &EstimatorSpec, device: &Device) -> Result<Self> {
        let Some(weights) = spec.weights else {
            return Err(FlowError::MissingWeights { name: spec.name.to_string(), expected: MofConfig::EXPECTED_WEIGHTS.to_string() });
        };
        let cfg = config_beside(weights)?.unwrap_or_default();
        Self::from_checkpoint(weights, cfg, spec.iters.unwrap_or(DEFAULT_ITERS), spec.weight_precision, device)
    }

    /// Loads `MOF_*.pth` or its safetensors conversion (`module.` prefix or not), its floating
    /// tensors at `precision`.
    pub fn from_checkpoint(path: &Path, cfg: MofConfig, iters: usize, precision: WeightPrecision, device: &Device) -> Result<Self> {
        let tensors = weights::load_checkpoint(path, precision, device)?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, device);
        let model = MofNet::new(vb, &cfg)
            .map_err(|e| FlowError::Checkpoint { path: path.to_path_buf(), reason: format!("does not fit the MOFNet config: {e}") })?;
        let mut estimator = Self::from_model(model, iters, device, weights_id(path)?)?;
        estimator.precision = precision;
        Ok(estimator)
    }

    /// An estimator over a model built by the caller, whose weights are taken as they are (f32).
    pub fn from_model(model: MofNet, iters: usize, device: &Device, weights_id: String) -> Result<Self> {
        if iters == 0 {
            return Err(FlowError::NoIterations { network: "MOFNet", step: "iteration" });
        }
        Ok(MofNetEstimator { model, iters, device: device.clone(), weights_id, precision: WeightPrecision::F32 })
    }

    pub fn model(&self) -> &MofNet {
        &self.model
    }

    /// Forward and backward flows `[3,2,H,W]` of one window's middle frames, `frames`
    /// `[5,H,W,3]` u8 (sides multiples of 8).
    pub fn window_flows(&self, frames: ArrayView4<u8>) -> Result<(Tensor, Tensor)> {
        self.model.forward(&self.to_tensor(frames)?, self.iters)
    }

    /// `[N,H,W,3]` u8 → `[N,3,H,W]` f32 in [−1, 1] on the device.
    fn to_tensor(&self, frames: ArrayView4<u8>) -> Result<Tensor> {
        let (n, h, w, _) = frames.dim();
        let data: Vec<f32> = frames.iter().map(|&v| v as f32 * (2.0 / 255.0) - 1.0).collect();
        Ok(Tensor::from_vec(data, (n, h, w, 3), &self.device)?.permute((0, 3, 1, 2))?.contiguous()?)
    }
}

impl FlowEstimator for MofNetEstimator {
    fn name(&self) -> &str {
        "mofnet"
    }

    fn settings(&self) -> serde_json::Value {
        let settings = serde_json::json!({ "iters": self.iters, "weights": self.weights_id, "config": format!("{:?}", self.model.config()), "windows": "videoflow-stride3" });
        self.precision.record(settings)
    }

    fn size_multiple(&self) -> usize {
        8
    }

    fn coarse_clip_flows(&self, frames: ArrayView4<f32>) -> Result<Flows> {
        let (n, c, h, w) = frames.dim();
        if c != 3 {
            return Err(FlowError::Clip { what: "MOFNet", needs: "RGB frames [N,3,H,W]".into(), got: format!("{:?}", frames.shape()) });
        }
        // `2.0 * (images / 255.0) - 1.0` in f32, in the reference's order (not `v·(2/255) − 1`).
        let data: Vec<f32> = frames.iter().map(|&v| 2.0 * (v / 255.0) - 1.0).collect();
        let images = Tensor::from_vec(data, (n, 3, h, w), &self.device)?;
        let (forward, _backward) = self.model.forward_coarse(&images, self.iters)?;
        let (m, _, fh, fw) = forward.dims4()?;
        let values = forward.flatten_all()?.to_vec1::<f32>()?;
        Array4::from_shape_vec((m, 2, fh, fw), values).map_err(|e| FlowError::Clip {
            what: "MOFNet's flows",
            needs: format!("[{m},2,{fh},{fw}]"),
            got: e.to_string(),
        })
    }

    fn estimate_padded(&self, frames: ArrayView4<u8>) -> Result<Flows> {
        let (n, h, w, _) = frames.dim();
        let mut out = Array4::<f32>::zeros((n - 1, 2, h, w));
        // Twins features per video frame, dropped once no later window needs them.
        let mut features: HashMap<usize, Tensor> = HashMap::new();
        let mut next_flow = 0;
        for window in window_plan(n) {
            let first = window.frames.iter().copied().min().unwrap_or(0);
            features.retain(|&k, _| k >= first);
            let missing: Vec<usize> =
                window.frames.iter().copied().filter(|k| !features.contains_key(k)).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
            if !missing.is_empty() {
                let images = self.to_tensor(frames.select(Axis(0), &missing).view())?;
                let fmaps = self.model.features(&images)?;
                for (i, &k) in missing.iter().enumerate() {
                    features.insert(k, fmaps.get(i)?);
                }
            }
            let fmaps = Tensor::stack(&window.frames.iter().map(|k| &features[k]).collect::<Vec<_>>(), 0)?;
            let middle = self.to_tensor(frames.select(Axis(0), &window.frames[1..WINDOW - 1]).view())?;
            let (forward, _backward) = self.model.flows_from_features(&middle, &fmaps, self.iters)?;
            for k in window.keep.clone() {
                let values = forward.get(k)?.flatten_all()?.to_vec1::<f32>()?;
                let mut dst = out.index_axis_mut(Axis(0), next_flow);
                for (d, v) in dst.iter_mut().zip(values) {
                    *d = v;
                }
                next_flow += 1;
            }
        }
        debug_assert_eq!(next_flow, n - 1);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Window k's middle frame j has flow `frames[j+1] → frames[j+2]`; the kept ones must be
    /// the video's flows 0..n−1 in order, each once.
    #[test]
    fn window_plan_covers_every_flow_once_in_order() {
        for n in 2..30 {
            let mut flows = Vec::new();
            for win in window_plan(n) {
                for k in win.keep.clone() {
                    let (a, b) = (win.frames[k + 1], win.frames[k + 2]);
                    flows.push((a, b));
                }
            }
            let expected: Vec<(usize, usize)> = (0..n - 1).map(|t| (t, t + 1)).collect();
            assert_eq!(flows, expected, "n = {n}");
        }
        // The reference's plan for 5 frames: [0,0,1,2,3] keeps 3 flows, [0,1,2,3,4] its last.
        assert_eq!(window_plan(5), vec![Window { frames: [0, 0, 1, 2, 3], keep: 0..3 }, Window { frames: [0, 1, 2, 3, 4], keep: 2..3 }]);
        assert_eq!(window_plan(7).len(), 2);
    }
}
