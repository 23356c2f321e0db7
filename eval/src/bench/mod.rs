//! Benchmarks: how each one's manifest is read, its questions are asked and its answers are
//! scored, behind one trait.
//!
//! Adding a benchmark is one new file with a type implementing [`Bench`] and one line in
//! [`REGISTRY`]; the runner, `score`, `compare` and every report then work for it unchanged.
//! Most benchmarks only need [`Bench::read`] and [`Bench::layout`]: the default prompt and
//! scoring follow the form of each question's answer (see [`default_prompt_asking`] and
//! [`default_score`]).
//!
//! Ranking options by likelihood (`[generation] answer = "likelihood"`) answers a question with
//! exactly one of its options, written bare; [`ranked`] says which questions that is sound for
//! and refuses the rest by name: a multi-select question (one option is never its answer) and
//! a benchmark whose answers are JSON objects (a bare option is not one).

use std::path::Path;

use motionvl_data::manifest::{Answer, ChoiceAnswer, Dimension};
use motionvl_data::samples::{ReadOptions, ReadOutcome};

use crate::error::{EvalError, Result};
use crate::extract::{Extracted, extract_choice, extract_choices, extract_number, extract_timestamp, extract_yes_no};
use crate::item::Item;
use crate::metrics::{Metric, RANDOM_YES_NO, Score, acc_at_1s, mra, random_choice, random_multi, set_f1};

mod dualcog;
mod links2bench;
mod nav;
mod sisbench;
mod urbanvideo;

pub use dualcog::DualCog;
pub use links2bench::LINKS2_BENCH;
pub use nav::Nav;
pub use sisbench::SIS_BENCH;
pub use urbanvideo::URBAN_VIDEO;

/// Every benchmark `evaluate --bench` accepts.
pub static REGISTRY: &[&dyn Bench] = &[&SIS_BENCH, &URBAN_VIDEO, &DualCog, &LINKS2_BENCH, &Nav];

/// One task column of a benchmark's table, in the paper's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub task: &'static str,
    /// Column heading in the Markdown table and chart.
    pub short: &'static str,
    pub dimension: &'static str,
    pub level: Option<&'static str>,
}

impl Column {
    /// Columns of a benchmark without levels, from `(task, short heading, dimension)` rows.
    pub fn without_levels(rows: &[(&'static str, &'static str, &'static str)]) -> Vec<Column> {
        rows.iter().map(|&(task, short, dimension)| Column { task, short, dimension, level: None }).collect()
    }
}

/// How a benchmark is named.
#[derive(Debug, Clone, Copy)]
pub struct BenchNames {
    /// Name on the command line (`--bench`) and in `results.json`.
    pub name: &'static str,
    /// Other accepted spellings of the name.
    pub aliases: &'static [&'static str],
    /// Name as reports print it.
    pub title: &'static str,
}

/// A benchmark: its names, manifest reader, prompt and scorer.
pub trait Bench: Send + Sync {
    fn names(&self) -> &'static BenchNames;
    fn name(&self) -> &'static str {
        self.names().name
    }
    fn aliases(&self) -> &'static [&'static str] {
        self.names().aliases
    }
    fn title(&self) -> &'static str {
        self.names().title
    }
    /// Reads a manifest; a bad row is an error naming file and line, or is skipped and counted
    /// under [`ReadOptions::skip_bad`].
    fn read(&self, manifest: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Item>>;
    /// Task columns in the paper's order; tasks a manifest holds beyond these are appended.
    fn layout(&self) -> Vec<Column>;
    /// The user turn, with one `<video>` / `<image>` tag per medium, asking for a single
    /// choice's answer in `form` (other answer kinds are asked for as their kind needs).
    fn prompt_asking(&self, item: &Item, form: ChoiceAnswer) -> String {
        default_prompt_asking(item, form)
    }
    /// The user turn when the answer is generated: a single choice asks for its letter.
    fn prompt(&self, item: &Item) -> String {
        self.prompt_asking(item, ChoiceAnswer::Letter)
    }
    /// Whether the benchmark asks for its answers as JSON objects (its scorer reads one).
    fn json_answers(&self) -> bool {
        false
    }
    /// Extracts the answer from a model's raw output and scores it.
    fn score(&self, item: &Item, output: &str) -> Score {
        default_score(item, output)
    }
}

