//! Collation: loaded samples (ndarray pixels, token ids) → the model's batch types (tensors).

use candle_core::{DType, Device};
use motionvl_data::loader::{LoadedSample, PixelInput as DataPixels};
use motionvl_models::qwen25vl::{Padding, PixelInput, PromptBatch, VisionInputs};

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

/// Stacks `samples` into one micro-batch. Its videos are fused with motion all or none: a batch
/// that mixes samples with and without motion pixels (possible only with `batch_size` > 1 and
/// rows read without motion) is refused, naming one of each.
pub fn collate(samples: &[LoadedSample], pad_id: u32, device: &Device) -> candle_core::Result<TrainBatch> {
    let with_videos = || samples.iter().filter(|s| !s.videos.is_empty());
    if let (Some(moving), Some(still)) = (with_videos().find(|s| !s.motion.is_empty()), with_videos().find(|s| s.motion.is_empty())) {
        candle_core::bail!(
            "one micro-batch holds sample {} with motion and sample {} without: train rows without motion at batch_size 1",
            moving.encoded.id,
            still.encoded.id
        );
    }
    let len = samples.iter().map(|s| s.encoded.len()).max().unwrap_or(0);
    let rows: Vec<(&[u32], &[u8])> = samples.iter().map(|s| (s.encoded.input_ids.as_slice(), s.encoded.mm_token_type_ids.as_slice())).collect();
    let prompt = PromptBatch::padded(&rows, pad_id, Padding::Right);
    let labels = samples.iter().map(|s| s.encoded.labels.iter().copied().chain(std::iter::repeat_n(-100, len - s.encoded.len())).collect()).collect();
    let images: Vec<&DataPixels> = samples.iter().flat_map(|s| &s.images).collect();
    let videos: Vec<&DataPixels> = samples.iter().flat_map(|s| &s.videos).collect();
    let motion: Vec<&DataPixels> = samples.iter().flat_map(|s| &s.motion).collect();
    let pixels = |items: &[&DataPixels]| PixelInput::stack(items, device, DType::F32);
    Ok(TrainBatch {
        vision: VisionInputs {
            images: pixels(&images)?,
            videos: pixels(&videos)?,
            video_seconds_per_grid: videos.iter().map(|v| v.second_per_grid.unwrap_or(1.0)).collect(),
        },
        motion: pixels(&motion)?,
        tokens: samples.iter().map(|s| s.encoded.len()).sum(),
        sample_ids: samples.iter().map(|s| s.encoded.id.clone()).collect(),
        prompt,
        labels,
    })
}
