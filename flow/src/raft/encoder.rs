//! Feature and context encoders (RAFT §3.1): a 7×7 stride-2 stem, three stages of two residual
//! blocks (strides 1, 2, 2) and a 1×1 projection, so the output is at 1/8 resolution.
//! torchvision's `FeatureEncoder` with `ResidualBlock` (large) or `BottleneckBlock` (small).

use candle_core::Tensor;
use candle_nn::VarBuilder;

use super::config::{Block, Norm};
use super::layers::{Conv, ConvNormAct};
use crate::error::Result;

/// Two 3×3 conv-norm-ReLUs plus a (projected) shortcut, then ReLU.
pub struct ResidualBlock {
    convnormrelu1: ConvNormAct,
    convnormrelu2: ConvNormAct,
    downsample: Option<ConvNormAct>,
}

impl ResidualBlock {
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, stride: usize, norm: Norm) -> Result<Self> {
        Ok(ResidualBlock {
            convnormrelu1: ConvNormAct::new(vb.pp("convnormrelu1"), c_in, c_out, 3, stride, norm, true)?,
            convnormrelu2: ConvNormAct::new(vb.pp("convnormrelu2"), c_out, c_out, 3, 1, norm, true)?,
            downsample: shortcut(vb, c_in, c_out, stride, norm)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.convnormrelu2.forward(&self.convnormrelu1.forward(x)?)?;
        let x = match &self.downsample {
            Some(d) => d.forward(x)?,
            None => x.clone(),
        };
        Ok((x + y)?.relu()?)
    }
}

/// 1×1 (to a quarter width) → 3×3 (strided) → 1×1 (back to full width), shortcut, ReLU.
pub struct BottleneckBlock {
    convnormrelu1: ConvNormAct,
    convnormrelu2: ConvNormAct,
    convnormrelu3: ConvNormAct,
    downsample: Option<ConvNormAct>,
}

impl BottleneckBlock {
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, stride: usize, norm: Norm) -> Result<Self> {
        let mid = c_out / 4;
        Ok(BottleneckBlock {
            convnormrelu1: ConvNormAct::new(vb.pp("convnormrelu1"), c_in, mid, 1, 1, norm, true)?,
            convnormrelu2: ConvNormAct::new(vb.pp("convnormrelu2"), mid, mid, 3, stride, norm, true)?,
            convnormrelu3: ConvNormAct::new(vb.pp("convnormrelu3"), mid, c_out, 1, 1, norm, true)?,
            downsample: shortcut(vb, c_in, c_out, stride, norm)?,
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.convnormrelu3.forward(&self.convnormrelu2.forward(&self.convnormrelu1.forward(x)?)?)?;
        let x = match &self.downsample {
            Some(d) => d.forward(x)?,
            None => x.clone(),
        };
        Ok((x + y)?.relu()?)
    }
}

/// A strided block projects its input with a 1×1 conv + norm (no ReLU); others add it as is.
fn shortcut(vb: VarBuilder, c_in: usize, c_out: usize, stride: usize, norm: Norm) -> Result<Option<ConvNormAct>> {
    if stride == 1 {
        return Ok(None);
    }
    Ok(Some(ConvNormAct::new(vb.pp("downsample"), c_in, c_out, 1, stride, norm, false)?))
}

enum AnyBlock {
    Residual(ResidualBlock),
    Bottleneck(BottleneckBlock),
}

impl AnyBlock {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            AnyBlock::Residual(b) => b.forward(x),
            AnyBlock::Bottleneck(b) => b.forward(x),
        }
    }
}

/// `[B,3,H,W]` in [−1,1] → `[B, layers[4], H/8, W/8]`.
pub struct FeatureEncoder {
    convnormrelu: ConvNormAct,
    layers: Vec<AnyBlock>,
    conv: Conv,
}

impl FeatureEncoder {
    pub fn new(vb: VarBuilder, layers: [usize; 5], block: Block, norm: Norm) -> Result<Self> {
        let convnormrelu = ConvNormAct::new(vb.pp("convnormrelu"), 3, layers[0], 7, 2, norm, true)?;
        let mut blocks = Vec::with_capacity(6);
        for (stage, stride) in [1usize, 2, 2].into_iter().enumerate() {
            let (c_in, c_out) = (layers[stage], layers[stage + 1]);
            let vb = vb.pp(format!("layer{}", stage + 1));
            for (i, (ci, s)) in [(c_in, stride), (c_out, 1)].into_iter().enumerate() {
                let vb = vb.pp(i.to_string());
                blocks.push(match block {
                    Block::Residual => AnyBlock::Residual(ResidualBlock::new(vb, ci, c_out, s, norm)?),
                    Block::Bottleneck => AnyBlock::Bottleneck(BottleneckBlock::new(vb, ci, c_out, s, norm)?),
                });
            }
        }
        let conv = Conv::square(vb.pp("conv"), layers[3], layers[4], 1, 1)?;
        Ok(FeatureEncoder { convnormrelu, layers: blocks, conv })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = self.convnormrelu.forward(x)?; // [B, l0, H/2, W/2]
        for block in &self.layers {
            x = block.forward(&x)?; // l1 @ 1/2, l2 @ 1/4, l3 @ 1/8
        }
        self.conv.forward(&x) // [B, l4, H/8, W/8]
    }
}
