//! The one question type every benchmark reader produces.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::taxonomy::{AnswerKind, Benchmark, Dimension, Level, Task};

/// The form a single-choice question's prompt asks its answer in, and the instruction that
/// closes the prompt. The evaluator asks for the letter when it generates (SPEC §2, lmms-eval /
/// VSI-Bench's wording), and for what it scores when it ranks the options by likelihood; a
/// training conversation asks for the form it answers in. So a prompt never asks for one form
/// while another is trained or scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChoiceAnswer {
    /// "B".
    Letter,
    /// "pink silo".
    Text,
    /// "B. pink silo".
    LetterText,
}

impl ChoiceAnswer {
    /// The last line of the prompt, after the lettered options.
    pub fn instruction(self) -> &'static str {
        match self {
            ChoiceAnswer::Letter => "Answer with the option's letter from the given choices directly.",
            ChoiceAnswer::Text => "Answer with the option's text from the given choices directly.",
            ChoiceAnswer::LetterText => "Answer with the option's letter and text from the given choices directly.",
        }
    }
}

/// One lettered option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerOption {
    pub label: char,
    pub text: String,
}

impl AnswerOption {
    /// Options labelled A, B, C, … in the order given (at most 26).
    pub fn lettered<S: AsRef<str>>(texts: &[S]) -> Vec<AnswerOption> {
        texts.iter().zip('A'..='Z').map(|(t, label)| AnswerOption { label, text: t.as_ref().to_string() }).collect()
    }
}

/// A ground-truth time interval in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub start: f64,
    pub end: f64,
}

/// A ground-truth answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// One option letter.
    Choice(char),
    /// Every correct letter of a multi-select question, in option order.
    Choices(Vec<char>),
    YesNo(bool),
    Number(f64),
    /// Seconds from the start of the video.
    Timestamp(f64),
    /// A single-choice answer as the manifest writes it when it is not one option letter
    /// (`"D."`, `"Both"`, `""`): kept, not refused, and asked as a single choice. The official
    /// scorer compares it, upper-cased, with the one letter it extracts
    /// (`motion/src/eval/eval.py:339-340`), so no output matches it.
    Verbatim(String),
}

impl Answer {
    pub fn kind(&self) -> AnswerKind {
        match self {
            Answer::Choice(_) => AnswerKind::Choice,
            Answer::Choices(_) => AnswerKind::MultiChoice,
            Answer::YesNo(_) => AnswerKind::YesNo,
            Answer::Number(_) => AnswerKind::Number,
            Answer::Timestamp(_) => AnswerKind::Timestamp,
            Answer::Verbatim(_) => AnswerKind::Choice,
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Choice(c) => write!(f, "{c}"),
            Answer::Choices(cs) => write!(f, "{}", cs.iter().map(char::to_string).collect::<Vec<_>>().join(",")),
            Answer::YesNo(b) => f.write_str(if *b { "yes" } else { "no" }),
            Answer::Number(x) => write!(f, "{x}"),
            Answer::Timestamp(t) => write!(f, "{t}s"),
            Answer::Verbatim(s) => f.write_str(s),
        }
    }
}

/// One benchmark question, whatever the benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub benchmark: Benchmark,
    pub id: String,
    pub task: Task,
    /// The question stem, without the options.
    pub question: String,
    /// Lettered options; empty for yes/no, numeric and timestamp questions.
    pub options: Vec<AnswerOption>,
    pub answer: Answer,
    /// Resolved video paths (files or frame folders).
    pub videos: Vec<PathBuf>,
    /// Resolved image paths (e.g. LinkS²Bench's satellite image).
    pub images: Vec<PathBuf>,
    /// Frame rate the manifest declares for its video (UAV-DualCog), if any.
    pub fps: Option<f64>,
    /// Clips stitched into the video (SIS-Bench `concat_num`), if given.
    pub clip_count: Option<u32>,
    /// The row's `split` (SIS-Bench, OpenUAV-QA), which the official scorer reports accuracy
    /// by; `None` when absent or empty, as the official `if split:` treats it.
    #[serde(default)]
    pub split: Option<String>,
    /// Ground-truth intervals (UAV-DualCog behaviour or visibility intervals).
    pub intervals: Vec<Interval>,
    pub file: PathBuf,
    pub line: usize,
}

impl Question {
    pub fn dimension(&self) -> Dimension {
        self.task.dimension()
    }

    pub fn level(&self) -> Option<Level> {
        self.task.level()
    }

    /// The options as prompt lines, `A. text` each.
    pub fn options_text(&self) -> String {
        self.options.iter().map(|o| format!("{}. {}", o.label, o.text)).collect::<Vec<_>>().join("\n")
    }
}
