//! SIS-Motion: a motion encoder over optical-flow pseudo-images and a connector whose output is
//! added to the visual tokens.
//!
//! ```text
//! frames ──► vision tower E_v ──────────────► e_v ─┐
//! flow pseudo-images P ──► motion encoder E_m ─► e_m ─► LN ─► Linear(d→h) ─► GELU ─► Linear(h→d) ─► e_m' ─(+)─► e
//! ```
//! `e` replaces the video placeholder tokens; images have no motion and pass through unchanged.
//!
//! On Qwen3-VL the encoder is a copy of the Qwen3-VL tower and `e_m` its merged tokens: the
//! connector's output is added to the video's merged tokens, the tokens that replace the
//! placeholders, which is where the paper adds it (`e = e_v + MLP(LN(e_m))`). The DeepStack
//! levels the decoder adds to its first layers come from the frames alone; the motion tower's
//! DeepStack mergers are not run (the paper's connector maps one token set, and a second
//! connector per level would be a model the paper does not describe).

use candle_core::{DType, Device, Module, Tensor, Var};
use candle_nn::VarBuilder;
use rand::{Rng, SeedableRng};

use crate::error::{ModelError, Result};
use crate::ops::{LayerNorm, Linear};
use crate::prompt::{PixelInput, VisionFeatures, VisionInputs};
use crate::qwen3vl::vision::Qwen3VisionTower;
use crate::qwen3vl::{Qwen3Features, Qwen3Vl};
use crate::qwen25vl::Qwen25Vl;
use crate::vision::{AdaptableTower, VisionTower};

/// The tower a motion encoder runs: the architecture of the backbone's vision tower.
#[derive(Debug, Clone)]
pub enum MotionTower {
    Qwen25(VisionTower),
    Qwen3(Qwen3VisionTower),
}

impl MotionTower {
    /// A copy of a Qwen2.5-VL tower with its base weights only (a LoRA on the vision tower
    /// adapts the visual path; the motion encoder stays frozen).
    pub fn qwen25(visual: &VisionTower) -> Self {
        Self::Qwen25(visual.without_adapters())
    }

    /// A copy of a Qwen3-VL tower with its base weights only.
    pub fn qwen3(visual: &Qwen3VisionTower) -> Self {
        Self::Qwen3(visual.without_adapters())
    }

    /// The same architecture with the weights under `vb` (`motion_encoder` of a weights file).
    fn with_weights(&self, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(match self {
            Self::Qwen25(t) => Self::Qwen25(VisionTower::new(t.config(), vb)?),
            Self::Qwen3(t) => Self::Qwen3(Qwen3VisionTower::new(t.config(), vb)?),
        })
    }

    fn dtype(&self) -> DType {
        match self {
            Self::Qwen25(t) => t.dtype(),
            Self::Qwen3(t) => t.dtype(),
        }
    }
}

/// The motion encoder E_m: a ViT with the backbone's vision tower's architecture, fed the flow
/// pseudo-images of the same sampled frames with the same grid, so it yields exactly one token
/// per visual token, of the same width.
///
/// By default it starts as a copy of the checkpoint's vision tower (`visual.*`). A pseudo-image
/// `[‖U‖, Uˣ, Uʸ]` is laid out like an RGB frame, and the pretrained tower already maps such
/// inputs into the language model's embedding space: edges, blobs and their layout — exactly
/// the structure a flow field has — come out as tokens the decoder can read, whereas a
/// randomly initialised encoder would emit noise that a frozen encoder could never unlearn.
/// It can also load weights of its own (`motion_encoder.*`).
#[derive(Debug, Clone)]
pub struct MotionEncoder {
    tower: MotionTower,
}

impl MotionEncoder {
    /// `pseudo_pixels`: pseudo-images preprocessed like video frames, `[Σ t·h·w, C·Tp·P·P]` →
    /// the tower's merged tokens `[Σ t·h·w / 4, d]`.
    pub fn forward(&self, pseudo_pixels: &Tensor, grids: &[[usize; 3]]) -> Result<Tensor> {
        match &self.tower {
            MotionTower::Qwen25(t) => t.forward(pseudo_pixels, grids),
            MotionTower::Qwen3(t) => t.forward_merged(pseudo_pixels, grids),
        }
    }
}

