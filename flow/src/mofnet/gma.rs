//! Global motion aggregation (Jiang et al., "Learning to Estimate Hidden Motions with Global
//! Motion Aggregation", ICCV 2021), as VideoFlow's `gma.py` uses it: an attention map over all
//! pixel pairs, computed once per window from the context features (appearance decides which
//! pixels move together), then applied at every iteration to the motion features.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use super::layers::Pointwise;
use crate::error::Result;

/// `softmax(q·kᵀ/√d)` over pixels, q and k one 1×1 projection of the context (`att.to_qk`).
/// The checkpoint's relative position embedding (`att.pos_emb.*`) is unused by MOFNet.
pub struct GmaAttention {
    to_qk: Pointwise,
    dim_head: usize,
}

impl GmaAttention {
    pub fn new(vb: VarBuilder, dim: usize) -> Result<Self> {
        // One head of width `dim`.
        Ok(GmaAttention { to_qk: Pointwise::no_bias(vb.pp("to_qk"), dim, 2 * dim)?, dim_head: dim })
    }

    /// Context `[B,C,H,W]` → attention `[B, H·W, H·W]` (rows: queries).
    pub fn forward(&self, context: &Tensor) -> Result<Tensor> {
        let (b, _, h, w) = context.dims4()?;
        let qk = self.to_qk.forward(context)?.reshape((b, 2 * self.dim_head, h * w))?;
        let q = (qk.narrow(1, 0, self.dim_head)? * (self.dim_head as f64).powf(-0.5))?.transpose(1, 2)?.contiguous()?; // [B,HW,d]
        let k = qk.narrow(1, self.dim_head, self.dim_head)?.contiguous()?; // [B,d,HW]
        Ok(candle_nn::ops::softmax_last_dim(&q.matmul(&k)?)?)
    }
}

/// `x + γ·(attention · to_v(x))`: each pixel adds the motion of the pixels it attends to.
pub struct Aggregate {
    to_v: Pointwise,
    gamma: f64,
}

impl Aggregate {
    pub fn new(vb: VarBuilder, dim: usize) -> Result<Self> {
        let gamma = vb.get(1, "gamma")?.to_vec1::<f32>()?[0] as f64;
        Ok(Aggregate { to_v: Pointwise::no_bias(vb.pp("to_v"), dim, dim)?, gamma })
    }

    /// `attention` `[B,HW,HW]`, motion features `[B,C,H,W]` → `[B,C,H,W]`.
    pub fn forward(&self, attention: &Tensor, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let v = self.to_v.forward(x)?.reshape((b, c, h * w))?.transpose(1, 2)?.contiguous()?; // [B,HW,C]
        let global = attention.matmul(&v)?.transpose(1, 2)?.reshape((b, c, h, w))?;
        Ok((x + (global * self.gamma)?)?)
    }
}
