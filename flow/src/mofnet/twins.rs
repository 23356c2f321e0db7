//! Twins-SVT (Chu et al., "Twins: Revisiting the Design of Spatial Attention in Vision
//! Transformers", NeurIPS 2021), timm 0.4.12's `twins_svt_large`, cut after its second stage as
//! VideoFlow uses it: a `[B,3,H,W]` image becomes `[B,C,H/8,W/8]` features.
//!
//! Each stage is a strided patch embedding, then blocks that alternate *locally-grouped*
//! attention (within `window×window` cells) and *global sub-sampled* attention (every token
//! attends to a strided-conv summary of the image), with a 3×3 depthwise positional encoding
//! (PEG) after the first block. Names follow timm under the wrapper's `svt.` prefix.

use candle_core::{D, Module, Tensor};
use candle_nn::{LayerNorm, VarBuilder};

use super::config::TwinsConfig;
use crate::error::Result;
use crate::kernels::{add_bias, depthwise_conv2d, gelu_erf};

/// LayerNorm eps inside the blocks (timm builds Twins with `partial(LayerNorm, eps=1e-6)`).
const BLOCK_EPS: f64 = 1e-6;
/// The patch embedding's and the sub-sampling's own `nn.LayerNorm` keep PyTorch's default.
const DEFAULT_EPS: f64 = 1e-5;

/// Tokens of an image: `[B, h·w, C]` plus the grid `(h, w)` they came from.
type Tokens = (Tensor, (usize, usize));

/// Non-overlapping `patch×patch` convolution to `dim` channels, then LayerNorm.
pub struct PatchEmbed {
    proj: candle_nn::Conv2d,
    norm: LayerNorm,
}

impl PatchEmbed {
    pub fn new(vb: VarBuilder, c_in: usize, dim: usize, patch: usize) -> Result<Self> {
        let cfg = candle_nn::Conv2dConfig { stride: patch, ..Default::default() };
        Ok(PatchEmbed {
            proj: candle_nn::conv2d(c_in, dim, patch, cfg, vb.pp("proj"))?,
            norm: candle_nn::layer_norm(dim, DEFAULT_EPS, vb.pp("norm"))?,
        })
    }

    /// `[B,C,H,W]` → tokens `[B, (H/p)·(W/p), dim]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tokens> {
        let y = self.proj.forward(x)?; // [B,dim,h,w]
        let (_, _, h, w) = y.dims4()?;
        let tokens = y.flatten_from(2)?.transpose(1, 2)?.contiguous()?;
        Ok((self.norm.forward(&tokens)?, (h, w)))
    }
}

/// `nn.Linear` over the last axis of `[B, N, in]` tokens: one matmul, then the bias added by
/// the parallel kernel (Candle's `Linear` broadcasts it on one thread).
pub struct Linear {
    weight: Tensor,
    bias: Tensor,
}

impl Linear {
    pub fn new(c_in: usize, c_out: usize, vb: VarBuilder) -> Result<Self> {
        Ok(Linear { weight: vb.get((c_out, c_in), "weight")?.t()?, bias: vb.get(c_out, "bias")? })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, n, c) = x.dims3()?;
        let y = x.contiguous()?.reshape((b * n, c))?.matmul(&self.weight)?;
        Ok(add_bias(&y, &self.bias, 1)?.reshape((b, n, ()))?)
    }
}

