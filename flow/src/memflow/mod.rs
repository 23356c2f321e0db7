//! MemFlow (Dong & Fu, "MemFlow: Optical Flow Estimation and Prediction with Memory", CVPR
//! 2024) in Candle, frozen, loading the released `MemFlowNet_*.pth` checkpoints (BasicEncoder
//! variant; MemFlowNet-T's Twins encoders are not ported).
//!
//! A video is processed pair by pair, front to back. Each step is a RAFT-style iteration whose
//! motion features are enriched with a read-out from a small memory of the motion of earlier
//! frames: attention from the current frame's context queries to the keys of the remembered
//! frames plus its own, over their motion "values". In reading order: [`config`] (inference
//! settings), [`pcblock`] (the large-kernel depthwise block everything is built of),
//! [`update`] (motion encoder, update, heads), [`memory`] (the key/value store and its
//! attention), [`model`] (one step), [`estimator`] (the whole clip, with the memory).
//! Encoders and correlation are RAFT's ([`crate::raft`]).

pub mod config;
pub mod estimator;
pub mod memory;
pub mod model;
pub mod pcblock;
pub mod update;

pub use config::MemFlowConfig;
pub use estimator::MemFlowEstimator;
pub use memory::{Readout, WorkingMemory};
pub use model::MemFlowNet;