/// A benchmark that is its manifest's table and no more: names, reader and task columns, with
/// the default prompts and scoring (they follow each answer's form). SIS-Bench,
/// UrbanVideo-Bench and LinkS²Bench are each one of these.
pub struct TableBench {
    pub names: &'static BenchNames,
    pub read: fn(&Path, &ReadOptions) -> Result<ReadOutcome<Item>>,
    pub layout: fn() -> Vec<Column>,
}

impl Bench for TableBench {
    fn names(&self) -> &'static BenchNames {
        self.names
    }

    fn read(&self, manifest: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Item>> {
        (self.read)(manifest, opts)
    }

    fn layout(&self) -> Vec<Column> {
        (self.layout)()
    }
}

/// The benchmark registered under `name` (or an alias), compared ignoring case and punctuation.
pub fn find(name: &str) -> Result<&'static dyn Bench> {
    let key = normalise(name);
    REGISTRY
        .iter()
        .copied()
        .find(|b| normalise(b.name()) == key || b.aliases().iter().any(|a| normalise(a) == key))
        .ok_or_else(|| EvalError::UnknownBench { name: name.to_string(), known: REGISTRY.iter().map(|b| b.name()).collect::<Vec<_>>().join(", ") })
}

/// The benchmark whose reader accepts every row of `manifest` (media not checked), trying the
/// registry in order; the navigation reader, the most permissive, comes last. A reader that
/// accepts the rows only by keeping tasks its taxonomy does not list (SIS-Bench takes any
/// `task_type`, as the official scorer does) yields to a later reader that knows them all.
/// For commands where `--bench` is left out.
pub fn detect(manifest: &Path) -> Result<&'static dyn Bench> {
    let opts = ReadOptions::rows_only();
    let mut reasons = Vec::new();
    let mut with_unlisted_tasks = None;
    for b in REGISTRY {
        match b.read(manifest, &opts) {
            Ok(outcome) if outcome.items.iter().any(|i| i.dimension == Dimension::Unlisted.name()) => {
                with_unlisted_tasks.get_or_insert(*b);
            }
            Ok(outcome) if !outcome.items.is_empty() => return Ok(*b),
            Ok(_) => reasons.push(format!("{}: no rows", b.name())),
            Err(e) => reasons.push(format!("{}: {e}", b.name())),
        }
    }
    if let Some(b) = with_unlisted_tasks {
        return Ok(b);
    }
    Err(EvalError::UnknownManifest { manifest: manifest.to_path_buf(), reasons })
}

fn normalise(s: &str) -> String {
    s.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect()
}

/// Wraps a data-crate reader's outcome into items.
pub(crate) fn items_from<Q: Into<Item>>(outcome: ReadOutcome<Q>) -> ReadOutcome<Item> {
    ReadOutcome { items: outcome.items.into_iter().map(Into::into).collect(), skipped: outcome.skipped }
}

/// Media tags, one line each: videos first, then images (a LinkS²Bench question shows the UAV
/// clip before the satellite image).
pub fn media_tags(item: &Item) -> String {
    let mut s = String::new();
    for _ in &item.videos {
        s.push_str("<video>\n");
    }
    for _ in &item.images {
        s.push_str("<image>\n");
    }
    s
}

pub use crate::error::NotRankable;

/// Whether `item` of `bench` is answered by ranking its options when the run answers by
/// likelihood: `true` for a single-choice question, `false` for one without options (it is
/// generated), an error naming the benchmark and question for one that ranking would answer
/// wrongly by construction.
pub fn ranked(bench: &dyn Bench, item: &Item) -> Result<bool> {
    let refuse = |reason| EvalError::NotRankable { bench: bench.name(), question: Some(item.location()), reason };
    if bench.json_answers() {
        return Err(refuse(NotRankable::JsonAnswers));
    }
    match (&item.answer, item.options.is_empty()) {
        (Answer::Choice(_), false) => Ok(true),
        (Answer::Choices(_), _) => Err(refuse(NotRankable::MultiSelect)),
        (_, true) => Ok(false),
        (_, false) => Err(refuse(NotRankable::NotAChoice)),
    }
}

