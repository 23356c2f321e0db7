//! The SEA-RAFT network (`core/raft.py::RAFT.forward`, test mode): context of the stacked pair
//! → `init_conv` → hidden state and context; iteration 0 regresses the 1/8-resolution flow
//! from the hidden state alone (no correlation, no initial zero flow), then `iters`
//! refinements look the current flow up in the correlation pyramid and add the flow head's
//! update; the last flow is convex-upsampled with weights predicted from the last hidden state.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::config::{CORR_LEVELS, SeaRaftConfig};
use super::conv::Conv;
use super::extractor::ResNetFpn;
use super::update::{FlowHead, UpdateBlock, UpsampleWeight};
use crate::error::{FlowError, Result};
use crate::raft::corr::CorrPyramid;
use crate::raft::update::upsample_convex;

pub struct SeaRaft {
    /// Feature network, per frame: `[B,3,H,W]` → `[B,2·dim,H/8,W/8]`.
    fnet: ResNetFpn,
    /// Context network on `[frame1 ‖ frame2]`: `[B,6,H,W]` → `[B,2·dim,H/8,W/8]`.
    cnet: ResNetFpn,
    init_conv: Conv,
    update_block: UpdateBlock,
    flow_head: FlowHead,
    upsample_weight: UpsampleWeight,
    cfg: SeaRaftConfig,
}

impl SeaRaft {
    /// `vb` holds the official names (no prefix; see [`super::weights`]).
    pub fn new(vb: VarBuilder, cfg: &SeaRaftConfig) -> Result<Self> {
        cfg.validate()?;
        let d = cfg.dim;
        Ok(SeaRaft {
            fnet: ResNetFpn::new(vb.pp("fnet"), cfg, 3, 2 * d)?,
            cnet: ResNetFpn::new(vb.pp("cnet"), cfg, 6, 2 * d)?,
            init_conv: Conv::square(vb.pp("init_conv"), 2 * d, 2 * d, 3, 1)?,
            update_block: UpdateBlock::new(vb.pp("update_block"), cfg)?,
            flow_head: FlowHead::new(vb.pp("flow_head"), d)?,
            upsample_weight: UpsampleWeight::new(vb.pp("upsample_weight"), d)?,
            cfg: cfg.clone(),
        })
    }

    pub fn config(&self) -> &SeaRaftConfig {
        &self.cfg
    }

    /// Per-frame features `[N,3,H,W]` (in [−1, 1]) → `[N,2·dim,H/8,W/8]`. Batch norm uses its
    /// stored statistics, so a clip's frames share a batch and each feeds two pairs.
    pub fn features(&self, images: &Tensor) -> Result<Tensor> {
        self.fnet.forward(images)
    }

    /// Flow `[B,2,H,W]` from both images `[B,3,H,W]` (in [−1, 1], sides multiples of 8) and
    /// their features, after `iters` refinements.
    pub fn flow_from_features(&self, image1: &Tensor, image2: &Tensor, fmap1: &Tensor, fmap2: &Tensor, iters: usize) -> Result<Tensor> {
        let (b, _, h, w) = fmap1.dims4()?;
        if (h >> (CORR_LEVELS - 1)) == 0 || (w >> (CORR_LEVELS - 1)) == 0 {
            return Err(FlowError::FramesTooSmall {
                what: format!("SEA-RAFT's {CORR_LEVELS} correlation levels"),
                min_side: 8 << (CORR_LEVELS - 1),
                width: 8 * w,
                height: 8 * h,
            });
        }
        let d = self.cfg.dim;
        let context = self.init_conv.forward(&self.cnet.forward(&Tensor::cat(&[image1, image2], 1)?)?)?;
        let mut net = context.narrow(1, 0, d)?; // hidden state, no tanh
        let context = context.narrow(1, d, d)?; // no ReLU either

        let mut flow = self.flow_head.forward(&net)?; // iteration 0: regressed, [B,2,h,w]
        if iters > 0 {
            let corr = CorrPyramid::new(fmap1, fmap2, CORR_LEVELS, self.cfg.radius)?;
            let grid = coords_grid(b, h, w, fmap1.device())?;
            for _ in 0..iters {
                let features = corr.lookup(&(&grid + &flow)?)?;
                net = self.update_block.forward(&net, &context, &features, &flow)?;
                flow = (flow + self.flow_head.forward(&net)?)?;
            }
        }
        upsample_convex(&flow, &self.upsample_weight.forward(&net)?)
    }

    /// Flow `[B,2,H,W]` between `image1` and `image2` `[B,3,H,W]`.
    pub fn forward(&self, image1: &Tensor, image2: &Tensor, iters: usize) -> Result<Tensor> {
        let b = image1.dim(0)?;
        let fmaps = self.features(&Tensor::cat(&[image1, image2], 0)?)?;
        self.flow_from_features(image1, image2, &fmaps.narrow(0, 0, b)?, &fmaps.narrow(0, b, b)?, iters)
    }
}

/// Pixel coordinates `[B,2,h,w]`, channel 0 = x, 1 = y.
pub fn coords_grid(b: usize, h: usize, w: usize, dev: &Device) -> Result<Tensor> {
    let xs = Tensor::arange(0u32, w as u32, dev)?.to_dtype(DType::F32)?.reshape((1, w))?.broadcast_as((h, w))?;
    let ys = Tensor::arange(0u32, h as u32, dev)?.to_dtype(DType::F32)?.reshape((h, 1))?.broadcast_as((h, w))?;
    Ok(Tensor::stack(&[xs, ys], 0)?.unsqueeze(0)?.broadcast_as((b, 2, h, w))?.contiguous()?)
}