/// How the connector's weights start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConnectorInit {
    /// W₁/b₁ as `nn.Linear` initialises them (uniform ±1/√d), W₂ and b₂ zero: at step 0 the
    /// motion-aware model computes exactly what the visual-only model does.
    #[default]
    Zero,
    /// The official recipe (`train_qwen.py:289-297`): both Linears `trunc_normal_(std=0.02)` —
    /// PyTorch truncates at ±2 absolute, not ±2σ, so at this std nothing is ever cut — and zero
    /// biases; motion tokens are non-zero from step 0.
    TruncatedNormal,
}

/// The connector's hidden width and initialisation, as a recipe asks for them and `motion.json`
/// records them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectorSpec {
    /// Width of the hidden layer: 2048 in the released SIS-Motion (whatever the model's width),
    /// d in motionvl's original d → d → d connector.
    pub hidden: usize,
    pub init: ConnectorInit,
}

/// The trained connector: `e_m' = W₂ GELU(W₁ LN(e_m) + b₁) + b₂`, width d → hidden → d.
#[derive(Debug, Clone)]
pub struct Connector {
    norm: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

/// Names of the connector's tensors in checkpoints (`connector.<name>`).
pub const CONNECTOR_TENSORS: [&str; 6] = ["norm.weight", "norm.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"];

impl Connector {
    /// `vb` scoped at `connector`.
    pub fn new(width: usize, hidden: usize, vb: VarBuilder) -> candle_core::Result<Self> {
        Ok(Self {
            norm: LayerNorm::new(width, 1e-5, vb.pp("norm"))?,
            fc1: Linear::new(width, hidden, true, vb.pp("fc1"))?,
            fc2: Linear::new(hidden, width, true, vb.pp("fc2"))?,
        })
    }

    /// The shape of each of [`CONNECTOR_TENSORS`], in that order, for a connector d → hidden → d.
    pub fn tensor_shapes(width: usize, hidden: usize) -> [Vec<usize>; 6] {
        [vec![width], vec![width], vec![hidden, width], vec![hidden], vec![width, hidden], vec![width]]
    }

    /// motionvl's original connector, d → d → d with [`ConnectorInit::Zero`].
    pub fn init_vars(width: usize, seed: u64, device: &Device) -> Result<Vec<(String, Var)>> {
        Self::init_vars_with(width, ConnectorSpec { hidden: width, init: ConnectorInit::Zero }, seed, device)
    }

    /// Fresh trainable (f32) connector variables by name: LN at identity, the Linears as
    /// `spec.init` says.
    pub fn init_vars_with(width: usize, spec: ConnectorSpec, seed: u64, device: &Device) -> Result<Vec<(String, Var)>> {
        let hidden = spec.hidden;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let (fc1_weight, fc1_bias, fc2_weight) = match spec.init {
            ConnectorInit::Zero => {
                let bound = 1.0 / (width as f32).sqrt();
                let mut uniform = |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random_range(-bound..bound)).collect() };
                let weight = uniform(hidden * width);
                (weight, uniform(hidden), vec![0.0; width * hidden])
            }
            ConnectorInit::TruncatedNormal => {
                let weight = truncated_normal(&mut rng, hidden * width);
                (weight, vec![0.0; hidden], truncated_normal(&mut rng, width * hidden))
            }
        };
        let tensors = [
            ("norm.weight", Tensor::ones(width, DType::F32, device)?),
            ("norm.bias", Tensor::zeros(width, DType::F32, device)?),
            ("fc1.weight", Tensor::from_vec(fc1_weight, (hidden, width), device)?),
            ("fc1.bias", Tensor::from_vec(fc1_bias, hidden, device)?),
            ("fc2.weight", Tensor::from_vec(fc2_weight, (width, hidden), device)?),
            ("fc2.bias", Tensor::zeros(width, DType::F32, device)?),
        ];
        tensors.into_iter().map(|(n, t)| Ok((format!("connector.{n}"), Var::from_tensor(&t)?))).collect()
    }

    /// A connector over the given variables (as made by [`init_vars`](Self::init_vars) or
    /// loaded); the widths come from `norm.weight` and `fc1.weight`, and every other tensor
    /// must agree with them.
    pub fn from_vars(vars: &[(String, Var)]) -> Result<Self> {
        let get = |name: &str| -> Result<Tensor> {
            let full = format!("connector.{name}");
            vars.iter()
                .find(|(n, _)| *n == full)
                .map(|(_, v)| v.as_tensor().clone())
                .ok_or_else(|| ModelError::MissingTensor { name: full, files: "the connector weights".into() })
        };
        let width = get("norm.weight")?.dim(0)?;
        let hidden = get("fc1.weight")?.dim(0)?;
        for (name, expected) in CONNECTOR_TENSORS.iter().zip(Self::tensor_shapes(width, hidden)) {
            let found = get(name)?.dims().to_vec();
            if found != expected {
                return Err(ModelError::TensorShape { name: format!("connector.{name}"), expected, found });
            }
        }
        Ok(Self {
            norm: LayerNorm::from_parts(get("norm.weight")?, get("norm.bias")?, 1e-5),
            fc1: Linear::from_parts(get("fc1.weight")?, Some(get("fc1.bias")?)),
            fc2: Linear::from_parts(get("fc2.weight")?, Some(get("fc2.bias")?)),
        })
    }

    /// Width of the hidden layer.
    pub fn hidden(&self) -> Result<usize> {
        Ok(self.fc1.weight().dim(0)?)
    }

    /// `e_m` [N, d] → `e_m'` [N, d], computed in `e_m`'s dtype (bf16 on a bf16 model; the
    /// layer norm in f32) from the connector's f32 master weights.
    pub fn forward(&self, motion_tokens: &Tensor) -> Result<Tensor> {
        let dtype = motion_tokens.dtype();
        let cast =
            |l: &Linear| -> Result<Linear> { Ok(Linear::from_parts(l.weight().to_dtype(dtype)?, l.bias().map(|b| b.to_dtype(dtype)).transpose()?)) };
        let x = cast(&self.fc1)?.forward(&self.norm.forward(motion_tokens)?)?.gelu_erf()?;
        Ok(cast(&self.fc2)?.forward(&x)?)
    }
}

