//! Training conversations (SIS-Motion-54K and any LLaVA / LLaMA-Factory video-chat data), and
//! the JSON record reading shared with [`crate::manifest`].
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

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::parquet_rows::{ParquetError, is_parquet, read_parquet_rows};
use crate::text::{IMAGE_TAG, MediaKind, Message, QwenTokenizer, Role, TextError, VIDEO_TAG, check_conversation, train_tokenizer};

/// Video suffixes the official loader tries, in its order, for a `video_path` without one.
const RELEASED_VIDEO_SUFFIXES: [&str; 5] = ["mp4", "mov", "avi", "mkv", "webm"];

/// What the official loader appends to a multiple-choice question after its options.
pub const OFFICIAL_MCQ_INSTRUCTION: &str = "Please select the correct answer.";

/// Keys under which a JSON object may hold its rows.
const WRAPPER_KEYS: [&str; 4] = ["samples", "data", "questions", "items"];

/// File-level failures: the file cannot be read or is not JSON / JSONL at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: not valid JSON: {message}")]
    Syntax { path: PathBuf, line: usize, message: String },
    #[error("{path}: {message}")]
    Layout { path: PathBuf, message: String },
    #[error(transparent)]
    Row(#[from] RowError),
}

/// A bad row, with where it is. Its `Display` reads `file:line (id): problem`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}:{line}{}: {problem}", file.display(), id.as_ref().map(|i| format!(" ({i})")).unwrap_or_default())]
pub struct RowError {
    pub file: PathBuf,
    pub line: usize,
    pub id: Option<String>,
    pub problem: RowProblem,
}

/// What is wrong with a row.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RowProblem {
    #[error("not valid JSON: {0}")]
    Json(String),
    #[error("a row must be a JSON object")]
    NotAnObject,
    #[error("missing field `{0}`")]
    MissingField(&'static str),
    #[error("field `{field}` should be {expected}")]
    WrongType { field: String, expected: &'static str },
    #[error("unknown speaker `{0}` (expected human/user, gpt/assistant or system)")]
    UnknownRole(String),
    #[error("unknown sample format `{0}` (expected mcq, open_qa or description)")]
    UnknownFormat(String),
    #[error("unknown task `{task}`; known: {known}")]
    UnknownTask { task: String, known: String },
    #[error("media file {0} does not exist")]
    MissingMedia(PathBuf),
    #[error("image {path} cannot be read: {reason}")]
    UnreadableImage { path: PathBuf, reason: String },
    #[error("a video given as a list of frame paths is not supported; point at a folder of numbered frames instead")]
    FrameListVideo,
    #[error("id `{0}` appears twice in the file")]
    DuplicateId(String),
    #[error("{0}")]
    Conversation(String),
    #[error("answer `{answer}` is not among the options {options}")]
    AnswerNotInOptions { answer: String, options: String },
    #[error("no options found{0}")]
    NoOptions(String),
    #[error("answer `{answer}` is not {expected}")]
    BadAnswer { answer: String, expected: &'static str },
    #[error("video {0} not found, nor a frame folder of that name without its suffix, nor (without a suffix) a .mp4/.mov/.avi/.mkv/.webm file")]
    MissingVideo(PathBuf),
}

/// How to read a data or manifest file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadOptions {
    /// Folder relative media paths resolve against; `None` means the data file's folder.
    pub media_root: Option<PathBuf>,
    /// Whether a row naming a media file that does not exist is bad (default true).
    pub check_media: bool,
    /// Leave bad rows out and report them instead of failing (the CLI's `--skip-bad`).
    pub skip_bad: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { media_root: None, check_media: true, skip_bad: false }
    }
}

/// Rows read, plus the bad rows left out under [`ReadOptions::skip_bad`].
#[derive(Debug, Clone)]
pub struct ReadOutcome<T> {
    pub items: Vec<T>,
    pub skipped: Vec<RowError>,
}

impl<T> ReadOutcome<T> {
    /// Number of rows left out.
    pub fn skipped_count(&self) -> usize {
        self.skipped.len()
    }
}

/// One JSON value of a data file and the line it starts on.
#[derive(Debug, Clone)]
pub struct Record {
    pub line: usize,
    /// The parsed value, or the parser's message when this row alone is malformed.
    pub value: Result<Value, String>,
}

