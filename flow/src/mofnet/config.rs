//! MOFNet hyper-parameters: VideoFlow's `multiframes_sintel_submission` config (the one its
//! `inference.py` uses) as the default, and per-key overrides read from a fixture's
//! `config.json` (reduced-width test models; see `tools/fixtures/mofnet.py`).

use serde::Deserialize;

use crate::error::{FlowError, Result};

/// Channels of the motion-propagation hidden state each middle frame carries (hard-wired in
/// VideoFlow's `SKMotionEncoder6_Deep_nopool_res`).
pub const MOTION_HIDDEN: usize = 48;
/// Motion features out of the motion encoder, the 4 raw flow channels included (the GMA
/// aggregator is built for exactly 128).
pub const MOTION_FEATURES: usize = 128;
/// Frames per window: the middle three get forward and backward flow.
pub const WINDOW: usize = 5;
/// Stride of the windows over a video (`WINDOW − 2`: each window's middle frames are new).
pub const WINDOW_STRIDE: usize = 3;

/// One Twins-SVT encoder, cut after its second stage (1/8 resolution).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TwinsConfig {
    /// Widths of stages 1 and 2; the encoder's output has `embed_dims[1]` channels.
    pub embed_dims: [usize; 2],
    pub num_heads: [usize; 2],
    pub mlp_ratios: [usize; 2],
    /// Blocks per stage; even blocks attend within windows, odd ones to a sub-sampled image.
    pub depths: [usize; 2],
    /// Sub-sampling of the keys in the global blocks (the `sr` convolution's kernel and stride).
    pub sr_ratios: [usize; 2],
    /// Side of the local attention windows.
    pub window: usize,
}

impl TwinsConfig {
    /// timm's `twins_svt_large`, stages 1–2.
    pub fn svt_large() -> Self {
        TwinsConfig { embed_dims: [128, 256], num_heads: [4, 8], mlp_ratios: [4, 4], depths: [2, 2], sr_ratios: [8, 4], window: 7 }
    }
}

/// Everything that shapes the network.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct MofConfig {
    /// Context width: split in half into the hidden state (tanh) and the context input (relu).
    pub feat_dim: usize,
    pub corr_levels: usize,
    pub corr_radius: usize,
    pub fnet: TwinsConfig,
    pub cnet: TwinsConfig,
    /// Outputs of the motion encoder's correlation blocks `convc1`, `convc2`.
    pub corr_channels: [usize; 2],
    /// Outputs of its flow blocks `convf1_`, `convf2`.
    pub flow_channels: [usize; 2],
}

impl Default for MofConfig {
    fn default() -> Self {
        MofConfig {
            feat_dim: 256,
            corr_levels: 4,
            corr_radius: 4,
            fnet: TwinsConfig::svt_large(),
            cnet: TwinsConfig::svt_large(),
            corr_channels: [128, 192],
            flow_channels: [128, 64],
        }
    }
}

/// `config.json` of a dump: the config plus the iteration count the reference ran.
#[derive(Deserialize)]
struct ConfigFile {
    arch: String,
    iters: Option<usize>,
    #[serde(flatten)]
    cfg: MofConfig,
}

impl MofConfig {
    /// The checkpoint VideoFlow's own inference loads, for the missing-weights error.
    pub const EXPECTED_WEIGHTS: &'static str =
        "VideoFlow's `MOF_sintel.pth` (or `MOF_things.pth` / `MOF_kitti.pth`, from VideoFlow_ckpt), or the same state dict as .safetensors";

    /// Parses a `config.json` (`{"arch": "mofnet", "iters": N, ...overrides}`).
    pub fn from_json(text: &str) -> Result<(Self, Option<usize>)> {
        let file: ConfigFile = serde_json::from_str(text)?;
        if file.arch != "mofnet" {
            return Err(FlowError::NetworkConfig { network: "MOFNet", problem: format!("config.json is for `{}`, not `mofnet`", file.arch) });
        }
        file.cfg.validate()?;
        Ok((file.cfg, file.iters))
    }

    /// Hidden-state (and context-input) channels of the update block.
    pub fn hidden_dim(&self) -> usize {
        self.feat_dim / 2
    }

    /// Channels of one direction's correlation features.
    pub fn corr_planes(&self) -> usize {
        self.corr_levels * (2 * self.corr_radius + 1).pow(2)
    }

    pub fn validate(&self) -> Result<()> {
        let bad = |problem: String| Err(FlowError::NetworkConfig { network: "MOFNet", problem });
        if self.feat_dim == 0 || !self.feat_dim.is_multiple_of(2) {
            return bad(format!("feat_dim must be even and positive, got {}", self.feat_dim));
        }
        if self.cnet.embed_dims[1] != self.feat_dim {
            return bad(format!(
                "the context encoder must output feat_dim = {} channels, its last stage has {}",
                self.feat_dim, self.cnet.embed_dims[1]
            ));
        }
        if self.corr_levels == 0 {
            return bad("corr_levels must be at least 1".into());
        }
        for (name, t) in [("fnet", &self.fnet), ("cnet", &self.cnet)] {
            for s in 0..2 {
                if t.num_heads[s] == 0 || t.embed_dims[s] % t.num_heads[s] != 0 {
                    return bad(format!("{name} stage {s}: {} channels do not split into {} heads", t.embed_dims[s], t.num_heads[s]));
                }
                if t.sr_ratios[s] == 0 || t.window < 2 || t.depths[s] == 0 {
                    return bad(format!("{name} stage {s}: sr_ratio, window (≥ 2) and depth must be positive"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_keep_the_sintel_defaults_elsewhere() -> Result<()> {
        let (cfg, iters) = MofConfig::from_json(r#"{"arch": "mofnet", "iters": 3, "corr_levels": 2}"#)?;
        assert_eq!(iters, Some(3));
        assert_eq!(cfg.corr_levels, 2);
        assert_eq!(cfg.corr_planes(), 162);
        assert_eq!(cfg.fnet, TwinsConfig::svt_large());
        assert_eq!(cfg.hidden_dim(), 128);
        let wrong = MofConfig::from_json(r#"{"arch": "raft_small"}"#).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(wrong.contains("not `mofnet`"), "{wrong}");
        let narrow = MofConfig::from_json(r#"{"arch": "mofnet", "feat_dim": 64}"#).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(narrow.contains("feat_dim = 64"), "{narrow}");
        Ok(())
    }
}