/// `n` draws of N(0, 0.02²) kept within [−2, 2], as `torch.nn.init.trunc_normal_(std=0.02)`
/// with its default absolute bounds (Box–Muller, redrawn outside the bounds).
fn truncated_normal(rng: &mut rand::rngs::StdRng, n: usize) -> Vec<f32> {
    const STD: f64 = 0.02;
    const BOUND: f64 = 2.0;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let u1: f64 = rng.random_range(f64::MIN_POSITIVE..1.0);
        let u2: f64 = rng.random::<f64>();
        let radius = (-2.0 * u1.ln()).sqrt();
        let angle = std::f64::consts::TAU * u2;
        for z in [radius * angle.cos(), radius * angle.sin()] {
            let v = z * STD;
            if out.len() < n && v.abs() <= BOUND {
                out.push(v as f32);
            }
        }
    }
    out
}

/// The motion branch: encoder, connector, and the fusion `e = e_v + e_m'`.
#[derive(Debug, Clone)]
pub struct MotionBranch {
    pub encoder: MotionEncoder,
    pub connector: Connector,
}

impl MotionBranch {
    /// Visual tokens of the videos fused with their motion tokens. `pseudo_pixels` and `grids`
    /// describe the same videos, in the same order, as `visual_tokens`.
    pub fn fuse(&self, visual_tokens: &Tensor, pseudo_pixels: &Tensor, grids: &[[usize; 3]]) -> Result<Tensor> {
        let motion = self.encoder.forward(pseudo_pixels, grids)?;
        if motion.dims() != visual_tokens.dims() {
            return Err(ModelError::Pixels {
                problem: format!(
                    "motion tokens {:?} do not align with visual tokens {:?}: the pseudo-images must use the video's frames and grid",
                    motion.dims(),
                    visual_tokens.dims()
                ),
            });
        }
        Ok((visual_tokens + self.connector.forward(&motion)?)?)
    }
}

/// Vision features for a Qwen2.5-VL batch: the tower's output, with the videos' tokens fused
/// with their motion tokens when a motion branch and motion pixels are given. Images are never
/// fused.
pub fn vision_features(
    model: &Qwen25Vl,
    branch: Option<&MotionBranch>,
    inputs: &VisionInputs,
    motion: Option<&PixelInput>,
) -> Result<VisionFeatures> {
    let mut features = model.encode_vision(inputs)?;
    if let (Some(branch), Some(videos)) = (branch, features.videos.as_ref()) {
        features.videos = Some(fuse_videos(branch, videos, inputs, motion)?);
    }
    Ok(features)
}

