//! CVAA, the cross-view alignment adapter of LinkS²Bench: one shared DINOv2 backbone B; the
//! satellite view is read off its CLS token, the UAV view GeM-pooled over its patch tokens;
//! both pass a shared projector P and then their own residual adapter, and are L2-normalised:
//! `f_sat = A_sat(P(cls))`, `f_uav = A_uav(P(GeM(patches)))`.
//!
//! The paper writes the joint feature h as a concatenation of both views; a retriever has to
//! embed each view alone (satellite windows are indexed once, then every UAV frame is compared
//! with them), so here each view is embedded on its own and the two meet only in the cosine
//! similarity and the InfoNCE loss.

use std::path::Path;

use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::{Init, VarBuilder};
use serde::{Deserialize, Serialize};

use crate::dinov2::{Dinov2Config, Dinov2Model, PosInterpolation};
use crate::error::{ModelError, Result};
use crate::ops::Linear;

/// The checkpoint's model description, next to its weights.
pub const CONFIG_FILE: &str = "cvaa.json";
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// GeM's clamp before the power, as in the GeM paper and QDFL.
const GEM_EPS: f64 = 1e-6;
/// Upper bound of the learned logit scale (1/temperature), as in CLIP.
pub const MAX_LOGIT_SCALE: f64 = 100.0;

/// Which resampling the backbone's positions use, spelled in `cvaa.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Interpolation {
    Transformers,
    Meta,
    Timm,
}

impl From<Interpolation> for PosInterpolation {
    fn from(i: Interpolation) -> Self {
        match i {
            Interpolation::Transformers => PosInterpolation::Transformers,
            Interpolation::Meta => PosInterpolation::Meta,
            Interpolation::Timm => PosInterpolation::Timm,
        }
    }
}

impl From<PosInterpolation> for Interpolation {
    fn from(i: PosInterpolation) -> Self {
        match i {
            PosInterpolation::Transformers => Interpolation::Transformers,
            PosInterpolation::Meta => Interpolation::Meta,
            PosInterpolation::Timm => Interpolation::Timm,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CvaaConfig {
    pub backbone: Dinov2Config,
    pub interpolation: Interpolation,
    /// Width of the shared embedding space (projector output).
    pub embed_dim: usize,
    /// Hidden width of each adapter's MLP.
    pub adapter_hidden: usize,
    /// Initial GeM exponent.
    pub gem_p: f64,
    /// Initial temperature of the InfoNCE logits.
    pub temperature: f64,
    /// `[height, width]` a UAV frame is resized to (multiples of the patch).
    pub uav_size: [usize; 2],
    /// Side a satellite image or window is resized to (a multiple of the patch).
    pub satellite_size: usize,
}

impl CvaaConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        crate::error::read_validated_json(path, Self::validate)
    }

    pub fn validate(&self) -> std::result::Result<(), String> {
        self.backbone.validate()?;
        let p = self.backbone.patch_size;
        let sides = [("uav_size[0]", self.uav_size[0]), ("uav_size[1]", self.uav_size[1]), ("satellite_size", self.satellite_size)];
        for (key, side) in sides {
            if side == 0 || side % p != 0 {
                return Err(format!("`{key}` = {side} must be a positive multiple of the patch size {p}"));
            }
        }
        if self.embed_dim == 0 || self.adapter_hidden == 0 {
            return Err("`embed_dim` and `adapter_hidden` must be positive".into());
        }
        if !(self.gem_p > 0.0) || !(self.temperature > 0.0) {
            return Err("`gem_p` and `temperature` must be positive".into());
        }
        Ok(())
    }
}

/// Generalised-mean pooling over tokens with a learned exponent p.
#[derive(Debug, Clone)]
pub struct Gem {
    p: Tensor, // [1]
}

impl Gem {
    pub fn new(p_init: f64, vb: VarBuilder) -> Result<Self> {
        Ok(Self { p: vb.get_with_hints(1, "p", Init::Const(p_init))? })
    }

    pub fn p(&self) -> &Tensor {
        &self.p
    }

