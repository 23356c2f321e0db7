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
