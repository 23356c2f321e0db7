//! Training conversations (SIS-Motion-54K and any LLaVA / LLaMA-Factory video-chat data). The
//! JSON record reading they share with [`crate::manifest`] is [`crate::records`], re-exported
//! here.
//!
//! Accepted row forms, freely mixed within a file:
//! - LLaVA / ShareGPT: `{"id", "conversations": [{"from": "human"|"gpt"|"system", "value"}],
//!   "video" | "image": path or [paths]}` (the form of the official Qwen finetuning code);
//! - LLaMA-Factory: `{"messages": [{"role": "user"|"assistant"|"system", "content"}],
//!   "videos" | "images": [paths], "system"?}` with `<video>` / `<image>` tags in the text.
//!
//! - SIS-Motion-54K as released (`{"video_path", "question", "answer", "qa_type"?, "options"?}`),
//!   read as the official loader reads it (`motion/src/uav/data/data_processor.py` of
//!   IntelliSensing/Self-in-Space): a row with `question` and `options` or `qa_type` is this
//!   form whatever else it holds (:340-343); its user turn is the video followed directly by
//!   `"{question}\n{A. …\nB. …}\nPlease select the correct answer."` for `qa_type` `mc` (the
//!   default) with options, sorted by key, else the question alone; the answer is `answer`
//!   verbatim (:300-323). [`read_training_rows`] with [`LlavaRows::Official`] also reads the
//!   conversation rows as that loader does (see [`LlavaRows`]).
//!
//! Conversation rows may add `format` (MCQ, open QA or description) and `task` /
//! `task_type` / `task_name`; both are kept when present.
//!
//! Files are JSONL, a JSON array, or a JSON object holding the rows under `samples`, `data`,
//! `questions` or `items`. Every row keeps its file and line, and every problem names them: a
//! bad row stops reading unless [`ReadOptions::skip_bad`] is set, in which case it is left out
//! and returned in [`ReadOutcome::skipped`].
//!
//! Relative media paths resolve against [`ReadOptions::media_root`], or else the folder of the
//! data file. A video is a file or a folder of numbered frames; a list of frame paths (a form
//! ms-swift accepts) is refused with a message saying so. A released row's `video_path` that
//! does not exist falls back as the official loader's does (:244-263): the same path without
//! its suffix when that is a frame folder, or, for a path without a suffix, the first of
//! `.mp4`, `.mov`, `.avi`, `.mkv`, `.webm` that is a file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::records::{MediaResolver, Row, normalise, read_rows};
use crate::text::{IMAGE_TAG, MediaKind, Message, QwenTokenizer, Role, TextError, VIDEO_TAG, check_conversation, train_tokenizer};

// Callers read training files through this module; the reading types stay reachable here.
pub use crate::records::{ReadError, ReadOptions, ReadOutcome, Record, RowError, RowProblem, read_records};

/// What the official loader appends to a multiple-choice question after its options.
pub const OFFICIAL_MCQ_INSTRUCTION: &str = "Please select the correct answer.";

/// The three SIS-Motion-54K sample formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SampleFormat {
    /// Four-option multiple choice over a perception or memory task.
    Mcq,
    /// The MCQ rewritten without options.
    OpenQa,
    /// Motion-intention or scene-content description.
    Description,
}

impl FromStr for SampleFormat {
    type Err = RowProblem;
    /// Accepts the usual spellings: `mcq`, `multiple_choice`, `open_qa`, `open-ended`,
    /// `description`, `caption`, case- and punctuation-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match normalise(s).as_str() {
            "mcq" | "multiplechoice" | "multichoice" | "choice" => Ok(SampleFormat::Mcq),
            "openqa" | "open" | "openended" | "openendedqa" | "oe" => Ok(SampleFormat::OpenQa),
            "description" | "desc" | "caption" | "captioning" => Ok(SampleFormat::Description),
            _ => Err(RowProblem::UnknownFormat(s.to_string())),
        }
    }
}

