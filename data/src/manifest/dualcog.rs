//! UAV-DualCog manifests: Stage 3 video rows and Stage 4 image rows.

use std::path::Path;

use serde_json::Value;

use crate::records::{MediaResolver, ReadError, ReadOptions, ReadOutcome, Row, RowProblem};

use super::question::{Answer, AnswerOption, Interval, Question};
use super::rows::{Base, option_letter, parse_choice, parse_intervals, parse_letter, parse_options, read_questions, unknown_task};
use super::taxonomy::{Benchmark, DualCogTask, Task};

/// UAV-DualCog Stage 3 and Stage 4 manifests (`{"samples": [...]}` or JSONL). Choice tasks
/// give their letters in `answer_option_ids` (multi-select) or `answer_option_id`, and the
/// intervals of the correct items; `env_visibility_reasoning` gives the visible count as a
/// number and the visibility intervals — for multi-landmark rows (`targets`, one count per
/// landmark) the total over the targets and every target's intervals. Stage 4 rows
/// (`task_type`) are image questions: the reference image (with its box drawn, when given),
/// then the query image or the four candidate images that `candidates` offers as options.
pub fn read_dualcog(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media = MediaResolver::new(path, opts);
    read_questions(Benchmark::UavDualCog, path, opts, &["sample_id"], media, |row, id, base, media| {
        let task_name = row.required_string(&["task_name", "form", "task_type"])?;
        let task = DualCogTask::from_name(&task_name).ok_or_else(|| unknown_task(&task_name, DualCogTask::ALL.iter().map(|t| t.name())))?;
        let question = row.required_string(&["user_prompt", "prompt_text", "question"])?;
        if task.is_image_task() {
            return read_dualcog_image(row, id, base, media, task, question);
        }
        let video = row.required_string(&["video_path"])?;
        let fps = row.number(&["fps"])?;
        let (options, answer, intervals) = if task == DualCogTask::EnvVisibilityReasoning {
            let (_, gold) = row.get(&["gold_environment_answer"]).ok_or(RowProblem::MissingField("gold_environment_answer"))?;
            let gold = Row::new(gold).map_err(|_| RowProblem::WrongType { field: "gold_environment_answer".into(), expected: "an object" })?;
            let (count, intervals) = match gold.get(&["targets"]) {
                Some((_, Value::Array(targets))) if !targets.is_empty() => {
                    let mut total = 0.0;
                    let mut intervals = Vec::new();
                    for t in targets {
                        let t = Row::new(t)
                            .map_err(|_| RowProblem::WrongType { field: "gold_environment_answer.targets".into(), expected: "a list of objects" })?;
                        let (count, mut ivs) = visible_count_and_intervals(&t)?;
                        total += count;
                        intervals.append(&mut ivs);
                    }
                    (total, intervals)
                }
                Some(_) => {
                    return Err(RowProblem::WrongType { field: "gold_environment_answer.targets".into(), expected: "a non-empty list of targets" });
                }
                None => visible_count_and_intervals(&gold)?,
            };
            (Vec::new(), Answer::Number(count), intervals)
        } else {
            let options = parse_options(row, &["choice_options"])?;
            let answer = match row.get(&["answer_option_ids"]) {
                Some((_, Value::Array(ids))) if !ids.is_empty() => {
                    let mut letters = Vec::with_capacity(ids.len());
                    for v in ids {
                        let s =
                            v.as_str().ok_or(RowProblem::WrongType { field: "answer_option_ids".into(), expected: "a list of option letters" })?;
                        letters.push(parse_letter(s, &options)?);
                    }
                    let multi = matches!(row.get(&["multi_select"]), Some((_, Value::Bool(true))));
                    if letters.len() == 1 && !multi {
                        Answer::Choice(letters[0])
                    } else {
                        letters.sort_unstable();
                        letters.dedup();
                        Answer::Choices(letters)
                    }
                }
                Some((_, Value::Array(_))) | None => parse_choice(&row.required_string(&["answer_option_id"])?, &options)?,
                Some(_) => {
                    return Err(RowProblem::WrongType { field: "answer_option_ids".into(), expected: "a list of option letters" });
                }
            };
            let mut intervals = Vec::new();
            if let Some((_, Value::Array(items))) = row.get(&["answer_items"]) {
                for item in items {
                    if let Some(v) = item.get("intervals_sec") {
                        intervals.extend(parse_intervals(v, "answer_items[].intervals_sec")?);
                    }
                }
            }
            (options, answer, intervals)
        };
        let mut q = base.question(id, Task::DualCog(task), question, options, answer);
        q.videos.push(media.resolve(&video)?);
        q.fps = fps;
        q.intervals = intervals;
        Ok(q)
    })
}

/// `visible_count` and `visible_intervals_sec` of a visibility answer or of one of its targets.
fn visible_count_and_intervals(gold: &Row<'_>) -> Result<(f64, Vec<Interval>), RowProblem> {
    let count = gold.number(&["visible_count"])?.ok_or(RowProblem::MissingField("visible_count"))?;
    let intervals = match gold.get(&["visible_intervals_sec"]) {
        Some((_, v)) => parse_intervals(v, "visible_intervals_sec")?,
        None => Vec::new(),
    };
    Ok((count, intervals))
}

/// A UAV-DualCog Stage 4 row: options from `label_options`, or `Image 2` … `Image 5` for the
/// `candidates`, whose images follow the reference image.
fn read_dualcog_image(
    row: &Row<'_>,
    id: String,
    base: &Base,
    media: &MediaResolver,
    task: DualCogTask,
    question: String,
) -> Result<Question, RowProblem> {
    let reference = row.required_string(&["reference_image_with_bbox", "reference_image"])?;
    let mut images = vec![media.resolve_image(&reference)?];
    let options = match row.get(&["candidates"]) {
        Some((_, Value::Array(candidates))) if !candidates.is_empty() => {
            let wrong = || RowProblem::WrongType { field: "candidates".into(), expected: "a list of {option_id, image} objects" };
            let mut options = Vec::with_capacity(candidates.len());
            for c in candidates {
                let letter = c.get("option_id").and_then(Value::as_str).and_then(option_letter).ok_or_else(wrong)?;
                let image = c.get("image").and_then(Value::as_str).ok_or_else(wrong)?;
                images.push(media.resolve_image(image)?);
                options.push(AnswerOption { label: letter, text: format!("Image {}", images.len()) });
            }
            options
        }
        Some(_) => return Err(RowProblem::WrongType { field: "candidates".into(), expected: "a non-empty list" }),
        None => {
            images.push(media.resolve_image(&row.required_string(&["target_image"])?)?);
            parse_options(row, &["label_options", "choice_options"])?
        }
    };
    let answer = parse_choice(&row.required_string(&["answer_option_id"])?, &options)?;
    let mut q = base.question(id, Task::DualCog(task), question, options, answer);
    q.images = images;
    Ok(q)
}
