//! The RAFT network (Teed & Deng 2020, Fig. 1): features of both frames → all-pairs
//! correlation pyramid; context of frame 1 → initial hidden state and context; then `iters`
//! updates of the 1/8-resolution flow, upsampled to full resolution at the end.

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::config::RaftConfig;
use super::corr::CorrPyramid;
use super::encoder::FeatureEncoder;
use super::update::{MaskPredictor, UpdateBlock, upsample_bilinear, upsample_convex};
use crate::error::{FlowError, Result};

pub struct Raft {
    feature_encoder: FeatureEncoder,
    context_encoder: FeatureEncoder,
    update_block: UpdateBlock,
    mask_predictor: Option<MaskPredictor>,
    cfg: RaftConfig,
}

impl Raft {
    /// `vb` holds torchvision's names (see [`super::weights`] for princeton-vl's).
    pub fn new(vb: VarBuilder, cfg: &RaftConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Raft {
            feature_encoder: FeatureEncoder::new(
                vb.pp("feature_encoder"),
                cfg.feature_encoder_layers,
                cfg.feature_encoder_block,
                cfg.feature_encoder_norm,
            )?,
            context_encoder: FeatureEncoder::new(
                vb.pp("context_encoder"),
                cfg.context_encoder_layers,
                cfg.context_encoder_block,
                cfg.context_encoder_norm,
            )?,
            update_block: UpdateBlock::new(vb.pp("update_block"), cfg)?,
            mask_predictor: match cfg.mask_predictor_hidden_size {
                Some(hidden) => Some(MaskPredictor::new(vb.pp("mask_predictor"), cfg.hidden_size, hidden)?),
                None => None,
            },
            cfg: cfg.clone(),
        })
    }

    pub fn config(&self) -> &RaftConfig {
        &self.cfg
    }

    /// Per-frame features `[N,3,H,W]` → `[N,C,H/8,W/8]`. Instance norm is per sample, so a
    /// clip's frames can share one batch and each pair reuses its frames' features.
    pub fn features(&self, images: &Tensor) -> Result<Tensor> {
        self.feature_encoder.forward(images)
    }

    /// Flow `[B,2,H,W]` from frame-1 images `[B,3,H,W]` (for the context) and both frames'
    /// features. Images are in [−1, 1], sides multiples of 8.
    pub fn flow_from_features(&self, image1: &Tensor, fmap1: &Tensor, fmap2: &Tensor, iters: usize) -> Result<Tensor> {
        let (b, _, h, w) = fmap1.dims4()?;
        let levels = self.cfg.corr_levels;
        if (h >> (levels - 1)) == 0 || (w >> (levels - 1)) == 0 {
            return Err(FlowError::FramesTooSmall {
                what: format!("RAFT with {levels} correlation levels"),
                min_side: 8 << (levels - 1),
                width: 8 * w,
                height: 8 * h,
            });
        }
        let corr = CorrPyramid::new(fmap1, fmap2, levels, self.cfg.corr_radius)?;
        let context = self.context_encoder.forward(image1)?; // [B, hidden + ctx, h, w]
        let hs = self.cfg.hidden_size;
        let mut hidden = context.narrow(1, 0, hs)?.tanh()?;
        let context = context.narrow(1, hs, self.cfg.context_channels())?.relu()?;

        let coords0 = coords_grid(b, h, w, fmap1.device())?;
        let mut coords1 = coords0.clone();
        for _ in 0..iters {
            let features = corr.lookup(&coords1)?;
            let flow = (&coords1 - &coords0)?;
            let (new_hidden, delta) = self.update_block.forward(&hidden, &context, &features, &flow)?;
            hidden = new_hidden;
            coords1 = (coords1 + delta)?;
        }
        let flow = (&coords1 - &coords0)?;
        match &self.mask_predictor {
            Some(mask) => upsample_convex(&flow, &mask.forward(&hidden)?),
            None => upsample_bilinear(&flow),
        }
    }

    /// Flow `[B,2,H,W]` between `image1` and `image2` `[B,3,H,W]`.
    pub fn forward(&self, image1: &Tensor, image2: &Tensor, iters: usize) -> Result<Tensor> {
        let b = image1.dim(0)?;
        let fmaps = self.features(&Tensor::cat(&[image1, image2], 0)?)?;
        self.flow_from_features(image1, &fmaps.narrow(0, 0, b)?, &fmaps.narrow(0, b, b)?, iters)
    }
}

/// Pixel coordinates `[B,2,h,w]`, channel 0 = x, 1 = y.
fn coords_grid(b: usize, h: usize, w: usize, dev: &Device) -> Result<Tensor> {
    let xs = Tensor::arange(0u32, w as u32, dev)?.to_dtype(DType::F32)?.reshape((1, w))?.broadcast_as((h, w))?;
    let ys = Tensor::arange(0u32, h as u32, dev)?.to_dtype(DType::F32)?.reshape((h, 1))?.broadcast_as((h, w))?;
    Ok(Tensor::stack(&[xs, ys], 0)?.unsqueeze(0)?.broadcast_as((b, 2, h, w))?.contiguous()?)
}
