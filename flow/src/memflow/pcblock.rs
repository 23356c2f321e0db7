//! `PCBlock4_Deep_nopool_res` (`core/Networks/MemFlowNet/sk2.py`, from SKFlow): every learned
//! stage of MemFlow's update is one. Large depthwise kernels (15×15, 7×7 in the update) give a
//! wide receptive field at 1/8 scale cheaply; 1×1 feed-forward layers mix channels.
//! `x ← GELU(x + FFN1(x))`, then `x ← GELU(x + DW_k(x))` for each kernel k, then
//! `x ← GELU(x + PW(x))`, then `FFN2(x)` to the output width.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::error::Result;
use crate::kernels::{add_bias, add_gelu, depthwise_conv2d, gelu_erf};

/// A 1×1 convolution as one matmul over `[B, C, H·W]` (no im2col copy).
pub struct Conv1x1 {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Conv1x1 {
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, bias: bool) -> Result<Self> {
        let weight = vb.get((c_out, c_in, 1, 1), "weight")?.reshape((c_out, c_in))?;
        let bias = if bias { Some(vb.get(c_out, "bias")?) } else { None };
        Ok(Conv1x1 { weight, bias })
    }

    /// `[B,c_in,H,W]` → `[B,c_out,H,W]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let y = self.weight.broadcast_matmul(&x.reshape((b, c, h * w))?)?;
        let y = match &self.bias {
            Some(bias) => add_bias(&y, bias, 1)?,
            None => y,
        };
        Ok(y.reshape((b, (), h, w))?)
    }
}

/// `nn.Sequential(1×1, GELU, 1×1)` with a 1.5× hidden width (`int(1.5·C_in)`).
struct Ffn {
    conv0: Conv1x1,
    conv2: Conv1x1,
}

impl Ffn {
    fn new(vb: VarBuilder, c_in: usize, c_out: usize) -> Result<Self> {
        let hidden = c_in * 3 / 2;
        Ok(Ffn { conv0: Conv1x1::new(vb.pp("0"), c_in, hidden, true)?, conv2: Conv1x1::new(vb.pp("2"), hidden, c_out, true)? })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.conv2.forward(&gelu_erf(&self.conv0.forward(x)?)?)
    }
}

/// Depthwise `k×k` (`groups = C`, padding `k/2`).
struct Depthwise {
    weight: Tensor,
    bias: Tensor,
    pad: usize,
}

pub struct PcBlock {
    ffn1: Ffn,
    conv_list: Vec<Depthwise>,
    pw: Conv1x1,
    ffn2: Ffn,
}

impl PcBlock {
    /// `kernels`: the depthwise sizes in order (`k_conv`: `[1, 15]`, or `[1, 7]` in the update).
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, kernels: &[usize]) -> Result<Self> {
        let conv_list = kernels
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                let vb = vb.pp("conv_list").pp(i);
                Ok(Depthwise { weight: vb.get((c_in, 1, k, k), "weight")?, bias: vb.get(c_in, "bias")?, pad: k / 2 })
            })
            .collect::<Result<_>>()?;
        Ok(PcBlock {
            ffn1: Ffn::new(vb.pp("ffn1"), c_in, c_in)?,
            conv_list,
            pw: Conv1x1::new(vb.pp("pw"), c_in, c_in, true)?,
            ffn2: Ffn::new(vb.pp("ffn2"), c_in, c_out)?,
        })
    }

    /// `[B,c_in,h,w]` → `[B,c_out,h,w]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let mut x = add_gelu(x, &self.ffn1.forward(x)?)?;
        for dw in &self.conv_list {
            x = add_gelu(&x, &depthwise_conv2d(&x, &dw.weight, Some(&dw.bias), dw.pad)?)?;
        }
        x = add_gelu(&x, &self.pw.forward(&x)?)?;
        self.ffn2.forward(&x)
    }
}
