//! The tokenizer: a laid-out conversation to ids, labels and vision spans, in one pass over
//! the whole rendered string as `apply_chat_template` does.

use std::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tokenizers::Tokenizer;

use super::error::TextError;
use super::message::{MediaKind, Message};
use super::template::{LabelMask, Laid, Mode, Piece, TemplateOptions, check_grids, layout, media_text};
use super::tokens::{ENDOFTEXT, IM_END, IM_START, IMAGE_PAD, VIDEO_PAD, VISION_END, VISION_PAD, VISION_START};

/// Label value the loss ignores (PyTorch's `CrossEntropyLoss(ignore_index=-100)` convention).
pub const IGNORE_INDEX: i64 = -100;

/// The token the official label rule looks for (`convert_tokens_to_ids("assistant")`).
pub const ASSISTANT_TOKEN: &str = "assistant";

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

    /// Wraps a tokenizer built in memory (for instance by [`train_tokenizer`](super::train_tokenizer)).
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
        self.encode_chat_timed(sample_id, messages, image_grids, video_grids, &[], opts)
    }

    /// [`Self::encode_chat`] with each video's `<t seconds>` per temporal grid step, which
    /// [`crate::text::VideoLayout::Timestamped`] writes (Qwen3-VL).
    pub fn encode_chat_timed(
        &self,
        sample_id: &str,
        messages: &[Message],
        image_grids: &[[usize; 3]],
        video_grids: &[[usize; 3]],
        video_seconds: &[Vec<f64>],
        opts: &TemplateOptions,
    ) -> Result<EncodedSample, TextError> {
        let laid = layout(sample_id, messages, image_grids.len(), video_grids.len(), opts, Mode::Train)?;
        check_grids(sample_id, image_grids, video_grids, opts.merge_size)?;
        let mut tokens = self.tokenize(sample_id, &laid, image_grids, video_grids, video_seconds, opts)?;
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
        self.encode_prompt_timed(sample_id, messages, image_grids, video_grids, &[], opts)
    }

    /// [`Self::encode_prompt`] with each video's `<t seconds>` per temporal grid step (see
    /// [`Self::encode_chat_timed`]).
    pub fn encode_prompt_timed(
        &self,
        sample_id: &str,
        messages: &[Message],
        image_grids: &[[usize; 3]],
        video_grids: &[[usize; 3]],
        video_seconds: &[Vec<f64>],
        opts: &TemplateOptions,
    ) -> Result<EncodedPrompt, TextError> {
        let laid = layout(sample_id, messages, image_grids.len(), video_grids.len(), opts, Mode::Prompt)?;
        check_grids(sample_id, image_grids, video_grids, opts.merge_size)?;
        let tokens = self.tokenize(sample_id, &laid, image_grids, video_grids, video_seconds, opts)?;
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
        video_seconds: &[Vec<f64>],
        opts: &TemplateOptions,
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
                        let (grid, seconds) = match kind {
                            MediaKind::Image => (image_grids[*index], None),
                            MediaKind::Video => (video_grids[*index], video_seconds.get(*index).map(Vec::as_slice)),
                        };
                        let blocks = media_text(sample_id, *kind, *index, grid, seconds, opts)?;
                        for (part, &count) in blocks.parts.iter().zip(&blocks.counts) {
                            media.push((*kind, *index, count));
                            text.push_str(part);
                            text.push_str(kind.pad_token());
                        }
                        text.push_str(blocks.parts.last().map_or("", String::as_str));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::bpe::train_tokenizer;
    use crate::text::message::Message;

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
}
