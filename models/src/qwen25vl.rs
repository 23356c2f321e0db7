//! Qwen2.5-VL for conditional generation: the vision tower's features replace the image/video
//! placeholder tokens, the decoder runs on M-RoPE positions, and the LM head gives logits.

use candle_core::{D, DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

use crate::checkpoint::{CheckpointFiles, CheckpointWeights};
use crate::config::Qwen25VlConfig;
use crate::error::{ModelError, Result};
use crate::ops::Linear;
use crate::rope::{RopePositions, TokenKind, VisionSpan, rope_index};
use crate::text::{CausalMask, KvCache, TextModel};
use crate::training_loss::{EmbeddingLeaf, TrainingLoss, log_softmax_f32, mean_nll};
use crate::vision::VisionTower;

/// Token ids of a left-padded batch with, per position, whether it is real and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptBatch {
    pub ids: Vec<Vec<u32>>,
    pub mask: Vec<Vec<bool>>,
    pub kinds: Vec<Vec<TokenKind>>,
}

impl PromptBatch {
    /// One unpadded prompt.
    pub fn single(ids: Vec<u32>, kinds: Vec<TokenKind>) -> Self {
        let mask = vec![true; ids.len()];
        Self { ids: vec![ids], mask: vec![mask], kinds: vec![kinds] }
    }

    /// Rows of `(token ids, mm_token_type_ids)` (0 text, 1 image, 2 video) padded with `pad_id` to
    /// the longest, on the given side.
    pub fn padded(rows: &[(&[u32], &[u8])], pad_id: u32, side: Padding) -> Self {
        let len = rows.iter().map(|(ids, _)| ids.len()).max().unwrap_or(0);
        let mut batch = Self { ids: Vec::with_capacity(rows.len()), mask: Vec::with_capacity(rows.len()), kinds: Vec::with_capacity(rows.len()) };
        for &(ids, types) in rows {
            let pad = len - ids.len();
            let kinds = types.iter().map(|&t| match t {
                1 => TokenKind::Image,
                2 => TokenKind::Video,
                _ => TokenKind::Text,
            });
            let (pad_ids, pad_mask, pad_kinds) =
                (std::iter::repeat_n(pad_id, pad), std::iter::repeat_n(false, pad), std::iter::repeat_n(TokenKind::Text, pad));
            let real = std::iter::repeat_n(true, ids.len());
            match side {
                Padding::Left => {
                    batch.ids.push(pad_ids.chain(ids.iter().copied()).collect());
                    batch.mask.push(pad_mask.chain(real).collect());
                    batch.kinds.push(pad_kinds.chain(kinds).collect());
                }
                Padding::Right => {
                    batch.ids.push(ids.iter().copied().chain(pad_ids).collect());
                    batch.mask.push(real.chain(pad_mask).collect());
                    batch.kinds.push(kinds.chain(pad_kinds).collect());
                }
            }
        }
        batch
    }

    pub fn rows(&self) -> usize {
        self.ids.len()
    }

