//! The convolutions MOFNet's update block is made of, and its one repeated block, the PCBlock
//! (VideoFlow `stack.py::PCBlock4_Deep_nopool_res`): pointwise feed-forward layers around
//! large depthwise kernels, a cheap stand-in for a big receptive field.

use candle_core::Tensor;
use candle_nn::VarBuilder;

use crate::error::Result;
use crate::kernels::{add_bias, add_gelu, depthwise_conv2d, gelu_erf};

/// A 1×1 convolution, computed as one `[O,C]·[C,H·W]` matmul per image (Candle's conv2d would
/// go through im2col for nothing).
pub struct Pointwise {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Pointwise {
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize) -> Result<Self> {
        let weight = vb.get((c_out, c_in, 1, 1), "weight")?.reshape((c_out, c_in))?;
        Ok(Pointwise { weight, bias: Some(vb.get(c_out, "bias")?) })
    }

    /// Without bias (GMA's `to_qk`, `to_v`).
    pub fn no_bias(vb: VarBuilder, c_in: usize, c_out: usize) -> Result<Self> {
        Ok(Pointwise { weight: vb.get((c_out, c_in, 1, 1), "weight")?.reshape((c_out, c_in))?, bias: None })
    }

    /// `[B,C,H,W]` → `[B,O,H,W]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let flat = x.reshape((b, c, h * w))?;
        let per_image = (0..b).map(|i| self.weight.matmul(&flat.get(i)?)).collect::<candle_core::Result<Vec<_>>>()?;
        let y = Tensor::stack(&per_image, 0)?; // [B,O,HW]
        let y = match &self.bias {
            Some(bias) => add_bias(&y, bias, 1)?,
            None => y,
        };
        Ok(y.reshape((b, (), h, w))?)
    }
}

/// `nn.Conv2d(C, C, k, padding=k/2, groups=C)` on the depthwise kernel.
pub struct Depthwise {
    weight: Tensor,
    bias: Tensor,
    pad: usize,
}

impl Depthwise {
    pub fn new(vb: VarBuilder, channels: usize, k: usize) -> Result<Self> {
        Ok(Depthwise { weight: vb.get((channels, 1, k, k), "weight")?, bias: vb.get(channels, "bias")?, pad: k / 2 })
    }

    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        depthwise_conv2d(x, &self.weight, Some(&self.bias), self.pad)
    }
}

/// The PCBlock: `x ← gelu(x + ffn1(x))`, then `x ← gelu(x + dwconv_k(x))` for each kernel size
/// k, `x ← gelu(x + pw(x))`, and `ffn2(x)` maps to the output width. The feed-forward layers
/// widen by 1.5×.
pub struct PcBlock {
    ffn1: (Pointwise, Pointwise),
    conv_list: Vec<Depthwise>,
    pw: Pointwise,
    ffn2: (Pointwise, Pointwise),
}

impl PcBlock {
    /// `kernels`: the depthwise sizes, `[1, 15]` in the motion encoder and flow head, `[1, 7]`
    /// in the "GRU".
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, kernels: &[usize]) -> Result<Self> {
        let wide = c_in * 3 / 2;
        Ok(PcBlock {
            ffn1: (Pointwise::new(vb.pp("ffn1.0"), c_in, wide)?, Pointwise::new(vb.pp("ffn1.2"), wide, c_in)?),
            conv_list: kernels.iter().enumerate().map(|(i, &k)| Depthwise::new(vb.pp(format!("conv_list.{i}")), c_in, k)).collect::<Result<_>>()?,
            pw: Pointwise::new(vb.pp("pw"), c_in, c_in)?,
            ffn2: (Pointwise::new(vb.pp("ffn2.0"), c_in, wide)?, Pointwise::new(vb.pp("ffn2.2"), wide, c_out)?),
        })
    }

    /// `[B,C_in,H,W]` → `[B,C_out,H,W]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let ffn1 = self.ffn1.1.forward(&gelu_erf(&self.ffn1.0.forward(x)?)?)?;
        let mut x = add_gelu(x, &ffn1)?;
        for conv in &self.conv_list {
            x = add_gelu(&x, &conv.forward(&x)?)?;
        }
        let x = add_gelu(&x, &self.pw.forward(&x)?)?;
        self.ffn2.1.forward(&gelu_erf(&self.ffn2.0.forward(&x)?)?)
    }
}
