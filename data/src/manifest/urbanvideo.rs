//! UrbanVideo-Bench manifests (`MCQ.parquet` or its JSON form).

use std::path::Path;

use crate::records::{MediaResolver, ReadError, ReadOptions, ReadOutcome, RowProblem};

use super::question::Question;
use super::rows::{parse_choice, read_questions, split_inline_options};
use super::taxonomy::{Benchmark, Task, UnlistedTask, UrbanVideoTask};

/// UrbanVideo-Bench rows (`MCQ.parquet`, or the same rows as JSON / JSONL). The options are
/// parsed out of the question text; the video is `video_id` under the media root, which defaults to the
/// `videos/` folder beside the manifest when that exists (the dataset's layout).
pub fn read_urbanvideo(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media = match &opts.media_root {
        Some(_) => MediaResolver::new(path, opts),
        None => {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            let videos = dir.join("videos");
            MediaResolver::with_root(if videos.is_dir() { videos } else { dir }, opts)
        }
    };
    read_questions(Benchmark::UrbanVideoBench, path, opts, &["Question_id", "question_id"], media, |row, id, base, media| {
        let category = row.required_string(&["question_category"])?;
        // A category outside the paper's 16 (the released "Association Reasoning") is
        // kept under its own name.
        let task = UrbanVideoTask::from_name(&category)
            .map(Task::UrbanVideo)
            .unwrap_or_else(|| Task::Unlisted(UnlistedTask::new(Benchmark::UrbanVideoBench, &category)));
        let text = row.required_string(&["question"])?;
        let (stem, options) = split_inline_options(&text);
        if options.len() < 2 {
            return Err(RowProblem::NoOptions(" in the question text (expected lines such as `A. ...`)".into()));
        }
        let answer = parse_choice(&row.required_string(&["answer"])?, &options)?;
        let video = row.required_string(&["video_id"])?;
        let mut q = base.question(id, task, stem, options, answer);
        q.videos.push(media.resolve(&video)?);
        Ok(q)
    })
}
