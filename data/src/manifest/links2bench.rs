//! LinkS²Bench manifests (our schema; see the module docs of [`super`]).

use std::path::Path;

use serde_json::Value;

use crate::records::{MediaResolver, ReadError, ReadOptions, ReadOutcome, RowProblem};

use super::question::{Answer, Question};
use super::rows::{parse_choice, parse_options, parse_timestamp, read_questions, unknown_task};
use super::taxonomy::{AnswerKind, Benchmark, LinkS2Task, Task};

/// LinkS²Bench-style rows (our schema, see the module docs). The task decides the answer's
/// form: a letter among `options`, yes/no, a number, or a timestamp (seconds, `mm:ss(.f)`,
/// `hh:mm:ss(.f)` or `12.5s`). At least one of the UAV video and the satellite image is
/// required.
pub fn read_links2bench(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media = MediaResolver::new(path, opts);
    read_questions(Benchmark::LinkS2Bench, path, opts, &["question_id"], media, |row, id, base, media| {
        let task_name = row.required_string(&["task", "task_type"])?;
        let task = LinkS2Task::from_name(&task_name).ok_or_else(|| unknown_task(&task_name, LinkS2Task::ALL.iter().map(|t| t.name())))?;
        let question = row.required_string(&["question"])?;
        let raw = row.get(&["answer"]).ok_or(RowProblem::MissingField("answer"))?.1;
        let raw_text = match raw {
            Value::String(s) => s.trim().to_string(),
            other => other.to_string(),
        };
        let (options, answer) = match task.answer_kind() {
            AnswerKind::Choice => {
                let options = parse_options(row, &["options"])?;
                let answer = parse_choice(&raw_text, &options)?;
                (options, answer)
            }
            AnswerKind::YesNo => {
                let yes = match raw {
                    Value::Bool(b) => Some(*b),
                    _ => match raw_text.to_ascii_lowercase().trim_end_matches('.') {
                        "yes" | "true" => Some(true),
                        "no" | "false" => Some(false),
                        _ => None,
                    },
                };
                let yes = yes.ok_or(RowProblem::BadAnswer { answer: raw_text.clone(), expected: "yes or no" })?;
                (Vec::new(), Answer::YesNo(yes))
            }
            AnswerKind::Number => {
                let x: f64 = raw_text
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite())
                    .ok_or(RowProblem::BadAnswer { answer: raw_text.clone(), expected: "a number" })?;
                (Vec::new(), Answer::Number(x))
            }
            AnswerKind::Timestamp | AnswerKind::MultiChoice => {
                let t = parse_timestamp(&raw_text).ok_or(RowProblem::BadAnswer { answer: raw_text.clone(), expected: "a timestamp" })?;
                (Vec::new(), Answer::Timestamp(t))
            }
        };
        let videos = row.paths(&["video_path", "uav_video", "videos"])?;
        let images = row.paths(&["satellite_image", "satellite_path", "image_path", "images"])?;
        if videos.is_empty() && images.is_empty() {
            return Err(RowProblem::MissingField("video_path"));
        }
        let mut q = base.question(id, Task::LinkS2(task), question, options, answer);
        q.videos = videos.iter().map(|v| media.resolve(v)).collect::<Result<_, _>>()?;
        q.images = images.iter().map(|v| media.resolve_image(v)).collect::<Result<_, _>>()?;
        Ok(q)
    })
}
