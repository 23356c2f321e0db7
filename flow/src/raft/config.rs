//! RAFT hyper-parameters: torchvision's `_raft(...)` arguments, with the two presets
//! `raft_small` and `raft_large` and per-key overrides (reduced-width test models).

use serde::Deserialize;

use crate::error::{FlowError, Result};

/// The two published architectures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum RaftArch {
    #[serde(rename = "raft_small")]
    Small,
    #[serde(rename = "raft_large")]
    Large,
}

impl RaftArch {
    /// What `--weights` should point at, for the missing-weights error.
    pub fn expected_weights(self) -> &'static str {
        match self {
            RaftArch::Small => {
                "a raft_small checkpoint (torchvision `raft_small_C_T_V2-01064c6d.pth` or princeton-vl `raft-small.pth`, or the same as .safetensors)"
            }
            RaftArch::Large => {
                "a raft_large checkpoint (torchvision `raft_large_C_T_SKHT_V2-ff5fadd5.pth` or princeton-vl `raft-things.pth`/`raft-sintel.pth`, or the same as .safetensors)"
            }
        }
    }

    /// torchvision's `raft_small()` / `raft_large()` hyper-parameters.
    pub fn config(self) -> RaftConfig {
        match self {
            RaftArch::Large => RaftConfig {
                arch: self,
                feature_encoder_layers: [64, 64, 96, 128, 256],
                feature_encoder_block: Block::Residual,
                feature_encoder_norm: Norm::Instance,
                context_encoder_layers: [64, 64, 96, 128, 256],
                context_encoder_block: Block::Residual,
                context_encoder_norm: Norm::Batch,
                corr_levels: 4,
                corr_radius: 4,
                motion_encoder_corr_layers: vec![256, 192],
                motion_encoder_flow_layers: [128, 64],
                motion_encoder_out_channels: 128,
                hidden_size: 128,
                gru: Gru::Separable,
                flow_head_hidden_size: 256,
                mask_predictor_hidden_size: Some(256),
            },
            RaftArch::Small => RaftConfig {
                arch: self,
                feature_encoder_layers: [32, 32, 64, 96, 128],
                feature_encoder_block: Block::Bottleneck,
                feature_encoder_norm: Norm::Instance,
                context_encoder_layers: [32, 32, 64, 96, 160],
                context_encoder_block: Block::Bottleneck,
                context_encoder_norm: Norm::None,
                corr_levels: 4,
                corr_radius: 3,
                motion_encoder_corr_layers: vec![96],
                motion_encoder_flow_layers: [64, 32],
                motion_encoder_out_channels: 82,
                hidden_size: 96,
                gru: Gru::Square,
                flow_head_hidden_size: 128,
                mask_predictor_hidden_size: None,
            },
        }
    }
}

/// Residual block kind of an encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Block {
    /// Two 3×3 convolutions (raft_large).
    Residual,
    /// 1×1 → 3×3 → 1×1 at a quarter width (raft_small).
    Bottleneck,
}

/// Normalisation of an encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Norm {
    /// Per-sample, per-channel, no affine parameters (feature encoders).
    Instance,
    /// Running statistics from the checkpoint (raft_large's context encoder).
    Batch,
    None,
}

/// Recurrent unit of the update block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gru {
    /// Two ConvGRUs, 1×5 then 5×1 (raft_large).
    Separable,
    /// One 3×3 ConvGRU (raft_small).
    Square,
}

/// Every size of a RAFT network.
#[derive(Debug, Clone, PartialEq)]
pub struct RaftConfig {
    pub arch: RaftArch,
    /// Channels of the stem, the three stages and the output 1×1 conv.
    pub feature_encoder_layers: [usize; 5],
    pub feature_encoder_block: Block,
    pub feature_encoder_norm: Norm,
    /// As the feature encoder; the output splits into hidden state and context.
    pub context_encoder_layers: [usize; 5],
    pub context_encoder_block: Block,
    pub context_encoder_norm: Norm,
    pub corr_levels: usize,
    pub corr_radius: usize,
    pub motion_encoder_corr_layers: Vec<usize>,
    pub motion_encoder_flow_layers: [usize; 2],
    pub motion_encoder_out_channels: usize,
    pub hidden_size: usize,
    pub gru: Gru,
    pub flow_head_hidden_size: usize,
    /// Convex upsampling head width; `None` upsamples bilinearly (raft_small).
    pub mask_predictor_hidden_size: Option<usize>,
}

