//! The `FlowEstimator` trait, its input-size rule, and what the registry ([`crate::registry`])
//! builds estimators from.
//!
//! An estimator takes a whole clip, `[N, H, W, 3]` RGB u8 frames, and returns one flow field per
//! consecutive pair, `[N-1, 2, H, W]` f32 (channel 0 = horizontal `u`, 1 = vertical `v`, in
//! pixels, forward: frame t at `(x, y)` moves to `(x+u, y+v)` in frame t+1). Pairwise networks
//! loop over the pairs themselves (and can reuse per-frame features); multi-frame networks see
//! the whole clip at once, which is why the unit of work is a clip and not a pair.

use std::path::Path;

use candle_core::{DType, Tensor};
use ndarray::{Array4, ArrayView4, s};
use serde::{Deserialize, Serialize};

use crate::error::{FlowError, Result};
use crate::name::EstimatorName;

/// Flow fields of a clip: `[N-1, 2, H, W]`, f32 pixels.
pub type Flows = Array4<f32>;

/// A dense optical-flow method.
pub trait FlowEstimator: Send + Sync {
    /// The registry name (`dis`, `raft-small`, ...), as given to `--motion`.
    fn name(&self) -> &str;

    /// Everything besides the name that changes the output (preset, iterations, weights
    /// digest...). The flow cache keys entries on it, so two settings never share an entry.
    fn settings(&self) -> serde_json::Value;

    /// Frame sides must be a multiple of this; [`FlowEstimator::estimate`] pads to it and crops
    /// the result back. RAFT needs 8 (three stride-2 stages); DIS takes any size (1).
    fn size_multiple(&self) -> usize {
        1
    }

    /// Flow of a clip whose sides are already multiples of [`FlowEstimator::size_multiple`].
    fn estimate_padded(&self, frames: ArrayView4<u8>) -> Result<Flows>;

    /// The forward flows of a whole clip's N−2 middle frames from one pass, at the network's
    /// 1/8 working resolution and in its 1/8-grid pixels, not upsampled: what the SIS-Motion
    /// pipeline ([`crate::official`]) takes from MOFNet. `frames` `[N,3,H,W]` f32 in [0, 255]
    /// (N ≥ 3, sides multiples of 8) → `[N−2,2,H/8,W/8]`. Only multi-frame networks that refine
    /// at 1/8 resolution have it.
    fn coarse_clip_flows(&self, _frames: ArrayView4<f32>) -> Result<Flows> {
        Err(FlowError::NoCoarseFlows { estimator: self.name().to_string() })
    }

    /// Flow of a clip of any size: checks the clip, replicate-pads it (centred, as RAFT's
    /// `InputPadder` does) to the size rule, and crops the flows back to `H×W`.
    fn estimate(&self, frames: ArrayView4<u8>) -> Result<Flows> {
        check_clip(frames)?;
        let (_, h, w, _) = frames.dim();
        let padding = Padding::to_multiple(h, w, self.size_multiple());
        if padding.is_zero() {
            return self.estimate_padded(frames);
        }
        let padded = padding.pad(frames);
        let flows = self.estimate_padded(padded.view())?;
        Ok(padding.crop(flows))
    }
}

/// Rejects clips an estimator cannot take: fewer than two frames, not RGB, or empty frames.
pub fn check_clip(frames: ArrayView4<u8>) -> Result<()> {
    let (n, h, w, c) = frames.dim();
    if n < 2 {
        return Err(FlowError::Clip { what: "a clip", needs: "at least 2 frames for flow".into(), got: n.to_string() });
    }
    if c != 3 {
        return Err(FlowError::Clip { what: "a clip", needs: "RGB frames [N,H,W,3]".into(), got: format!("{c} channels") });
    }
    if h == 0 || w == 0 {
        return Err(FlowError::Clip { what: "a clip", needs: "non-empty frames".into(), got: format!("{h}x{w}") });
    }
    Ok(())
}

/// Replicate padding that centres the frame in a canvas whose sides are multiples of `m`
/// (RAFT's `InputPadder` in "sintel" mode: the odd pixel goes to the bottom/right).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Padding {
    pub top: usize,
    pub bottom: usize,
    pub left: usize,
    pub right: usize,
}

impl Padding {
    pub fn to_multiple(h: usize, w: usize, m: usize) -> Self {
        let m = m.max(1);
        let ph = (m - h % m) % m;
        let pw = (m - w % m) % m;
        Padding { top: ph / 2, bottom: ph - ph / 2, left: pw / 2, right: pw - pw / 2 }
    }

    pub fn is_zero(&self) -> bool {
        self.top + self.bottom + self.left + self.right == 0
    }

    /// `[N,H,W,C]` → `[N,H+top+bottom,W+left+right,C]`, edges repeated.
    pub fn pad(&self, frames: ArrayView4<u8>) -> Array4<u8> {
        let (n, h, w, c) = frames.dim();
        let (hp, wp) = (h + self.top + self.bottom, w + self.left + self.right);
        Array4::from_shape_fn((n, hp, wp, c), |(t, y, x, k)| {
            let sy = y.saturating_sub(self.top).min(h - 1);
            let sx = x.saturating_sub(self.left).min(w - 1);
            frames[[t, sy, sx, k]]
        })
    }

    /// `[T,2,Hp,Wp]` flows → `[T,2,H,W]`: padding adds no motion, so cropping restores the flow.
    pub fn crop(&self, flows: Flows) -> Flows {
        let (_, _, hp, wp) = flows.dim();
        flows.slice(s![.., .., self.top..hp - self.bottom, self.left..wp - self.right]).to_owned()
    }
}

