//! The refinement step (`core/update.py`, `core/layer.py`): RAFT's motion encoder, then
//! ConvNeXt blocks where RAFT had a GRU — the hidden state is simply rewritten, no gates — and
//! the two heads on the hidden state (flow + uncertainty, convex-upsampling weights).

use candle_core::{D, Tensor};
use candle_nn::VarBuilder;

use super::config::SeaRaftConfig;
use super::conv::Conv;
use crate::error::Result;
use crate::kernels::{add_bias, depthwise_conv2d, gelu_erf};

/// (correlation features, flow) → `dim` motion channels, the last two being the raw flow.
pub struct MotionEncoder {
    convc1: Conv,
    convc2: Conv,
    convf1: Conv,
    convf2: Conv,
    conv: Conv,
}

impl MotionEncoder {
    pub fn new(vb: VarBuilder, cfg: &SeaRaftConfig) -> Result<Self> {
        let dim = cfg.dim;
        Ok(MotionEncoder {
            convc1: Conv::square(vb.pp("convc1"), cfg.corr_channels(), 2 * dim, 1, 1)?,
            convc2: Conv::square(vb.pp("convc2"), 2 * dim, dim + dim / 2, 3, 1)?,
            convf1: Conv::square(vb.pp("convf1"), 2, dim, 7, 1)?,
            convf2: Conv::square(vb.pp("convf2"), dim, dim / 2, 3, 1)?,
            conv: Conv::square(vb.pp("conv"), 2 * dim, dim - 2, 3, 1)?,
        })
    }

    /// `flow` `[B,2,h,w]`, `corr` `[B,L(2r+1)²,h,w]` → `[B,dim,h,w]`.
    pub fn forward(&self, flow: &Tensor, corr: &Tensor) -> Result<Tensor> {
        let c = self.convc2.forward(&self.convc1.forward(corr)?.relu()?)?.relu()?; // 3·dim/2
        let f = self.convf2.forward(&self.convf1.forward(flow)?.relu()?)?.relu()?; // dim/2
        let out = self.conv.forward(&Tensor::cat(&[&c, &f], 1)?)?.relu()?; // dim − 2
        Ok(Tensor::cat(&[&out, flow], 1)?)
    }
}

/// A 1×1 convolution stored as `nn.Linear` (`weight` `[out,in]`), applied channels-last.
struct Linear {
    weight_t: Tensor,
    bias: Tensor,
}

impl Linear {
    fn new(vb: VarBuilder, c_in: usize, c_out: usize) -> Result<Self> {
        Ok(Linear { weight_t: vb.get((c_out, c_in), "weight")?.t()?.contiguous()?, bias: vb.get(c_out, "bias")? })
    }

    /// `[N,c_in]` → `[N,c_out]`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        add_bias(&x.matmul(&self.weight_t)?, &self.bias, 1)
    }
}

/// ConvNeXt block (Liu et al. 2022) with a projection: 7×7 depthwise → LayerNorm → 1×1 to
/// 4·out → GELU → 1×1 back → layer scale γ → residual → 1×1 `final` to `out` channels.
/// The 1×1 layers run as matmuls on a channels-last copy, as the reference does.
pub struct ConvNextBlock {
    dw_weight: Tensor,
    dw_bias: Tensor,
    norm_weight: Tensor,
    norm_bias: Tensor,
    pwconv1: Linear,
    pwconv2: Linear,
    gamma: Tensor,
    /// `final` (1×1 conv) as a matmul: `[dim, out]`.
    final_t: Tensor,
    final_bias: Tensor,
}

const LAYER_NORM_EPS: f32 = 1e-6;

impl ConvNextBlock {
    pub fn new(vb: VarBuilder, dim: usize, out: usize) -> Result<Self> {
        let dw = vb.pp("dwconv");
        let norm = vb.pp("norm");
        let fin = vb.pp("final");
        Ok(ConvNextBlock {
            dw_weight: dw.get((dim, 1, 7, 7), "weight")?,
            dw_bias: dw.get(dim, "bias")?,
            norm_weight: norm.get(dim, "weight")?,
            norm_bias: norm.get(dim, "bias")?,
            pwconv1: Linear::new(vb.pp("pwconv1"), dim, 4 * out)?,
            pwconv2: Linear::new(vb.pp("pwconv2"), 4 * out, dim)?,
            gamma: vb.get(dim, "gamma")?,
            final_t: fin.get((out, dim, 1, 1), "weight")?.reshape((out, dim))?.t()?.contiguous()?,
            final_bias: fin.get(out, "bias")?,
        })
    }