/// Reads JSONL, a JSON array, or a JSON object wrapping an array (see the module docs) into
/// records with their starting lines; a `.parquet` file gives one record per row
/// ([`crate::parquet_rows`]).
///
/// A JSON array is split by a small structural scanner before each element is parsed, so a
/// row keeps its own line number and a malformed element is one bad row, not a dead file.
pub fn read_records(path: &Path) -> Result<Vec<Record>, ReadError> {
    if is_parquet(path) {
        let rows = read_parquet_rows(path).map_err(|e| match e {
            ParquetError::Io(source) => ReadError::Io { path: path.to_path_buf(), source },
            ParquetError::Layout(message) => ReadError::Layout { path: path.to_path_buf(), message },
        })?;
        return Ok(rows.into_iter().enumerate().map(|(i, value)| Record { line: i + 1, value: Ok(value) }).collect());
    }
    let text = std::fs::read_to_string(path).map_err(|source| ReadError::Io { path: path.to_path_buf(), source })?;
    records_from_str(&text).map_err(|(line, message)| ReadError::Syntax { path: path.to_path_buf(), line, message }).and_then(|r| {
        r.ok_or_else(|| ReadError::Layout {
            path: path.to_path_buf(),
            message: format!("a JSON object that holds no row array under any of {WRAPPER_KEYS:?}"),
        })
    })
}

/// `Ok(None)` when the text is one JSON object with no wrapper key; `Err((line, message))`
/// when the file-level structure is broken.
fn records_from_str(text: &str) -> Result<Option<Vec<Record>>, (usize, String)> {
    let bytes = text.as_bytes();
    let start = skip_ws(bytes, 0);
    if start == bytes.len() {
        return Ok(Some(Vec::new()));
    }
    match bytes[start] {
        b'[' => array_records(text, start).map(Some),
        b'{' => {
            let end = skip_value(bytes, start).map_err(|(p, m)| (line_of(text, p), m))?;
            if skip_ws(bytes, end) < bytes.len() {
                return Ok(Some(jsonl_records(text)));
            }
            // A single object: either a wrapper of rows or a one-row file.
            for (key, vstart) in object_members(text, start)? {
                if WRAPPER_KEYS.contains(&key.as_str()) && bytes[vstart] == b'[' {
                    return array_records(text, vstart).map(Some);
                }
            }
            let value = serde_json::from_str(&text[start..end]).map_err(|e| e.to_string());
            match value {
                Ok(Value::Object(_)) => Ok(Some(vec![Record { line: line_of(text, start), value }])),
                _ => Ok(None),
            }
        }
        _ => Err((line_of(text, start), "expected a JSON array, a JSON object or JSON lines".to_string())),
    }
}

fn jsonl_records(text: &str) -> Vec<Record> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Record { line: i + 1, value: serde_json::from_str(l).map_err(|e| in_file(&e, i + 1, 1)) })
        .collect()
}

fn array_records(text: &str, open: usize) -> Result<Vec<Record>, (usize, String)> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut pos = skip_ws(bytes, open + 1);
    if bytes.get(pos) == Some(&b']') {
        return Ok(out);
    }
    // Lines and the start of the current line are tracked incrementally: a 54k-row array on one
    // line (Python's `json.dump`) must not rescan the file per row.
    let (mut counted_to, mut line) = (open, line_of(text, open));
    let mut line_start = text[..open].rfind('\n').map_or(0, |nl| nl + 1);
    loop {
        let end = skip_value(bytes, pos).map_err(|(p, m)| (line_of(text, p), m))?;
        for (offset, &b) in bytes[counted_to..pos].iter().enumerate() {
            if b == b'\n' {
                line += 1;
                line_start = counted_to + offset + 1;
            }
        }
        counted_to = pos;
        let column = pos - line_start + 1;
        let value = serde_json::from_str(&text[pos..end]).map_err(|e| in_file(&e, line, column));
        out.push(Record { line, value });
        pos = skip_ws(bytes, end);
        match bytes.get(pos) {
            Some(b',') => pos = skip_ws(bytes, pos + 1),
            Some(b']') => return Ok(out),
            _ => return Err((line_of(text, pos), "expected `,` or `]` after an array element".to_string())),
        }
    }
}

