//! The Qwen2 language model of Qwen2.5-VL: decoder layers with grouped-query attention (q/k/v
//! biases), RMSNorm, SwiGLU MLP and multimodal rotary embedding, plus a KV cache for decoding.

use std::sync::Arc;

use candle_core::{Device, Module, Result, Tensor};
use candle_nn::VarBuilder;

use crate::chunked_attention;
use crate::config::TextConfig;
use crate::fused::attention as fused;
use crate::ops::{GatedMlp, Linear, RmsNorm, apply_rotary};
use crate::recompute::{RecomputedGrads, checkpointed};
use crate::rope::RopePositions;

/// M-RoPE angles: frequency `j` of the `head_dim/2` turns with the t, h or w position that
/// `mrope_layout` gives it; cos/sin repeat for rotate-half.
#[derive(Debug, Clone)]
pub struct MultimodalRotary {
    inv_freq: Vec<f32>,
    axis_of_freq: Vec<usize>,
}

impl MultimodalRotary {
    pub fn new(cfg: &TextConfig) -> Self {
        let half = cfg.head_dim() / 2;
        let inv_freq = (0..half).map(|i| 1.0 / (cfg.rope_theta as f32).powf((2 * i) as f32 / cfg.head_dim() as f32)).collect();
        let axis_of_freq = cfg.mrope_layout.axis_of_freq(cfg.mrope_section);
        Self { inv_freq, axis_of_freq }
    }

    /// cos/sin `[B, 1, L, head_dim]` (f32) for `position(axis, row, i)` over `rows × len`.
    pub fn cos_sin(&self, rows: usize, len: usize, position: impl Fn(usize, usize, usize) -> i64, device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let mut cos = Vec::with_capacity(rows * len * 2 * half);
        let mut sin = Vec::with_capacity(rows * len * 2 * half);
        let mut angles = vec![0f32; half];
        for b in 0..rows {
            for i in 0..len {
                for (j, angle) in angles.iter_mut().enumerate() {
                    *angle = position(self.axis_of_freq[j], b, i) as f32 * self.inv_freq[j];
                }
                for _ in 0..2 {
                    cos.extend(angles.iter().map(|a| a.cos()));
                    sin.extend(angles.iter().map(|a| a.sin()));
                }
            }
        }
        let shape = (rows, 1, len, 2 * half);
        Ok((Tensor::from_vec(cos, shape, device)?, Tensor::from_vec(sin, shape, device)?))
    }

    pub fn for_prompt(&self, positions: &RopePositions, device: &Device) -> Result<(Tensor, Tensor)> {
        let rows = positions.positions[0].len();
        let len = positions.positions[0].first().map_or(0, Vec::len);
        self.cos_sin(rows, len, |axis, b, i| positions.positions[axis][b][i], device)
    }
}

/// Keys and values of the tokens seen so far, per layer: `[B, kv_heads, T, head_dim]`.
#[derive(Debug, Clone, Default)]
pub struct KvCache {
    layers: Vec<Option<(Tensor, Tensor)>>,
}

impl KvCache {
    pub fn new(num_layers: usize) -> Self {
        Self { layers: vec![None; num_layers] }
    }

    pub fn len(&self) -> usize {
        self.layers.first().and_then(|l| l.as_ref()).map_or(0, |(k, _)| k.dim(2).unwrap_or(0))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone)]
pub struct TextAttention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    o_proj: Linear,
    /// Qwen3's per-head RMSNorm of queries and keys, before the rotary embedding.
    q_norm: Option<RmsNorm>,
    k_norm: Option<RmsNorm>,
    num_heads: usize,
    num_kv_heads: usize,
    head_dim: usize,
}