impl fmt::Display for SampleFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SampleFormat::Mcq => "mcq",
            SampleFormat::OpenQa => "open_qa",
            SampleFormat::Description => "description",
        })
    }
}

/// One training conversation with its media.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingSample {
    /// The row's `id` / `sample_id`, or `<file stem>:<line>` when it has none.
    pub id: String,
    /// Messages with `<image>` / `<video>` tags as written in the data.
    pub messages: Vec<Message>,
    /// Resolved image paths, in tag order.
    pub images: Vec<PathBuf>,
    /// Resolved video paths (files or frame folders), in tag order.
    pub videos: Vec<PathBuf>,
    pub format: Option<SampleFormat>,
    pub task: Option<String>,
    /// Data file and line of the row, for messages about it later.
    pub file: PathBuf,
    pub line: usize,
    /// Whether a motion-aware model fuses motion into this sample's videos. False for the
    /// conversation rows of [`LlavaRows::Official`]: the official loader gives them no
    /// `video_tchw`, so its model runs them visual-only (`data_processor.py:341-350`).
    #[serde(default = "with_motion_default")]
    pub with_motion: bool,
}

fn with_motion_default() -> bool {
    true
}

/// How conversation (LLaVA / LLaMA-Factory) rows are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LlavaRows {
    /// User text around `<image>` / `<video>` tags kept as written, and motion on every video.
    #[default]
    Verbatim,
    /// As the official loader (`_build_messages`, `data_processor.py:143-202`): a user turn's
    /// text between tags is `.strip()`ped and whitespace-only pieces dropped, so
    /// `"<video>\nWhat?"` renders `<|vision_end|>What?`; and the row trains without motion.
    Official,
}

impl TrainingSample {
    /// Where the row came from, as `file:line`.
    pub fn location(&self) -> String {
        format!("{}:{}", self.file.display(), self.line)
    }
}

/// Reads a training file (see the module docs for the forms), conversation rows verbatim.
pub fn read_training_samples(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<TrainingSample>, ReadError> {
    read_training_rows(path, opts, LlavaRows::Verbatim)
}

/// Reads a training file with conversation rows read as `llava` says.
///
/// Released rows are told apart by their line, not their id: the official loader reads rows by
/// position, so an `id` repeated across them (one clip asked as MCQ and as open QA) is no error.
pub fn read_training_rows(path: &Path, opts: &ReadOptions, llava: LlavaRows) -> Result<ReadOutcome<TrainingSample>, ReadError> {
    let media = MediaResolver::new(path, opts);
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    read_rows(path, opts, |value, line| {
        let row = Row::new(value).map_err(|p| (None, p))?;
        let located = format!("{stem}:{line}");
        let id = row.string(&["id", "sample_id", "question_id"]).map_err(|p| (None, p))?.unwrap_or_else(|| located.clone());
        if is_released_row(&row) {
            let sample = parse_released_row(&row, &id, &media, path, line).map_err(|p| (Some(id.clone()), p))?;
            return Ok((sample, located));
        }
        let sample = parse_training_row(&row, &id, &media, path, line, llava).map_err(|p| (Some(id.clone()), p))?;
        Ok((sample, id))
    })
}

/// The official loader's test for its own row form (`data_processor.py:340`): `question` with
/// `options` or `qa_type`, whatever else the row holds.
fn is_released_row(row: &Row<'_>) -> bool {
    row.obj.contains_key("question") && (row.obj.contains_key("options") || row.obj.contains_key("qa_type"))
}

/// A released SIS-Motion-54K row (`_build_uav_messages`, `data_processor.py:266-324`).
fn parse_released_row(row: &Row<'_>, id: &str, media: &MediaResolver, file: &Path, line: usize) -> Result<TrainingSample, RowProblem> {
    let video = media.resolve_released_video(&row.required_string(&["video_path"])?)?;
    let question = row.required_string(&["question"])?;
    let answer = row.required_string(&["answer"])?;
    let qa_type = match row.obj.get("qa_type") {
        None => "mc".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(RowProblem::WrongType { field: "qa_type".into(), expected: "a string" }),
    };
    let options = match (qa_type.as_str(), row.obj.get("options")) {
        ("mc", Some(options)) => Some(official_options(options)?),
        _ => None,
    };
    let format = match (qa_type.as_str(), &options) {
        ("mc", Some(_)) => Some(SampleFormat::Mcq),
        ("motion_intention", _) => Some(SampleFormat::Description),
        _ => Some(SampleFormat::OpenQa),
    };
    let user_text = match options {
        Some(options) => format!("{question}\n{options}\n{OFFICIAL_MCQ_INSTRUCTION}"),
        None => question,
    };
    let messages = vec![Message::user(format!("{VIDEO_TAG}{user_text}")), Message::assistant(answer)];
    let videos = vec![video];
    check_conversation(id, &messages, 0, videos.len()).map_err(conversation_problem)?;
    let task = row.string(&["task", "task_type", "task_name"])?;
    Ok(TrainingSample { id: id.to_string(), messages, images: Vec::new(), videos, format, task, file: file.to_path_buf(), line, with_motion: true })
}

/// `"\n".join(f"{k}. {v}" for k, v in sorted(options.items()))`: keys in code-point order
/// (Python's string order), values as Python prints strings and integers.
fn official_options(options: &Value) -> Result<String, RowProblem> {
    let wrong = || RowProblem::WrongType { field: "options".into(), expected: "an object of option key → text" };
    let map = options.as_object().ok_or_else(wrong)?;
    let mut entries: Vec<(&String, String)> = map
        .iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k, s.clone())),
            Value::Number(n) if n.is_i64() || n.is_u64() => Ok((k, n.to_string())),
            _ => Err(RowProblem::WrongType { field: format!("options.{k}"), expected: "a string" }),
        })
        .collect::<Result<_, _>>()?;
    entries.sort_by(|a, b| a.0.chars().cmp(b.0.chars()));
    Ok(entries.iter().map(|(k, v)| format!("{k}. {v}")).collect::<Vec<_>>().join("\n"))
}

