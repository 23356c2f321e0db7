//! DINOv2 ViT (Oquab et al. 2023), the shared backbone B of the CVAA retriever: patch embedding +
//! CLS token + learned absolute positions (bicubically resampled to the input grid) → pre-norm
//! blocks with LayerScale → final LayerNorm.
//!
//! Tensors are addressed by the names of the hub checkpoints (`facebook/dinov2-*`:
//! `embeddings.*`, `encoder.layer.N.attention.attention.query`, …). [`Dinov2Weights`] also reads
//! transformers-5 names (`attention.q_proj`) and the Meta/timm names (`blocks.N.attn.qkv`), and
//! picks the position resampling of the implementation the checkpoint came from.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{Init, VarBuilder};
use serde::{Deserialize, Serialize};

use crate::checkpoint::HubOptions;
use crate::config::Activation;
use crate::error::{ModelError, Result};
use crate::ops::{LayerNorm, Linear, attention};

/// The `Dinov2Config` keys the backbone reads (`config.json` of a transformers checkpoint).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dinov2Config {
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub mlp_ratio: f64,
    pub hidden_act: String,
    pub layer_norm_eps: f64,
    pub image_size: usize,
    pub patch_size: usize,
    pub num_channels: usize,
    pub qkv_bias: bool,
    pub layerscale_value: f64,
    pub use_swiglu_ffn: bool,
}

impl Default for Dinov2Config {
    /// transformers' defaults (the B/14 shape at 224 px).
    fn default() -> Self {
        Self {
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            mlp_ratio: 4.0,
            hidden_act: "gelu".into(),
            layer_norm_eps: 1e-6,
            image_size: 224,
            patch_size: 14,
            num_channels: 3,
            qkv_bias: true,
            layerscale_value: 1.0,
            use_swiglu_ffn: false,
        }
    }
}

impl Dinov2Config {
    /// ViT-S/14 as released (`facebook/dinov2-small`).
    pub fn small() -> Self {
        Self { hidden_size: 384, num_attention_heads: 6, image_size: 518, ..Self::default() }
    }

    /// ViT-B/14 as released (`facebook/dinov2-base`).
    pub fn base() -> Self {
        Self { image_size: 518, ..Self::default() }
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        crate::error::read_validated_json(path, Self::validate)
    }

    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.use_swiglu_ffn {
            return Err("`use_swiglu_ffn` (the ViT-g MLP) is not supported".into());
        }
        if self.num_attention_heads == 0 || !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(format!("`hidden_size` {} is not a multiple of `num_attention_heads` {}", self.hidden_size, self.num_attention_heads));
        }
        if self.patch_size == 0 || self.image_size < self.patch_size {
            return Err(format!("`image_size` {} must hold at least one `patch_size` {}", self.image_size, self.patch_size));
        }
        self.activation().map(|_| ())
    }

    fn activation(&self) -> std::result::Result<Activation, String> {
        Activation::parse(&self.hidden_act).ok_or_else(|| format!("unsupported `hidden_act` \"{}\"", self.hidden_act))
    }

    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_attention_heads
    }

    pub fn mlp_dim(&self) -> usize {
        (self.hidden_size as f64 * self.mlp_ratio) as usize
    }

    /// Side of the square patch grid the position embeddings were trained on.
    pub fn base_grid(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// The config of a Meta/timm checkpoint, read off its tensor shapes (every released DINOv2
    /// has 64-dimensional heads and an MLP ratio of 4).
    fn from_meta_shapes(weights: &HashMap<String, Tensor>, files: &str) -> Result<Self> {
        let dims = |name: &str| {
            weights.get(name).map(|t| t.dims().to_vec()).ok_or_else(|| ModelError::MissingTensor { name: name.into(), files: files.into() })
        };
        let proj = dims("patch_embed.proj.weight")?; // [D, C, P, P]
        let positions = dims("pos_embed")?; // [1, 1+N, D]
        let grid = ((positions[1] - 1) as f64).sqrt().round() as usize;
        let layers = (0..).take_while(|i| weights.contains_key(&format!("blocks.{i}.norm1.weight"))).count();
        let hidden = proj[0];
        Ok(Self {
            hidden_size: hidden,
            num_hidden_layers: layers,
            num_attention_heads: (hidden / 64).max(1),
            image_size: grid * proj[2],
            patch_size: proj[2],
            num_channels: proj[1],
            ..Self::default()
        })
    }
}

