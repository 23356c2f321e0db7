//! Scoring a set of predictions against a manifest, and `results.json`.
//!
//! `results.json` is a file contract that scripts and checks rely on: it holds `overall`,
//! `by_task`, `by_dimension` and `by_level`, each entry with at least `accuracy` (a fraction in
//! [0, 1]), `n` and `unanswered` (see [`Entry`]). Breakdowns are JSON objects keyed by name, in
//! the paper's order. A question without a prediction counts as unanswered (and is reported as
//! `missing`): the denominator is always the manifest, so a partial run cannot look better than
//! a complete one.
//!
//! Group accuracies are question-weighted (the mean over the group's questions, as SIS-Bench's
//! "overall" is); `macro_accuracy` beside them is the mean over the group's tasks.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::bench::Bench;
use crate::error::{EvalError, Result};
use crate::item::Item;
use crate::metrics::{Entry, Score, Tally};
use crate::official::{LeftOut, OfficialRow};

/// File name of the scores in a run folder.
pub const RESULTS_FILE: &str = "results.json";

/// Named entries in a fixed order, written as a JSON object that keeps that order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Breakdown(pub Vec<(String, Entry)>);

impl Breakdown {
    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, e)| e)
    }

    pub fn iter(&self) -> impl Iterator<Item = &(String, Entry)> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Breakdown {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Breakdown {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Breakdown;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of breakdown entries")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> std::result::Result<Breakdown, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = access.next_entry::<String, Entry>()? {
                    out.push((k, v));
                }
                Ok(Breakdown(out))
            }
        }
        deserializer.deserialize_map(Ordered)
    }
}

/// The contents of `results.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// `--bench` name.
    pub benchmark: String,
    /// Benchmark name as printed.
    pub title: String,
    /// Name of the run (the model row in tables).
    pub run: String,
    pub manifest: String,
    /// Questions in the manifest (after skipped rows).
    pub questions: usize,
    /// Questions with a prediction.
    pub predicted: usize,
    /// Questions without one (scored as unanswered).
    pub missing: usize,
    /// Predictions whose question is not in the manifest (ignored).
    pub unmatched: usize,
    /// Manifest rows left out under `--skip-bad`.
    pub skipped_rows: usize,
    pub overall: Entry,
    pub by_task: Breakdown,
    pub by_dimension: Breakdown,
    /// Empty for benchmarks without levels.
    pub by_level: Breakdown,
    /// How often each extraction rule decided.
    pub extraction: BTreeMap<String, usize>,
    /// Questions the protocol does not ask (the official one's missing or too-short media),
    /// in no count above.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
}

impl Results {
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(EvalError::io("read", path))?;
        serde_json::from_str(&text).map_err(|e| EvalError::BadFile { path: path.to_path_buf(), message: e.to_string() })
    }

    /// Reads `results.json` from a run folder, or the file itself.
    pub fn read_run(path: &Path) -> Result<Self> {
        if path.is_dir() { Self::read(&path.join(RESULTS_FILE)) } else { Self::read(path) }
    }
}

/// One question's outcome, a line of `scored.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scored {
    pub question_id: String,
    pub task: String,
    /// The ground truth as text.
    pub answer: String,
    /// `None` when the question has no prediction.
    pub prediction: Option<String>,
    #[serde(flatten)]
    pub score: Score,
}

/// What was scored and against what.
pub struct ScoreInput<'a> {
    pub bench: &'a dyn Bench,
    pub items: &'a [Item],
    pub predictions: &'a HashMap<&'a str, &'a str>,
    pub run: String,
    pub manifest: &'a Path,
    pub skipped_rows: usize,
    /// The rows as written, by question id, when outputs are scored the official way
    /// ([`crate::official::score`]); `None`: by the benchmark's own scorer.
    pub official: Option<&'a HashMap<String, OfficialRow>>,
}

/// Scores one output: the official way when `official` holds the question's row, else by the
/// benchmark's scorer.
pub fn score_one(bench: &dyn Bench, official: Option<&HashMap<String, OfficialRow>>, item: &Item, output: &str) -> Score {
    match official.and_then(|rows| rows.get(&item.id)) {
        Some(row) => crate::official::score(row, item, output),
        None => bench.score(item, output),
    }
}

