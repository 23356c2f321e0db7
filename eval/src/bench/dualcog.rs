//! UAV-DualCog Stage 3 video tasks: behaviour recognition (single or multi-select option letters,
//! each with the time intervals it happens in) and landmark visibility (how many separate times
//! a landmark is visible, and when); and Stage 4 image tasks (one option letter, with the
//! landmark's box, which is not scored here).
//!
//! The benchmark asks for a JSON object (its system prompts give the schema; the manifest keeps
//! only the user prompt, so the schema is appended to it here) and its scorer reads the span
//! from the first `{` to the last `}`. Scoring here follows `stage3_task_suite.py`:
//! - choice tasks: `answers[].option_id` (else `answer_option_id(s)`) against the true letter
//!   or set — exact match is the accuracy, option-set F1 a side metric — and the intervals of
//!   the chosen options against the true ones by mean best temporal IoU (`tiou`);
//! - visibility: `visible_count` exact (accuracy), within one (`within_1`), absolute error, and
//!   `visible_intervals_sec` by mean best temporal IoU; multi-landmark rows compare the total
//!   count and every target's intervals (an answer's `targets` are summed the same way);
//! - image tasks: `answer_option_id` against the true letter.
//!
//! Outputs that hold no JSON fall back to the text extractors (letters, numbers), without
//! intervals.

use std::path::Path;

use motionvl_data::manifest::{Answer, ChoiceAnswer, Interval, read_dualcog};
use motionvl_data::samples::{ReadOptions, ReadOutcome};
use serde_json::{Map, Value};

use super::{Bench, BenchNames, Column, default_score, items_from, options_block};
use crate::error::Result;
use crate::extract::{Extracted, Rule, parse_json_lenient};
use crate::item::Item;
use crate::metrics::{Metric, Score, mean_best_tiou, random_choice, random_multi, set_f1};

pub struct DualCog;

const NAMES: BenchNames = BenchNames { name: "dualcog", aliases: &["uav-dualcog", "uavdualcog"], title: "UAV-DualCog" };

const COLUMNS: [(&str, &str, &str); 10] = [
    ("self_instance_recognition_joint", "JBR", "self-state"),
    ("self_set_instance_recognition", "SIR", "self-state"),
    ("self_element_instance_recognition", "EIR", "self-state"),
    ("self_composite_instance_recognition", "CIR", "self-state"),
    ("self_atomic_instance_recognition", "AIR", "self-state"),
    ("self_where", "SWh", "self-state"),
    ("self_what", "SWt", "self-state"),
    ("env_visibility_reasoning", "EVR", "environment"),
    ("env_where", "EWh", "environment"),
    ("env_how", "EHw", "environment"),
];

impl Bench for DualCog {
    fn names(&self) -> &'static BenchNames {
        &NAMES
    }

    fn read(&self, manifest: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Item>> {
        Ok(items_from(read_dualcog(manifest, opts)?))
    }

    fn layout(&self) -> Vec<Column> {
        Column::without_levels(&COLUMNS)
    }

    /// The row's own user prompt, its options when the prompt does not list them, and the JSON
    /// schema its system prompt would have given: the answer is always a JSON object.
    fn prompt_asking(&self, item: &Item, _form: ChoiceAnswer) -> String {
        let mut s = super::media_tags(item);
        s.push_str(item.question.trim());
        if !item.options.is_empty() && !item.options.iter().all(|o| item.question.contains(&o.text)) {
            s.push_str("\n\nOptions:\n");
            s.push_str(&options_block(item));
        }
        s.push_str("\n\nReturn exactly one valid JSON object and nothing else, following this schema:\n");
        s.push_str(match item.answer {
            Answer::Number(_) => r#"{"visible_count":2,"visible_intervals_sec":[[0.0,9.1],[17.7,26.8]]}"#,
            _ if item.videos.is_empty() => r#"{"answer_option_id":"A","bbox_xyxy_norm":[0.1,0.2,0.3,0.4]}"#,
            _ => r#"{"answers":[{"option_id":"A","intervals_sec":[[0.0,1.2]]}]}"#,
        });
        s
    }

    fn json_answers(&self) -> bool {
        true
    }

    fn score(&self, item: &Item, output: &str) -> Score {
        let json = parse_json_lenient(&crate::extract::clean(output));
        match (&item.answer, json) {
            (Answer::Number(truth), Some(obj)) if obj.contains_key("visible_count") || obj.contains_key("targets") => score_count(item, *truth, &obj),
            (Answer::Choice(_) | Answer::Choices(_), Some(obj)) => match chosen(&obj) {
                Some((letters, intervals)) => score_choice(item, letters, &intervals),
                None => with_intervals_zero(item, default_score(item, output)),
            },
            _ => with_intervals_zero(item, default_score(item, output)),
        }
    }
}