/// How the learned positions are resampled to another patch grid; each reference does it its
/// own way, and the pretrained weights expect the way they were trained with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PosInterpolation {
    /// transformers' `Dinov2Model`: bicubic to the target size.
    Transformers,
    /// Meta's `DinoVisionTransformer`: bicubic with scale factors `(grid + 0.1) / base`.
    Meta,
    /// timm's `resample_abs_pos_embed`: antialiased bicubic to the target size.
    Timm,
}

impl PosInterpolation {
    /// `[rows, cols]` grid of `[base, base]` positions resampled to `[rows, cols]`:
    /// the row and column interpolation matrices, `[rows, base]` and `[cols, base]`.
    fn matrices(self, base: usize, rows: usize, cols: usize, device: &Device) -> Result<(Tensor, Tensor)> {
        let axis = |out: usize| -> Result<Tensor> {
            let weights = match self {
                Self::Transformers => bicubic_weights(base, out, None),
                Self::Meta => bicubic_weights(base, out, Some((out as f64 + 0.1) / base as f64)),
                Self::Timm => antialiased_bicubic_weights(base, out),
            };
            Ok(Tensor::from_vec(weights, (out, base), device)?)
        };
        Ok((axis(rows)?, axis(cols)?))
    }
}

/// Keys' cubic convolution kernel with parameter `a`.
fn cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

/// Row-major `[output, input]` weights of `torch.nn.functional.interpolate(mode="bicubic",
/// align_corners=False)` along one axis: four taps at A = −0.75, edges clamped. With a scale
/// factor the source coordinate uses it (as torch does when one is passed) instead of in/out.
pub fn bicubic_weights(input: usize, output: usize, scale_factor: Option<f64>) -> Vec<f32> {
    // torch computes the coordinate mapping in f32.
    let ratio = match scale_factor {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => input as f32 / output as f32,
    };
    let mut weights = vec![0f32; output * input];
    for o in 0..output {
        let source = ratio * (o as f32 + 0.5) - 0.5;
        let floor = source.floor();
        let t = (source - floor) as f64;
        let taps = [cubic(t + 1.0, -0.75), cubic(t, -0.75), cubic(1.0 - t, -0.75), cubic(2.0 - t, -0.75)];
        for (k, w) in taps.iter().enumerate() {
            let i = (floor as i64 - 1 + k as i64).clamp(0, input as i64 - 1) as usize;
            weights[o * input + i] += *w as f32;
        }
    }
    weights
}

/// Row-major `[output, input]` weights of `interpolate(mode="bicubic", antialias=True)` along
/// one axis: PIL's separable filter (A = −0.5) widened by the downscale factor, normalised.
pub fn antialiased_bicubic_weights(input: usize, output: usize) -> Vec<f32> {
    let scale = input as f64 / output as f64;
    let support = 2.0 * scale.max(1.0);
    let inv_scale = if scale >= 1.0 { 1.0 / scale } else { 1.0 };
    let mut weights = vec![0f32; output * input];
    for o in 0..output {
        let centre = scale * (o as f64 + 0.5);
        let first = ((centre - support + 0.5) as i64).max(0) as usize;
        let last = ((centre + support + 0.5) as i64).min(input as i64) as usize;
        let taps: Vec<f64> = (first..last).map(|i| cubic((i as f64 - centre + 0.5) * inv_scale, -0.5)).collect();
        let total: f64 = taps.iter().sum();
        for (k, w) in taps.iter().enumerate() {
            weights[o * input + first + k] = if total != 0.0 { (w / total) as f32 } else { 0.0 };
        }
    }
    weights
}

/// CLS token, patch projection and learned positions.
#[derive(Debug, Clone)]
pub struct Dinov2Embeddings {
    cls_token: Tensor,           // [1, 1, D]
    position_embeddings: Tensor, // [1, 1+G², D]
    projection: Tensor,          // [D, C·P·P]
    projection_bias: Tensor,     // [D]
    patch_size: usize,
    base_grid: usize,
    interpolation: PosInterpolation,
}

impl Dinov2Embeddings {
    pub fn new(cfg: &Dinov2Config, interpolation: PosInterpolation, vb: VarBuilder) -> Result<Self> {
        let (d, p, c) = (cfg.hidden_size, cfg.patch_size, cfg.num_channels);
        let grid = cfg.base_grid();
        let normal = Init::Randn { mean: 0.0, stdev: 0.02 };
        let projection = vb.pp("patch_embeddings.projection");
        Ok(Self {
            cls_token: vb.get_with_hints((1, 1, d), "cls_token", normal)?,
            position_embeddings: vb.get_with_hints((1, 1 + grid * grid, d), "position_embeddings", normal)?,
            projection: projection.get_with_hints((d, c, p, p), "weight", normal)?.reshape((d, c * p * p))?,
            projection_bias: projection.get_with_hints(d, "bias", Init::Const(0.0))?,
            patch_size: p,
            base_grid: grid,
            interpolation,
        })
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        vec![&self.cls_token, &self.position_embeddings, &self.projection, &self.projection_bias]
    }

