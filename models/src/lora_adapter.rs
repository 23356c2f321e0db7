//! The low-rank update a [`crate::ops::Linear`] carries once an adapter is attached, and the
//! switches all adapters of a model share. A leaf: the layers use it, the adapter files
//! ([`crate::lora`]) build it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use candle_core::{DType, Device, Tensor};

/// Switches shared by all adapters of a model: training mode (dropout on) and the dropout seed
/// of the current micro-batch. Dropout masks derive from that seed, so a resumed run draws the
/// same masks as an uninterrupted one.
#[derive(Debug, Clone, Default)]
pub struct LoraRuntime(Arc<(AtomicBool, AtomicU64)>);

impl LoraRuntime {
    pub fn set_training(&self, training: bool) {
        self.0.0.store(training, Ordering::Relaxed);
    }

    pub fn training(&self) -> bool {
        self.0.0.load(Ordering::Relaxed)
    }

    pub fn set_dropout_seed(&self, seed: u64) {
        self.0.1.store(seed, Ordering::Relaxed);
    }

    fn dropout_seed(&self) -> u64 {
        self.0.1.load(Ordering::Relaxed)
    }
}

/// The low-rank update attached to one [`crate::ops::Linear`].
#[derive(Debug, Clone)]
pub struct LoraAdapter {
    a: Tensor, // [r, in]
    b: Tensor, // [out, r]
    scale: f64,
    dropout: f32,
    module_id: u64,
    runtime: LoraRuntime,
}

impl LoraAdapter {
    /// `a`: [r, in], `b`: [out, r]; `module_id` decorrelates the dropout masks of the layers.
    pub fn new(a: Tensor, b: Tensor, scale: f64, dropout: f32, module_id: u64, runtime: LoraRuntime) -> Self {
        Self { a, b, scale, dropout, module_id, runtime }
    }

    pub fn matrices(&self) -> [&Tensor; 2] {
        [&self.a, &self.b]
    }

    /// `xs`: [rows, in] → [rows, out], computed in the dtype of `xs`: a bf16 model runs its
    /// adapters in bf16 (mixed precision, as autocast does) while A and B stay f32 master
    /// copies, which the cast's backward hands their f32 gradients.
    pub fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let x = if self.dropout > 0.0 && self.runtime.training() { self.dropout_mask(xs)? } else { xs.clone() };
        let (a, b) = (self.a.to_dtype(xs.dtype())?, self.b.to_dtype(xs.dtype())?);
        x.matmul(&a.t()?)?.matmul(&b.t()?)? * self.scale
    }

    fn dropout_mask(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let seed = self.runtime.dropout_seed() ^ self.module_id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        x.mul(&dropout_keep_mask(x.shape(), x.device(), seed, self.dropout)?.to_dtype(x.dtype())?)
    }
}

/// An inverted-dropout mask (`0` with probability `p`, else `1/(1−p)`) drawn where the
/// activations live, as a pure function of `(seed, element index)`: a checkpointed layer's
/// recompute and a resumed run draw exactly the same mask, the CPU and a GPU draw the same mask,
/// and nothing crosses between host and device. Each element is a SplitMix64 hash of its index,
/// computed in parallel (no sequential RNG stream, no generator to seed per call).
pub fn dropout_keep_mask(shape: &candle_core::Shape, device: &Device, seed: u64, p: f32) -> candle_core::Result<Tensor> {
    // The op makes its output from nothing; a scalar puts it on the device.
    Tensor::zeros((), DType::F32, device)?.apply_op1_no_bwd(&KeepMask { shape: shape.clone(), seed, p })
}

/// [`dropout_keep_mask`] as an op: the CPU loop here, the same hash in `kernels/fused.cu` on CUDA.
struct KeepMask {
    shape: candle_core::Shape,
    seed: u64,
    p: f32,
}

impl KeepMask {
    /// An element is dropped when the top 24 bits of its hash fall below this.
    fn threshold(&self) -> u64 {
        (self.p as f64 * (1u64 << 24) as f64) as u64
    }

    fn keep(&self) -> f32 {
        1.0 / (1.0 - self.p)
    }
}

impl candle_core::CustomOp1 for KeepMask {
    fn name(&self) -> &'static str {
        "lora-dropout-keep-mask"
    }

    fn cpu_fwd(&self, _: &candle_core::CpuStorage, _: &candle_core::Layout) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use rayon::prelude::*;
        let (seed, threshold, keep) = (self.seed, self.threshold(), self.keep());
        let mask: Vec<f32> = (0..self.shape.elem_count() as u64)
            .into_par_iter()
            .map(|i| if motionvl_util::rng::mix64(seed ^ i.wrapping_mul(0xD1B5_4A32_D192_ED03)) >> 40 < threshold { 0.0 } else { keep })
            .collect();
        Ok((candle_core::CpuStorage::F32(mask), self.shape.clone()))
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        anchor: &candle_core::CudaStorage,
        _: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CudaStorage, candle_core::Shape)> {
        use candle_core::backend::BackendStorage;
        let mask = crate::fused::cuda::dropout_keep_mask(anchor.device(), self.shape.elem_count(), self.seed, self.threshold(), self.keep())?;
        Ok((mask, self.shape.clone()))
    }
}
