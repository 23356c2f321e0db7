//! `--protocol official`: what the authors' released evaluator (`motion/src/eval/eval.py` and
//! `dataset_utils.py` of `IntelliSensing/Self-in-Space` at `b123237`) does that the paper's
//! protocol as motionvl read it does not.
//!
//! - **Rows as written** ([`OfficialRows`]): the official prompt and score use a row's
//!   `question`, `options`, `answer`, `task_type` and `split` verbatim, while the benchmark
//!   readers normalise them (trimmed option texts, task names mapped to the taxonomy), so the
//!   rows are read again here, keyed by `question_id` (else `id`) as `dataset_utils.py:58` does.
//! - **Prompt** ([`prompt`]): the user turn is `[video, text]` with text
//!   `"{question}\n{A. …\nB. …}\nPlease select the correct answer."`, the options in
//!   `sorted(options)` order, nothing trimmed (`dataset_utils.py:15-24, 206-221`); the video's
//!   tag is followed by no newline, so the chat reads `<|vision_end|>{question}`.
//! - **Which questions** ([`leave_out`]): a question whose media is missing, or whose header
//!   frame count is in `1..min_frames`, is not asked and not in any denominator
//!   (`dataset_utils.py:102-127`; `run_eval.sh` passes `--min_frames 8`).
//! - **Scores** ([`score`]): the regex cascade of `eval.py:36-74` compared with the row's
//!   `answer` ignoring case; an empty output is wrong.
//! - **`uav_accuracy.json`** ([`UavAccuracy`]): `eval.py:323-389`'s `{"overall", "per_category",
//!   "per_split"}`, each `{"correct", "total", "accuracy"}` with the accuracy in percent, keys in
//!   order of first appearance, written as `json.dump(..., indent=4)` writes it.
//! - **Decoding** ([`GenerationDefaults`]): the base model's `generation_config.json`
//!   `repetition_penalty` and `eos_token_id`, which `model.generate` applies even greedily.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use motionvl_data::manifest::Answer;
use motionvl_data::samples::read_records;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::bench::field_text;
use crate::error::{EvalError, Result};
use crate::extract::{extract_official, official_correct};
use crate::item::Item;
use crate::metrics::{Metric, Score, random_choice};

/// File name of the official accuracy summary in a run folder.
pub const UAV_ACCURACY_FILE: &str = "uav_accuracy.json";

/// The instruction closing every official prompt (`UAV_PROMPT_TEMPLATES["default"]`).
pub const INSTRUCTION: &str = "Please select the correct answer.";

/// The fields of a manifest row the official code reads, as written.
#[derive(Debug, Clone, PartialEq)]
pub struct OfficialRow {
    pub question: String,
    /// `(key, text)` in `sorted(options)` order.
    pub options: Vec<(String, String)>,
    /// `answer`, or empty when absent (`item.get("answer", "")`).
    pub answer: String,
    /// `task_type`, or `unknown` when absent.
    pub task_type: String,
    /// `split`, or empty when absent (then the question is in no split).
    pub split: String,
}

/// A manifest's rows by question id, read as the official code reads them.
#[derive(Debug, Clone, Default)]
pub struct OfficialRows {
    file: PathBuf,
    /// Row object and line, by `question_id` (else `id`).
    by_id: HashMap<String, (Map<String, Value>, usize)>,
}

impl OfficialRows {
    /// Reads every JSON-object row of `manifest` that has an id; rows the benchmark reader
    /// refuses are its business, not this one's.
    pub fn read(manifest: &Path) -> Result<Self> {
        let mut by_id = HashMap::new();
        for record in read_records(manifest)? {
            if let Ok(Value::Object(row)) = record.value
                && let Some(id) = field_text(&row, &["question_id", "id"])
            {
                by_id.entry(id).or_insert((row, record.line));
            }
        }
        Ok(OfficialRows { file: manifest.to_path_buf(), by_id })
    }

    /// The row of `item`, with an error naming the line and field the official code would
    /// fail on.
    pub fn row(&self, item: &Item) -> Result<OfficialRow> {
        self.row_by_id(&item.id, item.line)
    }