/// Members of the object starting at `open`: (key, start of its value).
fn object_members(text: &str, open: usize) -> Result<Vec<(String, usize)>, (usize, String)> {
    let bytes = text.as_bytes();
    let err = |p: usize, m: &str| (line_of(text, p), m.to_string());
    let mut out = Vec::new();
    let mut pos = skip_ws(bytes, open + 1);
    if bytes.get(pos) == Some(&b'}') {
        return Ok(out);
    }
    loop {
        if bytes.get(pos) != Some(&b'"') {
            return Err(err(pos, "expected an object key"));
        }
        let kend = skip_value(bytes, pos).map_err(|(p, m)| (line_of(text, p), m))?;
        let key: String = serde_json::from_str(&text[pos..kend]).map_err(|e| err(pos, &e.to_string()))?;
        pos = skip_ws(bytes, kend);
        if bytes.get(pos) != Some(&b':') {
            return Err(err(pos, "expected `:` after an object key"));
        }
        let vstart = skip_ws(bytes, pos + 1);
        let vend = skip_value(bytes, vstart).map_err(|(p, m)| (line_of(text, p), m))?;
        out.push((key, vstart));
        pos = skip_ws(bytes, vend);
        match bytes.get(pos) {
            Some(b',') => pos = skip_ws(bytes, pos + 1),
            Some(b'}') => return Ok(out),
            _ => return Err(err(pos, "expected `,` or `}` in an object")),
        }
    }
}

fn skip_ws(bytes: &[u8], mut pos: usize) -> usize {
    while pos < bytes.len() && bytes[pos].is_ascii_whitespace() {
        pos += 1;
    }
    pos
}

/// End (exclusive) of the JSON value starting at `pos`, found by bracket and string matching
/// only; the value itself is validated later by serde_json.
fn skip_value(bytes: &[u8], pos: usize) -> Result<usize, (usize, String)> {
    let mut depth = 0usize;
    let mut i = pos;
    let mut in_string = false;
    while i < bytes.len() {
        let b = bytes[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => {
                    in_string = false;
                    if depth == 0 {
                        return Ok(i + 1);
                    }
                }
                _ => {}
            }
        } else {
            match b {
                b'"' => in_string = true,
                b'[' | b'{' => depth += 1,
                b']' | b'}' => {
                    if depth == 0 {
                        return Ok(i);
                    }
                    depth -= 1;
                    if depth == 0 {
                        return Ok(i + 1);
                    }
                }
                b',' if depth == 0 => return Ok(i),
                c if depth == 0 && c.is_ascii_whitespace() => return Ok(i),
                _ => {}
            }
        }
        i += 1;
    }
    if in_string || depth > 0 { Err((pos, "unterminated JSON value".to_string())) } else { Ok(i) }
}

/// serde's message for a row that starts at `line`:`column` of its file, with the position
/// moved from the row's text to the file, so it points where an editor shows the fault.
fn in_file(e: &serde_json::Error, line: usize, column: usize) -> String {
    let message = e.to_string();
    let message = message.rsplit_once(" at line ").map_or(message.as_str(), |(m, _)| m);
    let (at_line, at_column) = if e.line() <= 1 { (line, column + e.column().saturating_sub(1)) } else { (line + e.line() - 1, e.column()) };
    format!("{message} at line {at_line} column {at_column}")
}