    pub fn len(&self) -> usize {
        self.ids.first().map_or(0, Vec::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn validate(&self) -> Result<()> {
        let len = self.len();
        for (b, ((ids, mask), kinds)) in self.ids.iter().zip(&self.mask).zip(&self.kinds).enumerate() {
            if ids.len() != len || mask.len() != len || kinds.len() != len {
                return Err(ModelError::Prompt {
                    problem: format!(
                        "batch row {b}: {} ids, {} mask entries and {} token kinds; every row must have {len}",
                        ids.len(),
                        mask.len(),
                        kinds.len()
                    ),
                });
            }
        }
        if self.mask.len() != self.rows() || self.kinds.len() != self.rows() {
            return Err(ModelError::Prompt { problem: "ids, mask and kinds must have the same number of rows".into() });
        }
        Ok(())
    }

    fn ids_tensor(&self, device: &Device) -> Result<Tensor> {
        let flat: Vec<u32> = self.ids.iter().flatten().copied().collect();
        Ok(Tensor::from_vec(flat, (self.rows(), self.len()), device)?)
    }
}

/// Which end of a row its padding goes to: the left for generation and scoring (each row ends
/// on its own last token), the right for training.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    Left,
    Right,
}

/// Preprocessed pixels of one modality: `[Σ t·h·w, C·Tp·P·P]` and the grid of each item.
#[derive(Debug, Clone)]
pub struct PixelInput {
    pub pixel_values: Tensor,
    pub grids: Vec<[usize; 3]>,
}

impl PixelInput {
    /// The patch rows of several preprocessed media stacked into one input; `None` for none.
    pub fn stack(items: &[&motionvl_util::pixels::PixelInput], device: &Device, dtype: DType) -> candle_core::Result<Option<Self>> {
        let Some(first) = items.first() else { return Ok(None) };
        let cols = first.pixel_values.ncols();
        let rows: usize = items.iter().map(|p| p.pixel_values.nrows()).sum();
        let mut flat = Vec::with_capacity(rows * cols);
        for p in items {
            flat.extend(p.pixel_values.iter().copied());
        }
        let pixel_values = Tensor::from_vec(flat, (rows, cols), device)?.to_dtype(dtype)?;
        Ok(Some(Self { pixel_values, grids: items.iter().map(|p| p.grid_thw).collect() }))
    }
}

/// The images and videos of a batch, each in prompt order (row by row).
#[derive(Debug, Clone, Default)]
pub struct VisionInputs {
    pub images: Option<PixelInput>,
    pub videos: Option<PixelInput>,
    /// `temporal_patch_size / sampled fps` per video.
    pub video_seconds_per_grid: Vec<f64>,
}

/// Vision-tower outputs ready to be spliced into the prompt embeddings.
#[derive(Debug, Clone, Default)]
pub struct VisionFeatures {
    pub images: Option<Tensor>,
    pub videos: Option<Tensor>,
}

#[derive(Debug, Clone)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    /// Generation of a row stops after it emits one of these (the stop id is kept).
    pub stop_ids: Vec<u32>,
    /// Keep the logits of every step (`[B, vocab]` each), e.g. to compare with a reference.
    pub keep_logits: bool,
}

/// Hugging Face's `RepetitionPenaltyLogitsProcessor`, which `generate` applies whenever the
/// model's `generation_config.json` sets `repetition_penalty` (Qwen2.5-VL's: 1.05), greedy
/// decoding included: before each argmax, the f32 logit of every token id already in the row's
/// sequence (prompt included, each id once) becomes `logit × penalty` when negative, else
/// `logit / penalty`.
#[derive(Debug, Clone, PartialEq)]
pub struct RepetitionPenalty {
    pub penalty: f32,
    /// Each row's prompt ids without padding (`input_ids` of a batch of one).
    pub prompt_ids: Vec<Vec<u32>>,
}

impl RepetitionPenalty {
    /// Penalises `logits` (one row's, f32) for the ids in `seen`, then returns the first
    /// largest index, as `torch.argmax` does.
    fn penalised_argmax(&self, logits: &mut [f32], seen: &std::collections::HashSet<u32>) -> u32 {
        for &id in seen {
            if let Some(score) = logits.get_mut(id as usize) {
                *score = if *score < 0.0 { *score * self.penalty } else { *score / self.penalty };
            }
        }
        let mut best = 0;
        for (i, &score) in logits.iter().enumerate() {
            if score > logits[best] {
                best = i;
            }
        }
        best as u32
    }
}