    /// The row with question id `id` (`line`: where the caller found it, for the error when
    /// no row has that id).
    pub fn row_by_id(&self, id: &str, line: usize) -> Result<OfficialRow> {
        let (row, line) = self.by_id.get(id).ok_or_else(|| EvalError::OfficialRow {
            file: self.file.clone(),
            line,
            id: id.to_string(),
            message: format!("no row of {} has this question_id or id", self.file.display()),
        })?;
        let bad = |message: String| EvalError::OfficialRow { file: self.file.clone(), line: *line, id: id.to_string(), message };
        let question = match row.get("question") {
            Some(Value::String(s)) => s.clone(),
            _ => return Err(bad("the official prompt needs `question` as a string".into())),
        };
        let options = match row.get("options") {
            Some(Value::Object(options)) => {
                let mut pairs = options
                    .iter()
                    .map(|(key, value)| python_str(value).map(|text| (key.clone(), text)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| bad("`options` values must be strings or numbers".into()))?;
                // `sorted()` on str keys: by code point, which is UTF-8 byte order.
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
                pairs
            }
            _ => return Err(bad("the official prompt needs `options` as an object {\"A\": text, …}".into())),
        };
        // `item.get(key, default)`, then what the official code does with the value: a null
        // split is no split, a null task the JSON key "null", a null answer never matches.
        let text = |key: &str, default: &str, null: &str| match row.get(key) {
            None => Some(default.to_string()),
            Some(Value::Null) => Some(null.to_string()),
            Some(value) => python_str(value),
        };
        Ok(OfficialRow {
            question,
            options,
            answer: text("answer", "", "").ok_or_else(|| bad("`answer` must be a string".into()))?,
            task_type: text("task_type", "unknown", "null").ok_or_else(|| bad("`task_type` must be a string".into()))?,
            split: text("split", "", "").ok_or_else(|| bad("`split` must be a string".into()))?,
        })
    }
}

/// `str(value)` for the JSON values a row's text fields hold (`None` for containers).
fn python_str(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(if *b { "True" } else { "False" }.to_string()),
        Value::Null => Some("None".to_string()),
        Value::Array(_) | Value::Object(_) => None,
    }
}

/// The official user turn: one media tag per video, then per image, each with no newline
/// after it, then the question, the options and the instruction.
pub fn prompt(row: &OfficialRow, item: &Item) -> String {
    let mut s = String::new();
    for _ in &item.videos {
        s.push_str(motionvl_data::text::VIDEO_TAG);
    }
    for _ in &item.images {
        s.push_str(motionvl_data::text::IMAGE_TAG);
    }
    s.push_str(&row.question);
    s.push('\n');
    let options: Vec<String> = row.options.iter().map(|(key, text)| format!("{key}. {text}")).collect();
    s.push_str(&options.join("\n"));
    s.push('\n');
    s.push_str(INSTRUCTION);
    s
}

/// The vLLM evaluator's user turn (`eval/src/uav/vqa/uav_dataset.py:77-93, 300-312`): one
/// image per frame, each with no text between, then the question and options in its template.
pub fn vllm_prompt(row: &OfficialRow, frames: usize) -> String {
    let options: Vec<String> = row.options.iter().map(|(key, text)| format!("{key}. {text}")).collect();
    format!(
        "{}Watch the video carefully and answer the following multiple choice question.\n\nQuestion:\n{}\n\nOptions:\n{}\n\n\
         Please select the correct answer from the options above. Only output the letter (A, B, C, or D) corresponding to your answer.",
        motionvl_data::text::IMAGE_TAG.repeat(frames),
        row.question,
        options.join("\n")
    )
}

/// A question the official protocol does not ask, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    pub question_id: String,
    pub reason: String,
}

/// The frame count the official code filters on: a frame folder's `.jpg/.jpeg/.png` files
/// (any case); a video's stream frame count, else its duration × average rate floored, else 0
/// (`dataset_utils.py:92-100`, PyAV's header fields).
pub fn header_frame_count(path: &Path) -> Result<usize> {
    if path.is_dir() {
        let entries = std::fs::read_dir(path).map_err(EvalError::io("list", path))?;
        let mut n = 0;
        for entry in entries {
            let entry = entry.map_err(EvalError::io("list", path))?;
            let ext = entry.path().extension().map(|e| e.to_string_lossy().to_lowercase());
            n += usize::from(matches!(ext.as_deref(), Some("jpg" | "jpeg" | "png")));
        }
        return Ok(n);
    }
    motionvl_data::video::probe_video(path)
        .map(|info| info.header_frames.unwrap_or(0))
        .map_err(|e| EvalError::BadFile { path: path.to_path_buf(), message: e.to_string() })
}