/// [`vision_features`] for a Qwen3-VL batch: the videos' merged tokens fused, their DeepStack
/// levels as the frames give them.
pub fn qwen3_features(model: &Qwen3Vl, branch: Option<&MotionBranch>, inputs: &VisionInputs, motion: Option<&PixelInput>) -> Result<Qwen3Features> {
    let mut features = model.encode_vision(inputs)?;
    if let (Some(branch), Some(videos)) = (branch, features.videos.as_mut()) {
        videos.features = fuse_videos(branch, &videos.features, inputs, motion)?;
    }
    Ok(features)
}

/// The videos' visual tokens plus the connector's motion tokens, after checking that the motion
/// pixels describe the same videos.
fn fuse_videos(branch: &MotionBranch, videos: &Tensor, inputs: &VisionInputs, motion: Option<&PixelInput>) -> Result<Tensor> {
    let motion = motion.ok_or_else(|| ModelError::Pixels { problem: "the model is motion-aware but the batch carries no motion pixels".into() })?;
    let video_grids = inputs.videos.as_ref().map(|v| v.grids.clone()).unwrap_or_default();
    if motion.grids != video_grids {
        return Err(ModelError::Pixels { problem: format!("motion grids {:?} differ from video grids {video_grids:?}", motion.grids) });
    }
    branch.fuse(videos, &motion.pixel_values, &motion.grids)
}

/// What a motion-aware checkpoint records beside its tensors (`motion.json`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MotionMeta {
    /// Registry name of the flow estimator the model was trained with (`dis`, `raft-small`, …).
    pub estimator: String,
    /// The estimator's settings (preset, iterations, weights digest…), as it reports them.
    pub estimator_settings: serde_json::Value,
    /// Pseudo-image settings (normalisation, temporal alignment).
    pub pseudo_images: serde_json::Value,
    /// `true` when `motion.safetensors` carries the encoder (`motion_encoder.*`); otherwise the
    /// encoder is a copy of the base model's vision tower.
    pub own_encoder: bool,
    /// The connector's hidden width and initialisation (absent in checkpoints written before
    /// the width was configurable: d → d → d, zero-initialised).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<ConnectorSpec>,
}

pub const MOTION_META_FILE: &str = "motion.json";
pub const MOTION_WEIGHTS_FILE: &str = "motion.safetensors";

impl MotionMeta {
    pub fn read(dir: &std::path::Path) -> Result<Option<Self>> {
        let path = dir.join(MOTION_META_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|source| ModelError::Io { path: path.clone(), source })?;
        serde_json::from_str(&text).map(Some).map_err(|e| ModelError::Config { path, reason: e.to_string() })
    }

    pub fn write(&self, dir: &std::path::Path) -> Result<()> {
        Ok(motionvl_util::files::write_json_atomic(&dir.join(MOTION_META_FILE), self)?)
    }
}

impl MotionBranch {
    /// Loads the branch saved in `dir` (`motion.json` + `motion.safetensors`); the encoder is
    /// the checkpoint's own (of `visual`'s architecture) or `visual` itself, a copy of the
    /// backbone's tower without adapters (`Backbone::motion_tower`).
    pub fn load(dir: &std::path::Path, meta: &MotionMeta, visual: MotionTower, device: &Device) -> Result<Self> {
        let path = dir.join(MOTION_WEIGHTS_FILE);
        let tensors = candle_core::safetensors::load(&path, device)?;
        let vars = CONNECTOR_TENSORS
            .iter()
            .map(|n| {
                let name = format!("connector.{n}");
                let t = tensors.get(&name).ok_or_else(|| ModelError::MissingTensor { name: name.clone(), files: path.display().to_string() })?;
                Ok((name, Var::from_tensor(&t.to_dtype(DType::F32)?)?))
            })
            .collect::<Result<Vec<_>>>()?;
        let connector = Connector::from_vars(&vars)?;
        if let Some(spec) = meta.connector
            && spec.hidden != connector.hidden()?
        {
            return Err(ModelError::Config {
                path: dir.join(MOTION_META_FILE),
                reason: format!(
                    "records a connector of hidden width {}, but {} holds one of width {}",
                    spec.hidden,
                    path.display(),
                    connector.hidden()?
                ),
            });
        }
        let tower = if meta.own_encoder {
            let vb = VarBuilder::from_tensors(tensors, visual.dtype(), device);
            visual.with_weights(vb.pp("motion_encoder"))?
        } else {
            visual
        };
        Ok(Self { encoder: MotionEncoder { tower }, connector })
    }

