//! The Qwen2.5-VL special tokens by name, in the relative order of its vocabulary.

/// End-of-text token (also the pad token of Qwen2.5 checkpoints).
pub const ENDOFTEXT: &str = "<|endoftext|>";
/// Opens a ChatML turn.
pub const IM_START: &str = "<|im_start|>";
/// Closes a ChatML turn; the generation stop token.
pub const IM_END: &str = "<|im_end|>";
/// Opens a vision block.
pub const VISION_START: &str = "<|vision_start|>";
/// Closes a vision block.
pub const VISION_END: &str = "<|vision_end|>";
/// Qwen's unused generic vision pad (kept so trained vocabularies line up with Qwen's).
pub const VISION_PAD: &str = "<|vision_pad|>";
/// One merged image patch.
pub const IMAGE_PAD: &str = "<|image_pad|>";
/// One merged video patch.
pub const VIDEO_PAD: &str = "<|video_pad|>";

/// The special tokens this module needs, in the relative order of Qwen2.5's vocabulary
/// (151643, 151644, 151645, 151652..151656).
pub const QWEN_SPECIAL_TOKENS: [&str; 8] = [ENDOFTEXT, IM_START, IM_END, VISION_START, VISION_END, VISION_PAD, IMAGE_PAD, VIDEO_PAD];