/// What to build: the `--motion` name plus the knobs the CLI exposes.
#[derive(Debug, Clone, Default)]
pub struct EstimatorSpec<'a> {
    pub name: EstimatorName,
    /// Checkpoint for network estimators (`.safetensors` or PyTorch `.pth`).
    pub weights: Option<&'a Path>,
    /// Refinement iterations for RAFT (default 12, torchvision's default).
    pub iters: Option<usize>,
    /// The values the checkpoint's weights are computed with.
    pub weight_precision: WeightPrecision,
}

/// The values a network estimator computes with, in f32 either way.
///
/// The SIS-Motion code builds its model under `from_pretrained(torch_dtype=torch.bfloat16)`, so
/// MOFNet's parameters are created in bf16 and `load_state_dict` rounds the f32 `MOF_*.pth`
/// into them (`motion_encoder.py:107`), before `.to(torch.float32)` brings them back
/// (`train_qwen.py:339-347`, `eval.py:127-131, 161-162`); in training DeepSpeed's bf16 engine
/// then calls `module.bfloat16()` on the whole model (deepspeed 0.18.9 `runtime/engine.py:1463`,
/// an identity on values already rounded) and the forward casts back with `self.mofnet.float()`
/// (`motion_encoder.py:135`).
/// MOFNet therefore runs in f32 on bf16-rounded weights whenever the official code runs in bf16.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WeightPrecision {
    /// The checkpoint's values as stored (f16 and f32 are exact in f32).
    #[default]
    F32,
    /// Every floating tensor rounded to bf16 (round to nearest, ties to even, as torch's
    /// `.bfloat16()`) and back to f32: what the official SIS-Motion code computes with in bf16.
    Bf16Rounded,
}

impl WeightPrecision {
    /// The value as configs spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            WeightPrecision::F32 => "f32",
            WeightPrecision::Bf16Rounded => "bf16-rounded",
        }
    }

    /// A checkpoint tensor as the estimator computes with it: f32, rounded through bf16 when
    /// asked. Integer tensors are left alone, as `Module.bfloat16()` leaves them.
    pub fn apply(self, tensor: Tensor) -> Result<Tensor> {
        if !tensor.dtype().is_float() {
            return Ok(tensor);
        }
        // f16 → f32 is exact, so f16 → f32 → bf16 is torch's direct f16 → bf16 copy.
        let exact = tensor.to_dtype(DType::F32)?;
        Ok(match self {
            WeightPrecision::F32 => exact,
            WeightPrecision::Bf16Rounded => exact.to_dtype(DType::BF16)?.to_dtype(DType::F32)?,
        })
    }

    /// `settings` (an estimator's [`FlowEstimator::settings`]) with this precision recorded:
    /// nothing is added for [`WeightPrecision::F32`], so caches and runs made before the choice
    /// existed keep their keys.
    pub fn record(self, mut settings: serde_json::Value) -> serde_json::Value {
        if self != WeightPrecision::F32
            && let Some(map) = settings.as_object_mut()
        {
            map.insert(WEIGHT_PRECISION_KEY.to_owned(), self.as_str().into());
        }
        settings
    }
}

impl std::str::FromStr for WeightPrecision {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        [WeightPrecision::F32, WeightPrecision::Bf16Rounded]
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| format!("estimator weights `{s}` is not known; use f32 or bf16-rounded"))
    }
}

/// Where [`WeightPrecision::record`] puts a precision other than f32 in an estimator's settings.
pub const WEIGHT_PRECISION_KEY: &str = "weight_precision";

/// `settings` without the weight precision: the same network, weights and iterations, whatever
/// the values were rounded to.
pub fn settings_without_precision(settings: &serde_json::Value) -> serde_json::Value {
    let mut out = settings.clone();
    if let Some(map) = out.as_object_mut() {
        map.remove(WEIGHT_PRECISION_KEY);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_centres_and_crop_restores() {
        let p = Padding::to_multiple(61, 96, 8);
        assert_eq!(p, Padding { top: 1, bottom: 2, left: 0, right: 0 });
        let frames = Array4::from_shape_fn((2, 61, 96, 3), |(t, y, x, c)| (t * 7 + y * 3 + x + c) as u8);
        let padded = p.pad(frames.view());
        assert_eq!(padded.dim(), (2, 64, 96, 3));
        assert_eq!(padded[[0, 0, 5, 1]], frames[[0, 0, 5, 1]]);
        assert_eq!(padded[[1, 1, 5, 1]], frames[[1, 0, 5, 1]]);
        assert_eq!(padded[[1, 63, 7, 2]], frames[[1, 60, 7, 2]]);
        let flows = Array4::from_shape_fn((1, 2, 64, 96), |(_, c, y, x)| (c * 10000 + y * 100 + x) as f32);
        let cropped = p.crop(flows);
        assert_eq!(cropped.dim(), (1, 2, 61, 96));
        assert_eq!(cropped[[0, 1, 0, 3]], 10000.0 + 100.0 + 3.0);
    }

    #[test]
    fn clips_are_checked() {
        let one = Array4::<u8>::zeros((1, 8, 8, 3));
        assert!(check_clip(one.view()).is_err());
        let grey = Array4::<u8>::zeros((2, 8, 8, 1));
        assert!(check_clip(grey.view()).is_err());
        let ok = Array4::<u8>::zeros((2, 8, 8, 3));
        assert!(check_clip(ok.view()).is_ok());
    }
}