impl TextAttention {
    pub fn new(cfg: &TextConfig, vb: VarBuilder) -> Result<Self> {
        let (h, hd) = (cfg.hidden_size, cfg.head_dim());
        let (nh, nkv) = (cfg.num_attention_heads, cfg.num_key_value_heads);
        Ok(Self {
            q_proj: Linear::new(h, nh * hd, cfg.qkv_bias, vb.pp("q_proj"))?,
            k_proj: Linear::new(h, nkv * hd, cfg.qkv_bias, vb.pp("k_proj"))?,
            v_proj: Linear::new(h, nkv * hd, cfg.qkv_bias, vb.pp("v_proj"))?,
            o_proj: Linear::new(nh * hd, h, cfg.o_bias, vb.pp("o_proj"))?,
            q_norm: cfg.qk_norm.then(|| RmsNorm::new(hd, cfg.rms_norm_eps, vb.pp("q_norm"))).transpose()?,
            k_norm: cfg.qk_norm.then(|| RmsNorm::new(hd, cfg.rms_norm_eps, vb.pp("k_norm"))).transpose()?,
            num_heads: nh,
            num_kv_heads: nkv,
            head_dim: hd,
        })
    }

    fn parameters(&self) -> Vec<&Tensor> {
        let norms = [&self.q_norm, &self.k_norm].into_iter().flatten().flat_map(RmsNorm::parameters);
        [&self.q_proj, &self.k_proj, &self.v_proj, &self.o_proj].into_iter().flat_map(Linear::parameters).chain(norms).collect()
    }

    fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        out.push((format!("{prefix}.q_proj"), &mut self.q_proj));
        out.push((format!("{prefix}.k_proj"), &mut self.k_proj));
        out.push((format!("{prefix}.v_proj"), &mut self.v_proj));
        out.push((format!("{prefix}.o_proj"), &mut self.o_proj));
    }

    fn forward(&self, xs: &Tensor, cos: &Tensor, sin: &Tensor, mask: &CausalMask, cache: Option<&mut Option<(Tensor, Tensor)>>) -> Result<Tensor> {
        let (b, l, _) = xs.dims3()?;
        // [B, L, n·hd] → [B, n, L, hd], each head normed first where the model says so.
        let heads = |proj: &Linear, n: usize, norm: &Option<RmsNorm>| -> Result<Tensor> {
            let xs = proj.forward(xs)?.reshape((b, l, n, self.head_dim))?;
            let xs = match norm {
                Some(norm) => norm.forward(&xs)?,
                None => xs,
            };
            xs.transpose(1, 2)?.contiguous()
        };
        let q = apply_rotary(&heads(&self.q_proj, self.num_heads, &self.q_norm)?, cos, sin)?;
        let mut k = apply_rotary(&heads(&self.k_proj, self.num_kv_heads, &self.k_norm)?, cos, sin)?;
        let mut v = heads(&self.v_proj, self.num_kv_heads, &None)?;
        if let Some(slot) = cache {
            if let Some((past_k, past_v)) = slot.as_ref() {
                k = Tensor::cat(&[past_k, &k], 2)?;
                v = Tensor::cat(&[past_v, &v], 2)?;
            }
            *slot = Some((k.clone(), v.clone()));
        }
        let scale = (self.head_dim as f64).powf(-0.5);
        let out = if fused::applies(&q, &k, &v) {
            fused::attention(&q, &k, &v, scale, &mask.described())?
        } else {
            // A decode step without padding has no mask: the flash kernel serves it on a GPU.
            let flash = if mask.is_trivial() { crate::flash::unmasked(&q, &k, &v, scale)? } else { None };
            match flash {
                Some(out) => out,
                None => chunked_attention::attention(&q, &k, &v, scale, &mask.described())?,
            }
        };
        self.o_proj.forward(&out.transpose(1, 2)?.reshape((b, l, self.num_heads * self.head_dim))?)
    }
}

#[derive(Debug, Clone)]
pub struct DecoderLayer {
    input_layernorm: RmsNorm,
    self_attn: TextAttention,
    post_attention_layernorm: RmsNorm,
    mlp: GatedMlp,
}