/// Scores every question of the manifest (module docs: missing predictions are unanswered).
pub fn score_all(input: &ScoreInput<'_>) -> (Results, Vec<Scored>) {
    let mut scored = Vec::with_capacity(input.items.len());
    for item in input.items {
        let prediction = input.predictions.get(item.id.as_str()).copied();
        let score = match prediction {
            Some(text) => score_one(input.bench, input.official, item, text),
            None => {
                // Scored as an empty output, so the metric and random baseline stay the task's.
                let mut s = score_one(input.bench, input.official, item, "");
                s.value = 0.0;
                s.extracted = None;
                s
            }
        };
        scored.push(Scored {
            question_id: item.id.clone(),
            task: item.task.clone(),
            answer: item.answer.to_string(),
            prediction: prediction.map(str::to_string),
            score,
        });
    }
    let ids: std::collections::HashSet<&str> = input.items.iter().map(|i| i.id.as_str()).collect();
    let predicted = input.items.iter().filter(|i| input.predictions.contains_key(i.id.as_str())).count();
    let unmatched = input.predictions.keys().filter(|k| !ids.contains(*k)).count();
    let mut results = aggregate(input.bench, input.items, &scored);
    results.run = input.run.clone();
    results.manifest = input.manifest.display().to_string();
    results.predicted = predicted;
    results.missing = input.items.len() - predicted;
    results.unmatched = unmatched;
    results.skipped_rows = input.skipped_rows;
    (results, scored)
}

/// (task, dimension, level).
type TaskKey = (String, String, Option<String>);

/// Groups scores by task, dimension and level in the benchmark's layout order.
fn aggregate(bench: &dyn Bench, items: &[Item], scored: &[Scored]) -> Results {
    // Task order: the layout's, then tasks it does not know in order of appearance.
    let layout = bench.layout();
    let mut tasks: Vec<TaskKey> = Vec::new();
    for col in &layout {
        if items.iter().any(|i| i.task == col.task) {
            tasks.push((col.task.to_string(), col.dimension.to_string(), col.level.map(str::to_string)));
        }
    }
    for item in items {
        if !tasks.iter().any(|t| t.0 == item.task) {
            tasks.push((item.task.clone(), item.dimension.clone(), item.level.clone()));
        }
    }
    let mut per_task: HashMap<&str, Tally> = HashMap::new();
    let mut overall = Tally::default();
    let mut per_dim: HashMap<&str, Tally> = HashMap::new();
    let mut per_level: HashMap<&str, Tally> = HashMap::new();
    let mut extraction: BTreeMap<String, usize> = BTreeMap::new();
    for (item, s) in items.iter().zip(scored) {
        per_task.entry(item.task.as_str()).or_default().add(&s.score);
        per_dim.entry(item.dimension.as_str()).or_default().add(&s.score);
        if let Some(level) = &item.level {
            per_level.entry(level.as_str()).or_default().add(&s.score);
        }
        overall.add(&s.score);
        let rule = if s.prediction.is_none() { "missing" } else { s.score.rule.name() };
        *extraction.entry(rule.to_string()).or_default() += 1;
    }
    let task_acc: HashMap<&str, f64> = per_task.iter().map(|(k, t)| (*k, t.accuracy())).collect();
    let macro_of = |names: &mut dyn Iterator<Item = &str>| -> Option<f64> {
        let accs: Vec<f64> = names.filter_map(|n| task_acc.get(n).copied()).collect();
        (!accs.is_empty()).then(|| accs.iter().sum::<f64>() / accs.len() as f64)
    };
    let by_task = Breakdown(
        tasks
            .iter()
            .map(|(name, dim, level)| {
                let mut e = per_task.get(name.as_str()).map(Tally::entry).unwrap_or_else(|| Tally::default().entry());
                e.dimension = Some(dim.clone());
                e.level = level.clone();
                (name.clone(), e)
            })
            .collect(),
    );
    let mut dims: Vec<&str> = Vec::new();
    let mut levels: Vec<&str> = Vec::new();
    for (_, dim, level) in &tasks {
        if !dims.contains(&dim.as_str()) {
            dims.push(dim);
        }
        if let Some(l) = level
            && !levels.contains(&l.as_str())
        {
            levels.push(l);
        }
    }
    // Levels in their natural order, whatever order tasks come in.
    levels.sort_by_key(|l| ["perception", "memory", "reasoning"].iter().position(|x| x == l).unwrap_or(usize::MAX));
    let group = |name: &str, pick: &dyn Fn(&TaskKey) -> bool, tally: Option<&Tally>| {
        let mut e = tally.map(Tally::entry).unwrap_or_else(|| Tally::default().entry());
        e.macro_accuracy = macro_of(&mut tasks.iter().filter(|t| pick(t)).map(|t| t.0.as_str()));
        (name.to_string(), e)
    };
    let by_dimension = Breakdown(dims.iter().map(|d| group(d, &|t| t.1 == *d, per_dim.get(d))).collect());
    let by_level = Breakdown(levels.iter().map(|l| group(l, &|t| t.2.as_deref() == Some(*l), per_level.get(l))).collect());
    let mut overall_entry = overall.entry();
    overall_entry.macro_accuracy = macro_of(&mut tasks.iter().map(|t| t.0.as_str()));
    Results {
        benchmark: bench.name().to_string(),
        title: bench.title().to_string(),
        run: String::new(),
        manifest: String::new(),
        questions: items.len(),
        predicted: 0,
        missing: 0,
        unmatched: 0,
        skipped_rows: 0,
        overall: overall_entry,
        by_task,
        by_dimension,
        by_level,
        extraction,
        left_out: Vec::new(),
    }
}
