//! MOFNet's iterative update (VideoFlow §3.2, `stack.py::SKUpdateBlock6_Deep_nopoolres_AllDecoder2`).
//!
//! Each middle frame of a window refines a forward and a backward flow together. The motion
//! encoder fuses both directions' correlation features and flows with a 48-channel *motion
//! state*: its own, and its two neighbours' warped to it along the current flows — the
//! "motion propagation" that lets frames share what they have found. GMA spreads the motion
//! features globally; a PCBlock with 7×7 kernels stands in for RAFT's GRU (no gating: the
//! hidden state is simply replaced), a PCBlock head predicts the 4 flow deltas, and a conv head
//! the convex-upsampling masks of both directions (×100, as trained).

use candle_core::Tensor;
use candle_nn::VarBuilder;

use super::config::{MOTION_FEATURES, MOTION_HIDDEN, MofConfig};
use super::gma::Aggregate;
use super::layers::{PcBlock, Pointwise};
use crate::error::Result;
use crate::kernels::{bilinear_sample, gelu_erf};
// SEA-RAFT's 3×3 convolution as shifted matmuls (Candle's im2col conv is several times slower).
use crate::sea_raft::conv::Conv;

/// Depthwise kernel sizes of the motion encoder's and flow head's PCBlocks.
const K_CONV: [usize; 2] = [1, 15];
/// … and of the "GRU" PCBlock.
const K_UPDATER: [usize; 2] = [1, 7];
/// The mask logits are scaled up (VideoFlow: "to balance gradients").
const MASK_SCALE: f64 = 100.0;

/// (both correlations, both flows, motion states) → motion features and the next motion state.
pub struct MotionEncoder {
    convc1: PcBlock,
    convc2: PcBlock,
    convf1: Pointwise,
    convf2: PcBlock,
    conv: PcBlock,
    /// The motion state before the first iteration, `[1,48,1,1]`, the same for every pixel.
    init_hidden_state: Tensor,
}

impl MotionEncoder {
    pub fn new(vb: VarBuilder, cfg: &MofConfig) -> Result<Self> {
        let [c1, c2] = cfg.corr_channels;
        let [f1, f2] = cfg.flow_channels;
        Ok(MotionEncoder {
            convc1: PcBlock::new(vb.pp("convc1"), cfg.corr_planes(), c1, &K_CONV)?,
            convc2: PcBlock::new(vb.pp("convc2"), 2 * c1, c2, &K_CONV)?,
            convf1: Pointwise::new(vb.pp("convf1_"), 4, f1)?,
            convf2: PcBlock::new(vb.pp("convf2"), f1, f2, &K_CONV)?,
            // Outputs 124 motion channels (the 4 flow channels are appended) + the next state.
            conv: PcBlock::new(vb.pp("conv"), c2 + f2 + 3 * MOTION_HIDDEN, MOTION_FEATURES - 4 + MOTION_HIDDEN, &K_CONV)?,
            init_hidden_state: vb.get((1, 1, MOTION_HIDDEN, 1, 1), "init_hidden_state")?.reshape((1, MOTION_HIDDEN, 1, 1))?,
        })
    }

    /// For the `M` middle frames of a window, in order: motion state `[M,48,h,w]` (`None`
    /// before the first iteration), flows `[M,2,h,w]`, `coords0` the pixel grid `[M,2,h,w]`,
    /// correlation features `[M,L(2r+1)²,h,w]`. Returns motion features `[M,128,h,w]` (the
    /// flows last) and the new state `[M,48,h,w]`.
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        state: Option<&Tensor>,
        fwd_flow: &Tensor,
        bwd_flow: &Tensor,
        coords0: &Tensor,
        fwd_corr: &Tensor,
        bwd_corr: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (m, _, h, w) = fwd_flow.dims4()?;
        let state = match state {
            Some(s) => s.clone(),
            None => self.init_hidden_state.broadcast_as((m, MOTION_HIDDEN, h, w))?.contiguous()?,
        };
        // Frame i sees frame i+1's state where its forward flow lands and frame i−1's where its
        // backward flow lands; the window's ends have no such neighbour (zeros).
        let zeros = Tensor::zeros((1, MOTION_HIDDEN, h, w), state.dtype(), state.device())?;
        let (next, prev) = if m == 1 {
            (zeros.clone(), zeros)
        } else {
            (Tensor::cat(&[&state.narrow(0, 1, m - 1)?, &zeros], 0)?, Tensor::cat(&[&zeros, &state.narrow(0, 0, m - 1)?], 0)?)
        };
        let next = bilinear_sample(&next, &(fwd_flow + coords0)?)?;
        let prev = bilinear_sample(&prev, &(bwd_flow + coords0)?)?;

