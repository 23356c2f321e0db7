//! The iterative update (RAFT §3.3): a motion encoder over (correlation features, current
//! flow), a convolutional GRU, a flow head predicting the residual flow, and the mask head of
//! convex upsampling. Names follow torchvision (`update_block.*`, `mask_predictor.*`).

use candle_core::{D, Tensor};
use candle_nn::VarBuilder;

use super::config::{Gru, Norm, RaftConfig};
use super::layers::{Conv, ConvNormAct};
use crate::error::Result;

/// (correlation features, flow) → motion features (+ the raw flow appended).
pub struct MotionEncoder {
    convcorr1: ConvNormAct,
    convcorr2: Option<ConvNormAct>,
    convflow1: ConvNormAct,
    convflow2: ConvNormAct,
    conv: ConvNormAct,
}

impl MotionEncoder {
    pub fn new(vb: VarBuilder, cfg: &RaftConfig) -> Result<Self> {
        let corr = &cfg.motion_encoder_corr_layers;
        let [f1, f2] = cfg.motion_encoder_flow_layers;
        let layer = |name: &str, c_in, c_out, k| ConvNormAct::new(vb.pp(name), c_in, c_out, k, 1, Norm::None, true);
        let convcorr2 = match corr.get(1) {
            Some(&c2) => Some(layer("convcorr2", corr[0], c2, 3)?),
            None => None,
        };
        let corr_out = corr[corr.len() - 1];
        Ok(MotionEncoder {
            convcorr1: layer("convcorr1", cfg.corr_channels(), corr[0], 1)?,
            convcorr2,
            convflow1: layer("convflow1", 2, f1, 7)?,
            convflow2: layer("convflow2", f1, f2, 3)?,
            // Two channels are left for the raw flow appended after it.
            conv: layer("conv", corr_out + f2, cfg.motion_encoder_out_channels - 2, 3)?,
        })
    }

    /// `flow` `[B,2,h,w]`, `corr` `[B,L(2r+1)²,h,w]` → `[B, out_channels, h, w]`.
    pub fn forward(&self, flow: &Tensor, corr: &Tensor) -> Result<Tensor> {
        let mut c = self.convcorr1.forward(corr)?;
        if let Some(c2) = &self.convcorr2 {
            c = c2.forward(&c)?;
        }
        let f = self.convflow2.forward(&self.convflow1.forward(flow)?)?;
        let out = self.conv.forward(&Tensor::cat(&[&c, &f], 1)?)?;
        Ok(Tensor::cat(&[&out, flow], 1)?)
    }
}

/// A convolutional GRU cell: `h' = (1−z)h + z·tanh(W_q[r⊙h, x])`.
pub struct ConvGru {
    convz: Conv,
    convr: Conv,
    convq: Conv,
}

impl ConvGru {
    pub fn new(vb: VarBuilder, hidden: usize, input: usize, kernel: (usize, usize), padding: (usize, usize)) -> Result<Self> {
        let conv = |name: &str| Conv::new(vb.pp(name), hidden + input, hidden, kernel, 1, padding);
        Ok(ConvGru { convz: conv("convz")?, convr: conv("convr")?, convq: conv("convq")? })
    }

    pub fn forward(&self, h: &Tensor, x: &Tensor) -> Result<Tensor> {
        let hx = Tensor::cat(&[h, x], 1)?;
        let z = candle_nn::ops::sigmoid(&self.convz.forward(&hx)?)?;
        let r = candle_nn::ops::sigmoid(&self.convr.forward(&hx)?)?;
        let q = self.convq.forward(&Tensor::cat(&[&(&r * h)?, x], 1)?)?.tanh()?;
        Ok(((z.affine(-1.0, 1.0)? * h)? + (z * q)?)?)
    }
}

/// raft_large: a 1×5 then a 5×1 GRU (separable); raft_small: one 3×3 GRU.
pub struct RecurrentBlock {
    convgru1: ConvGru,
    convgru2: Option<ConvGru>,
}

impl RecurrentBlock {
    pub fn new(vb: VarBuilder, cfg: &RaftConfig, input: usize) -> Result<Self> {
        let hidden = cfg.hidden_size;
        Ok(match cfg.gru {
            Gru::Separable => RecurrentBlock {
                convgru1: ConvGru::new(vb.pp("convgru1"), hidden, input, (1, 5), (0, 2))?,
                convgru2: Some(ConvGru::new(vb.pp("convgru2"), hidden, input, (5, 1), (2, 0))?),
            },
            Gru::Square => RecurrentBlock { convgru1: ConvGru::new(vb.pp("convgru1"), hidden, input, (3, 3), (1, 1))?, convgru2: None },
        })
    }