/// Multi-head attention `softmax(q·kᵀ/√d)·v` over `[G, heads, n, d]` inputs. The scale is
/// applied to q, which is `n_k/d` times smaller than the score matrix.
fn attend(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Tensor> {
    let attn = (q * scale)?.matmul(&k.t()?)?;
    Ok(candle_nn::ops::softmax_last_dim(&attn)?.matmul(v)?)
}

/// LSA: self-attention inside each `ws×ws` cell. The token grid is zero-padded at the bottom
/// and right to a multiple of `ws` *before* the qkv projection, so padding tokens take part as
/// keys (with the projection's bias), exactly as timm does.
pub struct LocalAttention {
    qkv: Linear,
    proj: Linear,
    heads: usize,
    ws: usize,
}

impl LocalAttention {
    pub fn new(vb: VarBuilder, dim: usize, heads: usize, ws: usize) -> Result<Self> {
        Ok(LocalAttention { qkv: Linear::new(dim, 3 * dim, vb.pp("qkv"))?, proj: Linear::new(dim, dim, vb.pp("proj"))?, heads, ws })
    }

    pub fn forward(&self, x: &Tensor, (h, w): (usize, usize)) -> Result<Tensor> {
        let (b, n, c) = x.dims3()?;
        let (ws, heads) = (self.ws, self.heads);
        let (pad_b, pad_r) = ((ws - h % ws) % ws, (ws - w % ws) % ws);
        let grid = x.reshape((b, h, w, c))?.pad_with_zeros(1, 0, pad_b)?.pad_with_zeros(2, 0, pad_r)?;
        let (gh, gw) = ((h + pad_b) / ws, (w + pad_r) / ws);
        // [B,gh,ws,gw,ws,C] → cells [B·gh·gw, ws², C]
        let cells = grid.reshape((b, gh, ws, gw, ws, c))?.transpose(2, 3)?.contiguous()?.reshape((b * gh * gw, ws * ws, c))?;
        let qkv = self.qkv.forward(&cells)?.reshape((b * gh * gw, ws * ws, 3, heads, c / heads))?.permute((2, 0, 3, 1, 4))?.contiguous()?;
        let (q, k, v) = (qkv.get(0)?, qkv.get(1)?, qkv.get(2)?); // [G,heads,ws²,d]
        let out = attend(&q, &k, &v, ((c / heads) as f64).powf(-0.5))?;
        // [G,heads,ws²,d] → [B,gh,gw,ws,ws,C] → [B,gh·ws,gw·ws,C], padding cropped
        let out = out.transpose(1, 2)?.reshape((b, gh, gw, ws, ws, c))?.transpose(2, 3)?.reshape((b, gh * ws, gw * ws, c))?;
        let out = out.narrow(1, 0, h)?.narrow(2, 0, w)?.contiguous()?.reshape((b, n, c))?;
        self.proj.forward(&out)
    }
}

/// GSA: every token attends to keys and values of a sub-sampled image (a `sr×sr` conv with
/// stride `sr`, then LayerNorm); without sub-sampling (`sr` = 1) to all tokens.
pub struct GlobalAttention {
    q: Linear,
    kv: Linear,
    proj: Linear,
    sr: Option<(candle_nn::Conv2d, LayerNorm)>,
    heads: usize,
}

impl GlobalAttention {
    pub fn new(vb: VarBuilder, dim: usize, heads: usize, sr_ratio: usize) -> Result<Self> {
        let sr = if sr_ratio > 1 {
            let cfg = candle_nn::Conv2dConfig { stride: sr_ratio, ..Default::default() };
            Some((candle_nn::conv2d(dim, dim, sr_ratio, cfg, vb.pp("sr"))?, candle_nn::layer_norm(dim, DEFAULT_EPS, vb.pp("norm"))?))
        } else {
            None
        };
        Ok(GlobalAttention {
            q: Linear::new(dim, dim, vb.pp("q"))?,
            kv: Linear::new(dim, 2 * dim, vb.pp("kv"))?,
            proj: Linear::new(dim, dim, vb.pp("proj"))?,
            sr,
            heads,
        })
    }

    pub fn forward(&self, x: &Tensor, (h, w): (usize, usize)) -> Result<Tensor> {
        let (b, n, c) = x.dims3()?;
        let (heads, d) = (self.heads, c / self.heads);
        let q = self.q.forward(x)?.reshape((b, n, heads, d))?.transpose(1, 2)?.contiguous()?; // [B,heads,N,d]
        let summary = match &self.sr {
            Some((conv, norm)) => {
                let image = x.transpose(1, 2)?.contiguous()?.reshape((b, c, h, w))?;
                let small = conv.forward(&image)?.flatten_from(2)?.transpose(1, 2)?.contiguous()?; // [B,M,C]
                norm.forward(&small)?
            }
            None => x.clone(),
        };
        let m = summary.dim(1)?;
        let kv = self.kv.forward(&summary)?.reshape((b, m, 2, heads, d))?.permute((2, 0, 3, 1, 4))?.contiguous()?;
        let out = attend(&q, &kv.get(0)?, &kv.get(1)?, (d as f64).powf(-0.5))?; // [B,heads,N,d]
        let out = out.transpose(1, 2)?.reshape((b, n, c))?;
        self.proj.forward(&out)
    }
}

pub enum Attention {
    Local(LocalAttention),
    Global(GlobalAttention),
}

/// `fc1 → GELU → fc2`.
pub struct Mlp {
    fc1: Linear,
    fc2: Linear,
}

impl Mlp {
    pub fn new(vb: VarBuilder, dim: usize, hidden: usize) -> Result<Self> {
        Ok(Mlp { fc1: Linear::new(dim, hidden, vb.pp("fc1"))?, fc2: Linear::new(hidden, dim, vb.pp("fc2"))? })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.fc2.forward(&gelu_erf(&self.fc1.forward(x)?)?)
    }
}

/// Pre-norm transformer block: `x + attn(norm1(x))`, then `x + mlp(norm2(x))`.
pub struct Block {
    norm1: LayerNorm,
    attn: Attention,
    norm2: LayerNorm,
    mlp: Mlp,
}

impl Block {
    /// Even blocks of a stage are local (LSA), odd ones global (GSA), as timm builds them.
    pub fn new(vb: VarBuilder, cfg: &TwinsConfig, stage: usize, index: usize) -> Result<Self> {
        let dim = cfg.embed_dims[stage];
        let heads = cfg.num_heads[stage];
        let attn = if index.is_multiple_of(2) {
            Attention::Local(LocalAttention::new(vb.pp("attn"), dim, heads, cfg.window)?)
        } else {
            Attention::Global(GlobalAttention::new(vb.pp("attn"), dim, heads, cfg.sr_ratios[stage])?)
        };
        Ok(Block {
            norm1: candle_nn::layer_norm(dim, BLOCK_EPS, vb.pp("norm1"))?,
            attn,
            norm2: candle_nn::layer_norm(dim, BLOCK_EPS, vb.pp("norm2"))?,
            mlp: Mlp::new(vb.pp("mlp"), dim, dim * cfg.mlp_ratios[stage])?,
        })
    }

    pub fn forward(&self, x: &Tensor, size: (usize, usize)) -> Result<Tensor> {
        let normed = self.norm1.forward(x)?;
        let attn = match &self.attn {
            Attention::Local(a) => a.forward(&normed, size)?,
            Attention::Global(a) => a.forward(&normed, size)?,
        };
        let x = (x + attn)?;
        Ok((&x + self.mlp.forward(&self.norm2.forward(&x)?)?)?)
    }
}

/// PEG (conditional positional encoding): `x + dwconv3×3(x)` on the token grid.
pub struct PosConv {
    weight: Tensor,
    bias: Tensor,
}

impl PosConv {
    pub fn new(vb: VarBuilder, dim: usize) -> Result<Self> {
        let vb = vb.pp("proj.0");
        Ok(PosConv { weight: vb.get((dim, 1, 3, 3), "weight")?, bias: vb.get(dim, "bias")? })
    }

    pub fn forward(&self, x: &Tensor, (h, w): (usize, usize)) -> Result<Tensor> {
        let (b, n, c) = x.dims3()?;
        let image = x.transpose(1, 2)?.contiguous()?.reshape((b, c, h, w))?;
        let y = (depthwise_conv2d(&image, &self.weight, Some(&self.bias), 1)? + image)?;
        Ok(y.reshape((b, c, n))?.transpose(1, 2)?.contiguous()?)
    }
}

/// One stage: patch embedding, blocks, the PEG after the first block.
pub struct Stage {
    embed: PatchEmbed,
    blocks: Vec<Block>,
    pos: PosConv,
}

impl Stage {
    /// `[B,C,H,W]` → `[B,dim,H/p,W/p]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, _, _, _) = x.dims4()?;
        let (mut tokens, size) = self.embed.forward(x)?;
        for (j, block) in self.blocks.iter().enumerate() {
            tokens = block.forward(&tokens, size)?;
            if j == 0 {
                tokens = self.pos.forward(&tokens, size)?;
            }
        }
        let c = tokens.dim(D::Minus1)?;
        Ok(tokens.transpose(1, 2)?.contiguous()?.reshape((b, c, size.0, size.1))?)
    }
}

