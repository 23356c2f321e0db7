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

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::processors::byte_level::ByteLevel as ByteLevelProcessor;
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Label value the loss ignores (PyTorch's `CrossEntropyLoss(ignore_index=-100)` convention).
pub const IGNORE_INDEX: i64 = -100;
/// System prompt Qwen2.5-VL's template inserts when a conversation has none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant.";
/// Placeholder for one image in LLaVA / LLaMA-Factory conversation text.
pub const IMAGE_TAG: &str = "<image>";
/// Placeholder for one video in LLaVA / LLaMA-Factory conversation text.
pub const VIDEO_TAG: &str = "<video>";
/// Qwen2.5-VL's 2×2 patch merger: one pad token per `merge²` patches.
pub const SPATIAL_MERGE_SIZE: usize = 2;

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

/// Qwen2's pre-tokenisation regex (from its `tokenizer.json`), so that a tokenizer trained by
/// [`train_tokenizer`] splits text the same way the real one does.
const QWEN2_SPLIT_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Errors of tokenizer loading and conversation encoding. Sample-level variants carry the
/// sample id so a failing row can be found in its file.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error("cannot load tokenizer {path}: {message}")]
    Load { path: PathBuf, message: String },
    #[error("cannot save tokenizer to {path}: {message}")]
    Save { path: PathBuf, message: String },
    #[error("tokenizer {origin} lacks the special token {token}; is it a Qwen2.5(-VL) tokenizer?")]
    MissingSpecialToken { origin: String, token: &'static str },
    #[error("tokenizer training failed: {message}")]
    Train { message: String },
    #[error("sample {sample_id}: tokenizer failed: {message}")]
    Tokenize { sample_id: String, message: String },
    #[error("cannot decode token ids: {message}")]
    Decode { message: String },
    #[error("sample {sample_id}: {tags} {kind} tag(s) in the text but {media} {kind}(s) given")]
    MediaCountMismatch { sample_id: String, kind: MediaKind, tags: usize, media: usize },
    #[error("sample {sample_id}: message {message_index} is a {role} turn with a {kind} tag; media belong to user turns")]
    MediaOutsideUserTurn { sample_id: String, message_index: usize, role: Role, kind: MediaKind },
    #[error("sample {sample_id}: {kind} {index} has grid {grid:?}; t must be ≥ 1 and h, w multiples of the merge size {merge_size}")]
    BadGrid { sample_id: String, kind: MediaKind, index: usize, grid: [usize; 3], merge_size: usize },
    #[error("sample {sample_id}: text contains the reserved token {token}; vision tokens may only come from media")]
    ReservedTokenInText { sample_id: String, token: &'static str },
    #[error("sample {sample_id}: message {index} has role {found}, expected {expected}")]
    RoleOrder { sample_id: String, index: usize, expected: &'static str, found: Role },
    #[error("sample {sample_id}: conversation has no {what}")]
    Incomplete { sample_id: String, what: &'static str },
    #[error("sample {sample_id}: {len} tokens do not fit max_seq_len {max_seq_len} without cutting a vision block or the first answer; skipped")]
    TooLong { sample_id: String, len: usize, max_seq_len: usize },
}

impl TextError {
    /// True for errors that mean "leave this sample out and count it" rather than "the data
    /// or the tokenizer is broken": today only [`TextError::TooLong`].
    pub fn is_skip(&self) -> bool {
        matches!(self, TextError::TooLong { .. })
    }
}

/// Image or video: decides the tag, the pad token and the `mm_token_type_ids` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaKind {
    Image,
    Video,
}

impl MediaKind {
    /// The placeholder in conversation text.
    pub fn tag(self) -> &'static str {
        match self {
            MediaKind::Image => IMAGE_TAG,
            MediaKind::Video => VIDEO_TAG,
        }
    }

    /// The pad token that stands for one merged patch.
    pub fn pad_token(self) -> &'static str {
        match self {
            MediaKind::Image => IMAGE_PAD,
            MediaKind::Video => VIDEO_PAD,
        }
    }

    /// Value in `mm_token_type_ids` for this kind's pads (0 is text).
    pub fn token_type(self) -> u8 {
        match self {
            MediaKind::Image => 1,
            MediaKind::Video => 2,
        }
    }
}

impl fmt::Display for MediaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MediaKind::Image => "image",
            MediaKind::Video => "video",
        })
    }
}

/// Speaker of a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    /// The role name ChatML writes after `<|im_start|>`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One chat message; `content` may hold `<image>` / `<video>` tags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message { role, content: content.into() }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Message::new(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Message::new(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::new(Role::Assistant, content)
    }
}

