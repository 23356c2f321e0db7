//! MemFlow's inference settings, under the names of the official config nodes
//! (`configs/*_memflownet.py`): they decide how many refinements run and how the memory is
//! kept and read, not the network's shapes (those are fixed in its code; see [`NET`]).

use serde::{Deserialize, Serialize};

use crate::error::{FlowError, Result};

/// Inference settings of `inference/inference_core_skflow.py`. Unknown keys are ignored.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct MemFlowConfig {
    /// Refinements per pair (`val_decoder_depth`; 15 in every released config).
    #[serde(default = "defaults::iters")]
    pub val_decoder_depth: usize,
    /// `L` of the attention's length scaling `log_L(N_keys)`: 1.5 × the 1/8-scale token count of
    /// the training crop (sintel/spring 6624, things 6750, kitti 6480).
    #[serde(default = "defaults::train_avg_length")]
    pub train_avg_length: f64,
    /// Every how many steps a frame's key and value enter the memory.
    #[serde(default = "defaults::one")]
    pub mem_every: usize,
    /// When the memory reaches this many frames it is cut back to `min_mid_term_frames`.
    #[serde(default = "defaults::two")]
    pub max_mid_term_frames: usize,
    #[serde(default = "defaults::one")]
    pub min_mid_term_frames: usize,
}

mod defaults {
    pub fn iters() -> usize {
        15
    }
    pub fn train_avg_length() -> f64 {
        super::MemFlowConfig::SINTEL_TRAIN_AVG_LENGTH
    }
    pub fn one() -> usize {
        1
    }
    pub fn two() -> usize {
        2
    }
}

/// The network's fixed sizes (literals in `MemFlow.py`, `sk2.py`, `cnn.py`).
pub struct NetSizes {
    /// BasicEncoder stem/stage widths and output, as [`crate::raft::RaftConfig`] counts them.
    pub encoder_layers: [usize; 5],
    pub hidden: usize,
    pub context: usize,
    pub corr_levels: usize,
    pub corr_radius: usize,
}

pub const NET: NetSizes = NetSizes { encoder_layers: [64, 64, 96, 128, 256], hidden: 128, context: 128, corr_levels: 4, corr_radius: 4 };

impl Default for MemFlowConfig {
    /// `configs/sintel_memflownet.py`, the settings of `MemFlowNet_sintel.pth`.
    fn default() -> Self {
        MemFlowConfig {
            val_decoder_depth: 15,
            train_avg_length: Self::SINTEL_TRAIN_AVG_LENGTH,
            mem_every: 1,
            max_mid_term_frames: 2,
            min_mid_term_frames: 1,
        }
    }
}

impl MemFlowConfig {
    /// `(368 · 768 // 64) · 3 / 2`.
    pub const SINTEL_TRAIN_AVG_LENGTH: f64 = 6624.0;

    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: MemFlowConfig = serde_json::from_str(text)?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        if self.train_avg_length <= 1.0 {
            return Err(FlowError::NetworkConfig {
                network: "MemFlow",
                problem: format!("train_avg_length must exceed 1 (it is a log base), got {}", self.train_avg_length),
            });
        }
        if self.mem_every == 0 || self.min_mid_term_frames == 0 || self.max_mid_term_frames <= self.min_mid_term_frames {
            return Err(FlowError::NetworkConfig {
                network: "MemFlow",
                problem: format!("memory settings need mem_every ≥ 1 and max_mid_term_frames > min_mid_term_frames ≥ 1, got {self:?}"),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_sintel_config_and_bad_settings_are_rejected() {
        let cfg = MemFlowConfig::from_json(r#"{"arch": "memflow"}"#).expect("parses");
        assert_eq!(cfg, MemFlowConfig::default());
        assert_eq!(MemFlowConfig::SINTEL_TRAIN_AVG_LENGTH, ((368 * 768 / 64) as f64) * 3.0 / 2.0);
        let cfg = MemFlowConfig::from_json(r#"{"val_decoder_depth": 4, "train_avg_length": 6480.0}"#).expect("parses");
        assert_eq!((cfg.val_decoder_depth, cfg.train_avg_length), (4, 6480.0));
        assert!(MemFlowConfig::from_json(r#"{"train_avg_length": 1.0}"#).is_err());
        assert!(MemFlowConfig::from_json(r#"{"max_mid_term_frames": 1}"#).is_err());
    }
}