    /// Positions for a `[rows, cols]` patch grid: [1, 1 + rows·cols, D].
    pub fn positions(&self, rows: usize, cols: usize) -> Result<Tensor> {
        if rows == self.base_grid && cols == self.base_grid {
            return Ok(self.position_embeddings.clone());
        }
        let d = self.position_embeddings.dim(2)?;
        let g = self.base_grid;
        let cls = self.position_embeddings.narrow(1, 0, 1)?;
        // [1, G², D] → [D, G, G]
        let grid = self.position_embeddings.narrow(1, 1, g * g)?.reshape((g, g, d))?.permute((2, 0, 1))?.contiguous()?;
        let (row_weights, col_weights) = self.interpolation.matrices(g, rows, cols, grid.device())?;
        let row_weights = row_weights.to_dtype(grid.dtype())?;
        let col_weights = col_weights.to_dtype(grid.dtype())?;
        // [D, G, G] → [D, rows, G] → [D, rows, cols]
        let resampled = row_weights.broadcast_matmul(&grid)?.broadcast_matmul(&col_weights.t()?)?;
        let patches = resampled.permute((1, 2, 0))?.reshape((1, rows * cols, d))?;
        Ok(Tensor::cat(&[&cls, &patches], 1)?)
    }

    /// `pixel_values`: [B, C, H, W] with H, W multiples of the patch → [B, 1 + H/P·W/P, D].
    pub fn forward(&self, pixel_values: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = pixel_values.dims4()?;
        let p = self.patch_size;
        if h % p != 0 || w % p != 0 || h == 0 || w == 0 {
            return Err(ModelError::Pixels {
                problem: format!("DINOv2 input is {h}×{w} px; both sides must be positive multiples of the patch size {p}"),
            });
        }
        let (rows, cols) = (h / p, w / p);
        // The stride-P convolution as a matmul over flattened patches: [B, rows·cols, C·P·P].
        let patches = pixel_values.to_dtype(self.projection.dtype())?.reshape((b, c, rows, p, cols, p))?.permute((0, 2, 4, 1, 3, 5))?.reshape((
            b,
            rows * cols,
            c * p * p,
        ))?;
        let tokens = patches.broadcast_matmul(&self.projection.t()?)?.broadcast_add(&self.projection_bias)?;
        let d = tokens.dim(2)?;
        let cls = self.cls_token.broadcast_as((b, 1, d))?;
        let tokens = Tensor::cat(&[&cls, &tokens], 1)?;
        Ok(tokens.broadcast_add(&self.positions(rows, cols)?)?)
    }
}

/// Multi-head self-attention with separate query, key and value projections.
#[derive(Debug, Clone)]
pub struct Dinov2Attention {
    query: Linear,
    key: Linear,
    value: Linear,
    output: Linear,
    num_heads: usize,
    head_dim: usize,
}

impl Dinov2Attention {
    pub fn new(cfg: &Dinov2Config, vb: VarBuilder) -> Result<Self> {
        let d = cfg.hidden_size;
        let qkv = vb.pp("attention");
        Ok(Self {
            query: linear(d, d, cfg.qkv_bias, qkv.pp("query"))?,
            key: linear(d, d, cfg.qkv_bias, qkv.pp("key"))?,
            value: linear(d, d, cfg.qkv_bias, qkv.pp("value"))?,
            output: linear(d, d, true, vb.pp("output.dense"))?,
            num_heads: cfg.num_attention_heads,
            head_dim: cfg.head_dim(),
        })
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        [&self.query, &self.key, &self.value, &self.output].into_iter().flat_map(Linear::parameters).collect()
    }

    /// `xs`: [B, L, D] → [B, L, D].
    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let (b, l, _) = xs.dims3()?;
        let heads = |proj: &Linear| -> Result<Tensor> {
            Ok(proj.forward(xs)?.reshape((b, l, self.num_heads, self.head_dim))?.transpose(1, 2)?.contiguous()?)
        };
        let scale = (self.head_dim as f64).powf(-0.5);
        let out = attention(&heads(&self.query)?, &heads(&self.key)?, &heads(&self.value)?, scale, None)?;
        Ok(self.output.forward(&out.transpose(1, 2)?.reshape((b, l, self.num_heads * self.head_dim))?)?)
    }
}

