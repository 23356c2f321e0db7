//! The vision-language models motionvl trains and evaluates, behind one type. Which one a
//! checkpoint holds is read from its config's `model_type`, so `train sft` and `evaluate run`
//! take either with the same flags.

use candle_core::{DType, Device};

use crate::checkpoint::CheckpointFiles;
use crate::error::{ModelError, Result};
use crate::motion::{MotionBranch, MotionTower, qwen3_features, vision_features};
use crate::ops::Linear;
use crate::prompt::{PixelInput, PromptBatch, VisionInputs};
use crate::qwen3vl::Qwen3Vl;
use crate::qwen25vl::Qwen25Vl;
use crate::recompute::RecomputedGrads;
use crate::rope::RopePositions;
use crate::text::TextModel;
use crate::training_loss::TrainingLoss;

pub use motionvl_util::family::ModelFamily as Family;

#[derive(Debug, Clone)]
pub enum Backbone {
    Qwen25(Qwen25Vl),
    Qwen3(Qwen3Vl),
}

impl Backbone {
    /// Loads a checkpoint of either family for inference or LoRA training.
    pub fn load(files: &CheckpointFiles, dtype: DType, device: &Device) -> Result<Self> {
        let family = Family::of_config(&files.config).map_err(|reason| ModelError::Config { path: files.config.clone(), reason })?;
        Ok(match family {
            Family::Qwen25Vl => Self::Qwen25(Qwen25Vl::load(files, dtype, device)?),
            Family::Qwen3Vl => Self::Qwen3(Qwen3Vl::load(files, dtype, device)?),
        })
    }

    pub fn family(&self) -> Family {
        match self {
            Self::Qwen25(_) => Family::Qwen25Vl,
            Self::Qwen3(_) => Family::Qwen3Vl,
        }
    }

    /// The Qwen2.5-VL model, when the checkpoint holds one.
    pub fn qwen25(&self) -> Option<&Qwen25Vl> {
        match self {
            Self::Qwen25(m) => Some(m),
            Self::Qwen3(_) => None,
        }
    }

    /// A copy of the vision tower with its base weights only: the motion encoder of a branch
    /// that has none of its own.
    pub fn motion_tower(&self) -> MotionTower {
        match self {
            Self::Qwen25(m) => MotionTower::qwen25(m.visual()),
            Self::Qwen3(m) => MotionTower::qwen3(m.visual()),
        }
    }

    pub fn text(&self) -> &TextModel {
        match self {
            Self::Qwen25(m) => m.text(),
            Self::Qwen3(m) => m.text(),
        }
    }

    pub fn hidden_size(&self) -> usize {
        match self {
            Self::Qwen25(m) => m.config().text.hidden_size,
            Self::Qwen3(m) => m.config().text.hidden_size,
        }
    }

    /// `image`, `video`, `vision_start`, `vision_end` token ids, in the order of
    /// [`crate::config::vision_token_mismatch`].
    pub fn vision_token_ids(&self) -> [u32; 4] {
        match self {
            Self::Qwen25(m) => {
                let c = m.config();
                [c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id]
            }
            Self::Qwen3(m) => {
                let c = m.config();
                [c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id]
            }
        }
    }

    /// Where the tokenizer's vision ids differ from the model's (see
    /// [`crate::config::vision_token_mismatch`]).
    pub fn vision_token_mismatch(&self, tokenizer: [u32; 4]) -> Option<ModelError> {
        crate::config::vision_token_mismatch(self.vision_token_ids(), tokenizer)
    }

    pub fn enable_gradient_checkpointing(&mut self) -> RecomputedGrads {
        match self {
            Self::Qwen25(m) => m.enable_gradient_checkpointing(),
            Self::Qwen3(m) => m.enable_gradient_checkpointing(),
        }
    }

    /// `(checkpoint path, in, out)` of every linear layer.
    pub fn linear_shapes(&self) -> Vec<(String, usize, usize)> {
        match self {
            Self::Qwen25(m) => m.linear_shapes(),
            Self::Qwen3(m) => m.linear_shapes(),
        }
    }

    /// Every linear layer by checkpoint path (`visual.…`, `model.layers.…`, `lm_head`).
    pub fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        match self {
            Self::Qwen25(m) => m.linears_mut(),
            Self::Qwen3(m) => m.linears_mut(),
        }
    }

    /// M-RoPE positions of a batch, as the family lays its vision blocks out.
    pub fn positions(&self, batch: &PromptBatch, inputs: &VisionInputs) -> Result<RopePositions> {
        match self {
            Self::Qwen25(m) => m.positions(batch, inputs),
            Self::Qwen3(m) => m.positions(batch, inputs),
        }
    }

    /// The training loss of a batch (see [`TrainingLoss`]); `motion` fuses a motion branch's
    /// features into the videos'.
    pub fn training_loss(
        &self,
        batch: &PromptBatch,
        inputs: &VisionInputs,
        motion: Option<(&MotionBranch, Option<&PixelInput>)>,
        labels: &[Vec<i64>],
    ) -> Result<TrainingLoss> {
        let positions = self.positions(batch, inputs)?;
        let (branch, pixels) = (motion.map(|(branch, _)| branch), motion.and_then(|(_, pixels)| pixels));
        match self {
            Self::Qwen25(m) => m.training_loss(batch, &vision_features(m, branch, inputs, pixels)?, &positions, labels),
            Self::Qwen3(m) => m.training_loss(batch, &qwen3_features(m, branch, inputs, pixels)?, &positions, labels),
        }
    }
}
