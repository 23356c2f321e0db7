//! SIS-Bench manifests.

use std::path::Path;


use crate::samples::{MediaResolver, ReadError, ReadOptions, ReadOutcome, RowProblem};

use super::question::Question;
use super::rows::{parse_choice, parse_options, read_questions, split_inline_options, unknown_task};
use super::taxonomy::{Benchmark, SisTask, Task};

/// SIS-Bench rows (the HF `choucsan/SIS-Bench` JSON). The video is `video_path`, else
/// `video_name`, resolved against the media root. Rows without `options` carry them inline in
/// the question (`A. ...` lines or markers), parsed by [`split_inline_options`].
pub fn read_sisbench(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media = MediaResolver::new(path, opts);
    read_questions(Benchmark::SisBench, path, opts, &["question_id"], media, |row, id, base, media| {
        let task_name = row.required_string(&["task_type"])?;
        let task = SisTask::from_name(&task_name)
            .ok_or_else(|| unknown_task(&task_name, SisTask::ALL.iter().map(|t| t.name())))?;
        let text = row.required_string(&["question"])?;
        let (question, options) = match row.get(&["options"]) {
            Some(_) => (text, parse_options(row, &["options"])?),
            None => split_inline_options(&text),
        };
        if options.len() < 2 {
            return Err(RowProblem::NoOptions(" (give `options` or `A. ...` lines in the question)".into()));
        }
        let answer = parse_choice(&row.required_string(&["answer"])?, &options)?;
        let video = row.string(&["video_path", "video_name"])?.ok_or(RowProblem::MissingField("video_path"))?;
        let mut q = base.question(id, Task::Sis(task), question, options, answer);
        q.videos.push(media.resolve(&video)?);
        q.clip_count = row.number(&["concat_num"])?.map(|n| n as u32);
        Ok(q)
    })
}