        let cor = gelu_erf(&Tensor::cat(&[&self.convc1.forward(fwd_corr)?, &self.convc1.forward(bwd_corr)?], 1)?)?;
        let cor = self.convc2.forward(&cor)?;
        let flow = Tensor::cat(&[fwd_flow, bwd_flow], 1)?; // [M,4,h,w]
        let flo = self.convf2.forward(&self.convf1.forward(&flow)?)?;
        let out = self.conv.forward(&Tensor::cat(&[&cor, &flo, &next, &prev, &state], 1)?)?;
        let motion = out.narrow(1, 0, MOTION_FEATURES - 4)?;
        let state = out.narrow(1, MOTION_FEATURES - 4, MOTION_HIDDEN)?.contiguous()?;
        Ok((Tensor::cat(&[&motion, &flow], 1)?, state))
    }
}

/// Motion encoder → GMA → PCBlock update of the hidden state → flow deltas and masks.
pub struct UpdateBlock {
    encoder: MotionEncoder,
    aggregator: Aggregate,
    gru: PcBlock,
    flow_head: PcBlock,
    mask: (Conv, Pointwise),
}

/// What one iteration produces.
pub struct Update {
    /// Hidden state `[M,hdim,h,w]`.
    pub net: Tensor,
    /// Motion state `[M,48,h,w]`.
    pub motion_state: Tensor,
    /// Convex-upsampling logits `[M, 2·576, h, w]`: forward flow's, then backward's.
    pub mask: Tensor,
    /// `[M,4,h,w]`: forward (x, y), then backward (x, y).
    pub delta: Tensor,
}

impl UpdateBlock {
    pub fn new(vb: VarBuilder, cfg: &MofConfig) -> Result<Self> {
        let hdim = cfg.hidden_dim();
        Ok(UpdateBlock {
            encoder: MotionEncoder::new(vb.pp("encoder"), cfg)?,
            aggregator: Aggregate::new(vb.pp("aggregator"), MOTION_FEATURES)?,
            // Input: hidden state, context, motion features, their global aggregate.
            gru: PcBlock::new(vb.pp("gru"), 2 * hdim + 2 * MOTION_FEATURES, hdim, &K_UPDATER)?,
            flow_head: PcBlock::new(vb.pp("flow_head"), hdim, 4, &K_CONV)?,
            mask: (Conv::square(vb.pp("mask.0"), hdim, 2 * hdim, 3, 1)?, Pointwise::new(vb.pp("mask.2"), 2 * hdim, 2 * 8 * 8 * 9)?),
        })
    }

    /// One iteration; `attention` from [`super::gma::GmaAttention`], the other inputs as in
    /// [`MotionEncoder::forward`].
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        net: &Tensor,
        motion_state: Option<&Tensor>,
        context: &Tensor,
        fwd_corr: &Tensor,
        bwd_corr: &Tensor,
        fwd_flow: &Tensor,
        bwd_flow: &Tensor,
        coords0: &Tensor,
        attention: &Tensor,
    ) -> Result<Update> {
        let (motion, motion_state) = self.encoder.forward(motion_state, fwd_flow, bwd_flow, coords0, fwd_corr, bwd_corr)?;
        let global = self.aggregator.forward(attention, &motion)?;
        let net = self.gru.forward(&Tensor::cat(&[net, context, &motion, &global], 1)?)?;
        let delta = self.flow_head.forward(&net)?;
        let mask = (self.mask.1.forward(&self.mask.0.forward(&net)?.relu()?)? * MASK_SCALE)?;
        Ok(Update { net, motion_state, mask, delta })
    }
}
