//! Inputs for motionvl: decoded frames, frame plans, Qwen2.5-VL pixel preprocessing,
//! chat-template tokenisation and dataset / benchmark manifest readers.
//!
//! This crate knows nothing of Candle: it yields `ndarray` arrays and token ids, so
//! loader threads never touch a device.

pub mod budget;
pub mod cvaa;
pub mod frames;
pub mod hub_files;
pub mod loader;
pub mod manifest;
pub mod media;
pub mod media_config;
pub mod parquet_rows;
pub mod preprocess;
pub mod processor;
pub mod records;
pub mod samples;
pub mod sampling;
pub mod text;
pub mod video;

// The shared pieces that moved to `motionvl-util`, under their old paths here.
pub use motionvl_util::{confine, digest, files, progress, rng, run_dir, stop};