/// Twins-SVT stages 1–2 (patch 4, then 2): `[B,3,H,W]` → `[B,embed_dims[1],H/8,W/8]`.
pub struct Twins {
    stages: Vec<Stage>,
}

impl Twins {
    /// `vb` at the encoder (`fnet` / `cnet`); weights live under its `svt.`.
    pub fn new(vb: VarBuilder, cfg: &TwinsConfig) -> Result<Self> {
        let svt = vb.pp("svt");
        let mut stages = Vec::with_capacity(2);
        for s in 0..2 {
            let (c_in, patch) = if s == 0 { (3, 4) } else { (cfg.embed_dims[0], 2) };
            let dim = cfg.embed_dims[s];
            stages.push(Stage {
                embed: PatchEmbed::new(svt.pp(format!("patch_embeds.{s}")), c_in, dim, patch)?,
                blocks: (0..cfg.depths[s]).map(|j| Block::new(svt.pp(format!("blocks.{s}.{j}")), cfg, s, j)).collect::<Result<_>>()?,
                pos: PosConv::new(svt.pp(format!("pos_block.{s}")), dim)?,
            });
        }
        Ok(Twins { stages })
    }

    pub fn forward(&self, images: &Tensor) -> Result<Tensor> {
        let mut x = images.clone();
        for stage in &self.stages {
            x = stage.forward(&x)?;
        }
        Ok(x)
    }
}