/// `fc2(act(fc1(x)))`.
#[derive(Debug, Clone)]
pub struct Dinov2Mlp {
    fc1: Linear,
    fc2: Linear,
    act: Activation,
}

impl Dinov2Mlp {
    pub fn new(cfg: &Dinov2Config, act: Activation, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            fc1: linear(cfg.hidden_size, cfg.mlp_dim(), true, vb.pp("fc1"))?,
            fc2: linear(cfg.mlp_dim(), cfg.hidden_size, true, vb.pp("fc2"))?,
            act,
        })
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        [&self.fc1, &self.fc2].into_iter().flat_map(Linear::parameters).collect()
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        Ok(self.fc2.forward(&self.act.apply(&self.fc1.forward(xs)?)?)?)
    }
}

/// `x + γ₁·attn(norm1(x))`, then `x + γ₂·mlp(norm2(x))`.
#[derive(Debug, Clone)]
pub struct Dinov2Layer {
    norm1: LayerNorm,
    attention: Dinov2Attention,
    layer_scale1: Tensor, // [D]
    norm2: LayerNorm,
    mlp: Dinov2Mlp,
    layer_scale2: Tensor, // [D]
}

impl Dinov2Layer {
    pub fn new(cfg: &Dinov2Config, act: Activation, vb: VarBuilder) -> Result<Self> {
        let d = cfg.hidden_size;
        let gamma = Init::Const(cfg.layerscale_value);
        Ok(Self {
            norm1: layer_norm(d, cfg.layer_norm_eps, vb.pp("norm1"))?,
            attention: Dinov2Attention::new(cfg, vb.pp("attention"))?,
            layer_scale1: vb.pp("layer_scale1").get_with_hints(d, "lambda1", gamma)?,
            norm2: layer_norm(d, cfg.layer_norm_eps, vb.pp("norm2"))?,
            mlp: Dinov2Mlp::new(cfg, act, vb.pp("mlp"))?,
            layer_scale2: vb.pp("layer_scale2").get_with_hints(d, "lambda1", gamma)?,
        })
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        let mut out = self.norm1.parameters();
        out.extend(self.attention.parameters());
        out.push(&self.layer_scale1);
        out.extend(self.norm2.parameters());
        out.extend(self.mlp.parameters());
        out.push(&self.layer_scale2);
        out
    }

    pub fn forward(&self, xs: &Tensor) -> Result<Tensor> {
        let attended = self.attention.forward(&self.norm1.forward(xs)?)?.broadcast_mul(&self.layer_scale1)?;
        let xs = (xs + attended)?;
        let transformed = self.mlp.forward(&self.norm2.forward(&xs)?)?.broadcast_mul(&self.layer_scale2)?;
        Ok((xs + transformed)?)
    }
}

/// The outputs of `Dinov2Model`.
#[derive(Debug, Clone)]
pub struct Dinov2Output {
    /// [B, 1 + N, D] after the final LayerNorm; row 0 is the CLS token.
    pub last_hidden_state: Tensor,
    /// [B, D], the normalised CLS token.
    pub pooler_output: Tensor,
}

impl Dinov2Output {
    /// [B, N, D], the normalised patch tokens.
    pub fn patch_tokens(&self) -> Result<Tensor> {
        let n = self.last_hidden_state.dim(1)? - 1;
        Ok(self.last_hidden_state.narrow(1, 1, n)?)
    }
}

#[derive(Debug, Clone)]
pub struct Dinov2Model {
    embeddings: Dinov2Embeddings,
    layers: Vec<Dinov2Layer>,
    layernorm: LayerNorm,
    cfg: Dinov2Config,
}

