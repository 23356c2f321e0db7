//! The downstream navigation MCQ: four-option questions on which path a UAV flew,
//! built from OpenUAV trajectories (true path plus reversed, rescaled, re-staged and
//! wrong-altitude distractors).
//!
//! The source publishes no manifest, so the row schema is ours, in the SIS-Bench mould (JSONL,
//! a JSON array, or an object holding the rows under `samples`/`data`/`questions`/`items`):
//!
//! | field | |
//! |---|---|
//! | `question_id` (or `id`) | string or number, unique |
//! | `question` | the stem; when `options` is absent, options are parsed out of it (`A. ...` lines) |
//! | `options` | `{"A": text, ...}`, `["A. text", ...]` or plain texts lettered in order |
//! | `answer` | the letter (`B`, `(B)`, `B. text`) |
//! | `video_name` / `video_path` / `video` | the flight video (file or frame folder), optional; found as the official SIS-Bench reader finds media ([`resolve_official`]) |
//! | `images` / `image_path` | observation frames, optional; at least one medium is required |
//! | `task_type` / `task` | optional task name (default `Navigation MCQ`) |
//! | `segments` | optional: the true path, `[{"kind", "distance_m", "altitude_change_m", "turn_deg"}]` |
//!
//! `construct nav` writes these rows (plus an `episode` field); a `segments` list that is not
//! of that form is a bad row.
//! Relative media paths resolve against `--media-root`, else the media folder of the released
//! layout beside the manifest ([`default_media_dir`]: `video/` or `TravelUAV_dataset/`), else the
//! manifest's folder.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use motionvl_data::manifest::nav::{Segment, TASK};
use motionvl_data::manifest::{Answer, AnswerOption, default_media_dir, resolve_official, split_inline_options};
use motionvl_data::samples::{ReadOptions, ReadOutcome, RowError, RowProblem, read_records};
use serde_json::{Map, Value};

use super::{Bench, BenchNames, Column, field_text};
use crate::error::Result;
use crate::item::Item;

pub struct Nav;

const NAMES: BenchNames = BenchNames { name: "nav", aliases: &["navigation", "openuav"], title: "Navigation MCQ" };