fn line_of(text: &str, pos: usize) -> usize {
    text.as_bytes()[..pos.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// Typed access to a JSON row that turns every missing or mistyped field into a
/// [`RowProblem`].
pub(crate) struct Row<'a> {
    pub obj: &'a Map<String, Value>,
}

impl<'a> Row<'a> {
    pub fn new(value: &'a Value) -> Result<Self, RowProblem> {
        value.as_object().map(|obj| Row { obj }).ok_or(RowProblem::NotAnObject)
    }

    /// First present, non-null key among `keys`.
    pub fn get(&self, keys: &[&'static str]) -> Option<(&'static str, &'a Value)> {
        keys.iter().find_map(|k| self.obj.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    }

    /// A string field; numbers are accepted and printed (ids are often numeric).
    pub fn string(&self, keys: &[&'static str]) -> Result<Option<String>, RowProblem> {
        match self.get(keys) {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s.clone())),
            Some((_, Value::Number(n))) => Ok(Some(n.to_string())),
            Some((k, _)) => Err(RowProblem::WrongType { field: k.to_string(), expected: "a string" }),
        }
    }

    pub fn required_string(&self, keys: &[&'static str]) -> Result<String, RowProblem> {
        self.string(keys)?.ok_or(RowProblem::MissingField(keys[0]))
    }

    /// A path or a list of paths.
    pub fn paths(&self, keys: &[&'static str]) -> Result<Vec<String>, RowProblem> {
        match self.get(keys) {
            None => Ok(Vec::new()),
            Some((_, Value::String(s))) => Ok(vec![s.clone()]),
            Some((k, Value::Array(items))) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Array(_) => Err(RowProblem::FrameListVideo),
                    _ => Err(RowProblem::WrongType { field: k.to_string(), expected: "a path or a list of paths" }),
                })
                .collect(),
            Some((k, _)) => Err(RowProblem::WrongType { field: k.to_string(), expected: "a path or a list of paths" }),
        }
    }

    pub fn number(&self, keys: &[&'static str]) -> Result<Option<f64>, RowProblem> {
        match self.get(keys) {
            None => Ok(None),
            Some((_, Value::Number(n))) => Ok(n.as_f64()),
            Some((k, Value::String(s))) => {
                s.trim().parse().map(Some).map_err(|_| RowProblem::WrongType { field: k.to_string(), expected: "a number" })
            }
            Some((k, _)) => Err(RowProblem::WrongType { field: k.to_string(), expected: "a number" }),
        }
    }
}

/// Resolves row media paths and checks they exist; shared with the manifest readers.
pub(crate) struct MediaResolver {
    root: PathBuf,
    check: bool,
}

impl MediaResolver {
    pub fn new(file: &Path, opts: &ReadOptions) -> Self {
        let root = opts.media_root.clone().unwrap_or_else(|| file.parent().map(Path::to_path_buf).unwrap_or_default());
        MediaResolver { root, check: opts.check_media }
    }

    pub fn with_root(root: PathBuf, opts: &ReadOptions) -> Self {
        MediaResolver { root, check: opts.check_media }
    }

    pub fn resolve(&self, raw: &str) -> Result<PathBuf, RowProblem> {
        let p = Path::new(raw);
        let path = if p.is_absolute() { p.to_path_buf() } else { self.root.join(p) };
        if self.check && !path.exists() {
            return Err(RowProblem::MissingMedia(path));
        }
        Ok(path)
    }

    /// A released row's `video_path` with the official loader's fallbacks (see the module
    /// docs). Without media checks the path is taken as written.
    pub fn resolve_released_video(&self, raw: &str) -> Result<PathBuf, RowProblem> {
        let p = Path::new(raw);
        let path = if p.is_absolute() { p.to_path_buf() } else { self.root.join(p) };
        if !self.check || path.exists() {
            return Ok(path);
        }
        let folder = path.with_extension("");
        if folder.is_dir() {
            return Ok(folder);
        }
        if path.extension().is_none() {
            let found = RELEASED_VIDEO_SUFFIXES.iter().map(|ext| path.with_extension(ext)).find(|c| c.is_file());
            if let Some(found) = found {
                return Ok(found);
            }
        }
        Err(RowProblem::MissingVideo(path))
    }

    /// [`resolve`](Self::resolve) for an image, whose header must also decode (an empty or
    /// truncated file is caught here, not half-way through training).
    pub fn resolve_image(&self, raw: &str) -> Result<PathBuf, RowProblem> {
        let path = self.resolve(raw)?;
        if self.check
            && let Err(e) = image::image_dimensions(&path)
        {
            return Err(RowProblem::UnreadableImage { reason: e.to_string(), path });
        }
        Ok(path)
    }
}

/// Runs `parse` over every record, attaching file/line/id to its problems, rejecting duplicate
/// ids and honouring `skip_bad`. `parse` returns the item and its id.
pub(crate) fn read_rows<T>(
    path: &Path,
    opts: &ReadOptions,
    mut parse: impl FnMut(&Value, usize) -> Result<(T, String), (Option<String>, RowProblem)>,
) -> Result<ReadOutcome<T>, ReadError> {
    let records = read_records(path)?;
    let mut items = Vec::with_capacity(records.len());
    let mut skipped = Vec::new();
    let mut seen = HashSet::new();
    for rec in records {
        let result = match &rec.value {
            Err(msg) => Err((None, RowProblem::Json(msg.clone()))),
            Ok(v) => parse(v, rec.line)
                .and_then(|(item, id)| if seen.insert(id.clone()) { Ok(item) } else { Err((Some(id.clone()), RowProblem::DuplicateId(id))) }),
        };
        match result {
            Ok(item) => items.push(item),
            Err((id, problem)) => {
                let err = RowError { file: path.to_path_buf(), line: rec.line, id, problem };
                if opts.skip_bad {
                    skipped.push(err);
                } else {
                    return Err(err.into());
                }
            }
        }
    }
    Ok(ReadOutcome { items, skipped })
}

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

/// Lower-case ASCII letters and digits only: how names from different sources are compared.
pub(crate) fn normalise(s: &str) -> String {
    s.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect()
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

    fn lines(text: &str) -> Vec<(usize, bool)> {
        records_from_str(text).expect("parse").expect("rows").iter().map(|r| (r.line, r.value.is_ok())).collect()
    }

    #[test]
    fn array_elements_keep_their_lines() {
        let text = "[\n  {\"a\": \"x]\\\"\"},\n  {\"b\": [1, {\"c\": 2}]},\n  {bad}\n]";
        assert_eq!(lines(text), vec![(2, true), (3, true), (4, false)]);
    }

    #[test]
    fn wrapper_object_and_jsonl_and_single_object() {
        let wrapped = "{\"generation_id\": \"g\",\n \"samples\": [\n{\"x\":1},\n{\"x\":2}]}";
        assert_eq!(lines(wrapped), vec![(3, true), (4, true)]);
        let jsonl = "{\"x\":1}\n\n{oops\n{\"x\":3}\n";
        assert_eq!(lines(jsonl), vec![(1, true), (3, false), (4, true)]);
        assert_eq!(lines("  {\"x\": 1}\n"), vec![(1, true)]);
        assert_eq!(lines(""), vec![]);
    }

    #[test]
    fn broken_structure_is_a_file_error_with_a_line() {
        assert_eq!(records_from_str("[\n{\"x\":1}\n{\"x\":2}]").expect_err("missing comma").0, 3);
        assert_eq!(records_from_str("[\n{\"x\": \"unterminated").expect_err("open string").0, 2);
        assert!(records_from_str("\n\n42").is_err());
    }

    #[test]
    fn many_rows_keep_exact_lines() {
        let rows: Vec<String> = (0..30_000).map(|i| format!("{{\"id\": {i},\n \"x\": \"a\\nb\"}}")).collect();
        let text = format!("[\n{}\n]", rows.join(",\n"));
        let recs = records_from_str(&text).expect("parse").expect("rows");
        assert_eq!(recs.len(), 30_000);
        for (i, r) in [(0, &recs[0]), (29_999, &recs[29_999])] {
            assert_eq!(r.line, 2 + 2 * i);
            assert_eq!(r.value.as_ref().expect("json")["id"], i);
        }
    }

    /// A one-line array (Python's `json.dump`) of 60k rows: every row on line 1, each error at
    /// its own column (what a per-row rescan to the file's start made quadratic).
    #[test]
    fn a_one_line_array_names_each_bad_rows_column() {
        let rows: Vec<String> =
            (0..60_000).map(|i| if i % 20_000 == 19_999 { "{\"id\": oops}".to_owned() } else { format!("{{\"id\": {i}}}") }).collect();
        let text = format!("[{}]", rows.join(", "));
        let recs = records_from_str(&text).expect("parse").expect("rows");
        assert_eq!(recs.len(), 60_000);
        assert!(recs.iter().all(|r| r.line == 1));
        for k in [19_999, 39_999, 59_999] {
            let column = text.match_indices("{\"id\": oops}").map(|(at, _)| at).nth(k / 20_000).expect("bad row") + 1;
            let err = recs[k].value.as_ref().expect_err("bad row");
            assert!(err.ends_with(&format!("at line 1 column {}", column + 7)), "row {k}: {err}");
        }
    }

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
