//! What a vision-language model is asked: a padded batch of token ids with the kind of every
//! position, the preprocessed pixels of its images and videos, the splice of vision features into
//! the text embeddings, and the next-token loss over labelled positions. Shared by every backbone.

use candle_core::{DType, Device, Tensor};

use crate::error::{ModelError, Result};
use crate::rope::{TokenKind, VisionSpan};
use crate::training_loss::{log_softmax_f32, mean_nll};

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

    pub(crate) fn validate(&self) -> Result<()> {
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

    pub(crate) fn ids_tensor(&self, device: &Device) -> Result<Tensor> {
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

/// The text embeddings `text` `[B, L, hidden]` with vision features in place of the placeholders.
pub(crate) fn place_features(batch: &PromptBatch, text: Tensor, features: &VisionFeatures) -> Result<Tensor> {
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

/// How a video's grid meets the prompt: as one vision block (Qwen2.5-VL), or one block per
/// temporal grid step, each after its own timestamp text (Qwen3-VL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VideoBlocks {
    Whole,
    PerFrame,
}

/// Grids of the vision blocks in prompt order, row by row, matched to their modality's inputs.
pub(crate) fn vision_spans(batch: &PromptBatch, inputs: &VisionInputs, blocks: VideoBlocks, merge_size: usize) -> Result<Vec<VisionSpan>> {
    let image_grids = inputs.images.as_ref().map_or(&[][..], |p| &p.grids[..]);
    let whole = inputs.videos.as_ref().map_or(&[][..], |p| &p.grids[..]);
    // Per frame, a video of grid [t, h, w] is t blocks of [1, h, w] (no time axis to scale).
    let (video_grids, video_seconds): (Vec<[usize; 3]>, Vec<f64>) = match blocks {
        VideoBlocks::Whole => (whole.to_vec(), inputs.video_seconds_per_grid.clone()),
        VideoBlocks::PerFrame => whole.iter().flat_map(|&[t, h, w]| std::iter::repeat_n(([1, h, w], 0.0), t)).unzip(),
    };
    let merge = merge_size * merge_size;
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
                (grid, video_seconds.get(next_video - 1).copied().unwrap_or(1.0))
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
    pub(crate) fn new(labels: &[Vec<i64>], rows: usize, len: usize, vocab: usize) -> Result<Self> {
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

    pub(crate) fn rows_tensor(&self, device: &Device) -> Result<Tensor> {
        Ok(Tensor::new(self.rows.as_slice(), device)?)
    }

    /// Mean negative log-likelihood of the targets under `logits` `[picks, vocab]`.
    pub(crate) fn mean_cross_entropy(&self, logits: &Tensor) -> Result<Tensor> {
        mean_nll(&log_softmax_f32(logits)?, &Tensor::new(self.targets.as_slice(), logits.device())?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
