//! The gated MLP's `silu(gate) ⊙ up` as one op. The composed form keeps `silu(gate)` (and the
//! autograd of silu recomputes the sigmoid into further temporaries); the fused op keeps only
//! `gate` and `up` and recomputes the sigmoid once per element in the backward pass.
//!
//! Both Qwen2.5-VL towers use silu. GELU variants (other checkpoints' `hidden_act`) take the
//! composed path.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor};
use rayon::prelude::*;

use super::{TASK_ELEMENTS, contiguous_f32, on_kernel_device};
use crate::config::Activation;

/// `act(gate) ⊙ up`: the fused op on the CPU and CUDA for silu and contiguous f32 operands of one
/// shape, the composed one otherwise.
pub fn gated_activation(act: Activation, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if applies(act, gate, up) { gate.apply_op2(up, FusedSwiGlu) } else { composed(act, gate, up) }
}

/// Whether [`gated_activation`] runs the fused op for these tensors.
pub fn applies(act: Activation, gate: &Tensor, up: &Tensor) -> bool {
    act == Activation::Silu
        && gate.shape() == up.shape()
        && [gate, up].iter().all(|t| on_kernel_device(t) && t.dtype() == DType::F32 && t.is_contiguous())
}

/// `act(gate) ⊙ up` from differentiable primitives: every activation, dtype and device; the
/// reference the fused op is tested against.
pub fn composed(act: Activation, gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    act.apply(gate)? * up
}

/// Forward: `y = g·σ(g)·u`, σ computed as candle's silu does (`g / (1 + e^(−g))`).
struct FusedSwiGlu;

impl CustomOp2 for FusedSwiGlu {
    fn name(&self) -> &'static str {
        "fused-swiglu"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let gate = contiguous_f32(s1, l1, self.name())?;
        let up = contiguous_f32(s2, l2, self.name())?;
        if gate.len() != up.len() {
            candle_core::bail!("{}: gate has {} elements, up {}", self.name(), gate.len(), up.len())
        }
        let mut out = vec![0f32; gate.len()];
        out.par_chunks_mut(TASK_ELEMENTS).zip(gate.par_chunks(TASK_ELEMENTS)).zip(up.par_chunks(TASK_ELEMENTS)).for_each(|((out, gate), up)| {
            for ((y, &g), &u) in out.iter_mut().zip(gate).zip(up) {
                *y = g / (1.0 + (-g).exp()) * u;
            }
        });
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((super::cuda::swiglu((s1, l1), (s2, l2), self.name())?, l1.shape().clone()))
    }

    fn bwd(&self, gate: &Tensor, up: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        // One pass yields both gradients; a custom op has one output, so they share a buffer
        // `[2, …]`: dgate, then dup.
        let both = gate.apply_op3_no_bwd(up, &grad.contiguous()?, &SwiGluBackward)?;
        let dgate = both.narrow(0, 0, 1)?.reshape(gate.shape())?;
        let dup = both.narrow(0, 1, 1)?.reshape(up.shape())?;
        Ok((Some(dgate), Some(dup)))
    }
}

/// Backward of [`FusedSwiGlu`] for `(g, u, dy)`: `dg = dy·u·σ(g)·(1 + g·(1 − σ(g)))`,
/// `du = dy·g·σ(g)`; output `[2, n]`.
struct SwiGluBackward;

impl CustomOp3 for SwiGluBackward {
    fn name(&self) -> &'static str {
        "fused-swiglu-backward"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let gate = contiguous_f32(s1, l1, self.name())?;
        let up = contiguous_f32(s2, l2, self.name())?;
        let grad = contiguous_f32(s3, l3, self.name())?;
        let n = gate.len();
        if up.len() != n || grad.len() != n {
            candle_core::bail!("{}: gate, up and gradient have {n}, {} and {} elements", self.name(), up.len(), grad.len())
        }
        let mut out = vec![0f32; 2 * n];
        let (dgate, dup) = out.split_at_mut(n);
        dgate
            .par_chunks_mut(TASK_ELEMENTS)
            .zip(dup.par_chunks_mut(TASK_ELEMENTS))
            .zip(gate.par_chunks(TASK_ELEMENTS).zip(up.par_chunks(TASK_ELEMENTS)).zip(grad.par_chunks(TASK_ELEMENTS)))
            .for_each(|((dgate, dup), ((gate, up), grad))| {
                for ((((dg, du), &g), &u), &dy) in dgate.iter_mut().zip(dup.iter_mut()).zip(gate).zip(up).zip(grad) {
                    let sigmoid = 1.0 / (1.0 + (-g).exp());
                    *dg = dy * u * sigmoid * (1.0 + g * (1.0 - sigmoid));
                    *du = dy * g * sigmoid;
                }
            });
        Ok((CpuStorage::F32(out), Shape::from((2, n))))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        s1: &candle_core::CudaStorage,
        l1: &Layout,
        s2: &candle_core::CudaStorage,
        l2: &Layout,
        s3: &candle_core::CudaStorage,
        l3: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        Ok((super::cuda::swiglu_backward((s1, l1), (s2, l2), (s3, l3), self.name())?, Shape::from((2, l1.shape().elem_count()))))
    }
}