/// Letters and their intervals from `answers`, else `answer_option_ids` / `answer_option_id`.
fn chosen(obj: &Map<String, Value>) -> Option<(Vec<char>, Vec<Interval>)> {
    let letter = |v: &Value| v.as_str().map(str::trim).and_then(|s| s.chars().next()).map(|c| c.to_ascii_uppercase());
    let mut letters = Vec::new();
    let mut intervals = Vec::new();
    if let Some(Value::Array(items)) = obj.get("answers") {
        for item in items {
            if let Some(c) = item.get("option_id").and_then(letter) {
                letters.push(c);
                intervals.extend(item.get("intervals_sec").map(intervals_of).unwrap_or_default());
            }
        }
    }
    if letters.is_empty() {
        match obj.get("answer_option_ids") {
            Some(Value::Array(ids)) => letters.extend(ids.iter().filter_map(letter)),
            Some(Value::String(s)) => letters.extend(s.split([',', ' ', ';']).filter_map(|p| p.trim().chars().next())),
            _ => {}
        }
    }
    if letters.is_empty()
        && let Some(c) = obj.get("answer_option_id").and_then(letter)
    {
        letters.push(c);
    }
    if letters.is_empty() {
        return None;
    }
    letters.sort_unstable();
    letters.dedup();
    Some((letters, intervals))
}

