//! Differentiable fused kernels with hand-written backward passes, for the ops whose composed
//! form (see [`crate::ops`]) keeps every intermediate alive for backprop. Each public function
//! runs the fused kernel where it applies (contiguous f32, on the CPU; RMSNorm, SwiGLU and rotary
//! embedding on CUDA too, with the kernels of `kernels/fused.cu`) and the composed code otherwise.

pub mod attention;
#[cfg(feature = "cuda")]
pub(crate) mod cuda;
pub mod gelu;
pub mod norm;
pub mod rotary;
pub mod swiglu;

/// Whether `t` lives where the fused kernels of RMSNorm, SwiGLU and rotary embedding run: the CPU, or a GPU when the
/// crate was built with CUDA.
pub(crate) fn on_kernel_device(t: &candle_core::Tensor) -> bool {
    t.device().is_cpu() || (cfg!(feature = "cuda") && t.device().is_cuda())
}

/// Elements one rayon task handles at least: below this the scheduling costs more than the work.
pub(crate) const TASK_ELEMENTS: usize = 1 << 14;

/// The contiguous f32 data a fused kernel reads; the public functions only dispatch such inputs,
/// so anything else is a caller's bug reported as an error rather than a panic.
pub(crate) fn contiguous_f32<'a>(
    storage: &'a candle_core::CpuStorage,
    layout: &candle_core::Layout,
    op: &'static str,
) -> candle_core::Result<&'a [f32]> {
    let (start, end) = layout.contiguous_offsets().ok_or(candle_core::Error::RequiresContiguous { op })?;
    Ok(&storage.as_slice::<f32>()?[start..end])
}

/// N(0, 1) test inputs of `shape` from a seeded stream, so that a failing case reproduces
/// (Candle's `Tensor::randn` draws from the CPU's unseeded generator).
#[cfg(test)]
pub(crate) fn seeded_randn(rng: &mut motionvl_util::rng::SynthRng, shape: impl Into<candle_core::Shape>) -> candle_core::Result<candle_core::Tensor> {
    let shape = shape.into();
    let values: Vec<f32> = (0..shape.elem_count()).map(|_| rng.normal() as f32).collect();
    candle_core::Tensor::from_vec(values, shape, &candle_core::Device::Cpu)
}