impl DecoderLayer {
    pub fn new(cfg: &TextConfig, vb: VarBuilder) -> Result<Self> {
        Ok(Self {
            input_layernorm: RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, vb.pp("input_layernorm"))?,
            self_attn: TextAttention::new(cfg, vb.pp("self_attn"))?,
            post_attention_layernorm: RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, vb.pp("post_attention_layernorm"))?,
            mlp: GatedMlp::new(cfg.hidden_size, cfg.intermediate_size, false, cfg.hidden_act, vb.pp("mlp"))?,
        })
    }

    fn parameters(&self) -> Vec<&Tensor> {
        let mut out = self.input_layernorm.parameters();
        out.extend(self.self_attn.parameters());
        out.extend(self.post_attention_layernorm.parameters());
        out.extend(self.mlp.parameters());
        out
    }

    fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        self.self_attn.linears_mut(&format!("{prefix}.self_attn"), out);
        self.mlp.linears_mut(&format!("{prefix}.mlp"), out);
    }

    pub fn forward(
        &self,
        xs: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: &CausalMask,
        cache: Option<&mut Option<(Tensor, Tensor)>>,
    ) -> Result<Tensor> {
        let attn = self.self_attn.forward(&self.input_layernorm.forward(xs)?, cos, sin, mask, cache)?;
        let xs = (xs + attn)?;
        &xs + self.mlp.forward(&self.post_attention_layernorm.forward(&xs)?)?
    }
}

/// Token embedding, decoder layers and the final norm (`model.*` in the hub checkpoints).
#[derive(Debug, Clone)]
pub struct TextModel {
    embed_tokens: Tensor, // [vocab, hidden]
    layers: Vec<DecoderLayer>,
    norm: RmsNorm,
    rotary: MultimodalRotary,
    checkpointing: Option<RecomputedGrads>,
}

impl TextModel {
    pub fn new(cfg: &TextConfig, vb: VarBuilder) -> Result<Self> {
        let layers = (0..cfg.num_hidden_layers).map(|i| DecoderLayer::new(cfg, vb.pp(format!("layers.{i}")))).collect::<Result<_>>()?;
        Ok(Self {
            embed_tokens: vb.pp("embed_tokens").get((cfg.vocab_size, cfg.hidden_size), "weight")?,
            layers,
            norm: RmsNorm::new(cfg.hidden_size, cfg.rms_norm_eps, vb.pp("norm"))?,
            rotary: MultimodalRotary::new(cfg),
            checkpointing: None,
        })
    }

    /// Gradient checkpointing: without a KV cache, each decoder layer keeps only its input during
    /// the forward pass and is recomputed in the backward pass. Parameter gradients found during
    /// the recomputation land in the returned store; add them with [`RecomputedGrads::merge_into`].
    pub fn enable_gradient_checkpointing(&mut self) -> RecomputedGrads {
        self.checkpointing.get_or_insert_with(RecomputedGrads::default).clone()
    }

    pub fn embedding_weight(&self) -> &Tensor {
        &self.embed_tokens
    }

    /// The LM head at `vb` (`lm_head.*`): the token embedding itself when `tied` and the
    /// checkpoint stores no head of its own.
    pub fn lm_head(&self, cfg: &TextConfig, tied: bool, vb: VarBuilder) -> Result<Linear> {
        if tied && !vb.contains_tensor("weight") {
            return Ok(Linear::from_parts(self.embed_tokens.clone(), None));
        }
        Linear::new(cfg.hidden_size, cfg.vocab_size, false, vb)
    }

    pub fn rotary(&self) -> &MultimodalRotary {
        &self.rotary
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    pub fn layers(&self) -> &[DecoderLayer] {
        &self.layers
    }

    /// Every linear layer with its checkpoint path below `prefix` (e.g. `model.layers.0.self_attn.q_proj`).
    pub fn linears_mut<'a>(&'a mut self, prefix: &str, out: &mut Vec<(String, &'a mut Linear)>) {
        for (i, layer) in self.layers.iter_mut().enumerate() {
            layer.linears_mut(&format!("{prefix}.layers.{i}"), out);
        }
    }

    /// `ids`: [B, L] u32 → [B, L, hidden].
    pub fn embed(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, l) = ids.dims2()?;
        self.embed_tokens.index_select(&ids.flatten_all()?, 0)?.reshape((b, l, ()))
    }

    /// Runs the decoder on `embeds` [B, L, hidden] and applies the final norm.
    pub fn forward(&self, embeds: &Tensor, cos: &Tensor, sin: &Tensor, mask: &CausalMask, cache: Option<&mut KvCache>) -> Result<Tensor> {
        self.forward_stacked(embeds, cos, sin, mask, cache, None)
    }