/// Which questions a protocol asks, besides those whose media is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The official evaluator: not a video whose header frame count is in `1..min_frames`.
    MinFrames(usize),
    /// The vLLM evaluator: not a frame folder without a `.jpg/.jpeg/.png` frame
    /// (`uav_dataset.py:158-182`; files are not probed).
    NonEmpty,
}

/// Why a protocol leaves `item` out: a medium that is not there, or one `admission` refuses;
/// `None` when it is asked.
pub fn leave_out(item: &Item, admission: Admission) -> Result<Option<String>> {
    for path in item.videos.iter().chain(&item.images) {
        if !path.exists() {
            return Ok(Some(format!("media not found: {}", path.display())));
        }
    }
    for path in &item.videos {
        match admission {
            Admission::MinFrames(min_frames) => {
                let frames = header_frame_count(path)?;
                if (1..min_frames).contains(&frames) {
                    return Ok(Some(format!("{} has {frames} frames, fewer than min_frames {min_frames}", path.display())));
                }
            }
            Admission::NonEmpty => {
                if path.is_dir() && header_frame_count(path)? == 0 {
                    return Ok(Some(format!("{} holds no .jpg/.jpeg/.png frame", path.display())));
                }
            }
        }
    }
    Ok(None)
}

/// Scores an output the official way (module docs); the random baseline is the question's.
pub fn score(row: &OfficialRow, item: &Item, output: &str) -> Score {
    let e = extract_official(output);
    let correct = official_correct(&e, &row.answer);
    let random = match item.answer {
        Answer::Choice(_) => random_choice(item.options.len()),
        _ => None,
    };
    Score { value: f64::from(u8::from(correct)), extracted: e.answer, ..Score::unanswered(Metric::Accuracy, e.rule, random) }
}

/// `uav_accuracy.json`: correct and total per question set, accuracy in percent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UavAccuracy {
    overall: (usize, usize),
    /// `(task_type, (correct, total))` in order of first appearance.
    per_category: Vec<(String, (usize, usize))>,
    per_split: Vec<(String, (usize, usize))>,
}

impl UavAccuracy {
    /// Counts `(row, correct)` pairs in the order the questions were asked.
    pub fn count<'a>(results: impl IntoIterator<Item = (&'a OfficialRow, bool)>) -> Self {
        fn add(groups: &mut Vec<(String, (usize, usize))>, key: &str, correct: bool) {
            let i = match groups.iter().position(|(k, _)| k == key) {
                Some(i) => i,
                None => {
                    groups.push((key.to_string(), (0, 0)));
                    groups.len() - 1
                }
            };
            groups[i].1.0 += usize::from(correct);
            groups[i].1.1 += 1;
        }
        let mut acc = UavAccuracy::default();
        for (row, correct) in results {
            acc.overall.0 += usize::from(correct);
            acc.overall.1 += 1;
            add(&mut acc.per_category, &row.task_type, correct);
            if !row.split.is_empty() {
                add(&mut acc.per_split, &row.split, correct);
            }
        }
        acc
    }

    /// The file's text as Python's `json.dump(stats, f, indent=4, ensure_ascii=False)` writes
    /// `compute_accuracy`'s dict (keys in insertion order).
    pub fn to_text(&self) -> String {
        let mut bytes = Vec::new();
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut bytes, formatter);
        // Serialising counts and names into memory cannot fail.
        let _ = self.serialize(&mut ser);
        String::from_utf8_lossy(&bytes).into_owned()
    }

    pub fn write(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(UAV_ACCURACY_FILE);
        motionvl_data::files::write_atomic(&path, self.to_text().as_bytes())?;
        Ok(path)
    }
}

/// `{"correct", "total", "accuracy"}`: `100 * correct / total` as a float, or the integer 0
/// for an empty set.
struct Entry((usize, usize));

impl Serialize for Entry {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let (correct, total) = self.0;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("correct", &correct)?;
        map.serialize_entry("total", &total)?;
        if total > 0 {
            map.serialize_entry("accuracy", &(100.0 * correct as f64 / total as f64))?;
        } else {
            map.serialize_entry("accuracy", &0)?;
        }
        map.end()
    }
}