#[derive(Debug, Clone)]
pub struct Generation {
    /// New tokens per row, ending with the stop id when one was produced.
    pub tokens: Vec<Vec<u32>>,
    pub step_logits: Vec<Tensor>,
}

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
        let head = vb.pp("lm_head");
        let lm_head = if cfg.tie_word_embeddings && !head.contains_tensor("weight") {
            Linear::from_parts(text.embedding_weight().clone(), None)
        } else {
            Linear::new(cfg.text.hidden_size, cfg.text.vocab_size, false, head)?
        };
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
        let spans = vision_spans(batch, inputs)?;
        rope_index(&batch.kinds, &batch.mask, &spans, self.cfg.vision.spatial_merge_size, f64::from(self.cfg.vision.tokens_per_second))
    }

    /// Prompt embeddings `[B, L, hidden]` with vision features in place of the placeholders.
    pub fn embed(&self, batch: &PromptBatch, features: &VisionFeatures) -> Result<Tensor> {
        batch.validate()?;
        let device = self.text.embedding_weight().device();
        let text = self.text.embed(&batch.ids_tensor(device)?)?;
        self.place_features(batch, text, features)
    }

    /// The text embeddings `text` `[B, L, hidden]` with vision features in place of the placeholders.
    fn place_features(&self, batch: &PromptBatch, text: Tensor, features: &VisionFeatures) -> Result<Tensor> {
        let device = text.device().clone();
        let (rows, len, hidden) = text.dims3()?;
        let count = |kind| batch.kinds.iter().zip(&batch.mask).flat_map(|(k, m)| k.iter().zip(m)).filter(|&(&k, &m)| m && k == kind).count();
        let feature_rows = |f: &Option<Tensor>| f.as_ref().map_or(Ok(0), |t| t.dim(0));
        let (n_image, n_video) = (feature_rows(&features.images)?, feature_rows(&features.videos)?);
        for (name, tokens, feats) in [("image", count(TokenKind::Image), n_image), ("video", count(TokenKind::Video), n_video)] {
            if tokens != feats {
                return Err(ModelError::PlaceholderMismatch { kind: name, tokens, features: feats });
            }
        }
        if n_image + n_video == 0 {
            return Ok(text);
        }
        // One gather over [text rows; image features; video features] puts every row in place.
        let mut sources = vec![text.reshape((rows * len, hidden))?];
        let image_base = rows * len;
        let video_base = image_base + n_image;
        for f in [&features.images, &features.videos].into_iter().flatten() {
            sources.push(f.to_dtype(text.dtype())?);
        }
        let (mut next_image, mut next_video) = (0, 0);
        let mut index = Vec::with_capacity(rows * len);
        for (b, (kinds, mask)) in batch.kinds.iter().zip(&batch.mask).enumerate() {
            for (i, (&kind, &real)) in kinds.iter().zip(mask).enumerate() {
                let source = match (kind, real) {
                    (TokenKind::Image, true) => {
                        next_image += 1;
                        image_base + next_image - 1
                    }
                    (TokenKind::Video, true) => {
                        next_video += 1;
                        video_base + next_video - 1
                    }
                    _ => b * len + i,
                };
                index.push(source as u32);
            }
        }
        let all = Tensor::cat(&sources, 0)?;
        Ok(all.index_select(&Tensor::new(index, &device)?, 0)?.reshape((rows, len, hidden))?)
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
            (Some(leaf), self.place_features(batch, text, features)?)
        } else {
            (None, self.embed(batch, features)?)
        };
        let (chosen, picks) = self.labelled_states(&embeds, &batch.mask, positions, labels)?;
        TrainingLoss::new(&self.lm_head, chosen, &picks.targets, embedding)
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
        Ok(self.text.forward_traced(&embeds, &cos, &sin, &CausalMask::new(&batch.mask, 0, embeds.dim(1)?))?)
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
        let device = embeds.device().clone();
        let (rows, prompt_len, _) = embeds.dims3()?;
        if let Some(p) = penalty
            && p.prompt_ids.len() != rows
        {
            return Err(ModelError::Prompt {
                problem: format!("the repetition penalty has prompt ids of {} rows for a batch of {rows}", p.prompt_ids.len()),
            });
        }
        // The ids each row's sequence holds so far: its prompt, then what it generated.
        let mut seen: Vec<std::collections::HashSet<u32>> = match penalty {
            Some(p) => p.prompt_ids.iter().map(|ids| ids.iter().copied().collect()).collect(),
            None => Vec::new(),
        };
        let mut cache = KvCache::new(self.text.num_layers());
        let mut key_mask: Vec<Vec<bool>> = mask.to_vec();
        let (cos, sin) = self.text.rotary().for_prompt(positions, &device)?;
        let hidden = self.text.forward(embeds, &cos, &sin, &CausalMask::new(&key_mask, 0, prompt_len), Some(&mut cache))?;
        let mut logits = self.lm_head.forward(&hidden.narrow(1, prompt_len - 1, 1)?)?.squeeze(1)?;

        let mut tokens = vec![Vec::new(); rows];
        let mut finished = vec![false; rows];
        let mut step_logits = Vec::new();
        for step in 0..options.max_new_tokens {
            let logits_f32 = logits.to_dtype(DType::F32)?;
            let next: Vec<u32> = match penalty {
                None => logits_f32.argmax(D::Minus1)?.to_vec1()?,
                Some(p) => {
                    let mut scores: Vec<Vec<f32>> = logits_f32.to_vec2()?;
                    scores.iter_mut().zip(&seen).map(|(row, ids)| p.penalised_argmax(row, ids)).collect()
                }
            };
            if options.keep_logits {
                step_logits.push(logits_f32);
            }
            for (b, &token) in next.iter().enumerate() {
                if !finished[b] {
                    tokens[b].push(token);
                    finished[b] = options.stop_ids.contains(&token);
                }
                if let Some(ids) = seen.get_mut(b) {
                    ids.insert(token);
                }
            }
            if finished.iter().all(|&f| f) || step + 1 == options.max_new_tokens {
                break;
            }
            for row in &mut key_mask {
                row.push(true);
            }
            let ids = Tensor::from_vec(next, (rows, 1), &device)?;
            let (cos, sin) = self.text.rotary().cos_sin(rows, 1, |_, b, _| positions.next[b] + step as i64, &device)?;
            let mask = CausalMask::new(&key_mask, cache.len(), 1);
            let hidden = self.text.forward(&self.text.embed(&ids)?, &cos, &sin, &mask, Some(&mut cache))?;
            logits = self.lm_head.forward(&hidden)?.squeeze(1)?;
        }
        Ok(Generation { tokens, step_logits })
    }
}

