//! motionvl's models in Candle: Qwen2.5-VL and Qwen3-VL (vision towers, multimodal-RoPE decoders, generation)
//! and the checkpoint loading that feeds it.

pub mod backbone;
pub mod checkpoint;
pub mod chunked_attention;
pub mod config;
pub mod cvaa;
pub mod device;
pub mod dinov2;
pub mod error;
pub mod flash;
pub mod flops;
pub mod fused;
pub mod generate;
pub mod init;
pub mod lora;
pub mod lora_adapter;
pub mod machine;
pub mod motion;
pub mod ops;
pub mod prompt;
pub mod qwen25vl;
pub mod qwen3vl;
pub mod recompute;
pub mod rope;
pub mod seeded;
pub mod sis_package;
pub mod text;
pub mod torch_save;
pub mod training_loss;
pub mod vision;

pub use checkpoint::{CheckpointFiles, CheckpointWeights, HubOptions};
pub use config::{Qwen25VlConfig, TextConfig, VisionConfig};
pub use error::{ModelError, Result};
