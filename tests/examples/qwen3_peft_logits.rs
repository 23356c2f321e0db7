//! Writes what `tools/fixtures/check_qwen3_peft.py` feeds transformers + PEFT to check a
//! Qwen3-VL adapter motionvl trained: one prompt of a clip (ids, token types, the video's
//! pixels and grid, as motionvl's Qwen3-VL processor made them) and motionvl's logits for it with
//! the adapter of `CHECKPOINT` on the run's base model.
//!
//!     cargo run -p motionvl-tests --example qwen3_peft_logits -- RUN/base-model RUN/checkpoint-N CLIP OUT.safetensors

use std::collections::HashMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use candle_core::{DType, Device, Tensor};
use motionvl_data::media_config::TrainingVideo;
use motionvl_data::processor::ModelProcessor;
use motionvl_data::text::{Message, QwenTokenizer, TemplateOptions};
use motionvl_models::CheckpointFiles;
use motionvl_models::backbone::{Backbone, Family};
use motionvl_models::lora::LoraWeights;
use motionvl_models::prompt::{PixelInput, PromptBatch, VisionInputs};
use motionvl_models::rope::TokenKind;

fn main() -> Result<()> {
    let args: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    let [base, adapter, clip, out] = args.as_slice() else { bail!("usage: qwen3_peft_logits BASE ADAPTER CLIP OUT.safetensors") };
    let files = CheckpointFiles::from_dir(base)?;
    let mut model = Backbone::load(&files, DType::F32, &Device::Cpu)?;
    let Backbone::Qwen3(_) = &model else { bail!("{}: not a Qwen3-VL", base.display()) };
    LoraWeights::load_peft(adapter, &Device::Cpu)?.attach(model.linears_mut())?;

    let processor = ModelProcessor::of_checkpoint(Family::Qwen3Vl, base)?;
    let video = TrainingVideo { min_pixels: 4096, max_pixels: 16384, ..TrainingVideo::default() }
        .media_with(&processor.pixels)
        .load_video(clip)
        .map_err(|e| anyhow::anyhow!("{}: {e}", clip.display()))?;
    let tokenizer = QwenTokenizer::from_model_dir(base)?;
    let template = processor.template(TemplateOptions { max_seq_len: None, ..TemplateOptions::default() });
    let messages = [Message::user("<video>\nIn which direction does the square move?")];
    let prompt = tokenizer.encode_prompt_timed("clip", &messages, &[], &[video.grid_thw], std::slice::from_ref(&video.grid_seconds), &template)?;

    let (rows, cols) = video.pixel_values.dim();
    let pixels = Tensor::from_vec(video.pixel_values.iter().copied().collect::<Vec<f32>>(), (rows, cols), &Device::Cpu)?;
    let kinds = prompt.mm_token_type_ids.iter().map(|&t| TokenKind::from_id(i64::from(t))).collect::<Result<Vec<_>, _>>()?;
    let batch = PromptBatch::single(prompt.input_ids.clone(), kinds);
    let inputs = VisionInputs { videos: Some(PixelInput { pixel_values: pixels.clone(), grids: vec![video.grid_thw] }), ..VisionInputs::default() };
    let Backbone::Qwen3(qwen3) = &model else { unreachable!("checked above") };
    let logits = qwen3.forward(&batch, &inputs, None)?;

    let len = prompt.input_ids.len();
    let ids: Vec<i64> = prompt.input_ids.iter().map(|&i| i64::from(i)).collect();
    let types: Vec<i64> = prompt.mm_token_type_ids.iter().map(|&t| i64::from(t)).collect();
    let grid: Vec<i64> = video.grid_thw.iter().map(|&g| g as i64).collect();
    let tensors: HashMap<String, Tensor> = [
        ("input_ids", Tensor::from_vec(ids, (1, len), &Device::Cpu)?),
        ("mm_token_type_ids", Tensor::from_vec(types, (1, len), &Device::Cpu)?),
        ("pixel_values_videos", pixels),
        ("video_grid_thw", Tensor::from_vec(grid, (1, 3), &Device::Cpu)?),
        ("logits", logits),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    candle_core::safetensors::save(&tensors, out).with_context(|| format!("writing {}", out.display()))?;
    println!("{}: {len} tokens, video grid {:?}", out.display(), video.grid_thw);
    Ok(())
}
