//! `construct sisbench-qa`: SIS-Bench questions for all 13 tasks from per-video annotations.
//!
//! The annotation schema (one row per video: what it shows, where and when) is documented in
//! `annotations.rs`.
//!
//! # Tasks and their distractor rules
//!
//! Each builder states its rule; the common aim is that the text alone gives nothing away:
//! distractors are drawn from what the videos of the file show (the "pool", with repeats, so
//! distractors follow the distribution of answers; each builder says what of this video it
//! leaves out), or are other arrangements of what this video shows, so a model that never
//! looks at the video scores chance (25%).
//! [`balance`] then places answers so that every letter is the answer equally often within
//! each task (the last questions of a task beyond a multiple of four are dropped).
//!
//! | file | holds |
//! |---|---|
//! | `annotations.rs` | the annotation schema ([`VideoAnnotation`] and its parts) and [`read_annotations`] |
//! | `mcq.rs` | [`Draft`], [`Mcq`], the distractor helpers, the distractor [`Pool`] and [`balance`] |
//! | `tasks.rs` | the 13 task builders, [`tasks_for`] and [`draft_task`] |
//!
//! This file asks every task of every video ([`build_questions`]) and writes the manifest.

mod annotations;
mod mcq;
mod tasks;

use std::collections::BTreeMap;
use std::path::Path;

use motionvl_data::manifest::SisTask;
use motionvl_util::rng::{SynthRng, derive_seed};
use serde::{Deserialize, Serialize};

use crate::ConstructError;

pub use annotations::{AnnotatedAction, AnnotatedLandmark, AnnotatedObject, AnnotatedType, ClipSpan, Position, VideoAnnotation, read_annotations};
pub use mcq::{Draft, LETTERS, Mcq, Pool, balance, order_distractors, permutations, sequence_text, take_three, task_tag};
pub use tasks::{
    QUADRANTS, RELATIONS, action_prediction, action_recall, action_recognition, action_sequence, consistency, draft_task, landmark_order,
    landmark_recall, object_attribute, object_existence, path_planning, positional_relationship, relative_direction, tasks_for,
};

/// Every question the annotations support: each video is asked each task of its type once,
/// with its own seed stream, and the answers are balanced per task. The pool is the whole
/// file's; ids start with `prefix`.
pub fn build_questions(videos: &[VideoAnnotation], prefix: &str, seed: u64) -> Vec<Mcq> {
    let pool = Pool::new(videos);
    let mut drafts = Vec::new();
    for (i, v) in videos.iter().enumerate() {
        for (t, &task) in tasks_for(v.video_type).iter().enumerate() {
            let mut rng = SynthRng::new(derive_seed(derive_seed(seed, i as u64), t as u64));
            drafts.extend(draft_task(task, v, &pool, &mut rng));
        }
    }
    balance(drafts, prefix, &SisTask::ALL, &mut SynthRng::new(derive_seed(seed, 0xba1a)))
}

/// Writes the questions as a SIS-Bench manifest (a JSON list of [`SisRow`]s).
pub fn write_manifest(path: &Path, questions: &[Mcq]) -> Result<(), ConstructError> {
    Ok(motionvl_util::files::write_json_atomic(path, &questions.iter().map(SisRow::new).collect::<Vec<_>>())?)
}

/// Questions per task, in the taxonomy's order (tasks with none included).
pub fn count_by_task(questions: &[Mcq]) -> Vec<(SisTask, usize)> {
    SisTask::ALL.iter().map(|&t| (t, questions.iter().filter(|q| q.task == t).count())).collect()
}

/// A SIS-Bench manifest row (the HF `choucsan/SIS-Bench` fields `manifest::read_sisbench` reads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SisRow {
    pub question_id: String,
    pub video_name: String,
    pub video_path: String,
    pub concat_num: u32,
    pub task_type: String,
    pub question: String,
    pub options: BTreeMap<String, String>,
    pub answer: String,
}

impl SisRow {
    pub fn new(q: &Mcq) -> Self {
        let video_name = Path::new(&q.video).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        SisRow {
            question_id: q.id.clone(),
            video_name,
            video_path: q.video.clone(),
            concat_num: q.concat_num,
            task_type: q.task.name().to_string(),
            question: q.question.clone(),
            options: LETTERS.iter().zip(&q.options).map(|(l, o)| (l.to_string(), o.clone())).collect(),
            answer: q.answer_letter().to_string(),
        }
    }
}