    /// `[B,dim,h,w]` → `[B,out,h,w]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let n = b * h * w;
        let y = depthwise_conv2d(x, &self.dw_weight, Some(&self.dw_bias), 3)?;
        let y = y.permute((0, 2, 3, 1))?.reshape((n, c))?; // channels last: [BHW, dim]
        let y = candle_nn::ops::layer_norm(&y, &self.norm_weight, &self.norm_bias, LAYER_NORM_EPS)?;
        let y = self.pwconv2.forward(&gelu_erf(&self.pwconv1.forward(&y)?)?)?.broadcast_mul(&self.gamma)?;
        let residual = x.permute((0, 2, 3, 1))?.reshape((n, c))?;
        let out = add_bias(&(residual + y)?.matmul(&self.final_t)?, &self.final_bias, 1)?; // [BHW, out]
        let out_c = out.dim(D::Minus1)?;
        Ok(out.reshape((b, h, w, out_c))?.permute((0, 3, 1, 2))?.contiguous()?)
    }
}

/// Motion encoder, then each ConvNeXt block rewrites the hidden state from
/// `[hidden ‖ context ‖ motion]`.
pub struct UpdateBlock {
    encoder: MotionEncoder,
    refine: Vec<ConvNextBlock>,
}

impl UpdateBlock {
    pub fn new(vb: VarBuilder, cfg: &SeaRaftConfig) -> Result<Self> {
        let refine = (0..cfg.num_blocks).map(|i| ConvNextBlock::new(vb.pp("refine").pp(i), 3 * cfg.dim, cfg.dim)).collect::<Result<_>>()?;
        Ok(UpdateBlock { encoder: MotionEncoder::new(vb.pp("encoder"), cfg)?, refine })
    }

    /// `net`, `context` `[B,dim,h,w]`, `corr` `[B,L(2r+1)²,h,w]`, `flow` `[B,2,h,w]` → new `net`.
    pub fn forward(&self, net: &Tensor, context: &Tensor, corr: &Tensor, flow: &Tensor) -> Result<Tensor> {
        let motion = self.encoder.forward(flow, corr)?;
        let inp = Tensor::cat(&[context, &motion], 1)?; // 2·dim
        let mut net = net.clone();
        for block in &self.refine {
            net = block.forward(&Tensor::cat(&[&net, &inp], 1)?)?;
        }
        Ok(net)
    }
}

/// `nn.Sequential(conv 3×3, ReLU, conv k×k)` — both heads on the hidden state have this shape
/// (indices `.0` and `.2` in the checkpoint).
pub struct Head {
    conv0: Conv,
    conv2: Conv,
}

impl Head {
    pub fn new(vb: VarBuilder, c_in: usize, hidden: usize, c_out: usize, k_out: usize) -> Result<Self> {
        Ok(Head { conv0: Conv::square(vb.pp("0"), c_in, hidden, 3, 1)?, conv2: Conv::square(vb.pp("2"), hidden, c_out, k_out, 1)? })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.conv2.forward(&self.conv0.forward(x)?.relu()?)
    }
}

/// `flow_head`: hidden state → 6 channels (flow update 2, mixture weights 2, log-scales 2);
/// inference keeps the flow.
pub struct FlowHead(Head);

impl FlowHead {
    pub fn new(vb: VarBuilder, dim: usize) -> Result<Self> {
        Ok(FlowHead(Head::new(vb, dim, 2 * dim, 6, 3)?))
    }

    /// `[B,dim,h,w]` → flow `[B,2,h,w]`.
    pub fn forward(&self, net: &Tensor) -> Result<Tensor> {
        Ok(self.0.forward(net)?.narrow(1, 0, 2)?)
    }
}

/// `upsample_weight`: hidden state → 8·8·9 convex-combination logits, ×0.25 as the reference.
pub struct UpsampleWeight(Head);

impl UpsampleWeight {
    pub fn new(vb: VarBuilder, dim: usize) -> Result<Self> {
        Ok(UpsampleWeight(Head::new(vb, dim, 2 * dim, 64 * 9, 1)?))
    }

    /// `[B,dim,h,w]` → `[B,576,h,w]`.
    pub fn forward(&self, net: &Tensor) -> Result<Tensor> {
        Ok((self.0.forward(net)? * 0.25)?)
    }
}