/// Ids of the special tokens in the loaded vocabulary (they differ between the real Qwen
/// vocabulary and a tokenizer trained for tests or the synthetic demo).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecialTokens {
    pub endoftext: u32,
    pub im_start: u32,
    pub im_end: u32,
    pub vision_start: u32,
    pub vision_end: u32,
    pub vision_pad: u32,
    pub image_pad: u32,
    pub video_pad: u32,
}

impl SpecialTokens {
    /// `image_pad`, `video_pad`, `vision_start`, `vision_end`: the ids a checkpoint's config
    /// must name alike.
    pub fn vision_ids(&self) -> [u32; 4] {
        [self.image_pad, self.video_pad, self.vision_start, self.vision_end]
    }

    fn lookup(tokenizer: &Tokenizer, origin: &str) -> Result<Self, TextError> {
        let id =
            |token: &'static str| tokenizer.token_to_id(token).ok_or_else(|| TextError::MissingSpecialToken { origin: origin.to_string(), token });
        Ok(SpecialTokens {
            endoftext: id(ENDOFTEXT)?,
            im_start: id(IM_START)?,
            im_end: id(IM_END)?,
            vision_start: id(VISION_START)?,
            vision_end: id(VISION_END)?,
            vision_pad: id(VISION_PAD)?,
            image_pad: id(IMAGE_PAD)?,
            video_pad: id(VIDEO_PAD)?,
        })
    }

    /// Pad id of a media kind.
    pub fn pad(&self, kind: MediaKind) -> u32 {
        match kind {
            MediaKind::Image => self.image_pad,
            MediaKind::Video => self.video_pad,
        }
    }

    /// Tokens that must never come out of plain text: they would claim vision features that
    /// no grid backs.
    fn reserved(&self) -> [(u32, &'static str); 5] {
        [
            (self.vision_start, VISION_START),
            (self.vision_end, VISION_END),
            (self.vision_pad, VISION_PAD),
            (self.image_pad, IMAGE_PAD),
            (self.video_pad, VIDEO_PAD),
        ]
    }
}

/// Which tokens of an assistant turn the loss sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LabelMask {
    /// The answer, its `<|im_end|>` and the `\n` after it: Qwen's official fine-tuning code and
    /// LLaMA-Factory.
    #[default]
    Qwen,
    /// The answer and its `<|im_end|>` only, what generation produces (motionvl's earlier mask).
    AnswerImEnd,
    /// The official SIS-Motion loader's rule on token ids (`data_processor.py:372-388`): after
    /// every `assistant` token, skip one token (the header's `\n`, or the token it merged into),
    /// then train up to the next `<|im_end|>` and the token after it. It equals [`Self::Qwen`]
    /// wherever `assistant` appears only in role headers; where a user or system text holds the
    /// bare word as a token, that text is trained too, as the official code trains it.
    Official,
}

/// The token the official label rule looks for (`convert_tokens_to_ids("assistant")`).
pub const ASSISTANT_TOKEN: &str = "assistant";

/// How a conversation is laid out and bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateOptions {
    /// Inserted as the system turn when the conversation has none.
    pub system_prompt: String,
    /// Longest allowed sequence (the paper trains with 2048). `None` never truncates.
    pub max_seq_len: Option<usize>,
    /// Patch-merge size; pads per medium are `t·h·w / merge_size²`.
    pub merge_size: usize,
    pub label_mask: LabelMask,
}

impl Default for TemplateOptions {
    fn default() -> Self {
        TemplateOptions {
            system_prompt: DEFAULT_SYSTEM_PROMPT.to_string(),
            max_seq_len: Some(2048),
            merge_size: SPATIAL_MERGE_SIZE,
            label_mask: LabelMask::default(),
        }
    }
}

/// Where one medium's pads sit in the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MediaSpan {
    pub kind: MediaKind,
    /// Index within its kind (into `image_grids` or `video_grids`).
    pub index: usize,
    /// Position of the first pad token (just after `<|vision_start|>`).
    pub start: usize,
    /// Number of pad tokens, `t·h·w / merge²`.
    pub len: usize,
}

/// A tokenised training conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EncodedSample {
    pub id: String,
    pub input_ids: Vec<u32>,
    /// Same length as `input_ids`; the id where trained, [`IGNORE_INDEX`] elsewhere. Not
    /// shifted: the loss shifts, as in transformers.
    pub labels: Vec<i64>,
    /// 0 text, 1 image pad, 2 video pad: what the model uses to place vision features.
    pub mm_token_type_ids: Vec<u8>,
    /// Grids of the images, in the order their blocks appear (= the order given).
    pub image_grids: Vec<[usize; 3]>,
    /// Grids of the videos, in the order their blocks appear (= the order given).
    pub video_grids: Vec<[usize; 3]>,
    /// Every vision block in sequence order.
    pub media_spans: Vec<MediaSpan>,
    /// Trailing text-only turns dropped to fit `max_seq_len`.
    pub dropped_turns: usize,
}

