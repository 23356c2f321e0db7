//! SEA-RAFT's hyper-parameters under the official argument names (`config/eval/*.json`, and the
//! `config.json` of the Hugging Face `MemorySlices/*` snapshots), so those files parse as they
//! are; and the three published presets.

use serde::{Deserialize, Serialize};

use crate::error::{FlowError, Result};

/// The ResNet trunk of both encoders (`args.pretrain`): it fixes the block count per stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Backbone {
    #[serde(rename = "resnet18")]
    ResNet18,
    #[serde(rename = "resnet34")]
    ResNet34,
}

impl Backbone {
    /// Residual blocks in the 1/2, 1/4 and 1/8 stages.
    pub fn blocks(self) -> [usize; 3] {
        match self {
            Backbone::ResNet18 => [2, 2, 2],
            Backbone::ResNet34 => [3, 4, 6],
        }
    }
}

/// The arguments `core/raft.py::RAFT` reads. Unknown keys (training settings) are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
pub struct SeaRaftConfig {
    pub pretrain: Backbone,
    /// Channels of the 7×7 stem.
    pub initial_dim: usize,
    /// Channels of the three ResNet stages.
    pub block_dims: [usize; 3],
    /// Correlation lookup radius (window `2r+1` per side).
    pub radius: usize,
    /// Hidden state and context channels; the encoders output `2·dim`.
    pub dim: usize,
    /// ConvNeXt blocks in the update.
    pub num_blocks: usize,
    /// Refinements after the directly regressed initial flow.
    pub iters: usize,
}

/// Pyramid levels; `RAFT.__init__` fixes it, whatever the config says.
pub const CORR_LEVELS: usize = 4;

impl SeaRaftConfig {
    /// Parses an official config (extra keys allowed) and checks it.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: SeaRaftConfig = serde_json::from_str(text)?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        if self.dim < 4 || !self.dim.is_multiple_of(2) {
            return Err(FlowError::NetworkConfig {
                network: "SEA-RAFT",
                problem: format!("`dim` must be even and at least 4 (the motion encoder uses dim/2 and dim−2), got {}", self.dim),
            });
        }
        if self.initial_dim == 0 || self.block_dims.contains(&0) || self.radius == 0 || self.num_blocks == 0 {
            return Err(FlowError::NetworkConfig { network: "SEA-RAFT", problem: format!("a zero size: {self:?}") });
        }
        Ok(())
    }

    /// Correlation features per pixel: levels × window.
    pub fn corr_channels(&self) -> usize {
        CORR_LEVELS * (2 * self.radius + 1).pow(2)
    }
}

/// The published models: S (ResNet18, 4 iterations), M (ResNet34, 4) and L (M's weights, 12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeaRaftPreset {
    S,
    M,
    L,
}

impl SeaRaftPreset {
    pub const ALL: [SeaRaftPreset; 3] = [SeaRaftPreset::S, SeaRaftPreset::M, SeaRaftPreset::L];

    /// The preset behind a `--motion` name, if it is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The `--motion` name.
    pub fn name(self) -> &'static str {
        match self {
            SeaRaftPreset::S => "sea-raft-s",
            SeaRaftPreset::M => "sea-raft-m",
            SeaRaftPreset::L => "sea-raft-l",
        }
    }

    /// `config/eval/sintel-{S,M,L}.json`.
    pub fn config(self) -> SeaRaftConfig {
        let (pretrain, iters) = match self {
            SeaRaftPreset::S => (Backbone::ResNet18, 4),
            SeaRaftPreset::M => (Backbone::ResNet34, 4),
            SeaRaftPreset::L => (Backbone::ResNet34, 12),
        };
        SeaRaftConfig { pretrain, initial_dim: 64, block_dims: [64, 128, 256], radius: 4, dim: 128, num_blocks: 2, iters }
    }

    /// What `--weights` should point at, for the missing-weights error.
    pub fn expected_weights(self) -> &'static str {
        match self {
            SeaRaftPreset::S => {
                "the SEA-RAFT-S checkpoint `Tartan-C-T-TSKH432x960-S.pth` (or the Hugging Face `MemorySlices/Tartan-C-T-TSKH432x960-S` model.safetensors)"
            }
            SeaRaftPreset::M | SeaRaftPreset::L => {
                "the SEA-RAFT-M checkpoint `Tartan-C-T-TSKH432x960-M.pth` (or the Hugging Face `MemorySlices/Tartan-C-T-TSKH432x960-M` model.safetensors); L is M's weights at 12 iterations"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn official_configs_parse_and_presets_match_them() {
        // config/eval/sintel-S.json, training keys included.
        let text = r#"{"name": "sintel-S", "dataset": "sintel", "gpus": [0, 1], "use_var": true, "var_min": 0, "var_max": 10,
            "pretrain": "resnet18", "initial_dim": 64, "block_dims": [64, 128, 256], "radius": 4, "dim": 128,
            "num_blocks": 2, "iters": 4, "image_size": [432, 960], "lr": 4e-4, "restore_ckpt": null}"#;
        let cfg = SeaRaftConfig::from_json(text).expect("parses");
        assert_eq!(cfg, SeaRaftPreset::S.config());
        assert_eq!(cfg.corr_channels(), 324);
        assert_eq!(SeaRaftPreset::L.config().pretrain.blocks(), [3, 4, 6]);
        assert_eq!((SeaRaftPreset::M.config().iters, SeaRaftPreset::L.config().iters), (4, 12));
        assert!(SeaRaftConfig::from_json(&text.replace("resnet18", "resnet50")).is_err());
        assert!(SeaRaftConfig::from_json(&text.replace("\"dim\": 128", "\"dim\": 127")).is_err());
        assert!(SeaRaftPreset::S.expected_weights().contains("Tartan-C-T-TSKH432x960-S.pth"));
    }
}
