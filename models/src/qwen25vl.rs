//! Qwen2.5-VL for conditional generation: the vision tower's features replace the image/video
//! placeholder tokens, the decoder runs on M-RoPE positions, and the LM head gives logits.

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

use crate::checkpoint::{CheckpointFiles, CheckpointWeights};
use crate::config::Qwen25VlConfig;
use crate::error::Result;
use crate::generate::greedy;
pub use crate::generate::{GenerateOptions, Generation, RepetitionPenalty};
use crate::ops::Linear;
pub use crate::prompt::{LabelPicks, Padding, PixelInput, PromptBatch, VideoBlocks, VisionFeatures, VisionInputs, causal_lm_loss};
use crate::prompt::{place_features, vision_spans};
use crate::rope::{RopePositions, rope_index};
use crate::text::{CausalMask, TextModel};
use crate::training_loss::{EmbeddingLeaf, TrainingLoss};
use crate::vision::{AdaptableTower, VisionTower};

#[derive(Debug, Clone)]
pub struct Qwen25Vl {
    visual: VisionTower,
    text: TextModel,
    lm_head: Linear,
    cfg: Qwen25VlConfig,
}

impl Qwen25Vl {
    /// Builds the model from a VarBuilder addressed by hub names (`visual.*`, `model.*`, `lm_head.*`).
    pub fn new(cfg: &Qwen25VlConfig, vb: VarBuilder) -> candle_core::Result<Self> {
        let visual = VisionTower::new(&cfg.vision, vb.pp("visual"))?;
        let text = TextModel::new(&cfg.text, vb.pp("model"))?;
        let lm_head = text.lm_head(&cfg.text, cfg.tie_word_embeddings, vb.pp("lm_head"))?;
        Ok(Self { visual, text, lm_head, cfg: cfg.clone() })
    }

    /// Loads a checkpoint (config + safetensors) for inference.
    pub fn load(files: &CheckpointFiles, dtype: DType, device: &Device) -> Result<Self> {
        let cfg = files.load_config()?;
        let vb = CheckpointWeights::open(&files.weights)?.var_builder(dtype, device);
        Ok(Self::new(&cfg, vb)?)
    }

    pub fn config(&self) -> &Qwen25VlConfig {
        &self.cfg
    }

    pub fn visual(&self) -> &VisionTower {
        &self.visual
    }

    pub fn text(&self) -> &TextModel {
        &self.text
    }

    /// The LM head, to take logits at chosen positions of [`Self::hidden_from_embeds`] only
    /// (scoring an answer's few tokens need not pay for `[L, vocab]` logits of the prompt).
    pub fn lm_head(&self) -> &Linear {
        &self.lm_head
    }

    /// Recompute decoder layers in the backward pass instead of keeping their activations;
    /// see [`crate::text::TextModel::enable_gradient_checkpointing`].
    pub fn enable_gradient_checkpointing(&mut self) -> crate::recompute::RecomputedGrads {
        self.text.enable_gradient_checkpointing()
    }

    /// `(checkpoint path, in, out)` of every linear layer.
    pub fn linear_shapes(&self) -> Vec<(String, usize, usize)> {
        let mut copy = self.clone();
        copy.linears_mut().into_iter().map(|(name, l)| (name, l.in_dim(), l.out_dim())).collect()
    }

    /// Every linear layer by checkpoint path (`visual.…`, `model.layers.…`, `lm_head`).
    pub fn linears_mut(&mut self) -> Vec<(String, &mut Linear)> {
        let mut out = Vec::new();
        self.visual.linears_mut("visual", &mut out);
        self.text.linears_mut("model", &mut out);
        out.push(("lm_head".to_owned(), &mut self.lm_head));
        out
    }

    pub fn encode_vision(&self, inputs: &VisionInputs) -> Result<VisionFeatures> {
        let run =
            |p: &Option<PixelInput>| -> Result<Option<Tensor>> { p.as_ref().map(|p| self.visual.forward(&p.pixel_values, &p.grids)).transpose() };
        Ok(VisionFeatures { images: run(&inputs.images)?, videos: run(&inputs.videos)? })
    }

    /// M-RoPE positions of a batch (the legacy algorithm the checkpoints were trained with).
    pub fn positions(&self, batch: &PromptBatch, inputs: &VisionInputs) -> Result<RopePositions> {
        batch.validate()?;
        let spans = vision_spans(batch, inputs, VideoBlocks::Whole, self.cfg.vision.spatial_merge_size)?;
        rope_index(&batch.kinds, &batch.mask, &spans, self.cfg.vision.spatial_merge_size, f64::from(self.cfg.vision.tokens_per_second))
    }

    /// Prompt embeddings `[B, L, hidden]` with vision features in place of the placeholders.
    pub fn embed(&self, batch: &PromptBatch, features: &VisionFeatures) -> Result<Tensor> {
        batch.validate()?;
        let device = self.text.embedding_weight().device();
        let text = self.text.embed(&batch.ids_tensor(device)?)?;
        place_features(batch, text, features)
    }

    /// Logits `[B, L, vocab]` for every position of the prompts.
    ///
    /// `positions` overrides the computed M-RoPE positions (to reproduce another implementation).
    pub fn forward(&self, batch: &PromptBatch, inputs: &VisionInputs, positions: Option<&RopePositions>) -> Result<Tensor> {
        let features = self.encode_vision(inputs)?;
        let embeds = self.embed(batch, &features)?;
        let positions = match positions {
            Some(p) => p.clone(),
            None => self.positions(batch, inputs)?,
        };
        self.forward_embeds(&embeds, &batch.mask, &positions)
    }

