//! Forward-only CPU kernels for the operations Candle runs slowly or lacks, shared by the
//! flow networks (RAFT's correlation lookup lives with RAFT in [`crate::raft::corr`]).

pub mod bias;
pub mod depthwise;
pub mod gelu;
pub mod warp;

pub use bias::add_bias;
pub use depthwise::depthwise_conv2d;
pub use gelu::{add_gelu, gelu_erf};
pub use warp::bilinear_sample;

/// N(0, 1) test inputs of `shape` from a seeded stream, so that a failing case reproduces
/// (Candle's `Tensor::randn` draws from the CPU's unseeded generator).
#[cfg(test)]
pub(crate) fn seeded_randn(rng: &mut motionvl_data::rng::SynthRng, shape: impl Into<candle_core::Shape>) -> candle_core::Result<candle_core::Tensor> {
    let shape = shape.into();
    let values: Vec<f32> = (0..shape.elem_count()).map(|_| rng.normal() as f32).collect();
    candle_core::Tensor::from_vec(values, shape, &candle_core::Device::Cpu)
}
