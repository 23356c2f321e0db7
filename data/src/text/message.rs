//! A chat message and the media kinds its text may stand for.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::tokens::{IMAGE_PAD, VIDEO_PAD};

/// Placeholder for one image in LLaVA / LLaMA-Factory conversation text.
pub const IMAGE_TAG: &str = "<image>";
/// Placeholder for one video in LLaVA / LLaMA-Factory conversation text.
pub const VIDEO_TAG: &str = "<video>";

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