/// Refuses a likelihood run of `bench` before anything is asked: a JSON benchmark outright,
/// otherwise at the first of `items` that ranking cannot answer (see [`ranked`]).
pub fn check_rankable(bench: &dyn Bench, items: &[Item]) -> Result<()> {
    if bench.json_answers() {
        return Err(EvalError::NotRankable { bench: bench.name(), question: None, reason: NotRankable::JsonAnswers });
    }
    items.iter().try_for_each(|item| ranked(bench, item).map(|_| ()))
}

/// The zero-shot prompt of SPEC §2 asking for the letter: [`default_prompt_asking`] with
/// [`ChoiceAnswer::Letter`].
pub fn default_prompt(item: &Item) -> String {
    default_prompt_asking(item, ChoiceAnswer::Letter)
}

/// The zero-shot prompt by answer kind: the question, then for a single choice the lmms-eval /
/// VSI-Bench multiple-choice wording ("Options:" lines and [`ChoiceAnswer::instruction`] for
/// `form`, "Answer with the option's letter from the given choices directly." for a letter),
/// else a one-line instruction for the expected form.
pub fn default_prompt_asking(item: &Item, form: ChoiceAnswer) -> String {
    let mut s = media_tags(item);
    s.push_str(item.question.trim());
    s.push('\n');
    match &item.answer {
        Answer::Choice(_) | Answer::Verbatim(_) => {
            s.push_str("Options:\n");
            s.push_str(&options_block(item));
            s.push('\n');
            s.push_str(form.instruction());
        }
        Answer::Choices(_) => {
            s.push_str("Options:\n");
            s.push_str(&options_block(item));
            s.push_str("\nSelect every correct option. Answer with the letters of the chosen options, separated by commas.");
        }
        Answer::YesNo(_) => s.push_str("Answer yes or no."),
        Answer::Number(_) => s.push_str("Answer with a single number."),
        Answer::Timestamp(_) => s.push_str("Answer with the time in seconds from the start of the video."),
    }
    s
}

/// `A. text` lines.
pub fn options_block(item: &Item) -> String {
    item.options.iter().map(|o| format!("{}. {}", o.label, o.text)).collect::<Vec<_>>().join("\n")
}

/// Scores an output by the form of the question's answer (module docs of [`crate::metrics`]).
pub fn default_score(item: &Item, output: &str) -> Score {
    let k = item.options.len();
    match &item.answer {
        Answer::Choice(truth) => {
            let e = extract_choice(output, &item.options);
            let value = f64::from(u8::from(e.answer == Some(Extracted::Choice(*truth))));
            Score { value, ..Score::unanswered(Metric::Accuracy, e.rule, random_choice(k)) }.extracted(e.answer)
        }
        // Kept as the released file states it; no extracted letter equals it.
        Answer::Verbatim(_) => {
            let e = extract_choice(output, &item.options);
            Score::unanswered(Metric::Accuracy, e.rule, random_choice(k)).extracted(e.answer)
        }
        Answer::Choices(truth) => {
            let e = extract_choices(output, &item.options);
            let base = Score::unanswered(Metric::Accuracy, e.rule, random_multi(k));
            match e.answer {
                Some(Extracted::Choices(pred)) => {
                    let value = f64::from(u8::from(&pred == truth));
                    Score { value, ..base }.with_extra("f1", set_f1(truth, &pred)).extracted(Some(Extracted::Choices(pred)))
                }
                _ => base.with_extra("f1", 0.0),
            }
        }
        Answer::YesNo(truth) => {
            let e = extract_yes_no(output);
            let value = f64::from(u8::from(e.answer == Some(Extracted::YesNo(*truth))));
            Score { value, ..Score::unanswered(Metric::Accuracy, e.rule, Some(RANDOM_YES_NO)) }.extracted(e.answer)
        }
        Answer::Number(truth) => {
            let e = extract_number(output);
            let base = Score::unanswered(Metric::Mra, e.rule, None);
            match e.answer {
                Some(Extracted::Number(pred)) => Score { value: mra(pred, *truth), ..base }
                    .with_extra("exact", f64::from(u8::from(pred == *truth)))
                    .with_extra("abs_error", (pred - truth).abs())
                    .extracted(Some(Extracted::Number(pred))),
                _ => base.with_extra("exact", 0.0),
            }
        }
        Answer::Timestamp(truth) => {
            let e = extract_timestamp(output);
            let base = Score::unanswered(Metric::AccAt1s, e.rule, None);
            match e.answer {
                Some(Extracted::Timestamp(pred)) => Score { value: f64::from(u8::from(acc_at_1s(pred, *truth))), ..base }
                    .with_extra("abs_error_s", (pred - truth).abs())
                    .extracted(Some(Extracted::Timestamp(pred))),
                _ => base,
            }
        }
    }
}

