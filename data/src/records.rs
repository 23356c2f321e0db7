//! Reading the rows of a JSON data file, shared by the training conversations
//! ([`crate::samples`]) and the benchmark manifests ([`crate::manifest`]).
//!
//! Files are JSONL, a JSON array, or a JSON object holding the rows under `samples`, `data`,
//! `questions` or `items`; a `.parquet` file gives one row per record. Every row keeps its
//! file and line, and every problem names them ([`RowError`]): a bad row stops reading unless
//! [`ReadOptions::skip_bad`] is set, in which case it is left out and returned in
//! [`ReadOutcome::skipped`]. A JSON array is split by a small structural scanner, so one
//! malformed element is one bad row, not a dead file.
//!
//! Also here, for both readers: typed access to a row's fields (`Row`), media path resolution
//! with the official loader's fallbacks for a released `video_path` (`MediaResolver`),
//! `read_rows` (every record parsed, located and checked for duplicate ids) and the name
//! comparison both use (`normalise`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::parquet_rows::{ParquetError, is_parquet, read_parquet_rows};

/// Video suffixes the official loader tries, in its order, for a `video_path` without one.
const RELEASED_VIDEO_SUFFIXES: [&str; 5] = ["mp4", "mov", "avi", "mkv", "webm"];

/// Keys under which a JSON object may hold its rows.
const WRAPPER_KEYS: [&str; 4] = ["samples", "data", "questions", "items"];

/// File-level failures: the file cannot be read or is not JSON / JSONL at all.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: not valid JSON: {message}")]
    Syntax { path: PathBuf, line: usize, message: String },
    /// A JSON object that holds no row array under any of the wrapper keys.
    #[error("{path}: a JSON object that holds no row array under any of {WRAPPER_KEYS:?}")]
    NoRowArray { path: PathBuf },
    #[error("{path}: {source}")]
    Parquet { path: PathBuf, source: ParquetError },
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

impl ReadOptions {
    /// The rows alone, against the data file's folder: media files are not checked (scoring,
    /// telling a manifest's benchmark, reading text) and a bad row is an error.
    pub fn rows_only() -> Self {
        ReadOptions { media_root: None, check_media: false, skip_bad: false }
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
            source => ReadError::Parquet { path: path.to_path_buf(), source },
        })?;
        return Ok(rows.into_iter().enumerate().map(|(i, value)| Record { line: i + 1, value: Ok(value) }).collect());
    }
    let text = std::fs::read_to_string(path).map_err(|source| ReadError::Io { path: path.to_path_buf(), source })?;
    records_from_str(&text)
        .map_err(|(line, message)| ReadError::Syntax { path: path.to_path_buf(), line, message })
        .and_then(|r| r.ok_or_else(|| ReadError::NoRowArray { path: path.to_path_buf() }))
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

/// Lower-case ASCII letters and digits only: how names from different sources are compared.
pub(crate) fn normalise(s: &str) -> String {
    s.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect()
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
}
