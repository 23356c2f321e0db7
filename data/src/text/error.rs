//! What can go wrong loading a tokenizer or encoding a conversation.

use std::path::PathBuf;

use super::message::{MediaKind, Role};

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
    /// A timestamped video layout (Qwen3-VL) without one time per temporal grid step.
    #[error(
        "sample {sample_id}: video {index} has {got} frame time(s) for {expected} temporal grid step(s); Qwen3-VL writes one `<t seconds>` per step"
    )]
    VideoTimes { sample_id: String, index: usize, expected: usize, got: usize },
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
