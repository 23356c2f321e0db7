//! A convolution layer whose stride-1 "same" case runs as k² shifted matmuls instead of
//! Candle's im2col.
//!
//! Candle's CPU `conv2d` transposes the input to NHWC, gathers 512-pixel im2col tiles and
//! scatters the result back, single-threaded outside the matmul: at the 1/2- and 1/4-scale
//! stages of a ResNet (64 channels at 224², 128 at 112²) that is 3–5× slower than PyTorch and
//! dominates SEA-RAFT. Here the input is zero-padded once and flattened per channel; on that
//! "wide-row" grid (each row `W + 2p` long) the tap `(ky, kx)` of every output pixel sits at a
//! fixed offset `ky·(W+2p) + kx`, so each tap is one matmul `W_tap [Co,Ci] × X[:, offset..]`
//! over a strided view, no copy; the k² products are summed and the `2p` junk columns of each
//! row dropped. Same arithmetic as the reference, summed in another order (≈1e-7 relative).

use candle_core::{D, Tensor};
use candle_nn::VarBuilder;

use crate::error::Result;
use crate::kernels::add_bias;

/// `nn.Conv2d` with bias, square kernel, padding `(k−1)/2` at stride 1 (any padding otherwise).
pub struct Conv {
    /// `[Co, Ci, k, k]`, for the strided path.
    weight: Tensor,
    /// Per tap `ky·k + kx`: `[Co, Ci]`, for the shifted-matmul path.
    taps: Vec<Tensor>,
    bias: Tensor,
    k: usize,
    stride: usize,
    padding: usize,
}

impl Conv {
    pub fn new(vb: VarBuilder, c_in: usize, c_out: usize, k: usize, stride: usize, padding: usize) -> Result<Self> {
        let weight = vb.get((c_out, c_in, k, k), "weight")?;
        let bias = vb.get(c_out, "bias")?;
        let shifted = stride == 1 && k > 1 && padding == (k - 1) / 2 && k % 2 == 1;
        let taps = if shifted {
            let mut taps = Vec::with_capacity(k * k);
            for ky in 0..k {
                for kx in 0..k {
                    taps.push(weight.narrow(2, ky, 1)?.narrow(3, kx, 1)?.reshape((c_out, c_in))?.contiguous()?);
                }
            }
            taps
        } else {
            Vec::new()
        };
        Ok(Conv { weight, taps, bias, k, stride, padding })
    }

    /// A `k×k` convolution padded by `(k−1)/2`: size kept at stride 1, halved at stride 2.
    pub fn square(vb: VarBuilder, c_in: usize, c_out: usize, k: usize, stride: usize) -> Result<Self> {
        Conv::new(vb, c_in, c_out, k, stride, (k - 1) / 2)
    }

    /// `[B,Ci,H,W]` → `[B,Co,H',W']`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = if self.taps.is_empty() { x.conv2d(&self.weight, self.padding, self.stride, 1, 1)? } else { self.shifted(x)? };
        add_bias(&y, &self.bias, 1)
    }

    fn shifted(&self, x: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = x.dims4()?;
        let (k, p) = (self.k, self.padding);
        let row = w + 2 * p;
        // One extra zero row at the bottom: the last taps of the last row read past it.
        let padded = x.pad_with_zeros(D::Minus2, p, p + 1)?.pad_with_zeros(D::Minus1, p, p)?;
        let flat = padded.reshape((b, c, (h + 2 * p + 1) * row))?;
        let n = h * row;
        let tap = |i: usize| -> Result<Tensor> {
            let offset = (i / k) * row + i % k; // tap (ky, kx) = (i / k, i % k)
            Ok(self.taps[i].broadcast_matmul(&flat.narrow(2, offset, n)?)?) // [B,Co,n]
        };
        let mut sum = tap(0)?;
        for i in 1..k * k {
            sum = (sum + tap(i)?)?;
        }
        let co = sum.dim(1)?;
        Ok(sum.reshape((b, co, h, row))?.narrow(3, 0, w)?.contiguous()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::seeded_randn;
    use candle_core::{DType, Device};
    use motionvl_data::rng::SynthRng;
    use std::collections::HashMap;

    #[test]
    fn shifted_matmuls_equal_candles_convolution() -> Result<()> {
        let dev = Device::Cpu;
        let mut rng = SynthRng::new(4);
        for (k, stride, c_in, c_out, h, w) in [(3, 1, 5, 7, 9, 6), (7, 1, 3, 4, 8, 11), (3, 2, 4, 6, 9, 10), (1, 1, 4, 3, 5, 5)] {
            let weight = seeded_randn(&mut rng, (c_out, c_in, k, k))?;
            let bias = seeded_randn(&mut rng, c_out)?;
            let vb = VarBuilder::from_tensors(
                HashMap::from([("weight".to_string(), weight.clone()), ("bias".to_string(), bias.clone())]),
                DType::F32,
                &dev,
            );
            let conv = Conv::square(vb, c_in, c_out, k, stride)?;
            assert_eq!(conv.taps.is_empty(), stride != 1 || k == 1);
            let x = seeded_randn(&mut rng, (2, c_in, h, w))?;
            let want = x.conv2d(&weight, (k - 1) / 2, stride, 1, 1)?.broadcast_add(&bias.reshape((1, c_out, 1, 1))?)?;
            let got = conv.forward(&x)?;
            assert_eq!(got.dims(), want.dims());
            let diff = (got - want)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff < 1e-4, "k={k} stride={stride}: {diff}");
        }
        Ok(())
    }
}
