//! Qwen3-VL for conditional generation: the vision tower's features replace the image/video
//! placeholder tokens, its DeepStack levels are added to the first decoder layers' outputs at
//! those positions, and the Qwen3 decoder (q/k norms, interleaved M-RoPE) gives logits.
//!
//! A video enters the prompt as one vision block per temporal grid step, each after its own
//! `<t seconds>` text, so every block has `t = 1`: positions are the Qwen2.5-VL algorithm run
//! over those blocks, and Qwen3-VL's rule (text resumes at start + max(h, w)) and the legacy one
//! (max + 1) agree.

pub mod config;
pub mod vision;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

use crate::checkpoint::{CheckpointFiles, CheckpointWeights};
use crate::error::{ModelError, Result};
use crate::generate::{GenerateOptions, Generation, RepetitionPenalty, greedy};
use crate::ops::Linear;
use crate::prompt::{LabelPicks, PixelInput, PromptBatch, VideoBlocks, VisionFeatures, VisionInputs, place_features, vision_spans};
use crate::rope::{RopePositions, TokenKind, rope_index};
use crate::text::{CausalMask, Deepstack, TextModel};
use crate::training_loss::{EmbeddingLeaf, TrainingLoss};
use crate::vision::AdaptableTower;
pub use config::{Qwen3VisionConfig, Qwen3VlConfig};
use vision::{Qwen3VisionOutput, Qwen3VisionTower};

/// Vision-tower outputs of a batch's images and videos, each in prompt order.
#[derive(Debug, Clone, Default)]
pub struct Qwen3Features {
    pub images: Option<Qwen3VisionOutput>,
    pub videos: Option<Qwen3VisionOutput>,
}

impl Qwen3Features {
    /// The same features `k` times over, one copy per row of a batch that repeats its media
    /// (each option of a question ranked by likelihood).
    pub fn repeated(&self, k: usize) -> candle_core::Result<Self> {
        let repeat = |o: &Option<Qwen3VisionOutput>| -> candle_core::Result<Option<Qwen3VisionOutput>> {
            let Some(o) = o else { return Ok(None) };
            let rows = |t: &Tensor| Tensor::cat(&vec![t; k], 0);
            Ok(Some(Qwen3VisionOutput { features: rows(&o.features)?, deepstack: o.deepstack.iter().map(rows).collect::<candle_core::Result<_>>()? }))
        };
        Ok(Self { images: repeat(&self.images)?, videos: repeat(&self.videos)? })
    }

    fn merged(&self) -> VisionFeatures {
        VisionFeatures { images: self.images.as_ref().map(|o| o.features.clone()), videos: self.videos.as_ref().map(|o| o.features.clone()) }
    }
}

#[derive(Debug, Clone)]
pub struct Qwen3Vl {
    visual: Qwen3VisionTower,
    text: TextModel,
    lm_head: Linear,
    cfg: Qwen3VlConfig,
}

impl Qwen3Vl {
    /// Builds the model from a VarBuilder addressed by hub names (`visual.*`, `model.*`,
    /// `lm_head.*`); [`CheckpointWeights`] maps transformers' `model.visual.*` and
    /// `model.language_model.*` onto them.
    pub fn new(cfg: &Qwen3VlConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let visual = Qwen3VisionTower::new(&cfg.vision, vb.pp("visual"))?;
        let text = TextModel::new(&cfg.text, vb.pp("model"))?;
        let lm_head = text.lm_head(&cfg.text, cfg.tie_word_embeddings, vb.pp("lm_head"))?;
        Ok(Self { visual, text, lm_head, cfg: cfg.clone() })
    }

    /// Loads a checkpoint (config + safetensors, one file or shards) for inference.
    pub fn load(files: &CheckpointFiles, dtype: DType, device: &Device) -> Result<Self> {
        let cfg = Qwen3VlConfig::from_file(&files.config)?;
        let vb = CheckpointWeights::open(&files.weights)?.var_builder(dtype, device);
        Ok(Self::new(&cfg, vb)?)
    }

    pub fn config(&self) -> &Qwen3VlConfig {
        &self.cfg
    }

    pub fn visual(&self) -> &Qwen3VisionTower {
        &self.visual
    }

    pub fn text(&self) -> &TextModel {
        &self.text
    }

    /// Recompute decoder layers in the backward pass instead of keeping their activations;
    /// see [`crate::text::TextModel::enable_gradient_checkpointing`].
    pub fn enable_gradient_checkpointing(&mut self) -> crate::recompute::RecomputedGrads {
        self.text.enable_gradient_checkpointing()
    }

