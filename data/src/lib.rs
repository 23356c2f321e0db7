//! Inputs for motionvl: decoded frames, frame plans, Qwen2.5-VL pixel preprocessing,
//! chat-template tokenisation and dataset / benchmark manifest readers.
//!
//! This crate knows nothing of Candle: it yields `ndarray` arrays and token ids, so
//! loader threads never touch a device.

pub mod budget;
pub mod confine;
pub mod construct;
pub mod cvaa;
pub mod dccs;
pub mod digest;
pub mod files;
pub mod frames;
pub mod hub_files;
pub mod loader;
pub mod manifest;
pub mod media_config;
pub mod parquet_rows;
pub mod preprocess;
pub mod progress;
pub mod rng;
pub mod run_dir;
pub mod samples;
pub mod sampling;
pub mod stop;
pub mod synth;
pub mod text;
pub mod video;