    /// `tokens`: [B, N, D] → [B, D], `(mean_n max(x, ε)^p)^(1/p)`.
    pub fn forward(&self, tokens: &Tensor) -> Result<Tensor> {
        let powered = tokens.maximum(GEM_EPS)?.log()?.broadcast_mul(&self.p)?.exp()?;
        Ok(powered.mean(1)?.log()?.broadcast_div(&self.p)?.exp()?)
    }
}

/// `x + fc2(GELU(fc1(x)))`; fc2 starts at zero so the adapter starts as the identity.
#[derive(Debug, Clone)]
pub struct Adapter {
    fc1: Linear,
    fc2: Linear,
}

impl Adapter {
    pub fn new(dim: usize, hidden: usize, vb: VarBuilder) -> Result<Self> {
        let fc1 = vb.pp("fc1");
        let fc2 = vb.pp("fc2");
        let normal = Init::Randn { mean: 0.0, stdev: (dim as f64).powf(-0.5) };
        Ok(Self {
            fc1: Linear::from_parts(
                fc1.get_with_hints((hidden, dim), "weight", normal)?,
                Some(fc1.get_with_hints(hidden, "bias", Init::Const(0.0))?),
            ),
            fc2: Linear::from_parts(
                fc2.get_with_hints((dim, hidden), "weight", Init::Const(0.0))?,
                Some(fc2.get_with_hints(dim, "bias", Init::Const(0.0))?),
            ),
        })
    }

    /// [B, E] → [B, E].
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok((xs + self.fc2.forward(&self.fc1.forward(xs)?.gelu_erf()?)?)?)
    }
}

/// The two heads on top of the backbone: GeM, projector P, adapters A_sat and A_uav.
#[derive(Debug, Clone)]
pub struct CvaaHeads {
    gem: Gem,
    projector: Linear,
    adapter_sat: Adapter,
    adapter_uav: Adapter,
    logit_scale: Tensor, // [1], log(1/temperature)
}

impl CvaaHeads {
    pub fn new(cfg: &CvaaConfig, vb: VarBuilder) -> Result<Self> {
        let (d, e) = (cfg.backbone.hidden_size, cfg.embed_dim);
        let proj = vb.pp("projector");
        let normal = Init::Randn { mean: 0.0, stdev: (d as f64).powf(-0.5) };
        Ok(Self {
            gem: Gem::new(cfg.gem_p, vb.pp("gem"))?,
            projector: Linear::from_parts(proj.get_with_hints((e, d), "weight", normal)?, Some(proj.get_with_hints(e, "bias", Init::Const(0.0))?)),
            adapter_sat: Adapter::new(e, cfg.adapter_hidden, vb.pp("adapter_sat"))?,
            adapter_uav: Adapter::new(e, cfg.adapter_hidden, vb.pp("adapter_uav"))?,
            logit_scale: vb.get_with_hints(1, "logit_scale", Init::Const((1.0 / cfg.temperature).ln()))?,
        })
    }

    /// CLS tokens [B, D] → satellite embeddings [B, E], unit length.
    pub fn satellite(&self, cls: &Tensor) -> Result<Tensor> {
        l2_normalize(&self.adapter_sat.forward(&self.projector.forward(cls)?)?)
    }

    /// Patch tokens [B, N, D] → UAV embeddings [B, E], unit length.
    pub fn uav(&self, patches: &Tensor) -> Result<Tensor> {
        l2_normalize(&self.adapter_uav.forward(&self.projector.forward(&self.gem.forward(patches)?)?)?)
    }

    /// `exp(logit_scale)`, clamped to [1, 100].
    pub fn logit_scale(&self) -> Result<Tensor> {
        Ok(self.logit_scale.clamp(0.0, MAX_LOGIT_SCALE.ln())?.exp()?)
    }

    pub fn gem(&self) -> &Gem {
        &self.gem
    }
}

/// Backbone and heads.
#[derive(Debug, Clone)]
pub struct Cvaa {
    backbone: Dinov2Model,
    heads: CvaaHeads,
    cfg: CvaaConfig,
}

impl Cvaa {
    /// `backbone` addresses hub DINOv2 names, `heads` the head names (`gem.p`, `projector.*`,
    /// `adapter_sat.*`, `adapter_uav.*`, `logit_scale`).
    pub fn new(cfg: &CvaaConfig, backbone: VarBuilder, heads: VarBuilder) -> Result<Self> {
        cfg.validate().map_err(|problem| ModelError::ModelConfig { model: "CVAA", problem })?;
        Ok(Self {
            backbone: Dinov2Model::new(&cfg.backbone, cfg.interpolation.into(), backbone)?,
            heads: CvaaHeads::new(cfg, heads)?,
            cfg: cfg.clone(),
        })
    }

    /// A trained checkpoint folder: `cvaa.json` + `model.safetensors` (`backbone.*` and heads).
    pub fn load(dir: &Path, device: &Device) -> Result<Self> {
        let cfg = CvaaConfig::from_file(&dir.join(CONFIG_FILE))?;
        let weights = dir.join(WEIGHTS_FILE);
        if !weights.is_file() {
            return Err(ModelError::NoWeights(dir.to_path_buf()));
        }
        let tensors = candle_core::safetensors::load(&weights, device)?;
        let vb = VarBuilder::from_tensors(tensors, DType::F32, device);
        Self::new(&cfg, vb.pp("backbone"), vb)
    }