/// Grids of the vision blocks in prompt order, row by row, matched to their modality's inputs.
fn vision_spans(batch: &PromptBatch, inputs: &VisionInputs) -> Result<Vec<VisionSpan>> {
    let image_grids = inputs.images.as_ref().map_or(&[][..], |p| &p.grids[..]);
    let video_grids = inputs.videos.as_ref().map_or(&[][..], |p| &p.grids[..]);
    let merge = 2 * 2;
    let (mut next_image, mut next_video) = (0, 0);
    let mut spans = Vec::new();
    for (kinds, mask) in batch.kinds.iter().zip(&batch.mask) {
        let mut i = 0;
        while i < kinds.len() {
            let kind = kinds[i];
            if kind == TokenKind::Text || !mask[i] {
                i += 1;
                continue;
            }
            let (grid, seconds) = if kind == TokenKind::Image {
                next_image += 1;
                let grid = *image_grids.get(next_image - 1).ok_or_else(|| ModelError::Prompt {
                    problem: format!("the prompts hold more image blocks than the {} image inputs", image_grids.len()),
                })?;
                (grid, 0.0)
            } else {
                next_video += 1;
                let grid = *video_grids.get(next_video - 1).ok_or_else(|| ModelError::Prompt {
                    problem: format!("the prompts hold more video blocks than the {} video inputs", video_grids.len()),
                })?;
                (grid, inputs.video_seconds_per_grid.get(next_video - 1).copied().unwrap_or(1.0))
            };
            spans.push(VisionSpan { grid, seconds_per_grid: seconds });
            i += grid.iter().product::<usize>() / merge;
        }
    }
    Ok(spans)
}

/// Mean cross-entropy of next-token prediction over positions whose label is not -100
/// (`labels` are aligned with the inputs; the shift happens here, as in transformers).
pub fn causal_lm_loss(logits: &Tensor, labels: &[Vec<i64>]) -> Result<Tensor> {
    let (rows, len, vocab) = logits.dims3()?;
    let picks = LabelPicks::new(labels, rows, len, vocab)?;
    let chosen = logits.reshape((rows * len, vocab))?.index_select(&picks.rows_tensor(logits.device())?, 0)?;
    picks.mean_cross_entropy(&chosen)
}

