//! `ResNetFPN` (`core/extractor.py`): an ImageNet ResNet18/34 trunk cut after its third stage
//! (1/8 resolution) with a 1×1 projection. SEA-RAFT uses it twice: as the feature network on
//! each frame (3 input channels) and as the context network on both frames stacked (6).
//! Batch norm runs on its stored statistics, so frames can share a batch.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use super::config::SeaRaftConfig;
use super::conv::Conv;
use crate::error::Result;
use crate::raft::config::Norm;
use crate::raft::layers::NormLayer;

/// Two 3×3 conv–BN–ReLU layers plus a shortcut (1×1 conv + BN when the shape changes).
pub struct BasicBlock {
    conv1: Conv,
    bn1: NormLayer,
    conv2: Conv,
    bn2: NormLayer,
    downsample: Option<(Conv, NormLayer)>,
}

impl BasicBlock {
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, stride: usize) -> Result<Self> {
        let downsample = if stride == 1 && c_in == c_out {
            None
        } else {
            // The shortcut norm is registered twice, as `downsample.1` and as `bn3`; a
            // safetensors export may keep either name.
            let norm_vb = if vb.contains_tensor("downsample.1.weight") { vb.pp("downsample.1") } else { vb.pp("bn3") };
            Some((Conv::square(vb.pp("downsample.0"), c_in, c_out, 1, stride)?, NormLayer::new(norm_vb, Norm::Batch, c_out)?))
        };
        Ok(BasicBlock {
            conv1: Conv::square(vb.pp("conv1"), c_in, c_out, 3, stride)?,
            bn1: NormLayer::new(vb.pp("bn1"), Norm::Batch, c_out)?,
            conv2: Conv::square(vb.pp("conv2"), c_out, c_out, 3, 1)?,
            bn2: NormLayer::new(vb.pp("bn2"), Norm::Batch, c_out)?,
            downsample,
        })
    }

    /// `[B,c_in,H,W]` → `[B,c_out,H/stride,W/stride]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.bn1.forward(&self.conv1.forward(x)?)?.relu()?;
        let y = self.bn2.forward(&self.conv2.forward(&y)?)?.relu()?;
        let shortcut = match &self.downsample {
            Some((conv, norm)) => norm.forward(&conv.forward(x)?)?,
            None => x.clone(),
        };
        Ok((shortcut + y)?.relu()?)
    }
}

/// Stem (7×7 stride 2) → three stages (strides 1, 2, 2) → 1×1 `final_conv`.
pub struct ResNetFpn {
    conv1: Conv,
    bn1: NormLayer,
    stages: Vec<Vec<BasicBlock>>,
    final_conv: Conv,
}

impl ResNetFpn {
    pub fn new(vb: VarBuilder, cfg: &SeaRaftConfig, c_in: usize, c_out: usize) -> Result<Self> {
        let mut planes = cfg.initial_dim;
        let mut stages = Vec::with_capacity(3);
        for (s, (&dim, &count)) in cfg.block_dims.iter().zip(cfg.pretrain.blocks().iter()).enumerate() {
            let layer = vb.pp(format!("layer{}", s + 1));
            let stride = if s == 0 { 1 } else { 2 };
            let mut blocks = Vec::with_capacity(count);
            for i in 0..count {
                blocks.push(BasicBlock::new(layer.pp(i), if i == 0 { planes } else { dim }, dim, if i == 0 { stride } else { 1 })?);
            }
            planes = dim;
            stages.push(blocks);
        }
        Ok(ResNetFpn {
            conv1: Conv::square(vb.pp("conv1"), c_in, cfg.initial_dim, 7, 2)?,
            bn1: NormLayer::new(vb.pp("bn1"), Norm::Batch, cfg.initial_dim)?,
            stages,
            final_conv: Conv::square(vb.pp("final_conv"), planes, c_out, 1, 1)?,
        })
    }

    /// `[B,c_in,H,W]` → `[B,c_out,H/8,W/8]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = self.bn1.forward(&self.conv1.forward(x)?)?.relu()?; // 1/2
        for block in self.stages.iter().flatten() {
            x = block.forward(&x)?; // 1/2 → 1/4 → 1/8
        }
        self.final_conv.forward(&x)
    }
}