impl EncodedSample {
    pub fn len(&self) -> usize {
        self.input_ids.len()
    }
    pub fn is_empty(&self) -> bool {
        self.input_ids.is_empty()
    }
    /// Number of tokens the loss sees.
    pub fn trained_tokens(&self) -> usize {
        self.labels.iter().filter(|&&l| l != IGNORE_INDEX).count()
    }
}

/// A tokenised generation prompt: the conversation so far plus `<|im_start|>assistant\n`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EncodedPrompt {
    pub id: String,
    pub input_ids: Vec<u32>,
    pub mm_token_type_ids: Vec<u8>,
    pub image_grids: Vec<[usize; 3]>,
    pub video_grids: Vec<[usize; 3]>,
    pub media_spans: Vec<MediaSpan>,
}

/// A piece of the laid-out conversation.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    ImStart,
    ImEnd,
    Text(String),
    Media(MediaKind, usize),
}

/// One message laid out as pieces; `trained[i]` says whether piece i is supervised.
#[derive(Debug)]
struct Laid {
    pieces: Vec<(Piece, bool)>,
    /// Ends a complete user→assistant turn: a legal truncation point.
    ends_turn: bool,
    has_media: bool,
}

/// Whether the conversation is a training example (ends with an answer) or a prompt.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Train,
    Prompt,
}

/// Qwen2.5(-VL) tokenizer plus the ids of its special tokens.
#[derive(Clone)]
pub struct QwenTokenizer {
    tokenizer: Tokenizer,
    special: SpecialTokens,
}

impl fmt::Debug for QwenTokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QwenTokenizer").field("vocab_size", &self.vocab_size()).field("special", &self.special).finish()
    }
}