/// The flattened `b * len + i` rows whose next token has a label, and those labels.
pub struct LabelPicks {
    rows: Vec<u32>,
    targets: Vec<u32>,
}

impl LabelPicks {
    fn new(labels: &[Vec<i64>], rows: usize, len: usize, vocab: usize) -> Result<Self> {
        let mut picks = Self { rows: Vec::new(), targets: Vec::new() };
        for (b, row) in labels.iter().enumerate().take(rows) {
            for i in 0..len.saturating_sub(1) {
                let label = row.get(i + 1).copied().unwrap_or(-100);
                if label == -100 {
                    continue;
                }
                if label < 0 || label as usize >= vocab {
                    return Err(ModelError::LabelOutOfVocabulary { label, row: b, position: i + 1, vocab });
                }
                picks.rows.push((b * len + i) as u32);
                picks.targets.push(label as u32);
            }
        }
        if picks.rows.is_empty() {
            return Err(ModelError::NoLabels);
        }
        Ok(picks)
    }

    /// The flattened `b * len + i` positions, in row order.
    pub fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// The label each of [`Self::rows`] predicts.
    pub fn targets(&self) -> &[u32] {
        &self.targets
    }

    fn rows_tensor(&self, device: &Device) -> Result<Tensor> {
        Ok(Tensor::new(self.rows.as_slice(), device)?)
    }

    /// Mean negative log-likelihood of the targets under `logits` `[picks, vocab]`.
    fn mean_cross_entropy(&self, logits: &Tensor) -> Result<Tensor> {
        mean_nll(&log_softmax_f32(logits)?, &Tensor::new(self.targets.as_slice(), logits.device())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits() {
        let p = RepetitionPenalty { penalty: 2.0, prompt_ids: Vec::new() };
        // Unpenalised, id 1 (3.0) wins; seen, it drops to 1.5 below id 3's 2.0. A seen
        // negative logit (id 2) falls further instead of rising towards zero.
        let mut logits = vec![-1.0_f32, 3.0, -0.5, 2.0, 2.0];
        let seen: std::collections::HashSet<u32> = [1, 2].into_iter().collect();
        assert_eq!(p.penalised_argmax(&mut logits, &seen), 3, "the first of two equal maxima");
        assert_eq!(logits, [-1.0, 1.5, -1.0, 2.0, 2.0]);
        let mut unseen = vec![-1.0_f32, 3.0, -0.5, 2.0];
        assert_eq!(p.penalised_argmax(&mut unseen, &std::collections::HashSet::new()), 1);
    }

    #[test]
    fn padding_goes_to_the_side_asked_with_the_pad_id_masked_as_text() {
        let (long, long_types): (&[u32], &[u8]) = (&[7, 8, 9], &[0, 2, 1]);
        let (short, short_types): (&[u32], &[u8]) = (&[5], &[2]);
        let left = PromptBatch::padded(&[(long, long_types), (short, short_types)], 0, Padding::Left);
        assert_eq!(left.ids, vec![vec![7, 8, 9], vec![0, 0, 5]]);
        assert_eq!(left.mask[1], vec![false, false, true]);
        assert_eq!(left.kinds[0], vec![TokenKind::Text, TokenKind::Video, TokenKind::Image]);
        assert_eq!(left.kinds[1], vec![TokenKind::Text, TokenKind::Text, TokenKind::Video]);
        let right = PromptBatch::padded(&[(long, long_types), (short, short_types)], 0, Padding::Right);
        assert_eq!(right.ids[1], vec![5, 0, 0]);
        assert_eq!(right.mask[1], vec![true, false, false]);
        assert_eq!(right.kinds[1], vec![TokenKind::Video, TokenKind::Text, TokenKind::Text]);
        assert!(right.validate().is_ok());
    }
}
