//! What a model family's processor does with pixels and prompts: Qwen2.5-VL's (patch 14, CLIP
//! normalisation, a per-frame pixel bound, a default system turn, one block per video) or
//! Qwen3-VL's (patch 16, mean and std 0.5, a bound over the whole clip, no default system
//! turn, a `<t seconds>` block per temporal step, laid out as transformers 4.57 does, the
//! official code's pin), with a checkpoint's own
//! `preprocessor_config.json` read over the family's defaults.

use std::path::Path;

pub use motionvl_util::family::ModelFamily;

use crate::preprocess::{PreprocessConfig, PreprocessError};
use crate::text::{DEFAULT_SYSTEM_PROMPT, TemplateOptions, VideoLayout};

#[derive(Debug, Clone, PartialEq)]
pub struct ModelProcessor {
    pub family: ModelFamily,
    /// Patch sizes, normalisation and the processor's own pixel bounds.
    pub pixels: PreprocessConfig,
}

impl ModelProcessor {
    /// The family's processor with the hub checkpoints' settings.
    pub fn of_family(family: ModelFamily) -> Self {
        let pixels = match family {
            ModelFamily::Qwen25Vl => PreprocessConfig::default(),
            ModelFamily::Qwen3Vl => PreprocessConfig::qwen3_vl(),
        };
        Self { family, pixels }
    }

    /// The processor of a checkpoint folder: its `preprocessor_config.json` when it has one
    /// (patch sizes, normalisation, pixel bounds), the family's defaults otherwise. How video
    /// bounds apply is the family's processor class, not a key of that file.
    pub fn of_checkpoint(family: ModelFamily, dir: &Path) -> Result<Self, PreprocessError> {
        let file = dir.join("preprocessor_config.json");
        Self::with_config_file(family, file.is_file().then_some(file.as_path()))
    }

    /// The family's processor with `file` (a `preprocessor_config.json`, wherever it was
    /// fetched to) read over its defaults, when there is one.
    pub fn with_config_file(family: ModelFamily, file: Option<&Path>) -> Result<Self, PreprocessError> {
        let mut processor = Self::of_family(family);
        if let Some(file) = file {
            let video_bound = processor.pixels.video_bound;
            processor.pixels = PreprocessConfig { video_bound, ..PreprocessConfig::from_json_file(file)? };
        }
        Ok(processor)
    }

    /// `base` with the family's system turn and video layout.
    pub fn template(&self, base: TemplateOptions) -> TemplateOptions {
        match self.family {
            ModelFamily::Qwen25Vl => {
                TemplateOptions { system_prompt: Some(DEFAULT_SYSTEM_PROMPT.to_string()), video_layout: VideoLayout::Whole, ..base }
            }
            ModelFamily::Qwen3Vl => TemplateOptions { system_prompt: None, video_layout: VideoLayout::Timestamped, ..base },
        }
    }
}
