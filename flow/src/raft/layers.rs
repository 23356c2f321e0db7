//! The two building blocks every RAFT module is made of: a convolution with any (h, w)
//! padding (Candle's `conv2d` takes one padding for both axes; the GRU needs 1×5 / 5×1), and
//! torchvision's `Conv2dNormActivation` (conv → norm → optional ReLU, checkpoint indices `.0`
//! conv and `.1` norm).

use candle_core::{D, Tensor};
use candle_nn::VarBuilder;

use super::config::Norm;
use crate::error::Result;

/// `nn.Conv2d` with bias; `kernel` and `padding` are (h, w).
pub struct Conv {
    weight: Tensor,
    bias: Tensor,
    stride: usize,
    padding: (usize, usize),
}

impl Conv {
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, kernel: (usize, usize), stride: usize, padding: (usize, usize)) -> Result<Self> {
        let weight = vb.get((c_out, c_in, kernel.0, kernel.1), "weight")?;
        let bias = vb.get(c_out, "bias")?.reshape((1, c_out, 1, 1))?;
        Ok(Conv { weight, bias, stride, padding })
    }

    /// A square `k×k` convolution padded to keep the size at stride 1 (`(k−1)/2`).
    pub fn square(vb: VarBuilder, c_in: usize, c_out: usize, k: usize, stride: usize) -> Result<Self> {
        Conv::new(vb, c_in, c_out, (k, k), stride, ((k - 1) / 2, (k - 1) / 2))
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (ph, pw) = self.padding;
        let y = if ph == pw {
            x.conv2d(&self.weight, ph, self.stride, 1, 1)?
        } else {
            x.pad_with_zeros(D::Minus2, ph, ph)?.pad_with_zeros(D::Minus1, pw, pw)?.conv2d(&self.weight, 0, self.stride, 1, 1)?
        };
        Ok(y.broadcast_add(&self.bias)?)
    }
}

/// Normalisation layer of an encoder, in inference mode.
pub enum NormLayer {
    /// `InstanceNorm2d(affine=False)`: per sample and channel over H×W, biased variance.
    Instance,
    /// `BatchNorm2d` with the checkpoint's running statistics, folded into scale and shift.
    Batch {
        scale: Tensor,
        shift: Tensor,
    },
    None,
}

const NORM_EPS: f64 = 1e-5;

impl NormLayer {
    pub fn new(vb: VarBuilder, kind: Norm, channels: usize) -> Result<Self> {
        Ok(match kind {
            Norm::Instance => NormLayer::Instance,
            Norm::None => NormLayer::None,
            Norm::Batch => {
                let weight = vb.get(channels, "weight")?;
                let bias = vb.get(channels, "bias")?;
                let mean = vb.get(channels, "running_mean")?;
                let var = vb.get(channels, "running_var")?;
                let scale = weight.div(&(var + NORM_EPS)?.sqrt()?)?;
                let shift = bias.sub(&mean.mul(&scale)?)?;
                NormLayer::Batch { scale: scale.reshape((1, channels, 1, 1))?, shift: shift.reshape((1, channels, 1, 1))? }
            }
        })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            NormLayer::None => x.clone(),
            NormLayer::Batch { scale, shift } => x.broadcast_mul(scale)?.broadcast_add(shift)?,
            NormLayer::Instance => {
                let (b, c, h, w) = x.dims4()?;
                let flat = x.reshape((b, c, h * w))?;
                let centred = flat.broadcast_sub(&flat.mean_keepdim(2)?)?;
                let var = centred.sqr()?.mean_keepdim(2)?;
                centred.broadcast_div(&(var + NORM_EPS)?.sqrt()?)?.reshape((b, c, h, w))?
            }
        })
    }
}

/// torchvision's `Conv2dNormActivation`: square conv (bias kept), norm, optional ReLU.
pub struct ConvNormAct {
    conv: Conv,
    norm: NormLayer,
    relu: bool,
}

impl ConvNormAct {
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, k: usize, stride: usize, norm: Norm, relu: bool) -> Result<Self> {
        let conv = Conv::square(vb.pp("0"), c_in, c_out, k, stride)?;
        let norm = NormLayer::new(vb.pp("1"), norm, c_out)?;
        Ok(ConvNormAct { conv, norm, relu })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = self.norm.forward(&self.conv.forward(x)?)?;
        Ok(if self.relu { y.relu()? } else { y })
    }
}
