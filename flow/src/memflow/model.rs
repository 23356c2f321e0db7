//! `MemFlowNet` (`core/Networks/MemFlowNet/MemFlow.py`) and one step of its video runtime
//! (`InferenceCore.step`): context of the first frame → hidden state, context, attention query
//! and key; features of both frames → correlation pyramid; `val_decoder_depth` refinements,
//! each reading the memory with the current motion values; convex upsampling of the last flow.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use super::config::NET;
use super::memory::WorkingMemory;
use super::pcblock::Conv1x1;
use super::update::UpdateBlock;
use crate::error::{FlowError, Result};
use crate::raft::config::{Block, Norm};
use crate::raft::corr::CorrPyramid;
use crate::raft::encoder::FeatureEncoder;
use crate::raft::update::upsample_convex;
use crate::sea_raft::model::coords_grid;

/// What a frame's context gives a step: `net` (tanh) and `inp` (ReLU) `[B,128,h,w]`, and the
/// attention `query`/`key` `[B,128,h,w]` (`att.to_qk(inp)` split in two).
pub struct FrameContext {
    pub net: Tensor,
    pub inp: Tensor,
    pub query: Tensor,
    pub key: Tensor,
}

/// The flow of one step and what the memory may keep of it.
pub struct StepOutput {
    /// `[B,2,H,W]`.
    pub flow: Tensor,
    /// Motion values of the last refinement `[B,128,h,w]`.
    pub value: Tensor,
}

pub struct MemFlowNet {
    /// BasicEncoder with instance norm: `[B,3,H,W]` → `[B,256,H/8,W/8]`.
    fnet: FeatureEncoder,
    /// BasicEncoder with batch norm on the first frame of a pair.
    cnet: FeatureEncoder,
    update_block: UpdateBlock,
    /// `att.to_qk` (no bias): context → query ‖ key.
    to_qk: Conv1x1,
    /// `dim_head^(−½)` of the attention.
    scale: f64,
}

impl MemFlowNet {
    /// `vb` holds RAFT's torchvision names for the encoders (`feature_encoder.*`,
    /// `context_encoder.*`) and the official names for the rest (see [`super::estimator`]).
    pub fn new(vb: VarBuilder) -> Result<Self> {
        let layers = NET.encoder_layers;
        Ok(MemFlowNet {
            fnet: FeatureEncoder::new(vb.pp("feature_encoder"), layers, Block::Residual, Norm::Instance)?,
            cnet: FeatureEncoder::new(vb.pp("context_encoder"), layers, Block::Residual, Norm::Batch)?,
            update_block: UpdateBlock::new(vb.pp("update_block"))?,
            to_qk: Conv1x1::new(vb.pp("att").pp("to_qk"), NET.context, 2 * NET.context, false)?,
            scale: (NET.context as f64).powf(-0.5),
        })
    }

    /// Per-frame features `[N,3,H,W]` (in [−1, 1]) → `[N,256,H/8,W/8]`; instance norm is per
    /// sample, so frames share a batch and each feeds two steps.
    pub fn features(&self, images: &Tensor) -> Result<Tensor> {
        self.fnet.forward(images)
    }

    /// `encode_context` on `[B,3,H,W]`.
    pub fn context(&self, image: &Tensor) -> Result<FrameContext> {
        let c = self.cnet.forward(image)?;
        let net = c.narrow(1, 0, NET.hidden)?.tanh()?;
        let inp = c.narrow(1, NET.hidden, NET.context)?.relu()?;
        let qk = self.to_qk.forward(&inp)?;
        let query = qk.narrow(1, 0, NET.context)?;
        let key = qk.narrow(1, NET.context, NET.context)?;
        Ok(FrameContext { net, inp, query, key })
    }

    /// One pair: `fmap1`, `fmap2` `[B,256,h,w]`, the first frame's context, the memory of
    /// earlier frames (read, not changed), `iters ≥ 1` refinements from zero flow.
    /// The last refinement's values come back for the memory.
    pub fn step(&self, ctx: &FrameContext, fmap1: &Tensor, fmap2: &Tensor, memory: &WorkingMemory, iters: usize) -> Result<StepOutput> {
        let (b, _, h, w) = fmap1.dims4()?;
        let levels = NET.corr_levels;
        if (h >> (levels - 1)) == 0 || (w >> (levels - 1)) == 0 {
            return Err(FlowError::FramesTooSmall {
                what: format!("MemFlow's {levels} correlation levels"),
                min_side: 8 << (levels - 1),
                width: 8 * w,
                height: 8 * h,
            });
        }
        let corr = CorrPyramid::new(fmap1, fmap2, levels, NET.corr_radius)?;
        let coords0 = coords_grid(b, h, w, fmap1.device())?;
        let mut coords1 = coords0.clone();
        let mut net = ctx.net.clone();
        let readout = memory.attend(&ctx.query, &ctx.key, self.scale)?;
        let mut value = None; // the last refinement's, which the memory keeps
        for _ in 0..iters {
            let features = corr.lookup(&coords1)?;
            let flow = (&coords1 - &coords0)?;
            let (motion, current) = self.update_block.motion_and_value(&flow, &features)?;
            let (new_net, delta) = self.update_block.forward(&net, &ctx.inp, &motion, &readout.read(&current)?)?;
            net = new_net;
            coords1 = (coords1 + delta)?;
            value = Some(current);
        }
        let value = value.ok_or(FlowError::NoIterations { network: "MemFlow", step: "refinement (val_decoder_depth ≥ 1)" })?;
        let flow = upsample_convex(&(&coords1 - &coords0)?, &self.update_block.mask(&net)?)?;
        Ok(StepOutput { flow, value })
    }
}
