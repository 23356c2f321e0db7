//! `predictions.jsonl`: one JSON line per answered question, `{"question_id": …, "prediction":
//! "raw model text"}` (the file contract; other fields are allowed and ignored on reading).
//!
//! The runner appends a line as soon as a question is answered and flushes it to disk after
//! every batch, so an interrupted run loses at most the batch in flight. A crash can leave a
//! torn last line (no newline, not valid JSON); resuming cuts it off and asks that question
//! again. Anything else malformed is an error naming the file and line: predictions are never
//! silently dropped.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::error::{EvalError, Result};

/// File name of the predictions in a run folder.
pub const PREDICTIONS_FILE: &str = "predictions.jsonl";

/// One prediction and the line it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prediction {
    pub question_id: String,
    /// The model's raw text (`null` in the file reads as empty: unanswered).
    pub prediction: String,
    pub line: usize,
}

fn parse_line(path: &Path, line_no: usize, line: &str) -> Result<Prediction> {
    let bad = |message: String| EvalError::Predictions { path: path.to_path_buf(), line: line_no, message };
    let value: Value = serde_json::from_str(line).map_err(|e| bad(format!("not valid JSON: {e}")))?;
    let obj = value.as_object().ok_or_else(|| bad("a prediction must be a JSON object".into()))?;
    let question_id = match obj.get("question_id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        Some(_) => return Err(bad("`question_id` must be a string or a number".into())),
        None => return Err(bad("missing `question_id`".into())),
    };
    let prediction = match obj.get("prediction") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) => String::new(),
        Some(_) => return Err(bad("`prediction` must be the model's text (a string)".into())),
        None => return Err(bad("missing `prediction`".into())),
    };
    Ok(Prediction { question_id, prediction, line: line_no })
}

/// Reads a predictions file; a question answered twice is an error naming both lines.
pub fn read_predictions(path: &Path) -> Result<Vec<Prediction>> {
    let bytes = std::fs::read(path).map_err(EvalError::io("read", path))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        EvalError::Predictions {
            path: path.to_path_buf(),
            line: e.as_bytes()[..valid].iter().filter(|b| **b == b'\n').count() + 1,
            message: "not UTF-8 text".into(),
        }
    })?;
    parse_all(path, &text)
}

fn parse_all(path: &Path, text: &str) -> Result<Vec<Prediction>> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let p = parse_line(path, i + 1, line)?;
        if let Some(first) = seen.insert(p.question_id.clone(), p.line) {
            return Err(EvalError::Predictions {
                path: path.to_path_buf(),
                line: p.line,
                message: format!("question `{}` was already answered on line {first}", p.question_id),
            });
        }
        out.push(p);
    }
    Ok(out)
}

/// Predictions by question id.
pub fn by_id(predictions: &[Prediction]) -> HashMap<&str, &str> {
    predictions.iter().map(|p| (p.question_id.as_str(), p.prediction.as_str())).collect()
}

/// An open predictions file that lines are appended to.
pub struct PredictionWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl PredictionWriter {
    /// Starts a new file; refuses to overwrite one.
    pub fn create(path: &Path) -> Result<Self> {
        let file = OpenOptions::new().write(true).create_new(true).open(path).map_err(EvalError::io("create", path))?;
        Ok(Self { path: path.to_path_buf(), out: BufWriter::new(file) })
    }

