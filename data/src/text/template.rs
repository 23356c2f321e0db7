//! The chat template: a conversation checked (role order, media tags) and laid out as ChatML
//! pieces, which [`super::QwenTokenizer`] tokenises and [`render_chat`] writes as text.

use serde::{Deserialize, Serialize};

use super::error::TextError;
use super::message::{MediaKind, Message, Role};
use super::tokens::{IM_END, IM_START, VISION_END, VISION_START};

/// System prompt Qwen2.5-VL's template inserts when a conversation has none.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are a helpful assistant.";
/// Qwen2.5-VL's 2×2 patch merger: one pad token per `merge²` patches.
pub const SPATIAL_MERGE_SIZE: usize = 2;

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

/// How a video's block is written into the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VideoLayout {
    /// `<|vision_start|>` + all pads + `<|vision_end|>` (Qwen2.5-VL).
    #[default]
    Whole,
    /// Qwen3-VL's processor as transformers 4.57 runs it (the official Self-in-Space code's
    /// pin): the template's block becomes, per temporal grid step, `<{t:.1} seconds>` then
    /// `<|vision_start|>` + that step's pads + `<|vision_end|>`.
    Timestamped,
    /// The same steps as transformers 5's Qwen3-VL processor writes them: inside the template's
    /// own `<|vision_start|>`…`<|vision_end|>` (it replaces only the pad).
    TimestampedNested,
}

/// How a conversation is laid out and bounded.
#[derive(Debug, Clone, PartialEq)]
pub struct TemplateOptions {
    /// Inserted as the system turn when the conversation has none; `None` writes no system
    /// turn then (Qwen3-VL's template).
    pub system_prompt: Option<String>,
    pub video_layout: VideoLayout,
    /// Longest allowed sequence (the paper trains with 2048). `None` never truncates.
    pub max_seq_len: Option<usize>,
    /// Patch-merge size; pads per medium are `t·h·w / merge_size²`.
    pub merge_size: usize,
    pub label_mask: LabelMask,
}

impl Default for TemplateOptions {
    fn default() -> Self {
        TemplateOptions {
            system_prompt: Some(DEFAULT_SYSTEM_PROMPT.to_string()),
            video_layout: VideoLayout::Whole,
            max_seq_len: Some(2048),
            merge_size: SPATIAL_MERGE_SIZE,
            label_mask: LabelMask::default(),
        }
    }
}

/// A piece of the laid-out conversation.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Piece {
    ImStart,
    ImEnd,
    Text(String),
    Media(MediaKind, usize),
}

/// One message laid out as pieces; `trained[i]` says whether piece i is supervised.
#[derive(Debug)]
pub(super) struct Laid {
    pub(super) pieces: Vec<(Piece, bool)>,
    /// Ends a complete user→assistant turn: a legal truncation point.
    pub(super) ends_turn: bool,
    pub(super) has_media: bool,
}

/// Whether the conversation is a training example (ends with an answer) or a prompt.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Train,
    Prompt,
}

/// Pad tokens one medium turns into: `t·h·w / merge²`.
pub fn pad_count(grid: [usize; 3], merge_size: usize) -> usize {
    grid[0] * grid[1] * grid[2] / (merge_size * merge_size)
}

pub(super) fn check_grids(sample_id: &str, image_grids: &[[usize; 3]], video_grids: &[[usize; 3]], merge: usize) -> Result<(), TextError> {
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

/// The text of one medium's vision block(s) around its pads: `parts[0] pad parts[1] pad …`,
/// with `counts[i]` pads standing where pad `i` is (one block per count).
pub(super) struct MediaText {
    pub(super) parts: Vec<String>,
    pub(super) counts: Vec<usize>,
}

pub(super) fn media_text(
    sample_id: &str,
    kind: MediaKind,
    index: usize,
    grid: [usize; 3],
    seconds: Option<&[f64]>,
    opts: &TemplateOptions,
) -> Result<MediaText, TextError> {
    if kind == MediaKind::Image || opts.video_layout == VideoLayout::Whole {
        return Ok(MediaText { parts: vec![VISION_START.to_string(), VISION_END.to_string()], counts: vec![pad_count(grid, opts.merge_size)] });
    }
    let seconds = seconds.unwrap_or_default();
    if seconds.len() != grid[0] {
        return Err(TextError::VideoTimes { sample_id: sample_id.to_string(), index, expected: grid[0], got: seconds.len() });
    }
    let nested = opts.video_layout == VideoLayout::TimestampedNested;
    let mut parts = vec![if nested { VISION_START.to_string() } else { String::new() }];
    for t in seconds {
        let last = parts.last_mut().expect("parts start non-empty");
        last.push_str(&format!("<{t:.1} seconds>{VISION_START}"));
        parts.push(VISION_END.to_string());
    }
    if nested {
        parts.last_mut().expect("parts start non-empty").push_str(VISION_END);
    }
    Ok(MediaText { parts, counts: vec![pad_count([1, grid[1], grid[2]], opts.merge_size); grid[0]] })
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
    render_chat_timed(sample_id, messages, image_grids, video_grids, &[], opts, generation_prompt)
}

/// [`render_chat`] with each video's `<t seconds>` per temporal grid step, which
/// [`VideoLayout::Timestamped`] writes.
pub fn render_chat_timed(
    sample_id: &str,
    messages: &[Message],
    image_grids: &[[usize; 3]],
    video_grids: &[[usize; 3]],
    video_seconds: &[Vec<f64>],
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
                    let (grid, seconds) = match kind {
                        MediaKind::Image => (image_grids[*index], None),
                        MediaKind::Video => (video_grids[*index], video_seconds.get(*index).map(Vec::as_slice)),
                    };
                    let media = media_text(sample_id, *kind, *index, grid, seconds, opts)?;
                    for (part, &count) in media.parts.iter().zip(&media.counts) {
                        out.push_str(part);
                        out.push_str(&kind.pad_token().repeat(count));
                    }
                    out.push_str(media.parts.last().map_or("", String::as_str));
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
pub(super) fn layout(
    sample_id: &str,
    messages: &[Message],
    n_images: usize,
    n_videos: usize,
    opts: &TemplateOptions,
    mode: Mode,
) -> Result<Vec<Laid>, TextError> {
    let sid = || sample_id.to_string();
    let (system, turns) = match messages.first() {
        Some(m) if m.role == Role::System => (Some(m.content.as_str()), &messages[1..]),
        _ => (opts.system_prompt.as_deref(), messages),
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
    if let Some(system) = system {
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
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::tokens::{IMAGE_PAD, VIDEO_PAD};

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
