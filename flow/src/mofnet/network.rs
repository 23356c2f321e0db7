//! The MOFNet network (Shi et al., "VideoFlow: Exploiting Temporal Cues for Multi-frame
//! Optical Flow Estimation", ICCV 2023, §3.2; VideoFlow `MOFNetStack/network.py::MOFNet`).
//!
//! A window of N frames: Twins features of all frames; for each of the N−2 middle frames a
//! forward (to t+1) and a backward (to t−1) all-pairs correlation pyramid, and Twins context
//! (hidden state tanh, context relu, GMA attention); then `iters` joint updates of both flows
//! of all middle frames at 1/8 resolution, convex-upsampled at the end (VideoFlow) or left at
//! 1/8 ([`MofNet::forward_coarse`], the SIS-Motion code).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;

use super::config::MofConfig;
use super::gma::GmaAttention;
use super::twins::Twins;
use super::update::UpdateBlock;
use crate::error::{FlowError, Result};
use crate::raft::corr::CorrPyramid;
use crate::raft::update::upsample_convex;

/// Down-sampling of the Twins features (stage 1 patch 4 × stage 2 patch 2).
const DOWN: usize = 8;

pub struct MofNet {
    fnet: Twins,
    cnet: Twins,
    att: GmaAttention,
    update_block: UpdateBlock,
    cfg: MofConfig,
}

impl MofNet {
    /// `vb` holds VideoFlow's names without the `module.` prefix (see [`super::weights`]).
    pub fn new(vb: VarBuilder, cfg: &MofConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(MofNet {
            fnet: Twins::new(vb.pp("fnet"), &cfg.fnet)?,
            cnet: Twins::new(vb.pp("cnet"), &cfg.cnet)?,
            att: GmaAttention::new(vb.pp("att"), cfg.hidden_dim())?,
            update_block: UpdateBlock::new(vb.pp("update_block"), cfg)?,
            cfg: cfg.clone(),
        })
    }

    pub fn config(&self) -> &MofConfig {
        &self.cfg
    }

    /// Smallest frame side the network takes: the coarsest correlation level and both
    /// encoders' key sub-sampling need at least one cell.
    pub fn min_side(&self) -> usize {
        let twins = |t: &super::config::TwinsConfig| (4 * t.sr_ratios[0]).max(8 * t.sr_ratios[1]);
        (DOWN << (self.cfg.corr_levels - 1)).max(twins(&self.cfg.fnet)).max(twins(&self.cfg.cnet))
    }

    /// Per-frame features `[N,3,H,W]` → `[N,C,H/8,W/8]`; images in [−1, 1].
    pub fn features(&self, images: &Tensor) -> Result<Tensor> {
        self.fnet.forward(images)
    }

    /// Flows of the middle frames of a window: `images` `[N,3,H,W]` in [−1, 1] (sides multiples
    /// of 8) → (forward, backward) flows, each `[N−2,2,H,W]`: middle frame i+1 to frames i+2
    /// and i.
    pub fn forward(&self, images: &Tensor, iters: usize) -> Result<(Tensor, Tensor)> {
        let n = images.dim(0)?;
        if n < 3 {
            return Err(FlowError::Clip { what: "MOFNet", needs: "windows of at least 3 frames".into(), got: n.to_string() });
        }
        let fmaps = self.features(images)?;
        self.flows_from_features(&images.narrow(0, 1, n - 2)?, &fmaps, iters)
    }

    /// [`MofNet::forward`] from precomputed features `fmaps` `[M+2,C,h,w]` of the whole window
    /// and the images `[M,3,H,W]` of its M middle frames (for the context).
    pub fn flows_from_features(&self, middle: &Tensor, fmaps: &Tensor, iters: usize) -> Result<(Tensor, Tensor)> {
        let (fwd_flow, bwd_flow, mask) = self.refine(middle, fmaps, iters)?;
        let k = DOWN * DOWN * 9;
        Ok((upsample_convex(&fwd_flow, &mask.narrow(1, 0, k)?)?, upsample_convex(&bwd_flow, &mask.narrow(1, k, k)?)?))
    }

    /// The flows of the middle frames at 1/8 resolution, before convex upsampling: `images`
    /// `[N,3,H,W]` in [−1, 1] → (forward, backward) `coords1 − coords0`, each `[N−2,2,H/8,W/8]`
    /// in 1/8-grid pixels. This is what the SIS-Motion code takes from MOFNet
    /// (`motion_encoder.py::_extract_optical_flow` ignores `up_mask`), over a whole clip at once.
    pub fn forward_coarse(&self, images: &Tensor, iters: usize) -> Result<(Tensor, Tensor)> {
        let n = images.dim(0)?;
        if n < 3 {
            return Err(FlowError::Clip { what: "MOFNet", needs: "windows of at least 3 frames".into(), got: n.to_string() });
        }
        let fmaps = self.features(images)?;
        let (fwd_flow, bwd_flow, _) = self.refine(&images.narrow(0, 1, n - 2)?, &fmaps, iters)?;
        Ok((fwd_flow, bwd_flow))
    }