impl Dinov2Model {
    /// A backbone over `vb` in hub names; a fresh `VarMap` builder initialises it as
    /// transformers does (N(0, 0.02²) weights, zero biases, unit norms and LayerScale).
    pub fn new(cfg: &Dinov2Config, interpolation: PosInterpolation, vb: VarBuilder) -> Result<Self> {
        let act = Activation::parse(&cfg.hidden_act).ok_or_else(|| ModelError::UnknownName {
            what: "DINOv2 hidden_act",
            name: cfg.hidden_act.clone(),
            expected: "silu, swish, gelu, gelu_pytorch_tanh or gelu_new",
        })?;
        let layers = (0..cfg.num_hidden_layers).map(|i| Dinov2Layer::new(cfg, act, vb.pp(format!("encoder.layer.{i}")))).collect::<Result<_>>()?;
        Ok(Self {
            embeddings: Dinov2Embeddings::new(cfg, interpolation, vb.pp("embeddings"))?,
            layers,
            layernorm: layer_norm(cfg.hidden_size, cfg.layer_norm_eps, vb.pp("layernorm"))?,
            cfg: cfg.clone(),
        })
    }

    /// Reads a checkpoint directory (`config.json` + safetensors) or a Meta/timm safetensors file.
    pub fn load(path: &Path, dtype: DType, device: &Device) -> Result<Self> {
        let weights = Dinov2Weights::open(path, device)?;
        let interpolation = weights.interpolation;
        let cfg = weights.config.clone();
        Self::new(&cfg, interpolation, weights.var_builder(dtype, device))
    }

    pub fn config(&self) -> &Dinov2Config {
        &self.cfg
    }

    pub fn embeddings(&self) -> &Dinov2Embeddings {
        &self.embeddings
    }

    /// Resample positions another implementation's way (a checkpoint picks its own on load).
    pub fn set_interpolation(&mut self, interpolation: PosInterpolation) {
        self.embeddings.interpolation = interpolation;
    }

    pub fn parameters(&self) -> Vec<&Tensor> {
        let mut out = self.embeddings.parameters();
        out.extend(self.layers.iter().flat_map(Dinov2Layer::parameters));
        out.extend(self.layernorm.parameters());
        out
    }

    /// `pixel_values`: [B, C, H, W] normalised pixels.
    pub fn forward(&self, pixel_values: &Tensor) -> Result<Dinov2Output> {
        let mut xs = self.embeddings.forward(pixel_values)?;
        for layer in &self.layers {
            xs = layer.forward(&xs)?;
        }
        let last_hidden_state = self.layernorm.forward(&xs)?;
        let pooler_output = last_hidden_state.narrow(1, 0, 1)?.squeeze(1)?;
        Ok(Dinov2Output { last_hidden_state, pooler_output })
    }
}

fn linear(in_dim: usize, out_dim: usize, bias: bool, vb: VarBuilder) -> Result<Linear> {
    let weight = vb.get_with_hints((out_dim, in_dim), "weight", Init::Randn { mean: 0.0, stdev: 0.02 })?;
    let bias = if bias { Some(vb.get_with_hints(out_dim, "bias", Init::Const(0.0))?) } else { None };
    Ok(Linear::from_parts(weight, bias))
}

fn layer_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    let weight = vb.get_with_hints(size, "weight", Init::Const(1.0))?;
    let bias = vb.get_with_hints(size, "bias", Init::Const(0.0))?;
    Ok(LayerNorm::from_parts(weight, bias, eps))
}

/// The naming a checkpoint uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dinov2Naming {
    /// `facebook/dinov2-*` on the hub: `attention.attention.query`, `attention.output.dense`.
    Hub,
    /// transformers ≥ 5 `save_pretrained`: `attention.q_proj`, `attention.o_proj`.
    Transformers5,
    /// Meta's `dinov2_vit*14` (with `mask_token`) and timm's `vit_*_patch14_dinov2` (without).
    Meta,
}

/// A checkpoint's tensors renamed to hub names, its config and its position resampling.
pub struct Dinov2Weights {
    pub tensors: HashMap<String, Tensor>,
    pub config: Dinov2Config,
    pub naming: Dinov2Naming,
    pub interpolation: PosInterpolation,
}