impl QwenTokenizer {
    /// Loads `tokenizer.json` from a file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, TextError> {
        let path = path.as_ref();
        // tokenizers 0.23 panics on some malformed files (an `unwrap` in its decoder
        // deserialiser, found by tests/tests/fuzz.rs): a damaged file is an error like any other.
        let loaded = std::panic::catch_unwind(|| Tokenizer::from_file(path)).map_err(|_| TextError::Load {
            path: path.to_path_buf(),
            message: "not a tokenizer.json the tokenizers library can read (it panicked)".into(),
        })?;
        let tokenizer = loaded.map_err(|e| TextError::Load { path: path.to_path_buf(), message: e.to_string() })?;
        Self::from_tokenizer_named(tokenizer, &path.display().to_string())
    }

    /// Loads `<dir>/tokenizer.json` from a model directory (a checkpoint download or snapshot).
    pub fn from_model_dir(dir: impl AsRef<Path>) -> Result<Self, TextError> {
        let path = dir.as_ref().join("tokenizer.json");
        if !path.is_file() {
            return Err(TextError::Load { path, message: "no tokenizer.json in the model directory".to_string() });
        }
        Self::from_file(path)
    }

    /// Wraps a tokenizer built in memory (for instance by [`train_tokenizer`]).
    pub fn from_tokenizer(tokenizer: Tokenizer) -> Result<Self, TextError> {
        Self::from_tokenizer_named(tokenizer, "<in memory>")
    }

    fn from_tokenizer_named(tokenizer: Tokenizer, origin: &str) -> Result<Self, TextError> {
        let special = SpecialTokens::lookup(&tokenizer, origin)?;
        Ok(QwenTokenizer { tokenizer, special })
    }

    /// Writes `tokenizer.json` so a trained vocabulary can ship with a checkpoint.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), TextError> {
        let path = path.as_ref();
        self.tokenizer.save(path, false).map_err(|e| TextError::Save { path: path.to_path_buf(), message: e.to_string() })
    }

    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// The underlying `tokenizers` object.
    pub fn inner(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Vocabulary size including added tokens (what an embedding must cover).
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// Plain text to ids, with no template and no special tokens added.
    pub fn encode_text(&self, text: &str) -> Result<Vec<u32>, TextError> {
        self.encode_raw(text, "<text>")
    }

    fn encode_raw(&self, text: &str, sample_id: &str) -> Result<Vec<u32>, TextError> {
        if text.is_empty() {
            return Ok(Vec::new());
        }
        self.tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TextError::Tokenize { sample_id: sample_id.to_string(), message: e.to_string() })
    }

    /// Ids back to text; `skip_special` drops `<|im_end|>` and friends.
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String, TextError> {
        self.tokenizer.decode(ids, skip_special).map_err(|e| TextError::Decode { message: e.to_string() })
    }

    /// Tokenises a training conversation: optional system message, then user / assistant
    /// turns ending with an assistant answer. `image_grids[k]` / `video_grids[k]` belong to the
    /// k-th `<image>` / `<video>` tag.
    ///
    /// When `max_seq_len` is exceeded, trailing complete turns without media are dropped
    /// (counted in `dropped_turns`); if that is not enough — the first answer or a vision
    /// block would be cut — the result is [`TextError::TooLong`], which the caller skips
    /// and counts ([`TextError::is_skip`]).
    pub fn encode_chat(
        &self,
        sample_id: &str,
        messages: &[Message],
        image_grids: &[[usize; 3]],
        video_grids: &[[usize; 3]],
        opts: &TemplateOptions,
    ) -> Result<EncodedSample, TextError> {
        let laid = layout(sample_id, messages, image_grids.len(), video_grids.len(), opts, Mode::Train)?;
        check_grids(sample_id, image_grids, video_grids, opts.merge_size)?;
        let mut tokens = self.tokenize(sample_id, &laid, image_grids, video_grids, opts.merge_size)?;
        if opts.label_mask == LabelMask::Official {
            tokens.labels = self.official_labels(sample_id, &tokens.ids)?;
        }

        // Legal cut points: the end of each complete turn after the last vision block.
        let mut cut = tokens.msg_ends.last().copied().unwrap_or(0);
        let mut dropped_turns = 0;
        if let Some(max) = opts.max_seq_len
            && cut > max
        {
            let last_media = laid.iter().rposition(|m| m.has_media);
            let total_turns = laid.iter().filter(|m| m.ends_turn).count();
            let mut best = None;
            let mut turns = 0;
            for (i, m) in laid.iter().enumerate() {
                if !m.ends_turn {
                    continue;
                }
                turns += 1;
                let end = tokens.msg_ends[i];
                if last_media.is_none_or(|lm| i > lm) && end <= max {
                    best = Some((end, turns));
                }
            }
            match best {
                Some((end, kept)) => {
                    cut = end;
                    dropped_turns = total_turns - kept;
                }
                None => {
                    return Err(TextError::TooLong { sample_id: sample_id.to_string(), len: cut, max_seq_len: max });
                }
            }
        }
        let mut out = tokens;
        out.ids.truncate(cut);
        out.labels.truncate(cut);
        out.types.truncate(cut);
        out.spans.retain(|s| s.start < cut);
        Ok(EncodedSample {
            id: sample_id.to_string(),
            input_ids: out.ids,
            labels: out.labels,
            mm_token_type_ids: out.types,
            image_grids: image_grids.to_vec(),
            video_grids: video_grids.to_vec(),
            media_spans: out.spans,
            dropped_turns,
        })
    }

    /// Tokenises a generation prompt: optional system message, then turns ending with a user
    /// message, then `<|im_start|>assistant\n`. Never truncates: evaluation must see the whole
    /// question.
    pub fn encode_prompt(
        &self,
        sample_id: &str,
        messages: &[Message],
        image_grids: &[[usize; 3]],
        video_grids: &[[usize; 3]],
        opts: &TemplateOptions,
    ) -> Result<EncodedPrompt, TextError> {
        let laid = layout(sample_id, messages, image_grids.len(), video_grids.len(), opts, Mode::Prompt)?;
        check_grids(sample_id, image_grids, video_grids, opts.merge_size)?;
        let tokens = self.tokenize(sample_id, &laid, image_grids, video_grids, opts.merge_size)?;
        Ok(EncodedPrompt {
            id: sample_id.to_string(),
            input_ids: tokens.ids,
            mm_token_type_ids: tokens.types,
            image_grids: image_grids.to_vec(),
            video_grids: video_grids.to_vec(),
            media_spans: tokens.spans,
        })
    }

    /// [`LabelMask::Official`]'s labels of the whole sequence, before any truncation (the
    /// official collator cuts after labelling).
    fn official_labels(&self, sample_id: &str, ids: &[u32]) -> Result<Vec<i64>, TextError> {
        let assistant = self.tokenizer.token_to_id(ASSISTANT_TOKEN).ok_or_else(|| TextError::Tokenize {
            sample_id: sample_id.to_string(),
            message: format!("the official label mask needs `{ASSISTANT_TOKEN}` to be one token, and this vocabulary has none"),
        })?;
        let im_end = self.special.im_end;
        let mut labels = vec![IGNORE_INDEX; ids.len()];
        let mut pos = 0;
        while pos < ids.len() {
            if ids[pos] == assistant {
                let start = pos + 2;
                if let Some(offset) = ids.get(start..).and_then(|rest| rest.iter().position(|&id| id == im_end)) {
                    let end = (start + offset + 2).min(ids.len());
                    for (label, &id) in labels[start..end].iter_mut().zip(&ids[start..end]) {
                        *label = i64::from(id);
                    }
                    pos = start + offset;
                }
            }
            pos += 1;
        }
        Ok(labels)
    }

    fn tokenize(
        &self,
        sample_id: &str,
        laid: &[Laid],
        image_grids: &[[usize; 3]],
        video_grids: &[[usize; 3]],
        merge: usize,
    ) -> Result<Tokens, TextError> {
        let sp = &self.special;
        // One pad per medium, expanded after tokenisation; byte ranges of what is trained.
        let mut text = String::new();
        let mut trained: Vec<std::ops::Range<usize>> = Vec::new();
        let mut msg_ends = Vec::with_capacity(laid.len());
        let mut media = Vec::new();
        for msg in laid {
            for (piece, piece_trained) in &msg.pieces {
                let start = text.len();
                match piece {
                    Piece::ImStart => text.push_str(IM_START),
                    Piece::ImEnd => text.push_str(IM_END),
                    Piece::Text(t) => {
                        if let Some(&(_, token)) = sp.reserved().iter().find(|(_, token)| t.contains(token)) {
                            return Err(TextError::ReservedTokenInText { sample_id: sample_id.to_string(), token });
                        }
                        text.push_str(t);
                    }
                    Piece::Media(kind, index) => {
                        let grid = match kind {
                            MediaKind::Image => image_grids[*index],
                            MediaKind::Video => video_grids[*index],
                        };
                        media.push((*kind, *index, pad_count(grid, merge)));
                        text.push_str(VISION_START);
                        text.push_str(kind.pad_token());
                        text.push_str(VISION_END);
                    }
                }
                if *piece_trained {
                    match trained.last_mut() {
                        Some(last) if last.end == start => last.end = text.len(),
                        _ => trained.push(start..text.len()),
                    }
                }
            }
            msg_ends.push(text.len());
        }
        let encoding = self
            .tokenizer
            .encode(text.as_str(), false)
            .map_err(|e| TextError::Tokenize { sample_id: sample_id.to_string(), message: e.to_string() })?;
        let mut t = Tokens::default();
        let mut media = media.into_iter();
        let mut ends = msg_ends.iter().peekable();
        for (&id, &(start, _)) in encoding.get_ids().iter().zip(encoding.get_offsets()) {
            while ends.next_if(|&&end| end <= start).is_some() {
                t.msg_ends.push(t.ids.len());
            }
            if id == sp.image_pad || id == sp.video_pad {
                // Text never holds a pad (checked above), so pads come from media, in order.
                let Some((kind, index, len)) = media.next() else {
                    return Err(TextError::ReservedTokenInText { sample_id: sample_id.to_string(), token: MediaKind::Video.pad_token() });
                };
                t.spans.push(MediaSpan { kind, index, start: t.ids.len(), len });
                for _ in 0..len {
                    t.push(id, false, kind.token_type());
                }
                continue;
            }
            let is_trained = trained.iter().any(|r| r.contains(&start));
            t.push(id, is_trained, 0);
        }
        t.msg_ends.extend(ends.map(|_| t.ids.len()));
        Ok(t)
    }
}

