//! Greedy decoding with a KV cache for every backbone, as transformers' `generate` does it with
//! `do_sample=False` (and, where the model's generation config sets one, its repetition penalty).

use candle_core::{D, DType, Module, Tensor};

use crate::error::{ModelError, Result};
use crate::ops::Linear;
use crate::rope::RopePositions;
use crate::text::{CausalMask, Deepstack, KvCache, TextModel};

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

/// Greedy decoding with a KV cache, rows of a left-padded batch in lockstep, with Hugging
/// Face's repetition penalty applied before every argmax (`None`: plain greedy decoding).
/// DeepStack features, where the model has them, enter with the prompt only.
#[allow(clippy::too_many_arguments)]
pub(crate) fn greedy(
    text: &TextModel,
    lm_head: &Linear,
    embeds: &Tensor,
    mask: &[Vec<bool>],
    positions: &RopePositions,
    options: &GenerateOptions,
    penalty: Option<&RepetitionPenalty>,
    deepstack: Option<&Deepstack>,
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
    let mut cache = KvCache::new(text.num_layers());
    let mut key_mask: Vec<Vec<bool>> = mask.to_vec();
    let (cos, sin) = text.rotary().for_prompt(positions, &device)?;
    let hidden = text.forward_stacked(embeds, &cos, &sin, &CausalMask::new(&key_mask, 0, prompt_len), Some(&mut cache), deepstack)?;
    let mut logits = lm_head.forward(&hidden.narrow(1, prompt_len - 1, 1)?)?.squeeze(1)?;

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
        let (cos, sin) = text.rotary().cos_sin(rows, 1, |_, b, _| positions.next[b] + step as i64, &device)?;
        let mask = CausalMask::new(&key_mask, cache.len(), 1);
        let hidden = text.forward(&text.embed(&ids)?, &cos, &sin, &mask, Some(&mut cache))?;
        logits = lm_head.forward(&hidden)?.squeeze(1)?;
    }
    Ok(Generation { tokens, step_logits })
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
}