    /// The default branch of a visual-only model: the encoder is `visual`, a copy of the
    /// backbone's tower with base weights only (a LoRA on the vision tower adapts the visual
    /// path, the motion encoder stays frozen), and the given connector.
    pub fn from_visual(visual: MotionTower, connector_vars: &[(String, Var)]) -> Result<Self> {
        Ok(Self { encoder: MotionEncoder { tower: visual }, connector: Connector::from_vars(connector_vars)? })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(vars: &[(String, Var)], name: &str) -> Vec<f32> {
        let full = format!("connector.{name}");
        vars.iter().find(|(n, _)| *n == full).unwrap().1.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap()
    }

    #[test]
    fn truncated_normal_init_is_the_official_one() {
        let (width, hidden) = (48, 2048);
        let vars = Connector::init_vars_with(width, ConnectorSpec { hidden, init: ConnectorInit::TruncatedNormal }, 1, &Device::Cpu).unwrap();
        let connector = Connector::from_vars(&vars).unwrap();
        assert_eq!(connector.hidden().unwrap(), hidden);
        for name in ["fc1.weight", "fc2.weight"] {
            let w = values(&vars, name);
            assert_eq!(w.len(), width * hidden);
            let n = w.len() as f64;
            let mean = w.iter().map(|&v| v as f64).sum::<f64>() / n;
            let std = (w.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n).sqrt();
            // 98,304 draws: the standard error of the std is 0.02/√(2n) ≈ 4.5e-5.
            assert!(mean.abs() < 5e-4 && (std - 0.02).abs() < 3e-4, "{name}: mean {mean}, std {std}");
        }
        assert_ne!(values(&vars, "fc1.weight"), values(&vars, "fc2.weight"));
        assert!(values(&vars, "fc1.bias").iter().chain(&values(&vars, "fc2.bias")).chain(&values(&vars, "norm.bias")).all(|&v| v == 0.0));
        assert!(values(&vars, "norm.weight").iter().all(|&v| v == 1.0));
        // Motion tokens reach the output from step 0.
        let probe = crate::seeded::randn((3, width), 1.0, 2, &Device::Cpu).unwrap();
        let out = connector.forward(&probe).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(out > 1e-3, "{out}");
    }

    #[test]
    fn zero_init_starts_at_the_visual_only_model_at_any_hidden_width() {
        let vars = Connector::init_vars_with(8, ConnectorSpec { hidden: 20, init: ConnectorInit::Zero }, 1, &Device::Cpu).unwrap();
        let bound = 1.0 / 8f32.sqrt();
        let fc1 = values(&vars, "fc1.weight");
        assert_eq!(fc1.len(), 160);
        assert!(fc1.iter().all(|v| v.abs() <= bound) && fc1.iter().any(|&v| v != 0.0));
        assert!(values(&vars, "fc2.weight").iter().chain(&values(&vars, "fc2.bias")).all(|&v| v == 0.0));
        // `init_vars` is the d → d → d connector it always was.
        let square = Connector::init_vars(8, 1, &Device::Cpu).unwrap();
        assert_eq!(Connector::from_vars(&square).unwrap().hidden().unwrap(), 8);
    }

    #[test]
    fn misshapen_connector_tensors_are_refused_by_name() {
        let mut vars = Connector::init_vars_with(8, ConnectorSpec { hidden: 20, init: ConnectorInit::Zero }, 1, &Device::Cpu).unwrap();
        vars[4].1 = Var::from_tensor(&Tensor::zeros((8, 21), DType::F32, &Device::Cpu).unwrap()).unwrap();
        let err = Connector::from_vars(&vars).unwrap_err().to_string();
        assert!(err.contains("connector.fc2.weight") && err.contains("[8, 21]") && err.contains("[8, 20]"), "{err}");
    }

    #[test]
    fn motion_json_records_the_connector_and_reads_older_files() {
        let old = r#"{"estimator":"dis","estimator_settings":{},"pseudo_images":{},"own_encoder":false}"#;
        assert_eq!(serde_json::from_str::<MotionMeta>(old).unwrap().connector, None);
        let spec = ConnectorSpec { hidden: 2048, init: ConnectorInit::TruncatedNormal };
        let meta = MotionMeta { connector: Some(spec), ..serde_json::from_str(old).unwrap() };
        let text = serde_json::to_string(&meta).unwrap();
        assert!(text.contains(r#""connector":{"hidden":2048,"init":"truncated-normal"}"#), "{text}");
        assert_eq!(serde_json::from_str::<MotionMeta>(&text).unwrap(), meta);
    }
}