    /// Every linear layer by checkpoint path (`visual.…`, `model.layers.…`, `lm_head`).
    pub fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let mut out = Vec::new();
        self.visual.linears_mut("visual", &mut out);
        self.text.linears_mut("model", &mut out);
        out.push(("lm_head".to_owned(), &mut self.lm_head));
        out
    }

    pub fn encode_vision(&self, inputs: &VisionInputs) -> Result<Qwen3Features> {
        let run = |p: &Option<PixelInput>| p.as_ref().map(|p| self.visual.forward(&p.pixel_values, &p.grids)).transpose();
        Ok(Qwen3Features { images: run(&inputs.images)?, videos: run(&inputs.videos)? })
    }

    /// M-RoPE positions of a batch, each video frame its own block.
    pub fn positions(&self, batch: &PromptBatch, inputs: &VisionInputs) -> Result<RopePositions> {
        batch.validate()?;
        let merge = self.cfg.vision.spatial_merge_size;
        let spans = vision_spans(batch, inputs, VideoBlocks::PerFrame, merge)?;
        rope_index(&batch.kinds, &batch.mask, &spans, merge, 0.0)
    }

    /// Prompt embeddings `[B, L, hidden]` with vision features in place of the placeholders.
    pub fn embed(&self, batch: &PromptBatch, features: &Qwen3Features) -> Result<Tensor> {
        batch.validate()?;
        let text = self.text.embed(&batch.ids_tensor(self.text.embedding_weight().device())?)?;
        place_features(batch, text, &features.merged())
    }

    /// The DeepStack levels laid onto the batch's vision positions (images and videos
    /// interleaved as the prompt orders them); `None` when the prompt holds no vision.
    pub fn deepstack(&self, batch: &PromptBatch, features: &Qwen3Features) -> Result<Option<Deepstack>> {
        let levels = self.cfg.vision.deepstack_visual_indexes.len();
        let image_rows = features.images.as_ref().map_or(Ok(0), |o| o.features.dim(0))?;
        let (mut rows, mut sources) = (Vec::new(), Vec::new());
        let (mut next_image, mut next_video) = (0, 0);
        for (b, (kinds, mask)) in batch.kinds.iter().zip(&batch.mask).enumerate() {
            for (i, (&kind, &real)) in kinds.iter().zip(mask).enumerate() {
                let source = match (kind, real) {
                    (TokenKind::Image, true) => {
                        next_image += 1;
                        next_image - 1
                    }
                    (TokenKind::Video, true) => {
                        next_video += 1;
                        image_rows + next_video - 1
                    }
                    _ => continue,
                };
                rows.push((b * batch.len() + i) as u32);
                sources.push(source as u32);
            }
        }
        if rows.is_empty() || levels == 0 {
            return Ok(None);
        }
        let device = self.text.embedding_weight().device();
        let sources = Tensor::new(sources, device)?;
        let level = |k: usize| -> Result<Tensor> {
            let parts: Vec<Tensor> = [&features.images, &features.videos].into_iter().flatten().map(|o| o.deepstack[k].clone()).collect();
            let width = self.cfg.text.hidden_size;
            if let Some(p) = parts.iter().find(|p| p.dim(1).ok() != Some(width)) {
                return Err(ModelError::Pixels { problem: format!("DeepStack level {k} is {:?}, not of the text width {width}", p.dims()) });
            }
            Ok(Tensor::cat(&parts, 0)?.index_select(&sources, 0)?)
        };
        let levels = (0..levels).map(level).collect::<Result<Vec<_>>>()?;
        Ok(Some(Deepstack::new(Tensor::new(rows, device)?, levels)))
    }

    /// Logits `[B, L, vocab]` for every position of the prompts; `positions` overrides the
    /// computed ones (to reproduce another implementation).
    pub fn forward(&self, batch: &PromptBatch, inputs: &VisionInputs, positions: Option<&RopePositions>) -> Result<Tensor> {
        let features = self.encode_vision(inputs)?;
        let positions = match positions {
            Some(p) => p.clone(),
            None => self.positions(batch, inputs)?,
        };
        let hidden = self.hidden(batch, &features, &positions)?;
        Ok(self.lm_head.forward(&hidden)?)
    }

    /// The decoder's final hidden states `[B, L, hidden]`, before the LM head.
    pub fn hidden(&self, batch: &PromptBatch, features: &Qwen3Features, positions: &RopePositions) -> Result<Tensor> {
        let embeds = self.embed(batch, features)?;
        let deepstack = self.deepstack(batch, features)?;
        let (cos, sin) = self.text.rotary().for_prompt(positions, embeds.device())?;
        let mask = CausalMask::new(&batch.mask, 0, embeds.dim(1)?);
        Ok(self.text.forward_stacked(&embeds, &cos, &sin, &mask, None, deepstack.as_ref())?)
    }

    /// Mean next-token cross-entropy over the labelled positions, with the LM head applied to
    /// those rows only.
    pub fn loss(&self, batch: &PromptBatch, inputs: &VisionInputs, positions: &RopePositions, labels: &[Vec<i64>]) -> Result<Tensor> {
        let (chosen, picks) = self.labelled_states(batch, &self.encode_vision(inputs)?, positions, labels)?;
        picks.mean_cross_entropy(&self.lm_head.forward(&chosen)?)
    }

    /// The decoder's final states `[n, hidden]` at the `n` positions that predict a label, and
    /// which positions and labels those are (the LM head need run on these rows only).
    pub fn labelled_states(
        &self,
        batch: &PromptBatch,
        features: &Qwen3Features,
        positions: &RopePositions,
        labels: &[Vec<i64>],
    ) -> Result<(Tensor, LabelPicks)> {
        let hidden = self.hidden(batch, features, positions)?;
        let (rows, len, width) = hidden.dims3()?;
        let picks = LabelPicks::new(labels, rows, len, self.lm_head.out_dim())?;
        let chosen = hidden.reshape((rows * len, width))?.index_select(&picks.rows_tensor(hidden.device())?, 0)?;
        Ok((chosen, picks))
    }

    /// The LM head, to take logits at chosen positions of [`Self::labelled_states`] only.
    pub fn lm_head(&self) -> &Linear {
        &self.lm_head
    }

    /// The training loss of [`Self::loss`], ready for [`TrainingLoss::backward`], which
    /// differentiates the LM head and a trained token embedding directly (see
    /// [`crate::training_loss`]): the trainer's path.
    pub fn training_loss(
        &self,
        batch: &PromptBatch,
        features: &Qwen3Features,
        positions: &RopePositions,
        labels: &[Vec<i64>],
    ) -> Result<TrainingLoss> {
        batch.validate()?;
        let weight = self.text.embedding_weight();
        let (embedding, embeds) = if weight.is_variable() {
            let leaf = EmbeddingLeaf::lookup(weight, &batch.ids_tensor(weight.device())?.flatten_all()?)?;
            let text = leaf.rows().reshape((batch.rows(), batch.len(), ()))?;
            (Some(leaf), place_features(batch, text, &features.merged())?)
        } else {
            (None, self.embed(batch, features)?)
        };
        let deepstack = self.deepstack(batch, features)?;
        let (cos, sin) = self.text.rotary().for_prompt(positions, embeds.device())?;
        let mask = CausalMask::new(&batch.mask, 0, embeds.dim(1)?);
        let hidden = self.text.forward_stacked(&embeds, &cos, &sin, &mask, None, deepstack.as_ref())?;
        let (rows, len, width) = hidden.dims3()?;
        let picks = LabelPicks::new(labels, rows, len, self.lm_head.out_dim())?;
        let chosen = hidden.reshape((rows * len, width))?.index_select(&picks.rows_tensor(hidden.device())?, 0)?;
        TrainingLoss::new(&self.lm_head, chosen, picks.targets(), embedding)
    }

    /// `(checkpoint path, in, out)` of every linear layer.
    pub fn linear_shapes(&self) -> Vec<(String, usize, usize)> {
        let mut copy = self.clone();
        copy.linears_mut().into_iter().map(|(name, l)| (name, l.in_dim(), l.out_dim())).collect()
    }

    /// transformers' `hidden_states`: embeddings, then each decoder layer's output before its
    /// DeepStack addition (the last one after the final norm).
    pub fn hidden_states(&self, batch: &PromptBatch, inputs: &VisionInputs, positions: &RopePositions) -> Result<Vec<Tensor>> {
        let features = self.encode_vision(inputs)?;
        let embeds = self.embed(batch, &features)?;
        let deepstack = self.deepstack(batch, &features)?;
        let (cos, sin) = self.text.rotary().for_prompt(positions, embeds.device())?;
        let mask = CausalMask::new(&batch.mask, 0, embeds.dim(1)?);
        Ok(self.text.forward_traced(&embeds, &cos, &sin, &mask, deepstack.as_ref())?)
    }

    /// Greedy decoding with a KV cache; rows of a left-padded batch decode in lockstep.
    pub fn generate(
        &self,
        batch: &PromptBatch,
        inputs: &VisionInputs,
        positions: Option<&RopePositions>,
        options: &GenerateOptions,
        penalty: Option<&RepetitionPenalty>,
    ) -> Result<Generation> {
        let features = self.encode_vision(inputs)?;
        let positions = match positions {
            Some(p) => p.clone(),
            None => self.positions(batch, inputs)?,
        };
        self.generate_from(batch, &features, &positions, options, penalty)
    }

    /// [`Self::generate`] from vision features already computed (fused with motion tokens, or
    /// encoded once for several prompts).
    pub fn generate_from(
        &self,
        batch: &PromptBatch,
        features: &Qwen3Features,
        positions: &RopePositions,
        options: &GenerateOptions,
        penalty: Option<&RepetitionPenalty>,
    ) -> Result<Generation> {
        let embeds = self.embed(batch, features)?;
        let deepstack = self.deepstack(batch, features)?;
        greedy(&self.text, &self.lm_head, &embeds, &batch.mask, positions, options, penalty, deepstack.as_ref())
    }
}