impl Bench for Nav {
    fn names(&self) -> &'static BenchNames {
        &NAMES
    }

    fn read(&self, manifest: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Item>> {
        let root = opts.media_root.clone().unwrap_or_else(|| default_media_dir(manifest));
        let mut items = Vec::new();
        let mut skipped = Vec::new();
        let mut seen = HashSet::new();
        for record in read_records(manifest)? {
            let parsed = match &record.value {
                Err(message) => Err((None, RowProblem::Json(message.clone()))),
                Ok(value) => parse_row(value, manifest, record.line, &root, opts.check_media),
            };
            let parsed =
                parsed.and_then(
                    |item| {
                        if seen.insert(item.id.clone()) { Ok(item) } else { Err((Some(item.id.clone()), RowProblem::DuplicateId(item.id))) }
                    },
                );
            match parsed {
                Ok(item) => items.push(item),
                Err((id, problem)) => {
                    let err = RowError { file: manifest.to_path_buf(), line: record.line, id, problem };
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

    fn layout(&self) -> Vec<Column> {
        vec![Column { task: TASK, short: "Nav", dimension: "navigation", level: None }]
    }
}

type RowResult<T> = std::result::Result<T, (Option<String>, RowProblem)>;

fn parse_row(value: &Value, file: &Path, line: usize, root: &Path, check_media: bool) -> RowResult<Item> {
    let row = value.as_object().ok_or((None, RowProblem::NotAnObject))?;
    let id = field_text(row, &["question_id", "id"]).ok_or((None, RowProblem::MissingField("question_id")))?;
    let fail = |problem: RowProblem| (Some(id.clone()), problem);
    let text = field_text(row, &["question"]).ok_or_else(|| fail(RowProblem::MissingField("question")))?;
    let (question, options) = match row.get("options") {
        Some(v) => (text.trim().to_string(), parse_options(v).map_err(&fail)?),
        None => split_inline_options(&text),
    };
    if options.len() < 2 {
        return Err(fail(RowProblem::NoOptions(" (give `options` or `A. ...` lines in the question)".into())));
    }
    let raw_answer = field_text(row, &["answer"]).ok_or_else(|| fail(RowProblem::MissingField("answer")))?;
    let letter = answer_letter(&raw_answer).filter(|c| options.iter().any(|o| o.label == *c)).ok_or_else(|| {
        let letters = options.iter().map(|o| o.label.to_string()).collect::<Vec<_>>().join("/");
        fail(RowProblem::AnswerNotInOptions { answer: raw_answer.clone(), options: letters })
    })?;
    let resolve = |raw: &str| -> std::result::Result<PathBuf, RowProblem> {
        let p = Path::new(raw);
        let path = if p.is_absolute() { p.to_path_buf() } else { root.join(p) };
        if check_media && !path.exists() {
            return Err(RowProblem::MissingMedia(path));
        }
        Ok(path)
    };
    let images = paths(row, &["images", "image_path", "image"]).map_err(&fail)?;
    let videos = match video_references(row) {
        // One video named by strings: found the official way, `video_name` first.
        Some(references) => {
            let refs: Vec<&str> = references.iter().map(String::as_str).collect();
            match resolve_official(root, &refs) {
                Some(found) => vec![found],
                None if check_media => return Err(fail(RowProblem::MissingMedia(root.join(&references[0])))),
                None => vec![root.join(&references[0])],
            }
        }
        None => paths(row, &["video_path", "video", "video_name"])
            .map_err(&fail)?
            .iter()
            .map(|v| resolve(v))
            .collect::<std::result::Result<_, _>>()
            .map_err(&fail)?,
    };
    if videos.is_empty() && images.is_empty() {
        return Err(fail(RowProblem::MissingField("video_path")));
    }
    if let Some(segments) = row.get("segments") {
        check_segments(segments).map_err(&fail)?;
    }
    let task = field_text(row, &["task_type", "task"]).unwrap_or_else(|| TASK.to_string());
    Ok(Item {
        task,
        dimension: "navigation".to_string(),
        level: None,
        question,
        options,
        answer: Answer::Choice(letter),
        videos,
        images: images.iter().map(|v| resolve(v)).collect::<std::result::Result<_, _>>().map_err(&fail)?,
        intervals: Vec::new(),
        file: file.to_path_buf(),
        line,
        id,
    })
}

/// The row's video references in the official order (`video_name`, `video_path`, then
/// motionvl's `video`) when every one given is a single string; `None` when there are none or a
/// key holds a list.
fn video_references(row: &Map<String, Value>) -> Option<Vec<String>> {
    let mut references = Vec::new();
    for key in ["video_name", "video_path", "video"] {
        match row.get(key) {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => references.push(s.clone()),
            Some(_) => return None,
        }
    }
    (!references.is_empty()).then_some(references)
}

fn paths(row: &Map<String, Value>, keys: &[&'static str]) -> std::result::Result<Vec<String>, RowProblem> {
    for key in keys {
        match row.get(*key) {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => return Ok(vec![s.clone()]),
            Some(Value::Array(items)) => {
                return items
                    .iter()
                    .map(|v| {
                        v.as_str().map(str::to_string).ok_or(RowProblem::WrongType { field: key.to_string(), expected: "a path or a list of paths" })
                    })
                    .collect();
            }
            Some(_) => {
                return Err(RowProblem::WrongType { field: key.to_string(), expected: "a path or a list of paths" });
            }
        }
    }
    Ok(Vec::new())
}

/// The `segments` of a row, as `construct nav` writes them.
fn check_segments(v: &Value) -> std::result::Result<(), RowProblem> {
    let items = v.as_array().ok_or(RowProblem::WrongType { field: "segments".into(), expected: "a list of path segments" })?;
    for (i, item) in items.iter().enumerate() {
        let segment: Segment = serde_json::from_value(item.clone()).map_err(|_| RowProblem::WrongType {
            field: format!("segments[{i}]"),
            expected: "{kind: take_off|landing|turn_left|turn_right|cruise, distance_m, altitude_change_m, turn_deg}",
        })?;
        if ![segment.distance_m, segment.altitude_change_m, segment.turn_deg].iter().all(|x| x.is_finite()) {
            return Err(RowProblem::WrongType { field: format!("segments[{i}]"), expected: "finite numbers" });
        }
    }
    Ok(())
}

/// `B`, `(B)`, `B.`, `B. text`.
fn answer_letter(raw: &str) -> Option<char> {
    let t = raw.trim().trim_start_matches('(');
    let mut chars = t.chars();
    let c = chars.next().filter(char::is_ascii_alphabetic)?;
    match chars.next() {
        None | Some('.' | ')' | ':' | ' ') => Some(c.to_ascii_uppercase()),
        _ => None,
    }
}

fn parse_options(v: &Value) -> std::result::Result<Vec<AnswerOption>, RowProblem> {
    let wrong = || RowProblem::WrongType { field: "options".into(), expected: "a map of letters to texts or a list of options" };
    let mut options = Vec::new();
    match v {
        Value::Object(map) => {
            for (k, text) in map {
                let label = answer_letter(k).ok_or_else(wrong)?;
                let text = text.as_str().map(str::trim).ok_or_else(wrong)?.to_string();
                options.push(AnswerOption { label, text });
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let s = item.as_str().ok_or_else(wrong)?.trim();
                let labelled = s
                    .char_indices()
                    .nth(1)
                    .and_then(|(at, sep)| matches!(sep, '.' | ')' | ':').then(|| (answer_letter(&s[..=at]), s[at + 1..].trim().to_string())));
                let option = match labelled {
                    Some((Some(label), text)) => AnswerOption { label, text },
                    _ => {
                        let label = (i < 26).then(|| (b'A' + i as u8) as char).ok_or_else(wrong)?;
                        AnswerOption { label, text: s.to_string() }
                    }
                };
                options.push(option);
            }
        }
        _ => return Err(wrong()),
    }
    options.sort_by_key(|o| o.label);
    if options.windows(2).any(|w| w[0].label == w[1].label) {
        return Err(RowProblem::WrongType { field: "options".into(), expected: "options with distinct letters" });
    }
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &str) -> PathBuf {
        let p = dir.join("nav.jsonl");
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        p
    }

    /// A released-style row beside a `video/` folder: `video_name` first, the suffix added and
    /// the same-stem frame folder found as the official resolver finds them, with no flag.
    #[test]
    fn video_name_resolves_the_official_way_under_the_released_layout() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let video = dir.path().join("video");
        std::fs::create_dir_all(video.join("seq")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(video.join("clip.mp4"), b"x").unwrap_or_else(|e| panic!("{e}"));
        let rows = concat!(
            r#"{"question_id": "r1", "video_name": "clip", "video_path": "UAVideo/clip.mp4", "question": "Q", "options": ["a", "b"], "answer": "A"}"#,
            "\n",
            r#"{"question_id": "r2", "video_name": "seq.mp4", "question": "Q", "options": ["a", "b"], "answer": "B"}"#,
            "\n",
        );
        let out = Nav.read(&write(dir.path(), rows), &ReadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        let media: Vec<&Path> = out.items.iter().map(|i| i.videos[0].as_path()).collect();
        assert_eq!(media, vec![video.join("clip.mp4").as_path(), video.join("seq").as_path()]);
    }

    #[test]
    fn reads_both_option_forms_and_names_bad_rows() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(dir.path().join("f.mp4"), b"x").unwrap_or_else(|e| panic!("{e}"));
        let good = concat!(
            r#"{"question_id": 1, "video_path": "f.mp4", "question": "Which path?", "options": {"A": "left", "B": "right", "C": "up", "D": "down"}, "answer": "C"}"#,
            "\n",
            r#"{"question_id": "n2", "video": "f.mp4", "question": "Which path?\nA. left\nB. right", "answer": "(B)", "task_type": "Stage Order"}"#,
            "\n",
        );
        let p = write(dir.path(), good);
        let out = Nav.read(&p, &ReadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.items.len(), 2);
        assert_eq!(out.items[0].answer, Answer::Choice('C'));
        assert_eq!(out.items[0].id, "1");
        assert_eq!(out.items[1].task, "Stage Order");
        assert_eq!(out.items[1].question, "Which path?");
        assert_eq!(out.items[1].options.len(), 2);

        let bad = format!("{good}{}\n", r#"{"question_id": "n3", "video": "f.mp4", "question": "Q", "options": ["a", "b"], "answer": "E"}"#);
        let p = write(dir.path(), &bad);
        let err = Nav.read(&p, &ReadOptions::default()).map(|_| ()).map_err(|e| e.to_string());
        let msg = err.err().unwrap_or_default();
        assert!(msg.contains("nav.jsonl:3") && msg.contains("n3") && msg.contains("not among the options"), "{msg}");
        let out = Nav.read(&p, &ReadOptions { skip_bad: true, ..ReadOptions::default() }).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((out.items.len(), out.skipped.len()), (2, 1));

        let missing = r#"{"question_id": "m", "video": "nope.mp4", "question": "Q", "options": ["a", "b"], "answer": "A"}"#;
        let p = write(dir.path(), missing);
        let msg = Nav.read(&p, &ReadOptions::default()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("nope.mp4"), "{msg}");
    }
}