/// A user turn's text as the official loader renders it: each piece between tags stripped,
/// whitespace-only pieces dropped, tags kept where they stand.
fn official_user_text(content: &str) -> String {
    let mut out = String::new();
    let mut rest = content;
    loop {
        let next = [IMAGE_TAG, VIDEO_TAG].into_iter().filter_map(|t| rest.find(t).map(|pos| (pos, t))).min_by_key(|&(pos, _)| pos);
        let Some((pos, tag)) = next else {
            out.push_str(rest.trim());
            return out;
        };
        out.push_str(rest[..pos].trim());
        out.push_str(tag);
        rest = &rest[pos + tag.len()..];
    }
}

fn conversation_problem(e: TextError) -> RowProblem {
    match e {
        TextError::MediaCountMismatch { kind, tags, media, .. } => RowProblem::Conversation(format!(
            "{tags} {} tag(s) but {media} {kind}(s) listed",
            match kind {
                MediaKind::Image => IMAGE_TAG,
                MediaKind::Video => VIDEO_TAG,
            }
        )),
        other => RowProblem::Conversation(other.to_string()),
    }
}

fn parse_training_row(
    row: &Row<'_>,
    id: &str,
    media: &MediaResolver,
    file: &Path,
    line: usize,
    llava: LlavaRows,
) -> Result<TrainingSample, RowProblem> {
    let mut messages = Vec::new();
    if let Some(system) = row.string(&["system"])? {
        messages.push(Message::system(system));
    }
    let (field, turns) = row.get(&["conversations", "messages"]).ok_or(RowProblem::MissingField("conversations"))?;
    let turns = turns.as_array().ok_or_else(|| RowProblem::WrongType { field: field.to_string(), expected: "a list of messages" })?;
    for (i, turn) in turns.iter().enumerate() {
        let t = Row::new(turn).map_err(|_| RowProblem::WrongType { field: format!("{field}[{i}]"), expected: "an object" })?;
        let speaker = t.string(&["from", "role"])?.ok_or(RowProblem::MissingField("from"))?;
        let role = match normalise(&speaker).as_str() {
            "human" | "user" => Role::User,
            "gpt" | "assistant" | "model" | "bot" => Role::Assistant,
            "system" => Role::System,
            _ => return Err(RowProblem::UnknownRole(speaker)),
        };
        let content = match t.get(&["value", "content"]) {
            Some((_, Value::String(s))) => s.clone(),
            Some((k, _)) => {
                return Err(RowProblem::WrongType { field: format!("{field}[{i}].{k}"), expected: "a string" });
            }
            None => return Err(RowProblem::MissingField("value")),
        };
        let content = if llava == LlavaRows::Official && role == Role::User { official_user_text(&content) } else { content };
        messages.push(Message::new(role, content));
    }
    // A top-level `system` field becomes the first message; a conversation that also opens
    // with a system turn then has two, which the template check below reports.
    let videos = row.paths(&["videos", "video"])?.iter().map(|p| media.resolve(p)).collect::<Result<Vec<_>, _>>()?;
    let images = row.paths(&["images", "image"])?.iter().map(|p| media.resolve_image(p)).collect::<Result<Vec<_>, _>>()?;
    check_conversation(id, &messages, images.len(), videos.len()).map_err(conversation_problem)?;
    let format = row.string(&["format", "sample_format"])?.map(|f| f.parse()).transpose()?;
    let task = row.string(&["task", "task_type", "task_name"])?;
    let with_motion = llava == LlavaRows::Verbatim;
    Ok(TrainingSample { id: id.to_string(), messages, images, videos, format, task, file: file.to_path_buf(), line, with_motion })
}