/// Token buffers filled by [`QwenTokenizer::tokenize`].
#[derive(Default)]
struct Tokens {
    ids: Vec<u32>,
    labels: Vec<i64>,
    types: Vec<u8>,
    spans: Vec<MediaSpan>,
    /// Sequence length after each laid-out message.
    msg_ends: Vec<usize>,
}

impl Tokens {
    fn push(&mut self, id: u32, trained: bool, ty: u8) {
        self.ids.push(id);
        self.labels.push(if trained { i64::from(id) } else { IGNORE_INDEX });
        self.types.push(ty);
    }
}

/// Pad tokens one medium turns into: `t·h·w / merge²`.
pub fn pad_count(grid: [usize; 3], merge_size: usize) -> usize {
    grid[0] * grid[1] * grid[2] / (merge_size * merge_size)
}

fn check_grids(sample_id: &str, image_grids: &[[usize; 3]], video_grids: &[[usize; 3]], merge: usize) -> Result<(), TextError> {
    let kinds = [(MediaKind::Image, image_grids), (MediaKind::Video, video_grids)];
    for (kind, grids) in kinds {
        for (index, &grid) in grids.iter().enumerate() {
            let [t, h, w] = grid;
            if merge == 0 || t == 0 || h == 0 || w == 0 || h % merge != 0 || w % merge != 0 {
                return Err(TextError::BadGrid { sample_id: sample_id.to_string(), kind, index, grid, merge_size: merge });
            }
        }
    }
    Ok(())
}

