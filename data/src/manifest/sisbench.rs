//! SIS-Bench manifests, read as the official evaluator reads the released files
//! (`SIS-Bench/SIS-Bench.jsonl`, and OpenUAV-QA's `TravelUAV_test.jsonl`, whose rows are the same;
//! `motion/src/eval/dataset_utils.py:50-90, 204-236`).

use std::path::Path;

use crate::records::{MediaResolver, ReadError, ReadOptions, ReadOutcome, RowProblem};

use super::question::Question;
use super::resolve::{default_media_dir, resolve_official};
use super::rows::{parse_options, read_questions, released_choice, split_inline_options};
use super::taxonomy::{Benchmark, SisTask, Task, UnlistedTask};

/// The `task_type` the official scorer files a row without one under.
const OFFICIAL_DEFAULT_TASK: &str = "unknown";

/// SIS-Bench rows. Per row:
/// - id: `question_id`, else `id`;
/// - media: `video_name`, then `video_path`, resolved as the official code does
///   ([`resolve_official`]) under the media root, which defaults to the released layout's
///   media folder beside the manifest ([`default_media_dir`]);
/// - task: `task_type` as a name or released key of the 13 tasks (`landmark_appearance_order`
///   is Landmark Order); any other name is kept as an [`UnlistedTask`] (`unknown` when absent);
/// - options: a `{letter: text}` map, or `A. ...` lines in the question;
/// - answer: one letter in either case, else kept verbatim ([`crate::manifest::Answer::Verbatim`]);
/// - `split` and `concat_num` when present.
pub fn read_sisbench(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media_dir = opts.media_root.clone().unwrap_or_else(|| default_media_dir(path));
    let media = MediaResolver::with_root(media_dir.clone(), opts);
    read_questions(Benchmark::SisBench, path, opts, &["question_id", "id"], media, |row, id, base, _| {
        let task_name = row.string(&["task_type"])?.unwrap_or_else(|| OFFICIAL_DEFAULT_TASK.to_string());
        let task =
            SisTask::from_name(&task_name).map(Task::Sis).unwrap_or_else(|| Task::Unlisted(UnlistedTask::new(Benchmark::SisBench, &task_name)));
        let text = row.required_string(&["question"])?;
        let (question, options) = match row.get(&["options"]) {
            Some(_) => (text, parse_options(row, &["options"])?),
            None => split_inline_options(&text),
        };
        if options.len() < 2 {
            return Err(RowProblem::NoOptions(" (give `options` or `A. ...` lines in the question)".into()));
        }
        let answer = released_choice(&row.string(&["answer"])?.unwrap_or_default());
        let references: Vec<String> = [row.string(&["video_name"])?, row.string(&["video_path"])?].into_iter().flatten().collect();
        let first = references.first().ok_or(RowProblem::MissingField("video_name"))?;
        let refs: Vec<&str> = references.iter().map(String::as_str).collect();
        let video = match resolve_official(&media_dir, &refs) {
            Some(found) => found,
            None if opts.check_media => return Err(RowProblem::MissingMedia(media_dir.join(first))),
            None => media_dir.join(first),
        };
        let mut q = base.question(id, task, question, options, answer);
        q.videos.push(video);
        q.clip_count = row.number(&["concat_num"])?.map(|n| n as u32);
        q.split = row.string(&["split"])?.filter(|s| !s.is_empty());
        Ok(q)
    })
}