    /// The `iters` joint updates: (forward, backward) flows `[M,2,h,w]` at 1/8 resolution and
    /// the last iteration's convex-upsampling logits `[M,2·576,h,w]`.
    fn refine(&self, middle: &Tensor, fmaps: &Tensor, iters: usize) -> Result<(Tensor, Tensor, Tensor)> {
        let (m, _, hi, wi) = middle.dims4()?;
        let (_, _, h, w) = fmaps.dims4()?;
        if hi.min(wi) < self.min_side() || hi % DOWN != 0 || wi % DOWN != 0 {
            return Err(FlowError::Clip {
                what: "MOFNet",
                needs: format!("frames with sides multiples of 8 and at least {} px", self.min_side()),
                got: format!("{wi}x{hi}"),
            });
        }
        let (levels, radius) = (self.cfg.corr_levels, self.cfg.corr_radius);
        let frames = fmaps.narrow(0, 1, m)?;
        let fwd_corr = CorrPyramid::new(&frames, &fmaps.narrow(0, 2, m)?, levels, radius)?;
        let bwd_corr = CorrPyramid::new(&frames, &fmaps.narrow(0, 0, m)?, levels, radius)?;

        let hdim = self.cfg.hidden_dim();
        let context = self.cnet.forward(middle)?;
        let mut net = context.narrow(1, 0, hdim)?.tanh()?;
        let context = context.narrow(1, hdim, hdim)?.relu()?.contiguous()?;
        let attention = self.att.forward(&context)?;

        let coords0 = coords_grid(m, h, w, fmaps.device())?;
        let (mut fwd, mut bwd) = (coords0.clone(), coords0.clone());
        let mut motion_state: Option<Tensor> = None;
        let mut mask = None;
        for _ in 0..iters {
            let (fwd_flow, bwd_flow) = ((&fwd - &coords0)?, (&bwd - &coords0)?);
            let update = self.update_block.forward(
                &net,
                motion_state.as_ref(),
                &context,
                &fwd_corr.lookup(&fwd)?,
                &bwd_corr.lookup(&bwd)?,
                &fwd_flow,
                &bwd_flow,
                &coords0,
                &attention,
            )?;
            fwd = (fwd + update.delta.narrow(1, 0, 2)?)?;
            bwd = (bwd + update.delta.narrow(1, 2, 2)?)?;
            net = update.net;
            motion_state = Some(update.motion_state);
            mask = Some(update.mask);
        }
        let (fwd_flow, bwd_flow) = ((&fwd - &coords0)?, (&bwd - &coords0)?);
        let Some(mask) = mask else {
            return Err(FlowError::NoIterations { network: "MOFNet", step: "iteration" });
        };
        Ok((fwd_flow, bwd_flow, mask))
    }
}

/// `[B,2,h,w]` pixel coordinates (x, then y).
fn coords_grid(b: usize, h: usize, w: usize, device: &Device) -> Result<Tensor> {
    let xs = Tensor::arange(0u32, w as u32, device)?.to_dtype(DType::F32)?.reshape((1, 1, 1, w))?.broadcast_as((b, 1, h, w))?;
    let ys = Tensor::arange(0u32, h as u32, device)?.to_dtype(DType::F32)?.reshape((1, 1, h, 1))?.broadcast_as((b, 1, h, w))?;
    Ok(Tensor::cat(&[&xs, &ys], 1)?.contiguous()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sintel configuration wires up (every width and checkpoint shape of the 13.4 M
    /// parameter network); its numbers are checked against VideoFlow by the parity test.
    #[test]
    fn sintel_config_builds_and_runs() -> Result<()> {
        let dev = Device::Cpu;
        let model = MofNet::new(VarBuilder::zeros(DType::F32, &dev), &MofConfig::default())?;
        assert_eq!(model.min_side(), 64);
        let images = Tensor::zeros((5, 3, 64, 64), DType::F32, &dev)?;
        let (fwd, bwd) = model.forward(&images, 1)?;
        assert_eq!(fwd.dims(), &[3, 2, 64, 64]);
        assert_eq!(bwd.dims(), &[3, 2, 64, 64]);
        let small = Tensor::zeros((5, 3, 56, 64), DType::F32, &dev)?;
        let err = model.forward(&small, 1).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("at least 64 px"), "{err}");
        Ok(())
    }
}