/// Renders the conversation as the string the HF template + processor would produce (pads
/// expanded to their real count when `grids` are given, one pad per medium when `None`).
/// With `generation_prompt`, the messages must end with a user turn and the string ends with
/// `<|im_start|>assistant\n`; without it they must end with an assistant answer.
pub fn render_chat(
    sample_id: &str,
    messages: &[Message],
    image_grids: &[[usize; 3]],
    video_grids: &[[usize; 3]],
    opts: &TemplateOptions,
    generation_prompt: bool,
) -> Result<String, TextError> {
    let mode = if generation_prompt { Mode::Prompt } else { Mode::Train };
    let laid = layout(sample_id, messages, image_grids.len(), video_grids.len(), opts, mode)?;
    check_grids(sample_id, image_grids, video_grids, opts.merge_size)?;
    let mut out = String::new();
    for msg in &laid {
        for (piece, _) in &msg.pieces {
            match piece {
                Piece::ImStart => out.push_str(IM_START),
                Piece::ImEnd => out.push_str(IM_END),
                Piece::Text(text) => out.push_str(text),
                Piece::Media(kind, index) => {
                    let grid = match kind {
                        MediaKind::Image => image_grids[*index],
                        MediaKind::Video => video_grids[*index],
                    };
                    out.push_str(VISION_START);
                    for _ in 0..pad_count(grid, opts.merge_size) {
                        out.push_str(kind.pad_token());
                    }
                    out.push_str(VISION_END);
                }
            }
        }
    }
    Ok(out)
}

/// Checks a training conversation without tokenising it: role order, a final answer, tags
/// only in user turns, and tag counts equal to media counts (or no tags at all). Dataset
/// readers call it so a bad row is reported with its file and line, not at training time.
pub fn check_conversation(sample_id: &str, messages: &[Message], n_images: usize, n_videos: usize) -> Result<(), TextError> {
    layout(sample_id, messages, n_images, n_videos, &TemplateOptions::default(), Mode::Train).map(|_| ())
}

/// Counts the tags of one kind in a text.
fn count_tags(text: &str, kind: MediaKind) -> usize {
    text.matches(kind.tag()).count()
}