impl Score {
    fn extracted(mut self, answer: Option<Extracted>) -> Self {
        self.extracted = answer;
        self
    }
}

/// Reads a JSON manifest row field as text (strings, or numbers printed).
pub(crate) fn field_text(row: &serde_json::Map<String, serde_json::Value>, keys: &[&str]) -> Option<String> {
    keys.iter().find_map(|k| match row.get(*k) {
        Some(serde_json::Value::String(s)) => Some(s.clone()),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use motionvl_data::manifest::AnswerOption;

    use super::*;

    fn item(answer: Answer, options: &[&str]) -> Item {
        Item {
            id: "q7".into(),
            task: "Action Recognition".into(),
            dimension: "self".into(),
            level: Some("perception".into()),
            question: "Which way does the drone turn?".into(),
            options: AnswerOption::lettered(options),
            answer,
            videos: vec!["clip.mp4".into()],
            images: Vec::new(),
            intervals: Vec::new(),
            file: "manifest.json".into(),
            line: 7,
        }
    }

    #[test]
    fn ranking_answers_single_choices_generates_open_questions_and_refuses_the_rest() {
        let two = ["left", "right"];
        assert!(matches!(ranked(&SIS_BENCH, &item(Answer::Choice('B'), &two)), Ok(true)));
        assert!(matches!(ranked(&SIS_BENCH, &item(Answer::YesNo(true), &[])), Ok(false)));
        let refusal = |bench: &dyn Bench, answer: Answer, options: &[&str]| match ranked(bench, &item(answer, options)) {
            Err(EvalError::NotRankable { bench, question, reason }) => (bench, question, reason),
            other => panic!("not refused: {other:?}"),
        };
        let at = Some("manifest.json:7 (q7)".to_string());
        assert_eq!(refusal(&SIS_BENCH, Answer::Choices(vec!['A', 'B']), &two), ("sisbench", at.clone(), NotRankable::MultiSelect));
        assert_eq!(refusal(&SIS_BENCH, Answer::Number(2.0), &two), ("sisbench", at.clone(), NotRankable::NotAChoice));
        // UAV-DualCog asks for JSON, even on its single-choice questions.
        assert_eq!(refusal(&DualCog, Answer::Choice('A'), &two), ("dualcog", at, NotRankable::JsonAnswers));
        assert!(matches!(
            check_rankable(&DualCog, &[]),
            Err(EvalError::NotRankable { bench: "dualcog", question: None, reason: NotRankable::JsonAnswers })
        ));
        assert!(check_rankable(&SIS_BENCH, &[item(Answer::Choice('A'), &two), item(Answer::YesNo(false), &[])]).is_ok());
    }

    #[test]
    fn the_single_choice_instruction_asks_for_the_form_requested() {
        let q = item(Answer::Choice('B'), &["left", "right"]);
        let head = "<video>\nWhich way does the drone turn?\nOptions:\nA. left\nB. right\n";
        assert_eq!(SIS_BENCH.prompt(&q), format!("{head}Answer with the option's letter from the given choices directly."));
        assert_eq!(SIS_BENCH.prompt_asking(&q, ChoiceAnswer::Text), format!("{head}Answer with the option's text from the given choices directly."));
        assert_eq!(
            SIS_BENCH.prompt_asking(&q, ChoiceAnswer::LetterText),
            format!("{head}Answer with the option's letter and text from the given choices directly.")
        );
    }
}
