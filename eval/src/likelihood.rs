//! Multiple choice by likelihood: lmms-eval's `output_type: multiple_choice`, lm-evaluation-
//! harness's loglikelihood ranking.
//!
//! Each option is written as the assistant's answer to the question — the same chat template,
//! the same tokens and the same labelled positions as a training conversation answering with
//! it (the answer and its `<|im_end|>`, so an option that is a prefix of another is not
//! favoured) — and scored by the sum of the log-probabilities of those tokens under teacher
//! forcing ([`Normalisation::Sum`], the harness's `acc`), or by their mean
//! ([`Normalisation::PerToken`], a length-normalised score like its `acc_norm`). The likeliest
//! option is the answer, written as `B. pink silo`, which every choice extractor reads as `B`,
//! so predictions files, scoring and reports are those of generated answers.
//!
//! A question's video is encoded once (through [`vision_features`], with the motion branch
//! when the model has one, as generation does) and its options are the rows of one batch.

use candle_core::{DType, Device, Module, Tensor};
use motionvl_data::loader::PixelInput as DataPixels;
use motionvl_data::manifest::AnswerOption;
use motionvl_data::text::{EncodedPrompt, EncodedSample, LabelMask, Message, QwenTokenizer, TemplateOptions, TextError};
use motionvl_models::backbone::Backbone;
use motionvl_models::motion::{MotionBranch, qwen3_features, vision_features};
use motionvl_models::qwen25vl::{Padding, PixelInput, PromptBatch, VisionFeatures, VisionInputs};

use crate::config::{Continuation, Normalisation};
use crate::error::{EvalError, Result};

/// Labels of positions the score leaves out (the prompt, padding), as in training.
const IGNORE_INDEX: i64 = -100;

/// One option of a question, tokenised as the assistant's answer to its prompt.
#[derive(Debug, Clone)]
pub struct OptionRow {
    pub option: AnswerOption,
    /// Prompt and answer; `labels` name the answer's tokens (the others are -100).
    pub sample: EncodedSample,
}

/// An option's answer as the model was trained to give it.
pub fn continuation(option: &AnswerOption, form: Continuation) -> String {
    match form {
        Continuation::Text => option.text.clone(),
        Continuation::Letter => option.label.to_string(),
        Continuation::LetterText => format!("{}. {}", option.label, option.text),
    }
}

/// The raw output recorded for a chosen option: its letter with a label mark, then its text.
pub fn chosen_output(option: &AnswerOption) -> String {
    format!("{}. {}", option.label, option.text)
}

/// Tokenises every option as the answer to `prompt_text`. Each row's prompt part must be the
/// generation prompt's tokens (`prompt`), so that the options are scored in the very context a
/// generated answer would start from; a tokenizer merging the answer into the prompt is an error.
#[allow(clippy::too_many_arguments)]
pub fn encode_options(
    tokenizer: &QwenTokenizer,
    id: &str,
    prompt_text: &str,
    prompt: &EncodedPrompt,
    options: &[AnswerOption],
    image_grids: &[[usize; 3]],
    video_grids: &[[usize; 3]],
    video_seconds: &[Vec<f64>],
    template: &TemplateOptions,
    form: Continuation,
) -> std::result::Result<Vec<OptionRow>, TextError> {
    // The answer and its `<|im_end|>`: what generation produces. Never truncated, like the prompt.
    let template = TemplateOptions { max_seq_len: None, label_mask: LabelMask::AnswerImEnd, ..template.clone() };
    options
        .iter()
        .map(|option| {
            let messages = [Message::user(prompt_text), Message::assistant(continuation(option, form))];
            let sample = tokenizer.encode_chat_timed(id, &messages, image_grids, video_grids, video_seconds, &template)?;
            let answer_start = sample.labels.iter().position(|&l| l != IGNORE_INDEX).unwrap_or(sample.labels.len());
            if answer_start != prompt.input_ids.len() || sample.input_ids[..answer_start] != prompt.input_ids[..] {
                return Err(TextError::Tokenize {
                    sample_id: id.to_string(),
                    message: format!(
                        "option {}: the answer's tokens start at position {answer_start}, not where the {}-token generation prompt ends; the tokenizer merges answer and prompt",
                        option.label,
                        prompt.input_ids.len()
                    ),
                });
            }
            Ok(OptionRow { option: option.clone(), sample })
        })
        .collect()
}