/// Checks the role order and media tags and lays the conversation out as pieces.
fn layout(
    sample_id: &str,
    messages: &[Message],
    n_images: usize,
    n_videos: usize,
    opts: &TemplateOptions,
    mode: Mode,
) -> Result<Vec<Laid>, TextError> {
    let sid = || sample_id.to_string();
    let (system, turns) = match messages.first() {
        Some(m) if m.role == Role::System => (m.content.as_str(), &messages[1..]),
        _ => (opts.system_prompt.as_str(), messages),
    };
    if turns.is_empty() {
        return Err(TextError::Incomplete { sample_id: sid(), what: "user message" });
    }
    for (i, m) in turns.iter().enumerate() {
        let expected = if i % 2 == 0 { Role::User } else { Role::Assistant };
        if m.role != expected {
            let index = i + messages.len() - turns.len();
            return Err(TextError::RoleOrder { sample_id: sid(), index, expected: expected.as_str(), found: m.role });
        }
    }
    let last = turns[turns.len() - 1].role;
    match (mode, last) {
        (Mode::Train, Role::User) => {
            return Err(TextError::Incomplete { sample_id: sid(), what: "final assistant answer" });
        }
        (Mode::Prompt, Role::Assistant) => {
            return Err(TextError::Incomplete { sample_id: sid(), what: "final user message to answer" });
        }
        _ => {}
    }

    // Tags: counted over the whole conversation; only user turns may carry them (a tag in a
    // system or assistant turn would stay literal text while its medium went unused).
    let mut prefix = String::new();
    for (kind, n_media) in [(MediaKind::Video, n_videos), (MediaKind::Image, n_images)] {
        let mut tags = 0;
        for (i, m) in messages.iter().enumerate() {
            let c = count_tags(&m.content, kind);
            if c > 0 && m.role != Role::User {
                return Err(TextError::MediaOutsideUserTurn { sample_id: sid(), message_index: i, role: m.role, kind });
            }
            tags += c;
        }
        if tags == 0 {
            // LLaMA-Factory's rule: untagged media go before the first user text.
            for _ in 0..n_media {
                prefix.push_str(kind.tag());
            }
        } else if tags != n_media {
            return Err(TextError::MediaCountMismatch { sample_id: sid(), kind, tags, media: n_media });
        }
    }

    let mut laid = Vec::with_capacity(turns.len() + 1);
    laid.push(Laid {
        pieces: vec![
            (Piece::ImStart, false),
            (Piece::Text(format!("system\n{system}")), false),
            (Piece::ImEnd, false),
            (Piece::Text("\n".to_string()), false),
        ],
        ends_turn: false,
        has_media: false,
    });
    let (mut next_image, mut next_video) = (0usize, 0usize);
    for (i, m) in turns.iter().enumerate() {
        let assistant = m.role == Role::Assistant;
        let mut pieces = vec![(Piece::ImStart, false)];
        let mut has_media = false;
        if assistant {
            pieces.push((Piece::Text("assistant\n".to_string()), false));
            if !m.content.is_empty() {
                pieces.push((Piece::Text(m.content.clone()), true));
            }
        } else {
            let content = if i == 0 && !prefix.is_empty() { format!("{prefix}{}", m.content) } else { m.content.clone() };
            let mut text = format!("{}\n", m.role.as_str());
            let mut rest = content.as_str();
            loop {
                let next = [MediaKind::Image, MediaKind::Video]
                    .into_iter()
                    .filter_map(|k| rest.find(k.tag()).map(|pos| (pos, k)))
                    .min_by_key(|&(pos, _)| pos);
                let Some((pos, kind)) = next else {
                    text.push_str(rest);
                    break;
                };
                text.push_str(&rest[..pos]);
                if !text.is_empty() {
                    pieces.push((Piece::Text(std::mem::take(&mut text)), false));
                }
                let index = match kind {
                    MediaKind::Image => {
                        next_image += 1;
                        next_image - 1
                    }
                    MediaKind::Video => {
                        next_video += 1;
                        next_video - 1
                    }
                };
                pieces.push((Piece::Media(kind, index), false));
                has_media = true;
                rest = &rest[pos + kind.tag().len()..];
            }
            if !text.is_empty() {
                pieces.push((Piece::Text(text), false));
            }
        }
        pieces.push((Piece::ImEnd, assistant));
        pieces.push((Piece::Text("\n".to_string()), assistant && opts.label_mask != LabelMask::AnswerImEnd));
        laid.push(Laid { pieces, ends_turn: assistant, has_media });
    }
    if mode == Mode::Prompt {
        laid.push(Laid {
            pieces: vec![(Piece::ImStart, false), (Piece::Text("assistant\n".to_string()), false)],
            ends_turn: false,
            has_media: false,
        });
    }
    Ok(laid)
}