    pub fn forward(&self, h: &Tensor, x: &Tensor) -> Result<Tensor> {
        let h = self.convgru1.forward(h, x)?;
        match &self.convgru2 {
            Some(g) => g.forward(&h, x),
            None => Ok(h),
        }
    }
}

/// Hidden state → residual flow `[B,2,h,w]`.
pub struct FlowHead {
    conv1: Conv,
    conv2: Conv,
}

impl FlowHead {
    pub fn new(vb: VarBuilder, c_in: usize, hidden: usize) -> Result<Self> {
        Ok(FlowHead { conv1: Conv::square(vb.pp("conv1"), c_in, hidden, 3, 1)?, conv2: Conv::square(vb.pp("conv2"), hidden, 2, 3, 1)? })
    }

    pub fn forward(&self, h: &Tensor) -> Result<Tensor> {
        self.conv2.forward(&self.conv1.forward(h)?.relu()?)
    }
}

/// Motion encoder → GRU (input: context ‖ motion features) → flow head.
pub struct UpdateBlock {
    motion_encoder: MotionEncoder,
    recurrent_block: RecurrentBlock,
    flow_head: FlowHead,
}

impl UpdateBlock {
    pub fn new(vb: VarBuilder, cfg: &RaftConfig) -> Result<Self> {
        let input = cfg.motion_encoder_out_channels + cfg.context_channels();
        Ok(UpdateBlock {
            motion_encoder: MotionEncoder::new(vb.pp("motion_encoder"), cfg)?,
            recurrent_block: RecurrentBlock::new(vb.pp("recurrent_block"), cfg, input)?,
            flow_head: FlowHead::new(vb.pp("flow_head"), cfg.hidden_size, cfg.flow_head_hidden_size)?,
        })
    }

    /// Returns the new hidden state and the residual flow.
    pub fn forward(&self, hidden: &Tensor, context: &Tensor, corr: &Tensor, flow: &Tensor) -> Result<(Tensor, Tensor)> {
        let motion = self.motion_encoder.forward(flow, corr)?;
        let x = Tensor::cat(&[context, &motion], 1)?;
        let hidden = self.recurrent_block.forward(hidden, &x)?;
        let delta = self.flow_head.forward(&hidden)?;
        Ok((hidden, delta))
    }
}

/// Hidden state → 8·8·9 convex-combination logits per 1/8 cell (×0.25, as the references).
pub struct MaskPredictor {
    convrelu: ConvNormAct,
    conv: Conv,
}

impl MaskPredictor {
    pub fn new(vb: VarBuilder, c_in: usize, hidden: usize) -> Result<Self> {
        Ok(MaskPredictor {
            convrelu: ConvNormAct::new(vb.pp("convrelu"), c_in, hidden, 3, 1, Norm::None, true)?,
            conv: Conv::square(vb.pp("conv"), hidden, 8 * 8 * 9, 1, 1)?,
        })
    }

    pub fn forward(&self, h: &Tensor) -> Result<Tensor> {
        Ok((self.conv.forward(&self.convrelu.forward(h)?)? * 0.25)?)
    }
}

/// Convex upsampling (RAFT §3.3, appendix B): each full-resolution pixel is a softmax-weighted
/// mix of the 3×3 coarse neighbours of its cell. `flow` `[B,2,h,w]`, `mask` `[B,576,h,w]` →
/// `[B,2,8h,8w]`.
pub fn upsample_convex(flow: &Tensor, mask: &Tensor) -> Result<Tensor> {
    let (b, c, h, w) = flow.dims4()?;
    let mask = candle_nn::ops::softmax(&mask.reshape(vec![b, 1, 9, 8, 8, h, w])?, 2)?;
    // F.unfold(8·flow, 3, padding=1): neighbour k = 3·ky + kx.
    let padded = (flow * 8.0)?.pad_with_zeros(D::Minus2, 1, 1)?.pad_with_zeros(D::Minus1, 1, 1)?;
    let mut shifted = Vec::with_capacity(9);
    for ky in 0..3 {
        for kx in 0..3 {
            shifted.push(padded.narrow(2, ky, h)?.narrow(3, kx, w)?);
        }
    }
    let neighbours = Tensor::stack(&shifted, 2)?.reshape(vec![b, c, 9, 1, 1, h, w])?;
    let up = neighbours.broadcast_mul(&mask)?.sum(2)?; // [B,2,8,8,h,w]
    Ok(up.permute((0, 1, 4, 2, 5, 3))?.reshape((b, c, 8 * h, 8 * w))?)
}

/// raft_small's upsampling: bilinear with aligned corners, vectors ×8.
pub fn upsample_bilinear(flow: &Tensor) -> Result<Tensor> {
    let (_, _, h, w) = flow.dims4()?;
    Ok((flow.upsample_bilinear2d(8 * h, 8 * w, true)? * 8.0)?)
}
