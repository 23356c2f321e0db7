//! Qwen3-VL configuration, read from the checkpoint's own `config.json`: the nested layout of
//! the hub checkpoints (`text_config` with `rope_scaling` and `rope_theta`, as transformers 4.57
//! wrote them) and of transformers 5 (`rope_parameters`) resolve to the same structs.

use std::path::Path;

use serde::Deserialize;

use crate::config::{Activation, RawRope, RawText, TextConfig, TextFamily, eos_token_ids, parse_activation, parse_text};
use crate::error::{ModelError, Result};

#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3VisionConfig {
    pub depth: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_heads: usize,
    pub in_channels: usize,
    pub out_hidden_size: usize,
    pub patch_size: usize,
    pub spatial_merge_size: usize,
    pub temporal_patch_size: usize,
    pub hidden_act: Activation,
    /// Entries of the learned position table, a square grid of `√n × √n`.
    pub num_position_embeddings: usize,
    /// Vision blocks whose outputs feed DeepStack, one level per early decoder layer.
    pub deepstack_visual_indexes: Vec<usize>,
    pub rope_theta: f64,
}

impl Qwen3VisionConfig {
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

    /// Side of the square learned position table (transformers' `int(n ** 0.5)`).
    pub fn position_grid_side(&self) -> usize {
        (self.num_position_embeddings as f64).sqrt() as usize
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Qwen3VlConfig {
    pub text: TextConfig,
    pub vision: Qwen3VisionConfig,
    pub image_token_id: u32,
    pub video_token_id: u32,
    pub vision_start_token_id: u32,
    pub vision_end_token_id: u32,
    pub eos_token_ids: Vec<u32>,
    pub tie_word_embeddings: bool,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawVision {
    depth: Option<usize>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_heads: Option<usize>,
    in_channels: Option<usize>,
    out_hidden_size: Option<usize>,
    patch_size: Option<usize>,
    spatial_merge_size: Option<usize>,
    temporal_patch_size: Option<usize>,
    hidden_act: Option<String>,
    num_position_embeddings: Option<usize>,
    deepstack_visual_indexes: Option<Vec<usize>>,
    rope_parameters: Option<RawRope>,
}

#[derive(Deserialize)]
struct RawConfig {
    #[serde(flatten)]
    top: RawText,
    model_type: Option<String>,
    text_config: Option<RawText>,
    vision_config: Option<RawVision>,
    image_token_id: Option<u32>,
    video_token_id: Option<u32>,
    vision_start_token_id: Option<u32>,
    vision_end_token_id: Option<u32>,
}

impl Qwen3VlConfig {
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
        Self::from_json(&text).map_err(|reason| ModelError::Config { path: path.to_path_buf(), reason })
    }

    /// Parses a Qwen3-VL config; the error names the first missing or invalid key.
    pub fn from_json(text: &str) -> std::result::Result<Self, String> {
        let raw: RawConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if let Some(kind) = raw.model_type.as_deref()
            && kind != "qwen3_vl"
        {
            return Err(format!("`model_type` is `{kind}`, not `qwen3_vl`"));
        }
        let nested = raw.text_config.unwrap_or_default();
        let top = raw.top;
        let text = parse_text(&nested, &top, TextFamily::Qwen3)?;
        let v = raw.vision_config.ok_or("missing `vision_config`")?;
        macro_rules! vision_key {
            ($key:ident) => {
                v.$key.clone().ok_or_else(|| format!("missing `vision_config.{}`", stringify!($key)))?
            };
        }
        let vision = Qwen3VisionConfig {
            depth: vision_key!(depth),
            hidden_size: vision_key!(hidden_size),
            intermediate_size: vision_key!(intermediate_size),
            num_heads: vision_key!(num_heads),
            in_channels: v.in_channels.unwrap_or(3),
            out_hidden_size: vision_key!(out_hidden_size),
            patch_size: v.patch_size.unwrap_or(16),
            spatial_merge_size: v.spatial_merge_size.unwrap_or(2),
            temporal_patch_size: v.temporal_patch_size.unwrap_or(2),
            hidden_act: parse_activation(Some(v.hidden_act.clone().unwrap_or_else(|| "gelu_pytorch_tanh".into())))?,
            num_position_embeddings: vision_key!(num_position_embeddings),
            deepstack_visual_indexes: v.deepstack_visual_indexes.clone().unwrap_or_default(),
            rope_theta: v.rope_parameters.as_ref().and_then(|r| r.rope_theta).unwrap_or(10000.0),
        };
        if vision.num_heads == 0 || !vision.hidden_size.is_multiple_of(vision.num_heads) || !vision.head_dim().is_multiple_of(4) {
            return Err("vision num_heads must divide hidden_size into a head_dim divisible by 4".into());
        }
        let side = vision.position_grid_side();
        if side < 2 || side * side != vision.num_position_embeddings {
            return Err(format!("`vision_config.num_position_embeddings` is {}, not the square of a side ≥ 2", vision.num_position_embeddings));
        }
        if let Some(&bad) = vision.deepstack_visual_indexes.iter().find(|&&i| i >= vision.depth) {
            return Err(format!("`vision_config.deepstack_visual_indexes` names block {bad} of a {}-block tower", vision.depth));
        }
        if vision.deepstack_visual_indexes.len() > text.num_hidden_layers {
            return Err(format!(
                "{} DeepStack levels for {} decoder layers: each level enters after its own layer",
                vision.deepstack_visual_indexes.len(),
                text.num_hidden_layers
            ));
        }
        if vision.out_hidden_size != text.hidden_size {
            return Err(format!("`vision_config.out_hidden_size` {} differs from the text width {}", vision.out_hidden_size, text.hidden_size));
        }
        Ok(Self {
            eos_token_ids: eos_token_ids(&nested, &top),
            text,
            vision,
            image_token_id: raw.image_token_id.unwrap_or(151655),
            video_token_id: raw.video_token_id.unwrap_or(151656),
            vision_start_token_id: raw.vision_start_token_id.unwrap_or(151652),
            vision_end_token_id: raw.vision_end_token_id.unwrap_or(151653),
            tie_word_embeddings: top.tie_word_embeddings.or(nested.tie_word_embeddings).unwrap_or(false),
        })
    }
}

impl Qwen3VlConfig {
    /// The layout of the released hub checkpoints (`rope_scaling` and `rope_theta` inside
    /// `text_config`), which transformers 4.57 and 5 both read.
    pub fn to_hub_json(&self) -> serde_json::Value {
        let (t, v) = (&self.text, &self.vision);
        serde_json::json!({
            "architectures": ["Qwen3VLForConditionalGeneration"],
            "model_type": "qwen3_vl",
            "image_token_id": self.image_token_id,
            "video_token_id": self.video_token_id,
            "vision_start_token_id": self.vision_start_token_id,
            "vision_end_token_id": self.vision_end_token_id,
            "tie_word_embeddings": self.tie_word_embeddings,
            "text_config": {
                "model_type": "qwen3_vl_text",
                "vocab_size": t.vocab_size,
                "hidden_size": t.hidden_size,
                "intermediate_size": t.intermediate_size,
                "num_hidden_layers": t.num_hidden_layers,
                "num_attention_heads": t.num_attention_heads,
                "num_key_value_heads": t.num_key_value_heads,
                "head_dim": t.head_dim(),
                "hidden_act": t.hidden_act.name(),
                "rms_norm_eps": t.rms_norm_eps,
                "attention_bias": t.qkv_bias,
                "rope_theta": t.rope_theta,
                "rope_scaling": {"rope_type": "default", "mrope_section": t.mrope_section, "mrope_interleaved": t.mrope_layout == crate::config::MropeLayout::Interleaved},
                "max_position_embeddings": 262144,
                "eos_token_id": self.eos_token_ids,
                "tie_word_embeddings": self.tie_word_embeddings,
                "dtype": "float32",
            },
            "vision_config": {
                "model_type": "qwen3_vl",
                "depth": v.depth,
                "hidden_size": v.hidden_size,
                "intermediate_size": v.intermediate_size,
                "num_heads": v.num_heads,
                "in_channels": v.in_channels,
                "out_hidden_size": v.out_hidden_size,
                "patch_size": v.patch_size,
                "spatial_merge_size": v.spatial_merge_size,
                "temporal_patch_size": v.temporal_patch_size,
                "hidden_act": v.hidden_act.name(),
                "num_position_embeddings": v.num_position_embeddings,
                "deepstack_visual_indexes": v.deepstack_visual_indexes,
            },
        })
    }
}
