//! The settings of an evaluation run, as a TOML file (`configs/eval/*.toml`) that command-line
//! flags override key by key. Keys are grouped by concern: `[model]`, `[generation]`,
//! `[protocol]`; the defaults are SPEC §2's protocol (at most 32 frames chosen by clip length,
//! 256–512 × 28² pixels per frame, greedy decoding of at most 128 new tokens).

use std::path::{Path, PathBuf};

pub use motionvl_data::media_config::ProtocolConfig;
use serde::{Deserialize, Serialize};

use crate::error::{EvalError, Result};

/// Everything `evaluate run` needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// `--bench` name (see [`crate::bench::REGISTRY`]).
    #[serde(default)]
    pub bench: String,
    #[serde(default)]
    pub manifest: PathBuf,
    /// The run folder: predictions, `run.json` and the reports.
    #[serde(default)]
    pub out: PathBuf,
    /// Name of the run in reports; default: the run folder's name.
    #[serde(default)]
    pub name: Option<String>,
    /// Folder relative media paths resolve against; default: the manifest's folder.
    #[serde(default)]
    pub media_root: Option<PathBuf>,
    /// Leave out bad manifest rows and questions whose media fail to load, and count them.
    #[serde(default)]
    pub skip_bad: bool,
    /// Continue the predictions already in `out` (required when there are some).
    #[serde(default)]
    pub resume: bool,
    /// Ask only the first N questions of the manifest (and score only those).
    #[serde(default)]
    pub limit: Option<usize>,
    #[serde(default)]
    pub model: ModelConfig,
    #[serde(default)]
    pub generation: GenerationConfig,
    #[serde(default)]
    pub protocol: ProtocolConfig,
    #[serde(default)]
    pub motion: MotionConfig,
    /// The CVAA alignment prior appended to each question (`--cvaa`).
    #[serde(default)]
    pub cvaa: crate::prior::CvaaPriorConfig,
}

/// The SIS-Motion branch at evaluation time. A motion-aware checkpoint (a `train sft --motion`
/// checkpoint folder, or a merged model, holding `motion.json` + `motion.safetensors`) is
/// evaluated with the flow estimator it was trained with; naming another one, or `none`, is
/// refused unless `force` is set, since the connector learnt that estimator's flow statistics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MotionConfig {
    /// Flow estimator by registry name (`--motion`); default: the checkpoint's own, or none
    /// for a visual-only checkpoint.
    #[serde(default)]
    pub estimator: Option<String>,
    /// Weights of a network estimator (RAFT) when it needs a file.
    #[serde(default)]
    pub weights: Option<PathBuf>,
    /// Flow cache folder; default `<out>/flow-cache`.
    #[serde(default)]
    pub cache_dir: Option<PathBuf>,
    /// Every flow must come from the cache (`--flow-cache-only`): a missing entry is an error
    /// naming the video, its frames and the cache, raised before any question is asked.
    #[serde(default)]
    pub cache_only: bool,
    /// Evaluate with a different estimator (or none) than the checkpoint was trained with.
    #[serde(default)]
    pub force: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// A local checkpoint folder or a hub id (`org/name[@revision]`).
    #[serde(default)]
    pub checkpoint: String,
    /// A PEFT LoRA adapter folder, or a trainer checkpoint folder holding one in `adapter/`.
    #[serde(default)]
    pub adapter: Option<PathBuf>,
    /// `f32`, `bf16` or `f16`; default f32 on the CPU and bf16 on CUDA.
    #[serde(default)]
    pub dtype: Option<String>,
    /// `cpu`, `cuda` or `cuda:N`.
    #[serde(default = "default_device")]
    pub device: String,
}

fn default_device() -> String {
    "cpu".to_string()
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            checkpoint: String::new(),
            adapter: None,
            dtype: None,
            device: default_device(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GenerationConfig {
    /// Questions decoded together (left-padded, one KV cache).
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// SPEC §2: at most 128.
    #[serde(default = "default_max_new")]
    pub max_new_tokens: usize,
}

fn default_batch() -> usize {
    4
}

fn default_max_new() -> usize {
    128
}

impl Default for GenerationConfig {
    fn default() -> Self {
        Self {
            batch_size: default_batch(),
            max_new_tokens: default_max_new(),
        }
    }
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            bench: String::new(),
            manifest: PathBuf::new(),
            out: PathBuf::new(),
            name: None,
            media_root: None,
            skip_bad: false,
            resume: false,
            limit: None,
            model: ModelConfig::default(),
            generation: GenerationConfig::default(),
            protocol: ProtocolConfig::default(),
            motion: MotionConfig::default(),
            cvaa: crate::prior::CvaaPriorConfig::default(),
        }
    }
}

impl RunConfig {
    /// Reads a TOML run file; relative paths in it stay relative to the working directory,
    /// like the flags that override them.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(EvalError::io("read", path))?;
        toml::from_str(&text).map_err(|e| EvalError::Config(format!("{}: {e}", path.display())))
    }

    /// Checks that the required keys are set and the numbers make sense.
    pub fn validate(&self) -> Result<()> {
        let missing = |what: &str, flag: &str| {
            Err(EvalError::Config(format!(
                "no {what}: pass {flag} or set it in the config file"
            )))
        };
        if self.bench.is_empty() {
            return missing("benchmark", "--bench");
        }
        if self.manifest.as_os_str().is_empty() {
            return missing("manifest", "--manifest");
        }
        if self.out.as_os_str().is_empty() {
            return missing("output folder", "--out");
        }
        if self.generation.batch_size == 0 || self.generation.max_new_tokens == 0 {
            return Err(EvalError::Config(
                "batch_size and max_new_tokens must be at least 1".into(),
            ));
        }
        if self.protocol.min_pixels > self.protocol.max_pixels {
            return Err(EvalError::Config(format!(
                "min_pixels {} exceeds max_pixels {}",
                self.protocol.min_pixels, self.protocol.max_pixels
            )));
        }
        Ok(())
    }

    /// The name of the run in reports.
    pub fn run_name(&self) -> String {
        self.name.clone().unwrap_or_else(|| {
            self.out
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "run".to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_spec_protocol() {
        let cfg: RunConfig = toml::from_str("bench = \"sisbench\"").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.protocol.max_frames, 32);
        assert_eq!(
            (cfg.protocol.min_pixels, cfg.protocol.max_pixels),
            (256 * 28 * 28, 512 * 28 * 28)
        );
        assert_eq!(cfg.generation.max_new_tokens, 128);
        assert_eq!(cfg.model.device, "cpu");
    }

    #[test]
    fn unknown_keys_are_refused() {
        let err = toml::from_str::<RunConfig>("[generation]\nmax_tokens = 3")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("max_tokens"), "{err}");
    }
}