/// `[[s, e], ...]`, `[{start_sec, end_sec}, ...]` or one `[s, e]`; malformed entries dropped.
fn intervals_of(v: &Value) -> Vec<Interval> {
    let pair = |s: &Value, e: &Value| match (s.as_f64(), e.as_f64()) {
        (Some(a), Some(b)) if a.is_finite() && b.is_finite() => Some(Interval { start: a.min(b), end: a.max(b) }),
        _ => None,
    };
    let Some(items) = v.as_array() else { return Vec::new() };
    if items.len() == 2 && items.iter().all(Value::is_number) {
        return pair(&items[0], &items[1]).into_iter().collect();
    }
    items
        .iter()
        .filter_map(|it| match it {
            Value::Array(p) if p.len() == 2 => pair(&p[0], &p[1]),
            Value::Object(o) => match (o.get("start_sec").or(o.get("start")), o.get("end_sec").or(o.get("end"))) {
                (Some(s), Some(e)) => pair(s, e),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn score_choice(item: &Item, letters: Vec<char>, intervals: &[Interval]) -> Score {
    let k = item.options.len();
    let valid = letters.iter().all(|c| item.options.iter().any(|o| o.label == *c));
    let (value, random, extracted) = match &item.answer {
        Answer::Choice(truth) => {
            let value = f64::from(u8::from(letters == [*truth]));
            let extracted = if letters.len() == 1 { Extracted::Choice(letters[0]) } else { Extracted::Choices(letters.clone()) };
            (value, random_choice(k), extracted)
        }
        Answer::Choices(truth) => (f64::from(u8::from(&letters == truth)), random_multi(k), Extracted::Choices(letters.clone())),
        _ => (0.0, None, Extracted::Choices(letters.clone())),
    };
    let truth: Vec<char> = match &item.answer {
        Answer::Choice(c) => vec![*c],
        Answer::Choices(cs) => cs.clone(),
        _ => Vec::new(),
    };
    let rule = if valid { Rule::Json } else { Rule::Invalid };
    let mut score = Score { value: if valid { value } else { 0.0 }, ..Score::unanswered(Metric::Accuracy, rule, random) };
    if valid {
        score.extracted = Some(extracted);
    }
    let score = score.with_extra("f1", if valid { set_f1(&truth, &letters) } else { 0.0 });
    match mean_best_tiou(&item.intervals, intervals) {
        Some(t) => score.with_extra("tiou", t),
        None => score,
    }
}

/// A visibility answer's count and intervals; with `targets`, their sum and all of theirs.
fn count_and_intervals(obj: &Map<String, Value>) -> (Option<f64>, Vec<Interval>) {
    if let Some(Value::Array(targets)) = obj.get("targets") {
        let parts: Vec<(Option<f64>, Vec<Interval>)> = targets.iter().filter_map(Value::as_object).map(count_and_intervals).collect();
        let total = parts.iter().map(|(c, _)| *c).sum::<Option<f64>>().filter(|_| !parts.is_empty());
        return (total, parts.into_iter().flat_map(|(_, i)| i).collect());
    }
    let count = match obj.get("visible_count") {
        Some(Value::Number(n)) => n.as_f64(),
        Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|c| c.is_finite() && *c >= 0.0);
    let intervals = obj.get("visible_intervals_sec").or(obj.get("intervals_sec")).map(intervals_of).unwrap_or_default();
    (count, intervals)
}

fn score_count(item: &Item, truth: f64, obj: &Map<String, Value>) -> Score {
    let (count, intervals) = count_and_intervals(obj);
    let base = Score::unanswered(Metric::Accuracy, Rule::Json, None);
    let score = match count {
        Some(c) => {
            let mut s = Score { value: f64::from(u8::from(c == truth)), ..base }
                .with_extra("within_1", f64::from(u8::from((c - truth).abs() <= 1.0)))
                .with_extra("abs_error", (c - truth).abs());
            s.extracted = Some(Extracted::Number(c));
            s
        }
        None => Score { rule: Rule::Invalid, ..base }.with_extra("within_1", 0.0),
    };
    match mean_best_tiou(&item.intervals, &intervals) {
        Some(t) => score.with_extra("tiou", t),
        None => score,
    }
}

/// A text fallback: the count is scored as an exact count (not MRA), and the intervals the
/// output could not give score 0 temporal IoU.
fn with_intervals_zero(item: &Item, score: Score) -> Score {
    let mut score = match item.answer {
        Answer::Number(truth) => {
            let exact = matches!(score.extracted, Some(Extracted::Number(c)) if c == truth);
            let mut s = Score { metric: Metric::Accuracy, value: f64::from(u8::from(exact)), ..score };
            s.extras.remove("exact");
            s
        }
        _ => score,
    };
    if !item.intervals.is_empty() {
        score = score.with_extra("tiou", 0.0);
    }
    score
}

#[cfg(test)]
mod tests {
    use motionvl_data::manifest::DualCogTask;

    use super::*;

    #[test]
    fn columns_follow_the_data_crate_taxonomy() {
        for (task, _, dimension) in COLUMNS {
            assert_eq!(DualCogTask::from_name(task).map(|t| t.dimension().name()), Some(dimension), "{task}");
        }
    }

    #[test]
    fn multi_landmark_answers_are_summed() {
        let obj = serde_json::json!({"targets": [
            {"visible_count": 2, "visible_intervals_sec": [[0.0, 1.0]]},
            {"visible_count": "1", "visible_intervals_sec": [[3.0, 4.0]]}
        ]});
        let (count, intervals) = count_and_intervals(obj.as_object().unwrap());
        assert_eq!(count, Some(3.0));
        assert_eq!(intervals, vec![Interval { start: 0.0, end: 1.0 }, Interval { start: 3.0, end: 4.0 }]);
        let missing = serde_json::json!({"targets": [{"visible_count": 2}, {"visible_intervals_sec": []}]});
        assert_eq!(count_and_intervals(missing.as_object().unwrap()).0, None);
    }

    #[test]
    fn intervals_in_every_accepted_form() {
        let v = serde_json::json!([[3.0, 1.0], {"start_sec": 4, "end_sec": 5}, "junk"]);
        assert_eq!(intervals_of(&v), vec![Interval { start: 1.0, end: 3.0 }, Interval { start: 4.0, end: 5.0 }]);
        assert_eq!(intervals_of(&serde_json::json!([2, 6])), vec![Interval { start: 2.0, end: 6.0 }]);
    }
}