    /// Opens an existing file to continue it: returns the predictions already made, after
    /// cutting off a torn last line (see the module docs).
    pub fn resume(path: &Path) -> Result<(Self, Vec<Prediction>)> {
        // Bytes first: a write cut by a crash or a full disk can end inside a multi-byte
        // character, and only the complete lines before it need to be text.
        let bytes = std::fs::read(path).map_err(EvalError::io("read", path))?;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        let tail_is_whole = std::str::from_utf8(&bytes[complete..]).is_ok_and(|tail| tail.trim().is_empty() || parse_line(path, 0, tail).is_ok());
        let keep = if tail_is_whole { bytes.len() } else { complete };
        let mut kept = String::from_utf8(bytes[..keep].to_vec()).map_err(|e| EvalError::Predictions {
            path: path.to_path_buf(),
            line: bytes[..e.utf8_error().valid_up_to()].iter().filter(|b| **b == b'\n').count() + 1,
            message: "not UTF-8 text".into(),
        })?;
        let predictions = parse_all(path, &kept)?;
        let file = OpenOptions::new().write(true).open(path).map_err(EvalError::io("open", path))?;
        if keep < bytes.len() {
            // Only a cut last line is dropped: a finished run's file stays untouched.
            file.set_len(keep as u64).map_err(EvalError::io("truncate", path))?;
        }
        let mut writer = Self { path: path.to_path_buf(), out: BufWriter::new(file) };
        use std::io::Seek;
        writer.out.seek(std::io::SeekFrom::End(0)).map_err(EvalError::io("seek", path))?;
        if !kept.is_empty() && !kept.ends_with('\n') {
            // A complete last line that lacked its newline.
            writer.out.write_all(b"\n").map_err(EvalError::io("write", path))?;
            kept.push('\n');
        }
        Ok((writer, predictions))
    }

    /// Appends one prediction; `extra` fields (task, timing) are written after the contract's.
    pub fn append(&mut self, question_id: &str, prediction: &str, extra: &Map<String, Value>) -> Result<()> {
        let mut obj = Map::new();
        obj.insert("question_id".into(), Value::String(question_id.to_string()));
        obj.insert("prediction".into(), Value::String(prediction.to_string()));
        for (k, v) in extra {
            obj.entry(k.clone()).or_insert_with(|| v.clone());
        }
        let line = Value::Object(obj).to_string();
        writeln!(self.out, "{line}").map_err(EvalError::io("write", &self.path))
    }

    /// Pushes everything written so far to the disk.
    pub fn sync(&mut self) -> Result<()> {
        self.out.flush().map_err(EvalError::io("write", &self.path))?;
        self.out.get_ref().sync_data().map_err(EvalError::io("sync", &self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torn_last_line_is_cut_and_complete_lines_kept() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join(PREDICTIONS_FILE);
        std::fs::write(
            &p,
            "{\"question_id\": \"a\", \"prediction\": \"A\"}\n{\"question_id\": 7, \"prediction\": \"B\"}\n{\"question_id\": \"c\", \"predic",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (mut w, got) = PredictionWriter::resume(&p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.iter().map(|p| p.question_id.as_str()).collect::<Vec<_>>(), ["a", "7"]);
        w.append("c", "C", &Map::new()).unwrap_or_else(|e| panic!("{e}"));
        w.sync().unwrap_or_else(|e| panic!("{e}"));
        let all = read_predictions(&p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].prediction, "C");
    }

    #[test]
    fn a_line_torn_inside_a_multibyte_character_is_cut() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join(PREDICTIONS_FILE);
        let mut bytes = "{\"question_id\": \"a\", \"prediction\": \"左\"}\n{\"question_id\": \"b\", \"prediction\": \"右".as_bytes().to_vec();
        bytes.truncate(bytes.len() - 1); // two of the three bytes of 右
        std::fs::write(&p, &bytes).unwrap_or_else(|e| panic!("{e}"));
        let (_, got) = PredictionWriter::resume(&p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.iter().map(|p| p.prediction.as_str()).collect::<Vec<_>>(), ["左"]);
        assert!(read_predictions(&p).is_ok_and(|all| all.len() == 1));
    }

    #[test]
    fn malformed_and_duplicate_lines_name_their_line() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = dir.path().join("p.jsonl");
        std::fs::write(&p, "{\"question_id\": \"a\", \"prediction\": \"A\"}\n\n{\"question_id\": \"a\", \"prediction\": \"B\"}\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let msg = read_predictions(&p).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("p.jsonl:3") && msg.contains("line 1"), "{msg}");
        std::fs::write(&p, "{\"id\": \"a\", \"prediction\": \"A\"}\n").unwrap_or_else(|e| panic!("{e}"));
        let msg = read_predictions(&p).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("p.jsonl:1") && msg.contains("question_id"), "{msg}");
    }
}
