//! Matmul FLOPs of a Qwen2.5-VL pass, counted from the config and the inputs' shapes, so that a
//! measured time becomes achieved GFLOP/s (how close a run is to the machine's peak, and which
//! side of a comparison wastes work). Elementwise ops, norms and softmax are left out: they are
//! a few percent of the total and bound by memory, not arithmetic.

use crate::config::Qwen25VlConfig;
use crate::error::Result;
use crate::vision::VisionLayout;

/// `2·m·n·k`, one multiply and one add per term.
fn matmul(m: usize, n: usize, k: usize) -> f64 {
    2.0 * m as f64 * n as f64 * k as f64
}

/// Forward FLOPs of one prompt, split where training treats the parts differently.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForwardFlops {
    /// Patch embedding, the vision blocks (window and full attention) and the merger.
    pub vision: f64,
    /// The decoder layers over every prompt token (attention counted over the whole causal
    /// square, as a dense kernel computes it).
    pub decoder: f64,
    /// The LM head per row it is applied to.
    pub lm_head_per_row: f64,
}

impl ForwardFlops {
    /// `grids` are the vision inputs' `[t, h, w]` patch grids, `tokens` the prompt length.
    pub fn new(cfg: &Qwen25VlConfig, grids: &[[usize; 3]], tokens: usize) -> Result<Self> {
        let v = &cfg.vision;
        let layout = VisionLayout::new(grids, v)?;
        let patches: usize = grids.iter().map(|g| g.iter().product::<usize>()).sum();
        let square_sum = |cu: &[usize]| cu.windows(2).map(|w| (w[1] - w[0]) as f64 * (w[1] - w[0]) as f64).sum::<f64>();
        let (windows, frames) = (square_sum(&layout.cu_window_seqlens), square_sum(&layout.cu_seqlens));
        let d = v.hidden_size;
        let block_dense = matmul(patches, 3 * d, d) + matmul(patches, d, d) + 3.0 * matmul(patches, v.intermediate_size, d);
        let mut vision = matmul(patches, d, v.patch_dim());
        for i in 0..v.depth {
            // Scores and weighted values: 2 matmuls of s×s×head_dim per head and segment.
            let squares = if v.fullatt_block_indexes.contains(&i) { frames } else { windows };
            vision += block_dense + 2.0 * 2.0 * squares * d as f64;
        }
        let merged = patches / v.merge_unit();
        let wide = d * v.merge_unit();
        vision += matmul(merged, wide, wide) + matmul(merged, v.out_hidden_size, wide);

        let t = &cfg.text;
        let (h, kv) = (t.hidden_size, t.num_key_value_heads * (t.hidden_size / t.num_attention_heads));
        let layer = matmul(tokens, h, h) * 2.0
            + matmul(tokens, kv, h) * 2.0
            + 3.0 * matmul(tokens, t.intermediate_size, h)
            + 2.0 * 2.0 * tokens as f64 * tokens as f64 * h as f64;
        Ok(Self { vision, decoder: layer * t.num_hidden_layers as f64, lm_head_per_row: matmul(1, t.vocab_size, h) })
    }

    /// A prefill that computes logits for every token.
    pub fn prefill(&self, tokens: usize) -> f64 {
        self.vision + self.decoder + self.lm_head_per_row * tokens as f64
    }

    /// Forward and backward with the vision tower frozen and every language-model weight
    /// trained: the backward of a matmul is two matmuls of its size (input and weight
    /// gradients), and no gradient enters the frozen tower. `head_rows` are the rows the LM head
    /// runs on (all tokens for full logits, the labelled ones for a loss-only head).
    pub fn train_language_model(&self, head_rows: usize) -> f64 {
        self.vision + 3.0 * (self.decoder + self.lm_head_per_row * head_rows as f64)
    }

    /// Forward and backward of LoRA training with the vision tower frozen: the frozen weights
    /// pass input gradients only (one matmul of each layer's size), the adapters' own matmuls
    /// (rank ≪ width) are left out.
    pub fn train_adapters(&self, head_rows: usize) -> f64 {
        self.vision + 2.0 * (self.decoder + self.lm_head_per_row * head_rows as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn midsize_counts_follow_the_layers_shapes() {
        let cfg = Qwen25VlConfig::from_json(include_str!("../../configs/models/midsize.json")).unwrap();
        // A 16-frame 224×224 video: 8 × 16 × 16 = 2,048 patches, 512 merged tokens, 575 in all.
        let f = ForwardFlops::new(&cfg, &[[8, 16, 16]], 575).unwrap();
        let mm = |m: f64, n: f64, k: f64| 2.0 * m * n * k;
        // Windows of 112 px = 8 × 8 patches: 4 per frame, 32 in all; full attention per frame.
        let windowed = 4.0 * 32.0 * 64.0 * 64.0 * 256.0;
        let full = 4.0 * 8.0 * 256.0 * 256.0 * 256.0;
        let dense = mm(2048.0, 768.0, 256.0) + mm(2048.0, 256.0, 256.0) + 3.0 * mm(2048.0, 1024.0, 256.0);
        let vision = mm(2048.0, 256.0, 1176.0) + 8.0 * dense + 6.0 * windowed + 2.0 * full + mm(512.0, 1024.0, 1024.0) + mm(512.0, 512.0, 1024.0);
        assert_eq!(f.vision, vision);
        // q and o 512×512, k and v 512×128 (2 KV heads of 64), gate/up/down 512×1408.
        let layer = 2.0 * mm(575.0, 512.0, 512.0) + 2.0 * mm(575.0, 128.0, 512.0) + 3.0 * mm(575.0, 1408.0, 512.0) + 4.0 * 575.0 * 575.0 * 512.0;
        assert_eq!(f.decoder, 8.0 * layer);
        assert_eq!(f.lm_head_per_row, mm(1.0, 151936.0, 512.0));
        assert_eq!(f.prefill(575), vision + 8.0 * layer + 575.0 * f.lm_head_per_row);
        assert!(f.train_language_model(30) < f.train_language_model(575));
    }
}