    pub fn config(&self) -> &CvaaConfig {
        &self.cfg
    }

    pub fn backbone(&self) -> &Dinov2Model {
        &self.backbone
    }

    pub fn heads(&self) -> &CvaaHeads {
        &self.heads
    }

    /// Satellite images or windows [B, 3, S, S] → [B, E].
    pub fn embed_satellite(&self, pixels: &Tensor) -> Result<Tensor> {
        self.heads.satellite(&self.backbone.forward(pixels)?.pooler_output)
    }

    /// UAV frames [B, 3, H, W] → [B, E].
    pub fn embed_uav(&self, pixels: &Tensor) -> Result<Tensor> {
        self.heads.uav(&self.backbone.forward(pixels)?.patch_tokens()?)
    }
}

/// Unit length over the last dimension.
pub fn l2_normalize(xs: &Tensor) -> Result<Tensor> {
    let norm = (xs.sqr()?.sum_keepdim(D::Minus1)? + 1e-12)?.sqrt()?;
    Ok(xs.broadcast_div(&norm)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens() -> Tensor {
        let values: Vec<f32> = vec![0.5, -1.0, 2.0, 0.25, 1.5, 3.0, -0.5, 0.0, 1.0, 4.0, 0.75, 2.5];
        Tensor::from_vec(values, (1, 4, 3), &Device::Cpu).unwrap()
    }

    fn gem(p: f64) -> Gem {
        Gem { p: Tensor::new(&[p as f32], &Device::Cpu).unwrap() }
    }

    #[test]
    fn gem_with_p_one_is_the_mean_of_the_clamped_tokens() {
        let pooled: Vec<f32> = gem(1.0).forward(&tokens()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        let expected = [(0.5 + 0.25 + 1e-6 + 4.0) / 4.0, (1e-6 + 1.5 + 1e-6 + 0.75) / 4.0, (2.0 + 3.0 + 1.0 + 2.5) / 4.0];
        for (got, want) in pooled.iter().zip(expected) {
            assert!((f64::from(*got) - want).abs() < 1e-5, "{got} vs {want}");
        }
    }

    #[test]
    fn gem_with_a_large_p_tends_to_the_maximum() {
        let pooled: Vec<f32> = gem(60.0).forward(&tokens()).unwrap().flatten_all().unwrap().to_vec1().unwrap();
        for (got, max) in pooled.iter().zip([4.0f32, 1.5, 3.0]) {
            assert!(*got <= max + 1e-4 && *got > 0.97 * max, "{got} vs max {max}");
        }
    }

    #[test]
    fn adapters_start_as_the_identity_and_outputs_are_unit_length() {
        let cfg = CvaaConfig {
            backbone: Dinov2Config {
                hidden_size: 32,
                num_hidden_layers: 1,
                num_attention_heads: 2,
                image_size: 28,
                patch_size: 14,
                ..Dinov2Config::default()
            },
            interpolation: Interpolation::Transformers,
            embed_dim: 16,
            adapter_hidden: 24,
            gem_p: 3.0,
            temperature: 0.07,
            uav_size: [28, 42],
            satellite_size: 28,
        };
        let vars = candle_nn::VarMap::new();
        let vb = VarBuilder::from_varmap(&vars, DType::F32, &Device::Cpu);
        let model = Cvaa::new(&cfg, vb.pp("backbone"), vb.clone()).unwrap();
        let x = Tensor::randn(0f32, 1.0, (3, 16), &Device::Cpu).unwrap();
        let diff = (model.heads.adapter_uav.forward(&x).unwrap() - &x).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(diff, 0.0);
        let uav = model.embed_uav(&Tensor::randn(0f32, 1.0, (2, 3, 28, 42), &Device::Cpu).unwrap()).unwrap();
        let sat = model.embed_satellite(&Tensor::randn(0f32, 1.0, (2, 3, 28, 28), &Device::Cpu).unwrap()).unwrap();
        for e in [uav, sat] {
            let norms: Vec<f32> = e.sqr().unwrap().sum(1).unwrap().to_vec1().unwrap();
            assert!(norms.iter().all(|n| (n - 1.0).abs() < 1e-5), "{norms:?}");
        }
        let scale = model.heads.logit_scale().unwrap().to_vec1::<f32>().unwrap()[0];
        assert!((scale - 1.0 / 0.07).abs() < 1e-3, "{scale}");
    }
}
