//! Benchmark manifests: one reader per benchmark, one output type, [`Question`].
//!
//! | benchmark | row fields read | answer |
//! |---|---|---|
//! | SIS-Bench, OpenUAV-QA | `question_id` or `id`, `video_name` then `video_path` (resolved as the official code does, [`resolve_official`]), `concat_num`, `task_type`, `split`, `question`, `options` {A..D} (or inline in `question`), `answer` | letter (kept verbatim when it is none) |
//! | UrbanVideo-Bench | `Question_id`, `video_id`, `question_category`, `question` (options inside the text, up to A–G), `answer` | letter |
//! | UAV-DualCog (Stage 3 video rows) | `sample_id`, `task_name`, `video_path`, `fps`, `user_prompt`/`prompt_text`, `choice_options` [{option_id, label}], `answer_option_id(s)`, `answer_items[].intervals_sec`, `gold_environment_answer` | letter(s), or a count plus visibility intervals |
//! | UAV-DualCog (Stage 4 image rows) | `sample_id`, `task_type`, `user_prompt`/`prompt_text`, `reference_image(_with_bbox)`, `target_image` or `candidates` [{option_id, image}], `label_options`, `answer_option_id` | letter |
//! | LinkS²Bench | `question_id`, `task`, `question`, `options`?, `answer`, `video_path`?, `satellite_image`? | letter, yes/no, number or timestamp, by task |
//!
//! The navigation MCQ's row schema is [`nav`]'s (`construct nav` writes it, `eval`'s `nav` bench
//! reads it).
//!
//! LinkS²Bench has no public release; its row schema above is
//! ours, chosen to mirror SIS-Bench's, and `construct` writes it.
//!
//! Every question carries its [`Task`], and through it the dimension and level of the SIS-Bench
//! taxonomy, LinkS²Bench's four dimensions, UrbanVideo-Bench's four abilities or
//! UAV-DualCog's two task groups. A SIS-Bench or UrbanVideo-Bench task no taxonomy lists is
//! kept under its own name ([`UnlistedTask`]; [`unlisted_tasks`] counts them for the run's
//! report), as the official scorers group by whatever the row says. A bad row — unknown
//! task elsewhere, answer not among the options, missing media file, malformed answer — is a
//! [`RowError`](crate::records::RowError) naming file and line; with
//! [`ReadOptions::skip_bad`] it is left out and reported in [`ReadOutcome::skipped`].
//!
//! Every reader takes JSON, JSONL or Parquet (by extension), so the official UrbanVideo-Bench
//! `MCQ.parquet` is read as it is published.

mod dualcog;
mod links2bench;
pub mod nav;
mod question;
mod resolve;
mod rows;
mod sisbench;
mod taxonomy;
mod urbanvideo;

use std::path::Path;

use crate::records::{ReadError, ReadOptions, ReadOutcome};

pub use dualcog::read_dualcog;
pub use links2bench::read_links2bench;
pub use question::{Answer, AnswerOption, ChoiceAnswer, Interval, Question};
pub use resolve::{
    LeftOut, OFFICIAL_MEDIA_SUBDIRS, OFFICIAL_MIN_FRAMES, OFFICIAL_VIDEO_SUFFIXES, default_media_dir, official_candidates, official_frame_count,
    official_left_out, resolve_official,
};
pub use rows::{parse_timestamp, split_inline_options};
pub use sisbench::read_sisbench;
pub use taxonomy::*;
pub use urbanvideo::read_urbanvideo;

/// How many questions each task no taxonomy lists holds, by name: what a run reports so that
/// a renamed or new task in a released file is seen, not silently scored apart.
pub fn unlisted_tasks(questions: &[Question]) -> std::collections::BTreeMap<&'static str, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for q in questions {
        if let Task::Unlisted(t) = q.task {
            *counts.entry(t.name()).or_insert(0) += 1;
        }
    }
    counts
}

/// Reads a manifest of the given benchmark.
pub fn read_manifest(benchmark: Benchmark, path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    match benchmark {
        Benchmark::SisBench => read_sisbench(path, opts),
        Benchmark::UrbanVideoBench => read_urbanvideo(path, opts),
        Benchmark::UavDualCog => read_dualcog(path, opts),
        Benchmark::LinkS2Bench => read_links2bench(path, opts),
    }
}