impl Dinov2Weights {
    /// `path`: a folder with `config.json` and `model.safetensors`, or one safetensors file
    /// (Meta/timm weights, whose config is read off the shapes).
    pub fn open(path: &Path, device: &Device) -> Result<Self> {
        let (config_file, weights_file) = if path.is_dir() {
            (Some(path.join("config.json")).filter(|c| c.is_file()), path.join("model.safetensors"))
        } else {
            (None, path.to_path_buf())
        };
        if !weights_file.is_file() {
            return Err(ModelError::NoWeights(path.to_path_buf()));
        }
        let files = weights_file.display().to_string();
        let stored = candle_core::safetensors::load(&weights_file, device)?;
        // Heads and wrappers of classification checkpoints sit around the backbone.
        let stored: HashMap<String, Tensor> =
            stored.into_iter().map(|(name, t)| (name.strip_prefix("dinov2.").map(str::to_owned).unwrap_or(name), t)).collect();
        let naming = if stored.contains_key("pos_embed") {
            Dinov2Naming::Meta
        } else if stored.keys().any(|n| n.contains(".attention.q_proj.")) {
            Dinov2Naming::Transformers5
        } else {
            Dinov2Naming::Hub
        };
        let config = match (&config_file, naming) {
            (Some(file), _) => Dinov2Config::from_file(file)?,
            (None, Dinov2Naming::Meta) => Dinov2Config::from_meta_shapes(&stored, &files)?,
            (None, _) => {
                return Err(ModelError::Io {
                    path: path.join("config.json"),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "a transformers DINOv2 checkpoint needs its config.json"),
                });
            }
        };
        let (tensors, interpolation) = match naming {
            Dinov2Naming::Hub => (stored, PosInterpolation::Transformers),
            Dinov2Naming::Transformers5 => {
                (stored.into_iter().map(|(n, t)| (hub_name_of_transformers5(&n), t)).collect(), PosInterpolation::Transformers)
            }
            Dinov2Naming::Meta => {
                let interpolation = if stored.contains_key("mask_token") { PosInterpolation::Meta } else { PosInterpolation::Timm };
                (hub_tensors_of_meta(stored, &files)?, interpolation)
            }
        };
        Ok(Self { tensors, config, naming, interpolation })
    }

    /// A local folder or file, else a hub id (`facebook/dinov2-small`, optionally `@revision`)
    /// resolved through the hf-hub cache.
    pub fn resolve(id_or_path: &str, hub: &HubOptions, device: &Device) -> Result<Self> {
        let path = Path::new(id_or_path);
        if path.exists() {
            return Self::open(path, device);
        }
        let (repo, revision) = id_or_path.split_once('@').unwrap_or((id_or_path, "main"));
        let config = hub.fetch(repo, revision, "config.json")?;
        hub.fetch(repo, revision, "model.safetensors")?;
        Self::open(config.parent().unwrap_or(Path::new(".")), device)
    }

    pub fn var_builder(self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_tensors(self.tensors, dtype, device)
    }
}

fn hub_name_of_transformers5(name: &str) -> String {
    name.replace(".attention.q_proj.", ".attention.attention.query.")
        .replace(".attention.k_proj.", ".attention.attention.key.")
        .replace(".attention.v_proj.", ".attention.attention.value.")
        .replace(".attention.o_proj.", ".attention.output.dense.")
}

/// Meta/timm tensors under hub names; the fused `qkv` projection is split in three.
fn hub_tensors_of_meta(stored: HashMap<String, Tensor>, files: &str) -> Result<HashMap<String, Tensor>> {
    let mut out = HashMap::new();
    for (name, tensor) in stored {
        let renamed = match name.as_str() {
            "cls_token" => "embeddings.cls_token".to_owned(),
            "pos_embed" => "embeddings.position_embeddings".to_owned(),
            "mask_token" => "embeddings.mask_token".to_owned(),
            _ => {
                if let Some(rest) = name.strip_prefix("patch_embed.proj.") {
                    format!("embeddings.patch_embeddings.projection.{rest}")
                } else if let Some(rest) = name.strip_prefix("norm.") {
                    format!("layernorm.{rest}")
                } else if let Some(rest) = name.strip_prefix("blocks.") {
                    let (layer, part) = rest.split_once('.').unwrap_or((rest, ""));
                    let prefix = format!("encoder.layer.{layer}");
                    if let Some(kind) = part.strip_prefix("attn.qkv.") {
                        let rows = tensor.dim(0)? / 3;
                        for (i, head) in ["query", "key", "value"].iter().enumerate() {
                            out.insert(format!("{prefix}.attention.attention.{head}.{kind}"), tensor.narrow(0, i * rows, rows)?.contiguous()?);
                        }
                        continue;
                    }
                    let part = part
                        .replace("attn.proj.", "attention.output.dense.")
                        .replace("ls1.gamma", "layer_scale1.lambda1")
                        .replace("ls2.gamma", "layer_scale2.lambda1");
                    format!("{prefix}.{part}")
                } else {
                    // Heads and register tokens are not part of the backbone.
                    continue;
                }
            }
        };
        out.insert(renamed, tensor);
    }
    if !out.contains_key("embeddings.position_embeddings") {
        return Err(ModelError::MissingTensor { name: "pos_embed".into(), files: files.into() });
    }
    Ok(out)
}