/// The tokenizer of a model trained from scratch on `samples`: [`train_tokenizer`] over every
/// message of every sample, as `train sft` builds it for a fresh base model.
pub fn tokenizer_for_fresh_model(samples: &[TrainingSample], vocab_size: usize) -> Result<QwenTokenizer, TextError> {
    train_tokenizer(samples.iter().flat_map(|s| s.messages.iter().map(|m| m.content.as_str())), vocab_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A folder with media the rows below point at: a video file, a frame folder standing for
    /// `seq.mp4`, and a suffix-less name that only exists as `.webm`.
    fn released_folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("AirScape_dataset")).expect("mkdir");
        std::fs::write(dir.path().join("AirScape_dataset/AirScape_Train_0732.mp4"), b"not decoded here").expect("write");
        std::fs::create_dir_all(dir.path().join("TravelUAV_dataset/seq")).expect("mkdir");
        std::fs::write(dir.path().join("clip.webm"), b"x").expect("write");
        dir
    }

    fn write_rows(dir: &Path, rows: &[Value]) -> PathBuf {
        let path = dir.join("SIS-Motion-54K.jsonl");
        let text: Vec<String> = rows.iter().map(Value::to_string).collect();
        std::fs::write(&path, text.join("\n")).expect("write rows");
        path
    }

    #[test]
    fn released_rows_take_the_official_prompt_and_answer() {
        let dir = released_folder();
        let rows = [
            serde_json::json!({"id": "c1", "video_path": "AirScape_dataset/AirScape_Train_0732.mp4", "question": "Where does the drone head?",
                "options": {"C": "up", "A": " left ", "B": "right", "D": 4}, "answer": "B", "qa_type": "mc"}),
            serde_json::json!({"id": "c1", "video_path": "TravelUAV_dataset/seq.mp4", "question": "Describe the flight.", "qa_type": "open_qa",
                "answer": "\nIt climbs, then turns left."}),
            serde_json::json!({"video_path": "clip", "question": "What does the pilot intend?", "qa_type": "motion_intention", "answer": "To land."}),
            serde_json::json!({"video_path": "AirScape_dataset/AirScape_Train_0732.mp4", "question": "No options given.", "qa_type": "mc", "answer": "A"}),
        ];
        let path = write_rows(dir.path(), &rows);
        let out = read_training_rows(&path, &ReadOptions::default(), LlavaRows::Official).expect("read");
        assert!(out.skipped.is_empty());
        let [mcq, open, intention, bare] = out.items.as_slice() else { panic!("four samples, got {}", out.items.len()) };
        assert_eq!(
            mcq.messages,
            vec![
                Message::user("<video>Where does the drone head?\nA.  left \nB. right\nC. up\nD. 4\nPlease select the correct answer."),
                Message::assistant("B"),
            ]
        );
        assert_eq!((mcq.format, mcq.videos[0].clone()), (Some(SampleFormat::Mcq), dir.path().join("AirScape_dataset/AirScape_Train_0732.mp4")));
        // The id repeats: released rows are told apart by line.
        assert_eq!((open.id.as_str(), open.line), ("c1", 2));
        assert_eq!(open.messages, vec![Message::user("<video>Describe the flight."), Message::assistant("\nIt climbs, then turns left.")]);
        assert_eq!(open.videos, vec![dir.path().join("TravelUAV_dataset/seq")]);
        assert_eq!(intention.format, Some(SampleFormat::Description));
        assert_eq!(intention.videos, vec![dir.path().join("clip.webm")]);
        assert_eq!(intention.id, "SIS-Motion-54K:3");
        assert_eq!(bare.messages[0].content, "<video>No options given.");
        assert!(out.items.iter().all(|s| s.with_motion));
    }

    #[test]
    fn released_row_problems_name_the_field() {
        let dir = released_folder();
        let cases = [
            (serde_json::json!({"question": "q", "qa_type": "mc", "answer": "A"}), RowProblem::MissingField("video_path")),
            (serde_json::json!({"video_path": "clip", "question": "q", "options": {"A": "x"}}), RowProblem::MissingField("answer")),
            (
                serde_json::json!({"video_path": "clip", "question": "q", "options": ["x", "y"], "answer": "A"}),
                RowProblem::WrongType { field: "options".into(), expected: "an object of option key → text" },
            ),
            (
                serde_json::json!({"video_path": "gone.mp4", "question": "q", "qa_type": "open_qa", "answer": "a"}),
                RowProblem::MissingVideo(dir.path().join("gone.mp4")),
            ),
        ];
        for (row, expected) in cases {
            let path = write_rows(dir.path(), std::slice::from_ref(&row));
            match read_training_samples(&path, &ReadOptions::default()) {
                Err(ReadError::Row(e)) => assert_eq!((e.line, e.problem), (1, expected), "{row}"),
                other => panic!("{row}: expected a bad row, got {other:?}"),
            }
        }
    }

    #[test]
    fn official_conversation_rows_strip_text_around_tags_and_skip_motion() {
        let dir = released_folder();
        let row = serde_json::json!({"id": "l1", "video": "clip.webm", "conversations": [
            {"from": "human", "value": "  First: <video>\n  What happens? \n"},
            {"from": "gpt", "value": " \nIt rises. "}]});
        let path = write_rows(dir.path(), &[row]);
        let official = read_training_rows(&path, &ReadOptions::default(), LlavaRows::Official).expect("read");
        assert_eq!(official.items[0].messages, vec![Message::user("First:<video>What happens?"), Message::assistant(" \nIt rises. ")]);
        assert!(!official.items[0].with_motion);
        let verbatim = read_training_samples(&path, &ReadOptions::default()).expect("read");
        assert_eq!(verbatim.items[0].messages[0].content, "  First: <video>\n  What happens? \n");
        assert!(verbatim.items[0].with_motion);
    }

    #[test]
    fn format_spellings() {
        assert_eq!("MCQ".parse::<SampleFormat>(), Ok(SampleFormat::Mcq));
        assert_eq!("open-ended".parse::<SampleFormat>(), Ok(SampleFormat::OpenQa));
        assert_eq!("Description".parse::<SampleFormat>(), Ok(SampleFormat::Description));
        assert!("essay".parse::<SampleFormat>().is_err());
    }
}