    /// Decoder + LM head on ready embeddings (the entry point for fused motion features).
    pub fn forward_embeds(&self, embeds: &Tensor, mask: &[Vec<bool>], positions: &RopePositions) -> Result<Tensor> {
        Ok(self.lm_head.forward(&self.hidden_from_embeds(embeds, mask, positions)?)?)
    }

    /// The training loss of [`Self::loss_from_embeds`] on the embeddings [`Self::embed`] makes,
    /// ready for [`TrainingLoss::backward`], which differentiates the LM head and a trained
    /// token embedding directly (see [`crate::training_loss`]): the trainer's path.
    pub fn training_loss(
        &self,
        batch: &PromptBatch,
        features: &VisionFeatures,
        positions: &RopePositions,
        labels: &[Vec<i64>],
    ) -> Result<TrainingLoss> {
        batch.validate()?;
        let weight = self.text.embedding_weight();
        let (embedding, embeds) = if weight.is_variable() {
            let leaf = EmbeddingLeaf::lookup(weight, &batch.ids_tensor(weight.device())?.flatten_all()?)?;
            let text = leaf.rows().reshape((batch.rows(), batch.len(), ()))?;
            (Some(leaf), place_features(batch, text, features)?)
        } else {
            (None, self.embed(batch, features)?)
        };
        let (chosen, picks) = self.labelled_states(&embeds, &batch.mask, positions, labels)?;
        TrainingLoss::new(&self.lm_head, chosen, picks.targets(), embedding)
    }

    /// The decoder's final hidden states `[B, L, hidden]`, before the LM head.
    pub fn hidden_from_embeds(&self, embeds: &Tensor, mask: &[Vec<bool>], positions: &RopePositions) -> Result<Tensor> {
        let device = embeds.device();
        let (cos, sin) = self.text.rotary().for_prompt(positions, device)?;
        Ok(self.text.forward(embeds, &cos, &sin, &CausalMask::new(mask, 0, embeds.dim(1)?), None)?)
    }

    /// The training loss, [`causal_lm_loss`] of [`Self::forward_embeds`], with the LM head
    /// applied only to the positions that predict a label. An SFT answer is a few dozen of a
    /// prompt's hundreds of tokens, and the head (vocab × hidden) is the largest matmul of the
    /// model: the full logits would cost most of the step's FLOPs and a `[L, vocab]` activation
    /// (and its gradient) for rows whose loss is zero.
    pub fn loss_from_embeds(&self, embeds: &Tensor, mask: &[Vec<bool>], positions: &RopePositions, labels: &[Vec<i64>]) -> Result<Tensor> {
        let (chosen, picks) = self.labelled_states(embeds, mask, positions, labels)?;
        picks.mean_cross_entropy(&self.lm_head.forward(&chosen)?)
    }

    /// The decoder's final states `[n, hidden]` at the `n` positions that predict a label, and
    /// which positions and labels those are (the LM head need run on these rows only).
    pub fn labelled_states(
        &self,
        embeds: &Tensor,
        mask: &[Vec<bool>],
        positions: &RopePositions,
        labels: &[Vec<i64>],
    ) -> Result<(Tensor, LabelPicks)> {
        let hidden = self.hidden_from_embeds(embeds, mask, positions)?;
        let (rows, len, width) = hidden.dims3()?;
        let picks = LabelPicks::new(labels, rows, len, self.lm_head.out_dim())?;
        let chosen = hidden.reshape((rows * len, width))?.index_select(&picks.rows_tensor(hidden.device())?, 0)?;
        Ok((chosen, picks))
    }

    /// transformers' `hidden_states` for a batch: embeddings, then each decoder layer's output
    /// (the last one after the final norm).
    pub fn hidden_states(&self, batch: &PromptBatch, inputs: &VisionInputs, positions: &RopePositions) -> Result<Vec<Tensor>> {
        let embeds = self.embed(batch, &self.encode_vision(inputs)?)?;
        let device = embeds.device();
        let (cos, sin) = self.text.rotary().for_prompt(positions, device)?;
        Ok(self.text.forward_traced(&embeds, &cos, &sin, &CausalMask::new(&batch.mask, 0, embeds.dim(1)?), None)?)
    }

    /// Greedy decoding with a KV cache; rows of a left-padded batch decode in lockstep.
    pub fn generate(
        &self,
        batch: &PromptBatch,
        inputs: &VisionInputs,
        positions: Option<&RopePositions>,
        options: &GenerateOptions,
    ) -> Result<Generation> {
        let features = self.encode_vision(inputs)?;
        let embeds = self.embed(batch, &features)?;
        let positions = match positions {
            Some(p) => p.clone(),
            None => self.positions(batch, inputs)?,
        };
        self.generate_from_embeds(&embeds, &batch.mask, &positions, options)
    }

    pub fn generate_from_embeds(
        &self,
        embeds: &Tensor,
        mask: &[Vec<bool>],
        positions: &RopePositions,
        options: &GenerateOptions,
    ) -> Result<Generation> {
        self.generate_penalised(embeds, mask, positions, options, None)
    }

    /// [`Self::generate_from_embeds`] with Hugging Face's repetition penalty applied before
    /// every argmax (`None`: plain greedy decoding).
    pub fn generate_penalised(
        &self,
        embeds: &Tensor,
        mask: &[Vec<bool>],
        positions: &RopePositions,
        options: &GenerateOptions,
        penalty: Option<&RepetitionPenalty>,
    ) -> Result<Generation> {
        greedy(&self.text, &self.lm_head, embeds, mask, positions, options, penalty, None)
    }
}