/// Named entries in the order given (serde_json's own maps sort their keys).
struct Group<'a>(&'a [(String, (usize, usize))]);

impl Serialize for Group<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, counts) in self.0 {
            map.serialize_entry(name, &Entry(*counts))?;
        }
        map.end()
    }
}

impl Serialize for UavAccuracy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("overall", &Entry(self.overall))?;
        map.serialize_entry("per_category", &Group(&self.per_category))?;
        map.serialize_entry("per_split", &Group(&self.per_split))?;
        map.end()
    }
}

/// What a checkpoint's `generation_config.json` makes `model.generate` do even greedily.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
pub struct GenerationDefaults {
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    /// One id or a list.
    #[serde(default)]
    pub eos_token_id: Option<Value>,
}

impl GenerationDefaults {
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(EvalError::io("read", path))?;
        serde_json::from_str(&text).map_err(|e| EvalError::BadFile { path: path.to_path_buf(), message: e.to_string() })
    }

    /// The eos ids, when the file gives any.
    pub fn eos_ids(&self) -> Option<Vec<u32>> {
        let ids = match self.eos_token_id.as_ref()? {
            Value::Number(n) => vec![n.as_u64()?],
            Value::Array(items) => items.iter().map(Value::as_u64).collect::<Option<Vec<_>>>()?,
            _ => return None,
        };
        ids.into_iter().map(|id| u32::try_from(id).ok()).collect()
    }
}

#[cfg(test)]
mod tests {
    use motionvl_data::manifest::AnswerOption;

    use super::*;

    fn item(id: &str, videos: Vec<PathBuf>) -> Item {
        Item {
            id: id.into(),
            task: "Action Recognition".into(),
            dimension: "self".into(),
            level: None,
            question: "q".into(),
            options: AnswerOption::lettered(&["a", "b", "c", "d"]),
            answer: Answer::Choice('B'),
            videos,
            images: Vec::new(),
            intervals: Vec::new(),
            file: "m.jsonl".into(),
            line: 1,
        }
    }

