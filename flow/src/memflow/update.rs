//! `SKUpdateBlock6_Deep_nopoolres_AllDecoder2_Mem_skflow` (`sk2.py`): the motion encoder, the
//! value projection the memory stores, the update of the hidden state from
//! `[hidden ‖ context ‖ motion ‖ motion + γ·memory]`, the flow head and the upsampling mask.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use super::config::NET;
use super::pcblock::{Conv1x1, PcBlock};
use crate::error::Result;
use crate::kernels::gelu_erf;
use crate::sea_raft::conv::Conv;

/// Depthwise kernels of the motion encoder and flow head, and of the update PCBlock.
const K_CONV: [usize; 2] = [1, 15];
const K_UPDATE: [usize; 2] = [1, 7];

/// (correlation features, flow) → 128 motion channels, the last two being the raw flow.
pub struct MotionEncoder {
    convc1: PcBlock,
    convc2: PcBlock,
    convf1: Conv1x1,
    convf2: PcBlock,
    conv: PcBlock,
}

impl MotionEncoder {
    pub fn new(vb: VarBuilder) -> Result<Self> {
        let corr = NET.corr_levels * (2 * NET.corr_radius + 1).pow(2);
        Ok(MotionEncoder {
            convc1: PcBlock::new(vb.pp("convc1"), corr, 256, &K_CONV)?,
            convc2: PcBlock::new(vb.pp("convc2"), 256, 192, &K_CONV)?,
            convf1: Conv1x1::new(vb.pp("convf1"), 2, 128, true)?,
            convf2: PcBlock::new(vb.pp("convf2"), 128, 64, &K_CONV)?,
            conv: PcBlock::new(vb.pp("conv"), 64 + 192, 128 - 2, &K_CONV)?,
        })
    }

    /// `flow` `[B,2,h,w]`, `corr` `[B,324,h,w]` → `[B,128,h,w]`.
    pub fn forward(&self, flow: &Tensor, corr: &Tensor) -> Result<Tensor> {
        let cor = self.convc2.forward(&gelu_erf(&self.convc1.forward(corr)?)?)?; // 192
        let flo = self.convf2.forward(&self.convf1.forward(flow)?)?; // 64
        let out = self.conv.forward(&Tensor::cat(&[&cor, &flo], 1)?)?; // 126
        Ok(Tensor::cat(&[&out, flow], 1)?)
    }
}

pub struct UpdateBlock {
    encoder: MotionEncoder,
    /// `aggregator.to_v`: motion features → the values the memory stores and reads.
    to_v: Conv1x1,
    /// `aggregator.gamma`: weight of the memory read-out added to the motion features.
    gamma: Tensor,
    gru: PcBlock,
    flow_head: PcBlock,
    mask0: Conv,
    mask2: Conv,
}

impl UpdateBlock {
    pub fn new(vb: VarBuilder) -> Result<Self> {
        let (hidden, context) = (NET.hidden, NET.context);
        Ok(UpdateBlock {
            encoder: MotionEncoder::new(vb.pp("encoder"))?,
            to_v: Conv1x1::new(vb.pp("aggregator").pp("to_v"), 128, 128, false)?,
            gamma: vb.pp("aggregator").get(1, "gamma")?,
            gru: PcBlock::new(vb.pp("gru"), 128 + hidden + context + 128, hidden, &K_UPDATE)?,
            flow_head: PcBlock::new(vb.pp("flow_head"), hidden, 2, &K_CONV)?,
            mask0: Conv::square(vb.pp("mask").pp("0"), hidden, 256, 3, 1)?,
            mask2: Conv::square(vb.pp("mask").pp("2"), 256, 64 * 9, 1, 1)?,
        })
    }

    /// Motion features `[B,128,h,w]` and their values `[B,128,h,w]` for the memory.
    pub fn motion_and_value(&self, flow: &Tensor, corr: &Tensor) -> Result<(Tensor, Tensor)> {
        let motion = self.encoder.forward(flow, corr)?;
        let value = self.to_v.forward(&motion)?;
        Ok((motion, value))
    }

    /// New hidden state and the flow update `[B,2,h,w]`; `readout` `[B,128,h,w]` is the memory's.
    pub fn forward(&self, net: &Tensor, inp: &Tensor, motion: &Tensor, readout: &Tensor) -> Result<(Tensor, Tensor)> {
        let global = (motion + readout.broadcast_mul(&self.gamma)?)?;
        let net = self.gru.forward(&Tensor::cat(&[net, inp, motion, &global], 1)?)?;
        let delta = self.flow_head.forward(&net)?;
        Ok((net, delta))
    }

    /// Convex-upsampling logits `[B,576,h,w]`, ×0.25 as the reference.
    pub fn mask(&self, net: &Tensor) -> Result<Tensor> {
        Ok((self.mask2.forward(&self.mask0.forward(net)?.relu()?)? * 0.25)?)
    }
}
