//! Qwen2.5-VL configuration, read from the checkpoint's own `config.json`.
//!
//! Two layouts exist in the wild: the flat one of the hub checkpoints (text keys at the top,
//! `rope_scaling.mrope_section`, `vision_config.in_chans`) and the nested one written by
//! transformers 5 (`text_config`, `rope_parameters`). Both resolve to the same structs.

use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use crate::error::{ModelError, Result};

/// Activation of an MLP, spelled as in `hidden_act`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    Silu,
    /// Exact (erf) GELU, PyTorch's `nn.GELU()` and `"gelu"`.
    Gelu,
    /// Tanh-approximated GELU, `"gelu_pytorch_tanh"`.
    GeluTanh,
}

impl Activation {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            "silu" | "swish" => Some(Self::Silu),
            "gelu" => Some(Self::Gelu),
            "gelu_pytorch_tanh" | "gelu_new" => Some(Self::GeluTanh),
            _ => None,
        }
    }

    pub fn apply(self, xs: &candle_core::Tensor) -> candle_core::Result<candle_core::Tensor> {
        match self {
            Self::Silu => candle_nn::ops::silu(xs),
            Self::Gelu => xs.gelu_erf(),
            Self::GeluTanh => crate::fused::gelu::gelu_tanh(xs),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct VisionConfig {
    pub depth: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_heads: usize,
    pub in_channels: usize,
    pub out_hidden_size: usize,
    pub patch_size: usize,
    pub spatial_merge_size: usize,
    pub temporal_patch_size: usize,
    /// Window side in pixels for window attention.
    pub window_size: usize,
    pub fullatt_block_indexes: Vec<usize>,
    /// Temporal M-RoPE units per second of video (an int in transformers' config).
    pub tokens_per_second: u32,
    pub hidden_act: Activation,
    pub rope_theta: f64,
}

impl VisionConfig {
    pub fn head_dim(&self) -> usize {
        self.hidden_size / self.num_heads
    }

    /// Values of one flattened patch: channels × temporal patch × patch × patch.
    pub fn patch_dim(&self) -> usize {
        self.in_channels * self.temporal_patch_size * self.patch_size * self.patch_size
    }

    pub fn merge_unit(&self) -> usize {
        self.spatial_merge_size * self.spatial_merge_size
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct TextConfig {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Split of the rotary frequencies between the t, h and w positions.
    pub mrope_section: [usize; 3],
    /// How that split is laid out: Qwen2.5-VL's contiguous blocks, or Qwen3-VL's interleaving.
    pub mrope_layout: MropeLayout,
    pub hidden_act: Activation,
    /// `head_dim` when the config sets it apart from `hidden_size / num_attention_heads` (Qwen3).
    pub explicit_head_dim: Option<usize>,
    /// Biases on q/k/v (Qwen2: yes) and on o (Qwen2: no); Qwen3's `attention_bias` sets all four.
    pub qkv_bias: bool,
    pub o_bias: bool,
    /// RMSNorm of each query and key head before the rotary embedding (Qwen3).
    pub qk_norm: bool,
}

impl TextConfig {
    pub fn head_dim(&self) -> usize {
        self.explicit_head_dim.unwrap_or(self.hidden_size / self.num_attention_heads)
    }
}

/// Which rotary frequencies turn with the t, h and w positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MropeLayout {
    /// Frequencies `[0, s_t)` follow t, the next `s_h` h, the last `s_w` w (Qwen2.5-VL).
    Chunked,
    /// Frequency `j` follows h when `j % 3 == 1` and `j < 3·s_h`, w when `j % 3 == 2` and
    /// `j < 3·s_w`, else t (Qwen3-VL's `mrope_interleaved`).
    Interleaved,
}

impl MropeLayout {
    /// The axis (0 t, 1 h, 2 w) of each of the `head_dim / 2` frequencies.
    pub fn axis_of_freq(self, section: [usize; 3]) -> Vec<usize> {
        match self {
            Self::Chunked => section.iter().enumerate().flat_map(|(axis, &n)| std::iter::repeat_n(axis, n)).collect(),
            Self::Interleaved => (0..section.iter().sum::<usize>())
                .map(|j| match j % 3 {
                    1 if j < 3 * section[1] => 1,
                    2 if j < 3 * section[2] => 2,
                    _ => 0,
                })
                .collect(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Qwen25VlConfig {
    pub text: TextConfig,
    pub vision: VisionConfig,
    pub image_token_id: u32,
    pub video_token_id: u32,
    pub vision_start_token_id: u32,
    pub vision_end_token_id: u32,
    pub eos_token_ids: Vec<u32>,
    /// Written so transformers does not fall back to Qwen's 151643, outside a small vocabulary.
    pub bos_token_id: Option<u32>,
    pub pad_token_id: Option<u32>,
    pub tie_word_embeddings: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct RawRope {
    mrope_section: Option<Vec<usize>>,
    mrope_interleaved: Option<bool>,
    pub(crate) rope_theta: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
pub(crate) struct RawText {
    pub(crate) vocab_size: Option<usize>,
    pub(crate) hidden_size: Option<usize>,
    pub(crate) intermediate_size: Option<usize>,
    pub(crate) num_hidden_layers: Option<usize>,
    pub(crate) num_attention_heads: Option<usize>,
    pub(crate) num_key_value_heads: Option<usize>,
    pub(crate) rms_norm_eps: Option<f64>,
    pub(crate) rope_theta: Option<f64>,
    pub(crate) rope_scaling: Option<RawRope>,
    pub(crate) rope_parameters: Option<RawRope>,
    pub(crate) hidden_act: Option<String>,
    pub(crate) head_dim: Option<usize>,
    pub(crate) attention_bias: Option<bool>,
    pub(crate) eos_token_id: Option<Value>,
    pub(crate) bos_token_id: Option<u32>,
    pub(crate) pad_token_id: Option<u32>,
    pub(crate) tie_word_embeddings: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawVision {
    depth: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_heads: Option<usize>,
    in_channels: Option<usize>,
    in_chans: Option<usize>,
    out_hidden_size: Option<usize>,
    patch_size: Option<usize>,
    spatial_patch_size: Option<usize>,
    spatial_merge_size: Option<usize>,
    temporal_patch_size: Option<usize>,
    window_size: Option<usize>,
    fullatt_block_indexes: Option<Vec<usize>>,
    tokens_per_second: Option<f64>,
    hidden_act: Option<String>,
    rope_parameters: Option<RawRope>,
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(flatten)]
    top: RawText,
    text_config: Option<RawText>,
    vision_config: Option<RawVision>,
    image_token_id: Option<u32>,
    video_token_id: Option<u32>,
    vision_start_token_id: Option<u32>,
    vision_end_token_id: Option<u32>,
}

impl Qwen25VlConfig {
    /// Where this config's vision token ids differ from a tokenizer's (see
    /// [`vision_token_mismatch`]).
    pub fn vision_token_mismatch(&self, tokenizer: [u32; 4]) -> Option<ModelError> {
        vision_token_mismatch([self.image_token_id, self.video_token_id, self.vision_start_token_id, self.vision_end_token_id], tokenizer)
    }

    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        Self::from_json(&text).map_err(|reason| ModelError::Config { path: path.to_path_buf(), reason })
    }

    /// Parses either config layout; the error names the first missing or invalid key.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let nested = raw.text_config.unwrap_or_default();
        let top = raw.top;
        let text_cfg = parse_text(&nested, &top, TextFamily::Qwen2)?;
        let act = parse_activation;
        let v = raw.vision_config.ok_or("missing `vision_config`")?;
        macro_rules! vision_key {
            ($key:ident) => {
                v.$key.clone().ok_or_else(|| format!("missing `vision_config.{}`", stringify!($key)))?
            };
        }
        let vision = VisionConfig {
            depth: vision_key!(depth),
            hidden_size: vision_key!(hidden_size),
            intermediate_size: vision_key!(intermediate_size),
            num_heads: vision_key!(num_heads),
            in_channels: v.in_channels.or(v.in_chans).unwrap_or(3),
            out_hidden_size: vision_key!(out_hidden_size),
            patch_size: v.patch_size.or(v.spatial_patch_size).unwrap_or(14),
            spatial_merge_size: v.spatial_merge_size.unwrap_or(2),
            temporal_patch_size: v.temporal_patch_size.unwrap_or(2),
            window_size: v.window_size.unwrap_or(112),
            fullatt_block_indexes: v.fullatt_block_indexes.clone().unwrap_or_default(),
            tokens_per_second: whole(v.tokens_per_second.unwrap_or(2.0))
                .ok_or("`vision_config.tokens_per_second` must be a whole number (transformers reads it as an int)")?,
            hidden_act: act(v.hidden_act.clone())?,
            rope_theta: v.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10000.0),
        };
        if vision.num_heads == 0 || !vision.hidden_size.is_multiple_of(vision.num_heads) || !vision.head_dim().is_multiple_of(4) {
            return Err("vision num_heads must divide hidden_size into a head_dim divisible by 4".into());
        }
        if !vision.window_size.is_multiple_of(vision.patch_size * vision.spatial_merge_size) {
            return Err("vision window_size must be a multiple of patch_size × spatial_merge_size".into());
        }
        let eos_token_ids = eos_token_ids(&nested, &top);
        Ok(Self {
            text: text_cfg,
            vision,
            image_token_id: raw.image_token_id.unwrap_or(151655),
            video_token_id: raw.video_token_id.unwrap_or(151656),
            vision_start_token_id: raw.vision_start_token_id.unwrap_or(151652),
            vision_end_token_id: raw.vision_end_token_id.unwrap_or(151653),
            eos_token_ids,
            bos_token_id: nested.bos_token_id.or(top.bos_token_id),
            pad_token_id: nested.pad_token_id.or(top.pad_token_id),
            tie_word_embeddings: top.tie_word_embeddings.or(nested.tie_word_embeddings).unwrap_or(false),
        })
    }
}

/// Where a model's vision token ids (`image_pad`, `video_pad`, `vision_start`, `vision_end`, in
/// that order) differ from a tokenizer's, the first that differs: the checkpoint and the
/// tokenizer come from different models, and vision features would land nowhere.
pub fn vision_token_mismatch(model: [u32; 4], tokenizer: [u32; 4]) -> Option<ModelError> {
    ["image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"]
        .into_iter()
        .zip(model)
        .zip(tokenizer)
        .find(|((_, model_id), tokenizer_id)| model_id != tokenizer_id)
        .map(|((key, model), tokenizer)| ModelError::VisionTokens { key, model, tokenizer })
}

/// Which decoder a text config describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextFamily {
    /// Qwen2 (Qwen2.5-VL): q/k/v biases, chunked M-RoPE.
    Qwen2,
    /// Qwen3 (Qwen3-VL): q/k norms, `attention_bias` on all four projections, explicit
    /// `head_dim`, interleaved M-RoPE where `mrope_interleaved` says so.
    Qwen3,
}

/// The text config from either layout: keys live in `text_config` (nested) and a key missing
/// there may still sit at the top (flat); the error names the first missing or invalid key.
pub(crate) fn parse_text(nested: &RawText, top: &RawText, family: TextFamily) -> std::result::Result<TextConfig, String> {
    macro_rules! text_key {
        ($key:ident) => {
            nested.$key.clone().or(top.$key.clone()).ok_or_else(|| format!("missing `{}`", stringify!($key)))?
        };
    }
    let rope = nested.rope_parameters.as_ref().or(nested.rope_scaling.as_ref()).or(top.rope_parameters.as_ref()).or(top.rope_scaling.as_ref());
    let mrope = rope.and_then(|r| r.mrope_section.clone()).ok_or("missing `mrope_section` (in rope_scaling or rope_parameters)")?;
    let mrope_section: [usize; 3] = mrope.try_into().map_err(|v: Vec<usize>| format!("`mrope_section` must have 3 entries, found {}", v.len()))?;
    let rope_theta = rope.and_then(|r| r.rope_theta).or(nested.rope_theta).or(top.rope_theta).ok_or("missing `rope_theta`")?;
    let attention_bias = nested.attention_bias.or(top.attention_bias);
    let interleaved = rope.and_then(|r| r.mrope_interleaved).unwrap_or(family == TextFamily::Qwen3);
    let cfg = TextConfig {
        vocab_size: text_key!(vocab_size),
        hidden_size: text_key!(hidden_size),
        intermediate_size: text_key!(intermediate_size),
        num_hidden_layers: text_key!(num_hidden_layers),
        num_attention_heads: text_key!(num_attention_heads),
        num_key_value_heads: text_key!(num_key_value_heads),
        rms_norm_eps: nested.rms_norm_eps.or(top.rms_norm_eps).unwrap_or(1e-6),
        rope_theta,
        mrope_section,
        mrope_layout: if interleaved { MropeLayout::Interleaved } else { MropeLayout::Chunked },
        hidden_act: parse_activation(nested.hidden_act.clone().or(top.hidden_act.clone()))?,
        explicit_head_dim: match family {
            TextFamily::Qwen2 => None,
            TextFamily::Qwen3 => nested.head_dim.or(top.head_dim),
        },
        qkv_bias: attention_bias.unwrap_or(family == TextFamily::Qwen2),
        o_bias: attention_bias.unwrap_or(false),
        qk_norm: family == TextFamily::Qwen3,
    };
    let heads_fit = cfg.num_attention_heads > 0
        && cfg.num_key_value_heads > 0
        && cfg.num_attention_heads.is_multiple_of(cfg.num_key_value_heads)
        && (cfg.explicit_head_dim.is_some() || cfg.hidden_size.is_multiple_of(cfg.num_attention_heads));
    if !heads_fit {
        return Err("text heads must divide hidden_size (or head_dim be given) and be a multiple of num_key_value_heads".into());
    }
    if 2 * mrope_section.iter().sum::<usize>() != cfg.head_dim() {
        return Err(format!(
            "mrope_section {mrope_section:?} sums to {}, but head_dim/2 is {}",
            mrope_section.iter().sum::<usize>(),
            cfg.head_dim() / 2
        ));
    }
    Ok(cfg)
}

pub(crate) fn parse_activation(name: Option<String>) -> std::result::Result<Activation, String> {
    let name = name.unwrap_or_else(|| "silu".into());
    Activation::parse(&name).ok_or(format!("unsupported activation `{name}`"))
}

/// `eos_token_id` as one id or a list, at the top or in `text_config`.
pub(crate) fn eos_token_ids(nested: &RawText, top: &RawText) -> Vec<u32> {
    match top.eos_token_id.clone().or(nested.eos_token_id.clone()) {
        Some(Value::Number(n)) => n.as_u64().map(|n| vec![n as u32]).unwrap_or_default(),
        Some(Value::Array(ids)) => ids.iter().filter_map(|n| n.as_u64()).map(|n| n as u32).collect(),
        _ => Vec::new(),
    }
}

/// `2.0` → 2; older motionvl configs wrote whole numbers as floats.
fn whole(x: f64) -> Option<u32> {
    (x.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&x)).then_some(x as u32)
}

impl Activation {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Silu => "silu",
            Self::Gelu => "gelu",
            Self::GeluTanh => "gelu_pytorch_tanh",
        }
    }
}

impl Qwen25VlConfig {
    /// The flat layout of the hub checkpoints, which both transformers 4 and 5 read.
    pub fn to_hub_json(&self) -> Value {
        let (t, v) = (&self.text, &self.vision);
        serde_json::json!({
            "architectures": ["Qwen2_5_VLForConditionalGeneration"],
            "model_type": "qwen2_5_vl",
            "vocab_size": t.vocab_size,
            "hidden_size": t.hidden_size,
            "intermediate_size": t.intermediate_size,
            "num_hidden_layers": t.num_hidden_layers,
            "num_attention_heads": t.num_attention_heads,
            "num_key_value_heads": t.num_key_value_heads,
            "rms_norm_eps": t.rms_norm_eps,
            "rope_theta": t.rope_theta,
            "rope_scaling": {"type": "mrope", "mrope_section": t.mrope_section},
            "hidden_act": t.hidden_act.name(),
            "max_position_embeddings": 32768,
            "tie_word_embeddings": self.tie_word_embeddings,
            "eos_token_id": self.eos_token_ids,
            "bos_token_id": self.bos_token_id,
            "pad_token_id": self.pad_token_id,
            "image_token_id": self.image_token_id,
            "video_token_id": self.video_token_id,
            "vision_start_token_id": self.vision_start_token_id,
            "vision_end_token_id": self.vision_end_token_id,
            "torch_dtype": "float32",
            "vision_config": {
                "depth": v.depth,
                "hidden_size": v.hidden_size,
                "intermediate_size": v.intermediate_size,
                "num_heads": v.num_heads,
                "in_chans": v.in_channels,
                "in_channels": v.in_channels,
                "out_hidden_size": v.out_hidden_size,
                "patch_size": v.patch_size,
                "spatial_patch_size": v.patch_size,
                "spatial_merge_size": v.spatial_merge_size,
                "temporal_patch_size": v.temporal_patch_size,
                "window_size": v.window_size,
                "fullatt_block_indexes": v.fullatt_block_indexes,
                "tokens_per_second": v.tokens_per_second,
                "hidden_act": v.hidden_act.name(),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first vision id that differs from the tokenizer's is named with both values.
    #[test]
    fn a_tokenizer_of_another_checkpoint_is_named() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/models/tiny.json");
        let cfg = Qwen25VlConfig::from_file(&path).unwrap_or_else(|e| panic!("{e}"));
        let same = [cfg.image_token_id, cfg.video_token_id, cfg.vision_start_token_id, cfg.vision_end_token_id];
        assert!(cfg.vision_token_mismatch(same).is_none());
        let shifted = [same[0], same[1] + 7, same[2], same[3] + 1];
        let said = cfg.vision_token_mismatch(shifted).map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            said,
            format!("the model's video_token_id is {} but the tokenizer gives {}: they come from different checkpoints", same[1], same[1] + 7)
        );
    }
}