/// Trains a byte-level BPE tokenizer shaped like Qwen2's (NFC, Qwen2's split regex, byte-level
/// alphabet, the Qwen special tokens as added special tokens) on `corpus`.
///
/// Tests and the synthetic demo use it instead of downloading the 151k-token vocabulary; the
/// result is a real `tokenizer.json` that [`QwenTokenizer::save`] can write next to a
/// checkpoint. The special tokens get ids `0..8` in [`QWEN_SPECIAL_TOKENS`] order; the
/// vocabulary holds at least the 256 byte symbols, so `vocab_size` below `264` yields 264.
pub fn train_tokenizer<I, S>(corpus: I, vocab_size: usize) -> Result<QwenTokenizer, TextError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    let train_err = |e: tokenizers::Error| TextError::Train { message: e.to_string() };
    let specials: Vec<AddedToken> = QWEN_SPECIAL_TOKENS.iter().map(|t| AddedToken::from(*t, true)).collect();
    let alphabet: HashSet<char> = ByteLevel::alphabet().into_iter().collect();
    let trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(0)
        .show_progress(false)
        .special_tokens(specials.clone())
        .initial_alphabet(alphabet)
        .build();
    let split = Split::new(SplitPattern::Regex(QWEN2_SPLIT_REGEX.to_string()), SplitDelimiterBehavior::Isolated, false).map_err(train_err)?;
    let byte_level = ByteLevel::new(false, false, false);
    let mut tokenizer = Tokenizer::new(BPE::default());
    tokenizer
        .with_normalizer(Some(NFC))
        .map_err(train_err)?
        .with_pre_tokenizer(Some(Sequence::new(vec![split.into(), byte_level.into()])))
        .with_post_processor(Some(ByteLevelProcessor::new(false, false, false)))
        .with_decoder(Some(ByteLevelDecoder::default()));
    let corpus: Vec<String> = corpus.into_iter().map(|s| s.as_ref().to_string()).collect();
    tokenizer.train(&mut TrainerWrapper::BpeTrainer(trainer), corpus.into_iter()).map_err(train_err)?;
    tokenizer.add_special_tokens(specials).map_err(train_err)?;
    QwenTokenizer::from_tokenizer(tokenizer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tok() -> QwenTokenizer {
        let corpus = [
            "What is the drone doing in this video?",
            "The drone flies forward over the road and turns left.",
            "A. forward B. backward C. ascend D. descend",
            "Answer with the option's letter from the given choices directly.",
        ];
        train_tokenizer(corpus, 400).expect("train")
    }

    #[test]
    fn special_tokens_come_first_in_qwen_order() {
        let t = tok();
        let s = t.special();
        assert_eq!(
            [s.endoftext, s.im_start, s.im_end, s.vision_start, s.vision_end, s.vision_pad, s.image_pad, s.video_pad],
            [0, 1, 2, 3, 4, 5, 6, 7]
        );
    }

    /// A tokenizer in which `assistant` is one token, as in Qwen's vocabulary.
    fn tok_with_assistant() -> QwenTokenizer {
        let corpus = ["assistant\n\nforward", "user\nassistant then stop.", "system\nYou are a helpful assistant.", " \nbackward", "\n\n\ndown\n"];
        let t = train_tokenizer(corpus.iter().cycle().take(40), 420).expect("train");
        assert!(t.inner().token_to_id(ASSISTANT_TOKEN).is_some(), "the corpus makes `assistant` one token");
        t
    }

    #[test]
    fn official_labels_equal_qwens_for_answers_that_open_with_newlines_or_spaces() {
        let t = tok_with_assistant();
        for answer in ["\nforward", " \nbackward", "   up  ", "\n\n\ndown\n", "", "B"] {
            let msgs = [Message::user("<video>Which way?"), Message::assistant(answer), Message::user("Again."), Message::assistant(answer)];
            let labels = |label_mask| {
                let opts = TemplateOptions { max_seq_len: None, label_mask, ..TemplateOptions::default() };
                t.encode_chat("s", &msgs, &[], &[[1, 2, 2]], &opts).expect("encode").labels
            };
            assert_eq!(labels(LabelMask::Official), labels(LabelMask::Qwen), "answer {answer:?}");
        }
    }

    #[test]
    fn official_labels_also_train_what_follows_a_bare_assistant_token_in_user_text() {
        let t = tok_with_assistant();
        let msgs = [Message::user("user\nassistant then stop."), Message::assistant("B")];
        let opts = |label_mask| TemplateOptions { max_seq_len: None, label_mask, ..TemplateOptions::default() };
        let official = t.encode_chat("s", &msgs, &[], &[], &opts(LabelMask::Official)).expect("encode");
        let qwen = t.encode_chat("s", &msgs, &[], &[], &opts(LabelMask::Qwen)).expect("encode");
        let ids = &official.input_ids;
        let assistant = t.inner().token_to_id(ASSISTANT_TOKEN).expect("one token");
        let in_user = ids.iter().position(|&id| id == assistant).expect("the user's word");
        let user_im_end = ids[in_user..].iter().position(|&id| id == t.special().im_end).expect("user's im_end") + in_user;
        // The official rule: skip the token after `assistant`, train to the `<|im_end|>` and one more.
        for (i, (&o, &q)) in official.labels.iter().zip(&qwen.labels).enumerate() {
            let extra = (in_user + 2..=user_im_end + 1).contains(&i);
            assert_eq!(o, if extra { i64::from(ids[i]) } else { q }, "position {i}");
        }
        assert!(official.trained_tokens() > qwen.trained_tokens());
    }

    #[test]
    fn official_labels_need_assistant_as_one_token() {
        // This corpus never spells the word, so no merge makes it one token.
        let t = tok();
        assert!(t.inner().token_to_id(ASSISTANT_TOKEN).is_none());
        let opts = TemplateOptions { max_seq_len: None, label_mask: LabelMask::Official, ..TemplateOptions::default() };
        let err = t.encode_chat("s", &[Message::user("Q?"), Message::assistant("A")], &[], &[], &opts).expect_err("no assistant token");
        assert!(err.to_string().contains("`assistant`"), "{err}");
    }

    #[test]
    fn pad_count_is_thw_over_merge_squared() {
        assert_eq!(pad_count([2, 4, 6], 2), 12);
        assert_eq!(pad_count([1, 2, 2], 2), 1);
    }

    #[test]
    fn untagged_media_go_first_videos_before_images() {
        let msgs = [Message::user("Q?"), Message::assistant("A")];
        let s = render_chat("s", &msgs, &[[1, 2, 2]], &[[1, 2, 2]], &TemplateOptions::default(), false).expect("render");
        assert!(s.contains(&format!("<|im_start|>user\n{VISION_START}{VIDEO_PAD}{VISION_END}{VISION_START}{IMAGE_PAD}{VISION_END}Q?<|im_end|>")));
    }
}