/// An option's log-probability under the model and the number of tokens it sums over.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptionLogLikelihood {
    pub sum: f64,
    pub tokens: usize,
}

impl OptionLogLikelihood {
    pub fn score(&self, normalisation: Normalisation) -> f64 {
        match normalisation {
            Normalisation::Sum => self.sum,
            Normalisation::PerToken => self.sum / self.tokens.max(1) as f64,
        }
    }
}

/// Index of the highest score; the first of equal ones (a NaN never wins).
pub fn best(scores: &[f64]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &s) in scores.iter().enumerate() {
        if s.is_nan() {
            continue;
        }
        if best.is_none_or(|b| s > scores[b]) {
            best = Some(i);
        }
    }
    best
}

/// `k` copies of `t` along its first dimension (one per option row).
fn repeat_rows(t: &Option<Tensor>, k: usize) -> Result<Option<Tensor>> {
    t.as_ref().map(|t| Ok(Tensor::cat(&vec![t; k], 0)?)).transpose()
}

/// Log-likelihood of each option row as the continuation of the question's prompt.
///
/// `images`, `videos` and `motion` are the question's own media (once); `motion` must be given,
/// one per video, when `branch` is.
pub fn option_log_likelihoods(
    model: &Backbone,
    branch: Option<&MotionBranch>,
    rows: &[OptionRow],
    media: (&[DataPixels], &[DataPixels], &[DataPixels]),
    pad_id: u32,
    device: &Device,
) -> Result<Vec<OptionLogLikelihood>> {
    let (images, videos, motion) = media;
    let k = rows.len();
    if k == 0 {
        return Ok(Vec::new());
    }
    let dtype = model.text().embedding_weight().dtype();
    let images = PixelInput::stack(&images.iter().collect::<Vec<_>>(), device, dtype)?;
    let videos_once = PixelInput::stack(&videos.iter().collect::<Vec<_>>(), device, dtype)?;
    let seconds: Vec<f64> = videos.iter().map(|v| v.second_per_grid.unwrap_or(1.0)).collect();
    let once = VisionInputs { images: images.clone(), videos: videos_once.clone(), video_seconds_per_grid: seconds.clone() };
    let motion_pixels = match branch {
        Some(_) if motion.len() != videos.len() => {
            return Err(EvalError::MotionPixels { videos: videos.len(), with_motion: motion.len() });
        }
        Some(_) => PixelInput::stack(&motion.iter().collect::<Vec<_>>(), device, dtype)?,
        None => None,
    };
    // Every row holds the question's media again: M-RoPE needs each row's grids. Only grids
    // and timing are read for positions, so the pixel tensors are the single copy.
    let repeat_grids = |p: &Option<PixelInput>| p.as_ref().map(|p| PixelInput { pixel_values: p.pixel_values.clone(), grids: p.grids.repeat(k) });
    let per_row = VisionInputs { images: repeat_grids(&images), videos: repeat_grids(&videos_once), video_seconds_per_grid: seconds.repeat(k) };

    let len = rows.iter().map(|r| r.sample.input_ids.len()).max().unwrap_or(0);
    // Left padding, as generation pads: the positions of real tokens do not depend on it.
    let tokens: Vec<(&[u32], &[u8])> = rows.iter().map(|r| (r.sample.input_ids.as_slice(), r.sample.mm_token_type_ids.as_slice())).collect();
    let batch = PromptBatch::padded(&tokens, pad_id, Padding::Left);
    let labels: Vec<Vec<i64>> = rows
        .iter()
        .map(|r| std::iter::repeat_n(IGNORE_INDEX, len - r.sample.input_ids.len()).chain(r.sample.labels.iter().copied()).collect())
        .collect();
    let mut out = vec![OptionLogLikelihood { sum: 0.0, tokens: 0 }; k];
    if labels.iter().all(|row| row.iter().all(|&l| l == IGNORE_INDEX)) {
        return Ok(out);
    }
    let positions = model.positions(&batch, &per_row)?;
    // The LM head only at the positions that predict an answer token.
    let (picked, picks, head) = match model {
        Backbone::Qwen25(model) => {
            let features = vision_features(model, branch, &once, motion_pixels.as_ref())?;
            let features = VisionFeatures { images: repeat_rows(&features.images, k)?, videos: repeat_rows(&features.videos, k)? };
            let embeds = model.embed(&batch, &features)?;
            let (picked, picks) = model.labelled_states(&embeds, &batch.mask, &positions, &labels)?;
            (picked, picks, model.lm_head())
        }
        Backbone::Qwen3(model) => {
            let features = qwen3_features(model, branch, &once, motion_pixels.as_ref())?.repeated(k)?;
            let (picked, picks) = model.labelled_states(&batch, &features, &positions, &labels)?;
            (picked, picks, model.lm_head())
        }
    };
    let logits: Vec<Vec<f32>> = head.forward(&picked)?.to_dtype(DType::F32)?.to_vec2()?;
    for ((row_logits, &target), &position) in logits.iter().zip(picks.targets()).zip(picks.rows()) {
        let option = &mut out[position as usize / len];
        option.sum += f64::from(row_logits[target as usize]) - log_sum_exp(row_logits);
        option.tokens += 1;
    }
    Ok(out)
}

