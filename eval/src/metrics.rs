//! Per-question scores and their aggregation.
//!
//! Every question gets one main score in [0, 1] ([`Score::value`]) under its task's metric:
//! - **accuracy** (options, yes/no, multi-select as an exact set, UAV-DualCog counts as an exact
//!   count): 1 or 0;
//! - **MRA** (LinkS²Bench numbers, SPEC §5): the mean over θ ∈ {0.50, 0.55, …, 0.95} of
//!   1(|ŷ−y|/|y| < 1−θ), and 1(ŷ = 0) when y = 0 — see [`mra`];
//! - **ACC@1s** (LinkS²Bench timestamps): 1 when |ŷ−y| ≤ 1 s — see [`acc_at_1s`].
//!
//! A group's `accuracy` is the mean of its questions' main scores, so a benchmark that mixes
//! kinds (LinkS²Bench) still has one overall number, as its paper reports one. Side metrics
//! (temporal IoU, option-set F1, count error, ...) are averaged over the questions that have
//! them. Unanswered questions score 0 and are counted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use motionvl_data::manifest::Interval;

use crate::extract::{Extracted, Rule};

/// Half-width of the ACC@1s window in seconds. The LinkS²Bench paper reads "correct when |ŷ−y| ≤ 1 s"; that
/// literal reading is used (SoccerNet's "@1s" is ±0.5 s).
pub const ACC_WINDOW_S: f64 = 1.0;

/// Slack on the ACC@1s bound, so that 10.1 vs 11.1 s (|Δ| = 1.0000000000000009 in binary
/// floating point) counts as the 1 s it is.
const TIME_EPS: f64 = 1e-9;

/// The metric a question's main score is under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    Accuracy,
    Mra,
    #[serde(rename = "acc@1s")]
    AccAt1s,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::Accuracy => "accuracy",
            Metric::Mra => "mra",
            Metric::AccAt1s => "acc@1s",
        }
    }
}

/// Mean Relative Accuracy of a numeric answer.
///
/// The ten thresholds θ_k = (50 + 5k)/100 are compared in integer hundredths —
/// `100·|ŷ−y| < (50 − 5k)·|y|` — so a relative error of exactly 0.05 fails θ = 0.95 as the
/// strict "<" says, instead of passing by the rounding of `1 − 0.95`. (VSI-Bench's code uses
/// "≤"; LinkS²Bench's definition, followed here, uses "<".) Non-finite inputs score 0.
pub fn mra(pred: f64, truth: f64) -> f64 {
    if !pred.is_finite() || !truth.is_finite() {
        return 0.0;
    }
    if truth == 0.0 {
        return if pred == 0.0 { 1.0 } else { 0.0 };
    }
    let err = 100.0 * (pred - truth).abs();
    let passed = (0..10).filter(|k| err < f64::from(50 - 5 * k) * truth.abs()).count();
    passed as f64 / 10.0
}

/// ACC@1s: the predicted time is within [`ACC_WINDOW_S`] of the truth (inclusive).
pub fn acc_at_1s(pred: f64, truth: f64) -> bool {
    pred.is_finite() && truth.is_finite() && (pred - truth).abs() <= ACC_WINDOW_S + TIME_EPS
}

/// Temporal IoU of two intervals (either may be given reversed); 0 when the union is empty,
/// as in UAV-DualCog's `_interval_iou`.
pub fn interval_iou(a: Interval, b: Interval) -> f64 {
    let (a0, a1) = (a.start.min(a.end), a.start.max(a.end));
    let (b0, b1) = (b.start.min(b.end), b.start.max(b.end));
    let inter = (a1.min(b1) - a0.max(b0)).max(0.0);
    let union = a1.max(b1) - a0.min(b0);
    if union > 1e-6 { inter / union } else { 0.0 }
}

/// UAV-DualCog's `mean_best_tIoU`: for each ground-truth interval the best IoU with any
/// predicted one, averaged; `None` when there is no ground truth to score against.
pub fn mean_best_tiou(gold: &[Interval], pred: &[Interval]) -> Option<f64> {
    if gold.is_empty() {
        return None;
    }
    let total: f64 = gold.iter().map(|g| pred.iter().map(|p| interval_iou(*p, *g)).fold(0.0, f64::max)).sum();
    Some(total / gold.len() as f64)
}

/// F1 of a predicted option set against the true one (UAV-DualCog's element-level score).
pub fn set_f1(gold: &[char], pred: &[char]) -> f64 {
    if gold.is_empty() && pred.is_empty() {
        return 1.0;
    }
    let tp = pred.iter().filter(|c| gold.contains(c)).count() as f64;
    let precision = tp / pred.len().max(1) as f64;
    let recall = tp / gold.len().max(1) as f64;
    if precision + recall == 0.0 { 0.0 } else { 2.0 * precision * recall / (precision + recall) }
}

/// Expected accuracy of a uniform guess among `k` options.
pub fn random_choice(k: usize) -> Option<f64> {
    (k > 0).then(|| 1.0 / k as f64)
}