/// A `config.json`: the architecture, optional iteration count, and any overridden sizes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    arch: RaftArch,
    iters: Option<usize>,
    feature_encoder_layers: Option<[usize; 5]>,
    context_encoder_layers: Option<[usize; 5]>,
    corr_levels: Option<usize>,
    corr_radius: Option<usize>,
    motion_encoder_corr_layers: Option<Vec<usize>>,
    motion_encoder_flow_layers: Option<[usize; 2]>,
    motion_encoder_out_channels: Option<usize>,
    hidden_size: Option<usize>,
    flow_head_hidden_size: Option<usize>,
    mask_predictor_hidden_size: Option<usize>,
}

impl RaftConfig {
    /// Parses `{"arch": "raft_small"|"raft_large", "iters": N, ...overrides}`; returns the
    /// config and the iteration count if the file names one.
    pub fn from_json(text: &str) -> Result<(Self, Option<usize>)> {
        let f: ConfigFile = serde_json::from_str(text)?;
        let mut c = f.arch.config();
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = f.$field { c.$field = v; } )* };
        }
        set!(
            feature_encoder_layers,
            context_encoder_layers,
            corr_levels,
            corr_radius,
            motion_encoder_corr_layers,
            motion_encoder_flow_layers,
            motion_encoder_out_channels,
            hidden_size,
            flow_head_hidden_size
        );
        if let Some(m) = f.mask_predictor_hidden_size {
            c.mask_predictor_hidden_size = Some(m);
        }
        c.validate()?;
        Ok((c, f.iters))
    }

    pub fn validate(&self) -> Result<()> {
        let context = self.context_encoder_layers[4];
        if context <= self.hidden_size {
            return Err(FlowError::NetworkConfig {
                network: "RAFT",
                problem: format!("the context encoder outputs {context} channels but must exceed the hidden state ({})", self.hidden_size),
            });
        }
        if self.motion_encoder_corr_layers.is_empty() || self.motion_encoder_corr_layers.len() > 2 {
            return Err(FlowError::NetworkConfig { network: "RAFT", problem: "motion_encoder_corr_layers needs 1 or 2 entries".into() });
        }
        if self.corr_levels == 0 {
            return Err(FlowError::NetworkConfig { network: "RAFT", problem: "corr_levels must be at least 1".into() });
        }
        Ok(())
    }

    /// Channels of the correlation features: levels × (2r+1)².
    pub fn corr_channels(&self) -> usize {
        self.corr_levels * (2 * self.corr_radius + 1).pow(2)
    }

    /// Context channels after the hidden state is split off.
    pub fn context_channels(&self) -> usize {
        self.context_encoder_layers[4] - self.hidden_size
    }

    /// Smallest input side: the coarsest correlation level needs 2 cells (torchvision's check).
    pub fn min_input_side(&self) -> usize {
        8 * 2 * (1 << (self.corr_levels - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_overrides() {
        let (c, iters) = RaftConfig::from_json(r#"{"arch": "raft_small", "iters": 5}"#).expect("parses");
        assert_eq!((c.corr_channels(), c.context_channels(), iters), (4 * 49, 64, Some(5)));
        let (c, _) = RaftConfig::from_json(r#"{"arch": "raft_large", "hidden_size": 32, "context_encoder_layers": [8,8,8,8,48]}"#).expect("parses");
        assert_eq!((c.hidden_size, c.context_channels(), c.corr_channels()), (32, 16, 324));
        assert!(RaftConfig::from_json(r#"{"arch": "raft_large", "hidden_size": 300}"#).is_err());
        assert!(RaftConfig::from_json(r#"{"arch": "raft_huge"}"#).is_err());
        assert!(RaftConfig::from_json(r#"{"arch": "raft_small", "typo": 1}"#).is_err());
        assert_eq!(RaftArch::Large.config().min_input_side(), 128);
    }
}