    fn rows(text: &str) -> (tempfile::TempDir, OfficialRows) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("m.jsonl");
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
        let rows = OfficialRows::read(&path).unwrap_or_else(|e| panic!("{e}"));
        (dir, rows)
    }

    #[test]
    fn the_prompt_is_the_rows_text_verbatim_with_sorted_options_and_no_newline_after_the_video() {
        let (_dir, rows) = rows(concat!(
            r#"{"question_id": "q1", "question": " Where does the drone go? ", "options": {"C": "up ", "A": " left", "B": "right", "D": 4}, "answer": "b"}"#,
            "\n",
            r#"{"id": 7, "question": "x", "options": ["A. a"], "answer": "A"}"#,
            "\n",
            r#"{"question_id": "q3", "question": "x", "options": {"A": "a"}, "answer": "A", "split": null, "task_type": null}"#,
            "\n"
        ));
        let q1 = item("q1", vec!["v.mp4".into()]);
        let row = rows.row(&q1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(prompt(&row, &q1), "<video> Where does the drone go? \nA.  left\nB. right\nC. up \nD. 4\nPlease select the correct answer.");
        assert_eq!((row.answer.as_str(), row.task_type.as_str(), row.split.as_str()), ("b", "unknown", ""));
        let q3 = rows.row(&item("q3", Vec::new())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((q3.split.as_str(), q3.task_type.as_str()), ("", "null"), "a null split is none; a null task the key \"null\"");
        // A list of options is what the official `_format_options` cannot read.
        let err = rows.row(&item("7", Vec::new())).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("m.jsonl:2 (7)") && err.contains("`options` as an object"), "{err}");
        let err = rows.row(&item("q9", Vec::new())).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("no row"), "{err}");
    }

    #[test]
    fn scores_follow_the_answer_as_written() {
        let (_dir, rows) = rows(r#"{"question_id": "q1", "question": "q", "options": {"A": "a", "B": "b"}, "answer": "b"}"#);
        let q1 = item("q1", Vec::new());
        let row = rows.row(&q1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(score(&row, &q1, "B. right").value, 1.0);
        assert_eq!(score(&row, &q1, "A drone turns right").value, 0.0, "read as A");
        let empty = score(&row, &q1, "");
        assert_eq!((empty.value, empty.extracted.is_none()), (0.0, true));
    }

    #[test]
    fn short_and_missing_media_are_left_out_and_a_zero_count_is_kept() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let folder = |name: &str, files: &[&str]| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
            for f in files {
                std::fs::write(d.join(f), b"x").unwrap_or_else(|e| panic!("{e}"));
            }
            d
        };
        let seven: Vec<String> = (0..7).map(|i| format!("{i:03}.JPG")).collect();
        let seven: Vec<&str> = seven.iter().map(String::as_str).chain(["notes.txt", "x.webp"]).collect();
        let short = folder("short", &seven);
        let eight: Vec<String> = (0..8).map(|i| format!("{i}.png")).collect();
        let long = folder("long", &eight.iter().map(String::as_str).collect::<Vec<_>>());
        let empty = folder("empty", &[]);
        assert_eq!(header_frame_count(&short).ok(), Some(7), ".jpg/.jpeg/.png in any case only");
        let reason = leave_out(&item("s", vec![short.clone()]), Admission::MinFrames(8)).ok().flatten().unwrap_or_default();
        assert!(reason.contains("7 frames, fewer than min_frames 8"), "{reason}");
        assert_eq!(leave_out(&item("l", vec![long]), Admission::MinFrames(8)).ok(), Some(None));
        assert_eq!(leave_out(&item("e", vec![empty.clone()]), Admission::MinFrames(8)).ok(), Some(None), "a count of 0 is kept");
        // The vLLM evaluator asks about the short clip and drops the empty folder.
        assert_eq!(leave_out(&item("s", vec![short]), Admission::NonEmpty).ok(), Some(None));
        let reason = leave_out(&item("e", vec![empty]), Admission::NonEmpty).ok().flatten().unwrap_or_default();
        assert!(reason.contains("holds no .jpg/.jpeg/.png frame"), "{reason}");
        let reason = leave_out(&item("m", vec![dir.path().join("gone.mp4")]), Admission::NonEmpty).ok().flatten().unwrap_or_default();
        assert!(reason.starts_with("media not found") && reason.contains("gone.mp4"), "{reason}");
    }

    #[test]
    fn uav_accuracy_has_the_official_shape_order_and_number_forms() {
        let row = |task: &str, split: &str| OfficialRow {
            question: String::new(),
            options: Vec::new(),
            answer: "A".into(),
            task_type: task.into(),
            split: split.into(),
        };
        let (a1, b1, a2) = (row("Path Planning", "val"), row("Action Recognition", ""), row("Path Planning", "test"));
        let acc = UavAccuracy::count([(&a1, true), (&b1, false), (&a2, false), (&a1, true), (&b1, true), (&b1, false)]);
        let text = acc.to_text();
        let expected = r#"{
    "overall": {
        "correct": 3,
        "total": 6,
        "accuracy": 50.0
    },
    "per_category": {
        "Path Planning": {
            "correct": 2,
            "total": 3,
            "accuracy": 66.66666666666667
        },
        "Action Recognition": {
            "correct": 1,
            "total": 3,
            "accuracy": 33.333333333333336
        }
    },
    "per_split": {
        "val": {
            "correct": 2,
            "total": 2,
            "accuracy": 100.0
        },
        "test": {
            "correct": 0,
            "total": 1,
            "accuracy": 0.0
        }
    }
}"#;
        assert_eq!(text, expected);
        assert_eq!(
            UavAccuracy::count([]).to_text(),
            "{\n    \"overall\": {\n        \"correct\": 0,\n        \"total\": 0,\n        \"accuracy\": 0\n    },\n    \"per_category\": {},\n    \"per_split\": {}\n}"
        );
    }

    #[test]
    fn generation_defaults_read_the_penalty_and_eos_ids() {
        let d: GenerationDefaults =
            serde_json::from_str(r#"{"repetition_penalty": 1.05, "eos_token_id": [151645, 151643], "top_k": 1}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((d.repetition_penalty, d.eos_ids()), (Some(1.05), Some(vec![151645, 151643])));
        let d: GenerationDefaults = serde_json::from_str(r#"{"eos_token_id": 2}"#).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((d.repetition_penalty, d.eos_ids()), (None, Some(vec![2])));
    }
}