/// `ln Σ exp(x)`, in f64 and shifted by the maximum so nothing overflows.
pub fn log_sum_exp(xs: &[f32]) -> f64 {
    let max = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    if !max.is_finite() {
        return max;
    }
    max + xs.iter().map(|&x| (f64::from(x) - max).exp()).sum::<f64>().ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_takes_the_first_of_equal_scores_and_never_a_nan() {
        assert_eq!(best(&[-3.0, -1.0, -1.0, -2.0]), Some(1));
        assert_eq!(best(&[f64::NAN, -5.0]), Some(1));
        assert_eq!(best(&[f64::NAN]), None);
        assert_eq!(best(&[]), None);
    }

    #[test]
    fn per_token_normalisation_divides_by_the_answer_length() {
        let long = OptionLogLikelihood { sum: -3.0, tokens: 6 };
        let short = OptionLogLikelihood { sum: -2.0, tokens: 2 };
        // The sum favours the short answer, the mean the long one.
        assert!(short.score(Normalisation::Sum) > long.score(Normalisation::Sum));
        assert!(long.score(Normalisation::PerToken) > short.score(Normalisation::PerToken));
        assert_eq!(long.score(Normalisation::PerToken), -0.5);
    }

    #[test]
    fn log_sum_exp_matches_the_direct_formula() {
        let xs = [0.5f32, -1.0, 2.0];
        let direct = xs.iter().map(|&x| f64::from(x).exp()).sum::<f64>().ln();
        assert!((log_sum_exp(&xs) - direct).abs() < 1e-12);
        // Large logits do not overflow.
        assert!((log_sum_exp(&[1000.0, 1000.0]) - (1000.0 + 2f64.ln())).abs() < 1e-9);
    }

    #[test]
    fn continuations_follow_the_training_answer_forms() {
        let option = AnswerOption { label: 'B', text: "pink silo".into() };
        assert_eq!(continuation(&option, Continuation::Text), "pink silo");
        assert_eq!(continuation(&option, Continuation::Letter), "B");
        assert_eq!(continuation(&option, Continuation::LetterText), "B. pink silo");
        assert_eq!(chosen_output(&option), "B. pink silo");
    }
}
