//! [`Item`]: one benchmark question as the evaluator sees it.
//!
//! The data crate's [`Question`] types its task with a closed enum of the four benchmarks it
//! reads. The evaluator also scores benchmarks that enum does not know (the navigation MCQ, and
//! whatever a user adds as one new [`crate::bench::Bench`]), and its reports are keyed by names
//! anyway, so it carries the task, dimension and level as strings.

use std::path::PathBuf;

use motionvl_data::manifest::{Answer, AnswerOption, Interval, Question};

/// A question to ask and score.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub id: String,
    /// Task name as reports print it (`Object Existence`).
    pub task: String,
    /// Dimension of the task (`spatial`, `self`, `localization`, ...).
    pub dimension: String,
    /// SIS-Bench's level (`perception`, `memory`, `reasoning`); `None` elsewhere.
    pub level: Option<String>,
    /// The question stem, without the options (or the whole prompt, for UAV-DualCog rows).
    pub question: String,
    pub options: Vec<AnswerOption>,
    pub answer: Answer,
    pub videos: Vec<PathBuf>,
    pub images: Vec<PathBuf>,
    /// Ground-truth intervals (UAV-DualCog); scored by temporal IoU when the model gives some.
    pub intervals: Vec<Interval>,
    /// Manifest file and line the question came from, for error messages.
    pub file: PathBuf,
    pub line: usize,
}

impl Item {
    /// `file:line (id)`, the prefix of every message about this question.
    pub fn location(&self) -> String {
        format!("{}:{} ({})", self.file.display(), self.line, self.id)
    }

    /// Option letters in order.
    pub fn letters(&self) -> Vec<char> {
        self.options.iter().map(|o| o.label).collect()
    }
}

impl From<Question> for Item {
    fn from(q: Question) -> Self {
        Item {
            task: q.task.name().to_string(),
            dimension: q.task.dimension().name().to_string(),
            level: q.task.level().map(|l| l.name().to_string()),
            id: q.id,
            question: q.question,
            options: q.options,
            answer: q.answer,
            videos: q.videos,
            images: q.images,
            intervals: q.intervals,
            file: q.file,
            line: q.line,
        }
    }
}
