//! Collation: loaded samples (ndarray pixels, token ids) → the model's batch types (tensors).

use candle_core::{Device, Tensor};
use motionvl_data::loader::{LoadedSample, PixelInput as DataPixels};
use motionvl_models::qwen25vl::{PixelInput, PromptBatch, VisionInputs};
use motionvl_models::rope::TokenKind;

/// A training micro-batch: right-padded prompts, their pixels, and aligned labels.
pub struct TrainBatch {
    pub prompt: PromptBatch,
    pub vision: VisionInputs,
    /// Motion pseudo-image pixels of the videos (same order and grids), when computed.
    pub motion: Option<PixelInput>,
    pub labels: Vec<Vec<i64>>,
    pub sample_ids: Vec<String>,
    /// Real (non-padding) tokens.
    pub tokens: usize,
}

pub fn collate(samples: &[LoadedSample], pad_id: u32, device: &Device) -> candle_core::Result<TrainBatch> {
    let len = samples.iter().map(|s| s.encoded.len()).max().unwrap_or(0);
    let mut prompt = PromptBatch { ids: vec![], mask: vec![], kinds: vec![] };
    let mut labels = Vec::with_capacity(samples.len());
    for s in samples {
        let e = &s.encoded;
        let pad = len - e.len();
        prompt.ids.push(e.input_ids.iter().copied().chain(std::iter::repeat_n(pad_id, pad)).collect());
        prompt.mask.push(std::iter::repeat_n(true, e.len()).chain(std::iter::repeat_n(false, pad)).collect());
        prompt.kinds.push(
            e.mm_token_type_ids
                .iter()
                .map(|&t| match t {
                    1 => TokenKind::Image,
                    2 => TokenKind::Video,
                    _ => TokenKind::Text,
                })
                .chain(std::iter::repeat_n(TokenKind::Text, pad))
                .collect(),
        );
        labels.push(e.labels.iter().copied().chain(std::iter::repeat_n(-100, pad)).collect());
    }
    let images: Vec<&DataPixels> = samples.iter().flat_map(|s| &s.images).collect();
    let videos: Vec<&DataPixels> = samples.iter().flat_map(|s| &s.videos).collect();
    let motion: Vec<&DataPixels> = samples.iter().flat_map(|s| &s.motion).collect();
    Ok(TrainBatch {
        vision: VisionInputs {
            images: pixels(&images, device)?,
            videos: pixels(&videos, device)?,
            video_seconds_per_grid: videos.iter().map(|v| v.second_per_grid.unwrap_or(1.0)).collect(),
        },
        motion: pixels(&motion, device)?,
        tokens: samples.iter().map(|s| s.encoded.len()).sum(),
        sample_ids: samples.iter().map(|s| s.encoded.id.clone()).collect(),
        prompt,
        labels,
    })
}

/// Stacks the patch rows of several media into one `[Σ patches, patch_dim]` tensor.
pub fn pixels(items: &[&DataPixels], device: &Device) -> candle_core::Result<Option<PixelInput>> {
    let Some(first) = items.first() else { return Ok(None) };
    let cols = first.pixel_values.ncols();
    let rows: usize = items.iter().map(|p| p.pixel_values.nrows()).sum();
    let mut flat = Vec::with_capacity(rows * cols);
    for p in items {
        flat.extend(p.pixel_values.iter().copied());
    }
    Ok(Some(PixelInput {
        pixel_values: Tensor::from_vec(flat, (rows, cols), device)?,
        grids: items.iter().map(|p| p.grid_thw).collect(),
    }))
}
