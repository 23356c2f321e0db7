//! Multimodal rotary positions (M-RoPE) of Qwen2.5-VL.
//!
//! Text tokens advance all three axes together; a vision block gets `(t, h, w)` positions on its
//! merged grid, with time in units of `second_per_grid_t × tokens_per_second`. Text after a
//! vision block resumes at *the largest position used so far + 1*, as in Qwen's original code,
//! transformers 4.x and vLLM — the positions the released checkpoints were trained with
//! (transformers 5 resumes lower; see the `legacy.*` tensors of fixture `tiny-b`, made by
//! transformers 4.57.1). The time step is `second_per_grid_t × tokens_per_second` in floating
//! point, as in Qwen's fine-tuning code, transformers 4.49–4.51 and vLLM; transformers 4.52–4.57
//! first truncate `second_per_grid_t` to an integer. Both agree on whole seconds per grid (the
//! official recipes' 1.0, and every dump's).

use crate::error::{ModelError, Result};

/// What a prompt position holds; the model needs this to find the vision blocks
/// (transformers calls it `mm_token_type_ids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenKind {
    Text,
    Image,
    Video,
}

impl TokenKind {
    /// From transformers' `mm_token_type_ids` encoding: 0 text, 1 image, 2 video.
    pub fn from_id(id: i64) -> Result<Self> {
        match id {
            0 => Ok(Self::Text),
            1 => Ok(Self::Image),
            2 => Ok(Self::Video),
            other => Err(ModelError::Prompt { problem: format!("token type {other} is not 0 (text), 1 (image) or 2 (video)") }),
        }
    }
}

/// One vision item in prompt order: its grid and, for videos, seconds per temporal grid step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VisionSpan {
    pub grid: [usize; 3],
    pub seconds_per_grid: f64,
}

/// Positions `[3][B][L]` (t, h, w), per-row `rope_delta` and the position each row's next
/// generated token takes. The delta is transformers 4.x's: max position + 1 − the row's length
/// *with* its left padding, because the reference decodes the token at cache position `c` (which
/// counts the padding) at `c + delta`; so `next = L + delta`.
#[derive(Debug, Clone, PartialEq)]
pub struct RopePositions {
    pub positions: [Vec<Vec<i64>>; 3],
    pub deltas: Vec<i64>,
    pub next: Vec<i64>,
}

impl RopePositions {
    /// Positions computed elsewhere (e.g. by another implementation, to compare against it).
    pub fn explicit(positions: [Vec<Vec<i64>>; 3], mask: &[Vec<bool>]) -> Self {
        let mut deltas = Vec::new();
        let mut next = Vec::new();
        for (row, row_mask) in mask.iter().enumerate() {
            let real: Vec<usize> = (0..row_mask.len()).filter(|&i| row_mask[i]).collect();
            let max = real.iter().flat_map(|&i| positions.iter().map(move |axis| axis[row][i])).max().unwrap_or(-1);
            next.push(max + 1);
            deltas.push(max + 1 - row_mask.len() as i64);
        }
        Self { positions, deltas, next }
    }
}

/// Computes M-RoPE positions for a left-padded batch.
///
/// `kinds[b][i]` says what each position holds, `mask[b][i]` whether it is a real token (false for
/// padding, which gets position 1 like the reference). Each maximal run of equal image/video
/// kinds is one vision item; `spans` lists the items of the whole batch in order (row by row).
pub fn rope_index(
    kinds: &[Vec<TokenKind>],
    mask: &[Vec<bool>],
    spans: &[VisionSpan],
    spatial_merge_size: usize,
    tokens_per_second: f64,
) -> Result<RopePositions> {
    let mut positions: [Vec<Vec<i64>>; 3] = Default::default();
    let mut deltas = Vec::with_capacity(kinds.len());
    let mut next_positions = Vec::with_capacity(kinds.len());
    let mut spans = spans.iter();
    for (row, (row_kinds, row_mask)) in kinds.iter().zip(mask).enumerate() {
        if row_kinds.len() != row_mask.len() {
            return Err(ModelError::Prompt { problem: format!("row {row}: {} token kinds but {} mask entries", row_kinds.len(), row_mask.len()) });
        }
        let mut axes: [Vec<i64>; 3] = std::array::from_fn(|_| vec![1; row_kinds.len()]);
        let real: Vec<usize> = (0..row_kinds.len()).filter(|&i| row_mask[i]).collect();
        let mut next = 0i64; // first free position
        let mut i = 0;
        while i < real.len() {
            let kind = row_kinds[real[i]];
            if kind == TokenKind::Text {
                for axis in &mut axes {
                    axis[real[i]] = next;
                }
                next += 1;
                i += 1;
                continue;
            }
            let span = spans
                .next()
                .ok_or_else(|| ModelError::Prompt { problem: format!("row {row}: more vision blocks in the prompt than vision inputs") })?;
            let [t, h, w] = span.grid;
            let (h, w) = (h / spatial_merge_size, w / spatial_merge_size);
            let count = t * h * w;
            let run = real[i..].iter().take_while(|&&p| row_kinds[p] == kind).count();
            if run < count {
                return Err(ModelError::PlaceholderMismatch {
                    kind: if kind == TokenKind::Image { "image" } else { "video" },
                    tokens: run,
                    features: count,
                });
            }
            let interval = if kind == TokenKind::Video { span.seconds_per_grid * tokens_per_second } else { 0.0 };
            let mut max = next - 1;
            for ti in 0..t {
                // Float multiply then truncate, as the reference does.
                let tpos = next + (ti as f64 * interval) as i64;
                for hi in 0..h {
                    for wi in 0..w {
                        let p = real[i + (ti * h + hi) * w + wi];
                        let pos = [tpos, next + hi as i64, next + wi as i64];
                        for (axis, value) in axes.iter_mut().zip(pos) {
                            axis[p] = value;
                            max = max.max(value);
                        }
                    }
                }
            }
            next = max + 1;
            i += count;
        }
        deltas.push(next - row_kinds.len() as i64);
        next_positions.push(next);
        for (out, axis) in positions.iter_mut().zip(axes) {
            out.push(axis);
        }
    }
    if spans.next().is_some() {
        return Err(ModelError::Prompt { problem: "more vision inputs than vision blocks in the prompts".into() });
    }
    Ok(RopePositions { positions, deltas, next: next_positions })
}