    /// [`Self::forward`] with DeepStack: after decoder layer `k`, the `k`-th vision feature level
    /// is added at the vision positions (Qwen3-VL).
    pub fn forward_stacked(
        &self,
        embeds: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: &CausalMask,
        mut cache: Option<&mut KvCache>,
        deepstack: Option<&Deepstack>,
    ) -> Result<Tensor> {
        let mut xs = embeds.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            xs = match (&self.checkpointing, cache.as_deref_mut()) {
                (Some(grads), None) => {
                    let (layer, cos, sin, mask) = (layer.clone(), cos.clone(), sin.clone(), mask.clone());
                    let params = layer.parameters().into_iter().cloned().collect();
                    let block = Arc::new(move |xs: &Tensor| layer.forward(xs, &cos, &sin, &mask, None));
                    checkpointed(&xs, block, params, grads)?
                }
                (_, cache) => layer.forward(&xs, cos, sin, mask, cache.map(|c| &mut c.layers[i]))?,
            };
            if let Some(stack) = deepstack {
                xs = stack.add_after_layer(i, &xs)?;
            }
        }
        self.norm.forward(&xs)
    }

    /// The decoder's hidden states as transformers returns them: the input embeddings, each
    /// layer's output (before its DeepStack addition), with the last replaced by the final
    /// norm's output.
    pub fn forward_traced(
        &self,
        embeds: &Tensor,
        cos: &Tensor,
        sin: &Tensor,
        mask: &CausalMask,
        deepstack: Option<&Deepstack>,
    ) -> Result<Vec<Tensor>> {
        let mut states = vec![embeds.clone()];
        let mut xs = embeds.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let out = layer.forward(&xs, cos, sin, mask, None)?;
            xs = match deepstack {
                Some(stack) => stack.add_after_layer(i, &out)?,
                None => out.clone(),
            };
            states.push(out);
        }
        let last = states.len() - 1;
        states[last] = self.norm.forward(&states[last])?;
        Ok(states)
    }
}

/// Qwen3-VL's DeepStack: vision features of intermediate tower blocks, one level per early
/// decoder layer, added to the hidden states at the vision positions.
#[derive(Debug, Clone)]
pub struct Deepstack {
    /// Flattened `b · L + i` rows of the vision positions, in prompt order.
    rows: Tensor,
    /// Per level, `[rows, hidden]` features in the same order.
    levels: Vec<Tensor>,
}

impl Deepstack {
    pub fn new(rows: Tensor, levels: Vec<Tensor>) -> Self {
        Self { rows, levels }
    }

    /// `xs` [B, L, hidden] plus level `layer`'s features at the vision rows (unchanged past the
    /// last level).
    fn add_after_layer(&self, layer: usize, xs: &Tensor) -> Result<Tensor> {
        let Some(level) = self.levels.get(layer) else { return Ok(xs.clone()) };
        let (b, l, hidden) = xs.dims3()?;
        xs.reshape((b * l, hidden))?.index_add(&self.rows, &level.to_dtype(xs.dtype())?, 0)?.reshape((b, l, hidden))
    }
}

/// Which keys the queries of one decoder pass see: query `i` of row `b` sees key `j` when
/// `j ≤ past + i` and `key_mask[b][j]` (a real token). Both attention kernels read this
/// description; neither needs the `[B, 1, L, past + L]` additive tensor.
#[derive(Debug, Clone)]
pub struct CausalMask {
    key_mask: Arc<[Vec<bool>]>,
    past: usize,
    len: usize,
    padded: bool,
}

impl CausalMask {
    /// `key_mask`: per batch row, whether each of the `past + len` keys is a real token.
    pub fn new(key_mask: &[Vec<bool>], past: usize, len: usize) -> Self {
        let padded = key_mask.iter().any(|row| row.iter().any(|&real| !real));
        Self { key_mask: key_mask.into(), past, len, padded }
    }

    /// A single unpadded query per row sees every key: no masking at all.
    fn is_trivial(&self) -> bool {
        self.len == 1 && !self.padded
    }

    fn described(&self) -> fused::Mask {
        fused::Mask::Causal { past: self.past, key_padding: self.padded.then(|| self.key_mask.clone()) }
    }
}
