//! The tokenizer, chat-template and processor files of a hub-layout Qwen2.5-VL or Qwen3-VL folder, for the
//! models motionvl builds itself: what `AutoProcessor.from_pretrained` and
//! `AutoTokenizer.from_pretrained` read beside `tokenizer.json`, with the values motionvl
//! preprocesses and tokenises with.

use std::path::Path;

use serde_json::json;

use crate::files::{FileError, write_json_atomic};
use crate::preprocess::PreprocessConfig;
use crate::processor::ModelFamily;
use crate::text::{ENDOFTEXT, IM_END, QWEN_SPECIAL_TOKENS, QwenTokenizer};

/// Qwen2.5-VL-*-Instruct's chat template (its `chat_template.json`), which
/// [`crate::text`] renders.
pub const QWEN25VL_CHAT_TEMPLATE: &str = concat!(
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}",
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}",
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}",
    "{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}",
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}",
    "<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] == 'video' or 'video' in content %}",
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}",
    "<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}",
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
);

/// Qwen3-VL-*-Instruct's chat template as far as motionvl writes its prompts (see
/// [`crate::text`] with [`crate::processor::ModelProcessor`]'s Qwen3-VL options): a system turn
/// only when the conversation has one, the vision placeholders of Qwen2.5-VL's. The hub file was
/// not reachable where this was written; `tests/fixtures/sis_lora` runs the official evaluation
/// with this same template.
pub const QWEN3VL_CHAT_TEMPLATE: &str = concat!(
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}",
    "{%- for message in messages %}{%- if message.role != 'system' %}{{- '<|im_start|>' + message.role + '\\n' }}",
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for content in message.content %}",
    "{%- if content.type == 'image' or 'image' in content %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}",
    "{%- elif content.type == 'video' or 'video' in content %}{{- '<|vision_start|><|video_pad|><|vision_end|>' }}",
    "{%- elif 'text' in content %}{{- content.text }}{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endif %}{%- endfor %}",
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
);

/// What transformers reads to build a family's processor: the processor, image processor and
/// video processor classes and the chat template.
struct ProcessorClasses {
    processor: &'static str,
    image: &'static str,
    video: &'static str,
    template: &'static str,
}

impl ProcessorClasses {
    fn of(family: ModelFamily) -> Self {
        match family {
            ModelFamily::Qwen25Vl => Self {
                processor: "Qwen2_5_VLProcessor",
                image: "Qwen2VLImageProcessor",
                video: "Qwen2VLVideoProcessor",
                template: QWEN25VL_CHAT_TEMPLATE,
            },
            ModelFamily::Qwen3Vl => Self {
                processor: "Qwen3VLProcessor",
                image: "Qwen2VLImageProcessorFast",
                video: "Qwen3VLVideoProcessor",
                template: QWEN3VL_CHAT_TEMPLATE,
            },
        }
    }
}

/// Writes `tokenizer_config.json` (with the chat template), `chat_template.json`,
/// `preprocessor_config.json`, `video_preprocessor_config.json` and `generation_config.json`
/// into `dir`, each atomically.
pub fn write_processor_files(dir: &Path, tokenizer: &QwenTokenizer, preprocess: &PreprocessConfig, family: ModelFamily) -> Result<(), FileError> {
    let classes = ProcessorClasses::of(family);
    let special = tokenizer.special();
    let added: serde_json::Map<String, serde_json::Value> = QWEN_SPECIAL_TOKENS
        .iter()
        .filter_map(|token| tokenizer.inner().token_to_id(token).map(|id| (token, id)))
        .map(|(token, id)| {
            let entry = json!({"content": token, "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true});
            (id.to_string(), entry)
        })
        .collect();
    let tokenizer_config = json!({
        "tokenizer_class": "Qwen2Tokenizer",
        "processor_class": classes.processor,
        "added_tokens_decoder": added,
        "additional_special_tokens": QWEN_SPECIAL_TOKENS[1..],
        "bos_token": null,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": null,
        "errors": "replace",
        "clean_up_tokenization_spaces": false,
        "split_special_tokens": false,
        "model_max_length": 32768,
        "chat_template": classes.template,
    });
    let pixels = |kind: (&str, &str)| {
        json!({
            kind.0: kind.1,
            "processor_class": classes.processor,
            "min_pixels": preprocess.min_pixels,
            "max_pixels": preprocess.max_pixels,
            "size": {"shortest_edge": preprocess.min_pixels, "longest_edge": preprocess.max_pixels},
            "patch_size": preprocess.patch_size,
            "temporal_patch_size": preprocess.temporal_patch_size,
            "merge_size": preprocess.merge_size,
            "image_mean": preprocess.image_mean,
            "image_std": preprocess.image_std,
            "rescale_factor": preprocess.rescale_factor,
            "do_rescale": true,
            "do_normalize": true,
            "do_resize": true,
            "do_convert_rgb": true,
        })
    };
    let generation = json!({
        "bos_token_id": special.endoftext,
        "eos_token_id": [special.im_end, special.endoftext],
        "pad_token_id": special.endoftext,
    });
    let files = [
        ("tokenizer_config.json", tokenizer_config),
        ("chat_template.json", json!({ "chat_template": classes.template })),
        ("preprocessor_config.json", pixels(("image_processor_type", classes.image))),
        ("video_preprocessor_config.json", pixels(("video_processor_type", classes.video))),
        ("generation_config.json", generation),
    ];
    for (name, value) in files {
        write_json_atomic(&dir.join(name), &value)?;
    }
    Ok(())
}