/// Expected exact-set accuracy of a uniform guess among the 2^k − 1 non-empty subsets of `k`
/// options.
pub fn random_multi(k: usize) -> Option<f64> {
    (1..=30).contains(&k).then(|| 1.0 / ((1u64 << k) - 1) as f64)
}

/// Expected accuracy of a coin flip on a yes/no question.
pub const RANDOM_YES_NO: f64 = 0.5;

/// One question, scored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub metric: Metric,
    /// Main score in [0, 1].
    pub value: f64,
    /// The answer read from the output; `None` means unanswered.
    pub extracted: Option<Extracted>,
    pub rule: Rule,
    /// Expected score of a random guess at this question, where one is defined.
    pub random: Option<f64>,
    /// Side metrics of this question (`tiou`, `f1`, `abs_error`, `within_1`, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extras: BTreeMap<String, f64>,
}

impl Score {
    /// A question the model did not answer: score 0.
    pub fn unanswered(metric: Metric, rule: Rule, random: Option<f64>) -> Self {
        Score { metric, value: 0.0, extracted: None, rule, random, extras: BTreeMap::new() }
    }

    pub fn answered(&self) -> bool {
        self.extracted.is_some()
    }

    /// Full marks (always the case for a correct accuracy-type answer).
    pub fn correct(&self) -> bool {
        self.value >= 1.0
    }

    pub fn with_extra(mut self, name: &str, value: f64) -> Self {
        self.extras.insert(name.to_string(), value);
        self
    }
}

/// Running sums over a group of scored questions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tally {
    pub n: usize,
    pub unanswered: usize,
    pub correct: usize,
    pub sum: f64,
    random_sum: f64,
    random_n: usize,
    metrics: Vec<Metric>,
    extras: BTreeMap<String, (f64, usize)>,
}

impl Tally {
    pub fn add(&mut self, s: &Score) {
        self.n += 1;
        self.sum += s.value;
        self.correct += usize::from(s.correct());
        self.unanswered += usize::from(!s.answered());
        if let Some(r) = s.random {
            self.random_sum += r;
            self.random_n += 1;
        }
        if !self.metrics.contains(&s.metric) {
            self.metrics.push(s.metric);
            self.metrics.sort();
        }
        for (k, v) in &s.extras {
            let e = self.extras.entry(k.clone()).or_insert((0.0, 0));
            e.0 += v;
            e.1 += 1;
        }
    }

    /// Mean main score; 0 for an empty group.
    pub fn accuracy(&self) -> f64 {
        if self.n == 0 { 0.0 } else { self.sum / self.n as f64 }
    }

    /// Mean random baseline, defined only when every question of the group has one (a group
    /// mixing MRA questions in would otherwise show a baseline for part of its score).
    pub fn random(&self) -> Option<f64> {
        (self.n > 0 && self.random_n == self.n).then(|| self.random_sum / self.n as f64)
    }

    pub fn entry(&self) -> Entry {
        Entry {
            accuracy: self.accuracy(),
            n: self.n,
            correct: self.correct,
            unanswered: self.unanswered,
            random: self.random(),
            metric: self.metrics.iter().map(|m| m.name()).collect::<Vec<_>>().join("+"),
            macro_accuracy: None,
            dimension: None,
            level: None,
            extras: self.extras.iter().map(|(k, (sum, count))| (k.clone(), sum / *count as f64)).collect(),
        }
    }
}

/// One line of a breakdown in `results.json` (the file contract: `accuracy`, `n` and
/// `unanswered` are always there).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// Mean main score, a fraction in [0, 1].
    pub accuracy: f64,
    pub n: usize,
    /// Questions with full marks.
    pub correct: usize,
    pub unanswered: usize,
    /// Expected accuracy of random guessing, when every question has one.
    pub random: Option<f64>,
    /// Metric(s) behind `accuracy`: `accuracy`, `mra`, `acc@1s`, or several joined by `+`.
    pub metric: String,
    /// Mean of the per-task accuracies (groups of several tasks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub macro_accuracy: Option<f64>,
    /// The task's dimension (task entries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dimension: Option<String>,
    /// The task's level (SIS-Bench task entries only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// Side metrics averaged over the questions that have them.
    #[serde(flatten)]
    pub extras: BTreeMap<String, f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_baselines() {
        assert_eq!(random_choice(4), Some(0.25));
        assert_eq!(random_choice(0), None);
        assert_eq!(random_multi(3), Some(1.0 / 7.0));
    }

    #[test]
    fn tally_random_needs_every_question() {
        let mut t = Tally::default();
        t.add(&Score::unanswered(Metric::Accuracy, Rule::None, Some(0.25)));
        assert_eq!(t.random(), Some(0.25));
        t.add(&Score::unanswered(Metric::Mra, Rule::None, None));
        assert_eq!(t.random(), None);
        assert_eq!(t.entry().metric, "accuracy+mra");
    }
}
