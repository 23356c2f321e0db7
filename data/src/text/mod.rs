//! Tokenizer, Qwen2.5 chat template and label masks.
//!
//! The template is Qwen2.5-VL's `chat_template.json` (ChatML):
//!
//! ```text
//! <|im_start|>system\nYou are a helpful assistant.<|im_end|>\n
//! <|im_start|>user\n<|vision_start|><|video_pad|>…<|vision_end|>What …?<|im_end|>\n
//! <|im_start|>assistant\nB<|im_end|>\n
//! ```
//!
//! The default system turn is inserted only when the first message is not a system message,
//! as the Jinja template does (`loop.first and message['role'] != 'system'`). Media are written
//! where the `<image>` / `<video>` tags of the LLaVA / LLaMA-Factory data stand, and one
//! `<|image_pad|>` / `<|video_pad|>` of the template becomes `t·h·w / merge²` pads, which is
//! what the HF processor expands it to. When a conversation carries media but no tag of that
//! kind at all, the tags are prepended to the first user message, as LLaMA-Factory does
//! (videos before images, each in list order).
//!
//! The whole conversation is rendered to one string (one pad per medium) and tokenised at
//! once, as `apply_chat_template` does, so the ids are transformers' on every conversation:
//! tokenising the answer apart from its header would split Qwen2's pre-tokenizer where the
//! header's `\n` and an answer's leading `\n` merge into one token. Each medium's pad is then
//! repeated to its count, which equals tokenising the expanded string (pads are special
//! tokens, split before anything else).
//!
//! Labels are found by offsets: a token is trained when it starts inside an assistant turn's
//! trained region, which [`LabelMask`] chooses — by default the answer, its `<|im_end|>` and
//! the `\n` after it, as Qwen's fine-tuning code and LLaMA-Factory train. A token that merges
//! the header's `\n` with the answer's stays with the header, masked. Everything else
//! (system, user turns, vision pads, role headers) is [`IGNORE_INDEX`].
//!
//! | file | holds |
//! |---|---|
//! | `tokens.rs` | the special tokens by name |
//! | `message.rs` | [`Message`], [`Role`], [`MediaKind`] and the `<image>` / `<video>` tags |
//! | `error.rs` | [`TextError`] |
//! | `template.rs` | the chat template: checks, layout, [`render_chat`], [`LabelMask`], [`TemplateOptions`] |
//! | `tokenizer.rs` | [`QwenTokenizer`]: ids, labels and vision spans of a conversation |
//! | `bpe.rs` | [`train_tokenizer`], a small Qwen2-shaped tokenizer for tests and the demo |

mod bpe;
mod error;
mod message;
mod template;
mod tokenizer;
mod tokens;

pub use bpe::train_tokenizer;
pub use error::TextError;
pub use message::{IMAGE_TAG, MediaKind, Message, Role, VIDEO_TAG};
pub use template::{
    DEFAULT_SYSTEM_PROMPT, LabelMask, SPATIAL_MERGE_SIZE, TemplateOptions, VideoLayout, check_conversation, pad_count, render_chat, render_chat_timed,
};
pub use tokenizer::{ASSISTANT_TOKEN, EncodedPrompt, EncodedSample, IGNORE_INDEX, MediaSpan, QwenTokenizer, SpecialTokens};
pub use tokens::{ENDOFTEXT, IM_END, IM_START, IMAGE_PAD, QWEN_SPECIAL_TOKENS, VIDEO_PAD, VISION_END, VISION_PAD, VISION_START};
