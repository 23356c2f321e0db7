//! The demo's report: `summary.json`, `summary.md` (the paper's table, 95% intervals, the
//! differences between the models and whether the claims hold) and `summary.png`.
//!
//! `summary.json` is a file contract:
//! `{"models": {NAME: {"overall": C, "tasks": {TASK: C}, "dimensions": {"spatial"|"self": C}}},
//! "difference": {"self"|"spatial": D, "self_vs_control": D, "self_control_vs_visual": D}}` with
//! `C = {"accuracy", "n", "ci95": [lo, hi]}`, `D = {"mean", "ci95": [lo, hi]}`, accuracies as
//! fractions and TASK the SIS-Bench task names. In "difference", a dimension's key holds the
//! motion-aware model's accuracy minus the visual-only model's over the same questions;
//! "self_vs_control" the motion-aware model's minus the control's on the self dimension (the
//! comparison that isolates motion: same connector, capacity and training, zero flow); and
//! "self_control_vs_visual" the control's minus the visual-only model's there.
//!
//! Differences are paired by question and their intervals resample clips, not questions: the
//! questions asked about one clip share what a model makes of that clip, so they are not
//! independent ([`cluster_paired_bootstrap95`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use motionvl_eval::metrics::Entry;
use motionvl_eval::report::compare_chart::{self, Column, Series};
use motionvl_eval::results::Results;
use motionvl_eval::stats::{cluster_paired_bootstrap95, wilson95};
use serde::Serialize;

use crate::{DemoError, RunsMismatch};

/// The model whose gain is measured, the baseline it is measured against, and the control.
pub const VISUAL: &str = "visual-only";
pub const MOTION: &str = "motion-aware";
pub const CONTROL: &str = "motion-control";

pub const JSON_FILE: &str = "summary.json";
pub const MARKDOWN_FILE: &str = "summary.md";
pub const CHART_FILE: &str = "summary.png";

/// An accuracy with its Wilson 95% interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Accuracy {
    pub accuracy: f64,
    pub n: usize,
    pub ci95: [f64; 2],
}

impl Accuracy {
    fn of(correct: usize, n: usize) -> Self {
        Self { accuracy: if n == 0 { 0.0 } else { correct as f64 / n as f64 }, n, ci95: wilson95(correct, n) }
    }

    fn entry(e: &Entry) -> Self {
        Self::of(e.correct, e.n)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ModelSummary {
    pub overall: Accuracy,
    pub tasks: BTreeMap<String, Accuracy>,
    pub dimensions: BTreeMap<String, Accuracy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct Difference {
    pub mean: f64,
    pub ci95: [f64; 2],
}

/// The differences of `summary.json` (module docs).
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Differences {
    /// Motion-aware − visual-only, by dimension (`self`, `spatial`).
    #[serde(flatten)]
    pub motion_vs_visual: BTreeMap<String, Difference>,
    /// Motion-aware − motion-control on the self dimension.
    pub self_vs_control: Difference,
    /// Motion-control − visual-only on the self dimension.
    pub self_control_vs_visual: Difference,
}

/// `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct SummaryJson {
    pub models: BTreeMap<String, ModelSummary>,
    pub difference: Differences,
}

/// The clip each question is asked about, by question id: the unit the intervals resample.
pub type Clips = HashMap<String, String>;

/// One evaluated model: its scores and the folder they were read from.
#[derive(Debug, Clone)]
pub struct Evaluated {
    pub name: String,
    pub results: Results,
    pub eval_dir: PathBuf,
}

/// What stage 0 measured: the loss per answer token on the held-out worlds' pretraining set
/// (descriptions and spatial questions) of the pretrained model and of the same pretraining
/// with the vision tower left random.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TowerCheck {
    pub pretrained: f64,
    pub random_tower: f64,
}

/// The report, ready to be written.
pub struct Summary {
    pub json: SummaryJson,
    pub markdown: String,
    pub png: Vec<u8>,
}

/// Builds the report of `runs` (which must hold [`VISUAL`], [`MOTION`] and [`CONTROL`]);
/// `clips` names the clip of every question they answered.
pub fn summarise(runs: &[Evaluated], clips: &Clips, tower: Option<TowerCheck>, resamples: usize, seed: u64) -> Result<Summary, DemoError> {
    let find = |name: &str| runs.iter().find(|r| r.name == name).ok_or_else(|| DemoError::Runs(RunsMismatch::MissingRun(name.to_owned())));
    let (visual, motion, control) = (find(VISUAL)?, find(MOTION)?, find(CONTROL)?);
    let models = runs.iter().map(|r| (r.name.clone(), model_summary(&r.results))).collect();
    let paired = |a: &Evaluated, b: &Evaluated, dim: &str| paired(a, b, dim, clips, resamples, seed);
    let mut motion_vs_visual = BTreeMap::new();
    let mut columns = DifferenceColumns::default();
    for (dim, _) in visual.results.by_dimension.iter() {
        motion_vs_visual.insert(dim.clone(), paired(visual, motion, dim)?);
        columns.vs_control.insert(dim.clone(), paired(control, motion, dim)?);
        columns.control_vs_visual.insert(dim.clone(), paired(visual, control, dim)?);
    }
    let self_of = |d: &BTreeMap<String, Difference>| d.get("self").copied().ok_or_else(|| DemoError::Runs(RunsMismatch::NoDimension("self")));
    let difference = Differences {
        self_vs_control: self_of(&columns.vs_control)?,
        self_control_vs_visual: self_of(&columns.control_vs_visual)?,
        motion_vs_visual,
    };
    let json = SummaryJson { models, difference };
    let markdown = markdown(runs, &json, &columns, tower);
    let png = chart(runs, &json)?;
    Ok(Summary { json, markdown, png })
}

impl Summary {
    /// Writes the three files into `dir`, each atomically; returns their paths.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, DemoError> {
        let json = serde_json::to_string_pretty(&self.json)?;
        [(JSON_FILE, json.into_bytes()), (MARKDOWN_FILE, self.markdown.clone().into_bytes()), (CHART_FILE, self.png.clone())]
            .into_iter()
            .map(|(name, bytes)| {
                let path = dir.join(name);
                motionvl_train::checkpoint::write_atomic(&path, &bytes)?;
                Ok(path)
            })
            .collect()
    }
}

fn model_summary(r: &Results) -> ModelSummary {
    ModelSummary {
        overall: Accuracy::entry(&r.overall),
        tasks: r.by_task.iter().map(|(t, e)| (t.clone(), Accuracy::entry(e))).collect(),
        dimensions: r.by_dimension.iter().map(|(d, e)| (d.clone(), Accuracy::entry(e))).collect(),
    }
}

/// Per-question scores of a run (`scored.jsonl`): question id, task, score.
fn scores(run: &Evaluated) -> Result<Vec<(String, String, f64)>, DemoError> {
    let path = run.eval_dir.join(motionvl_eval::report::SCORED_FILE);
    let text = std::fs::read_to_string(&path).map_err(|e| DemoError::Scores { path: path.clone(), line: None, problem: e.to_string() })?;
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| DemoError::Scores { path: path.clone(), line: Some(i + 1), problem: e.to_string() })?;
            match (v["question_id"].as_str(), v["task"].as_str(), v["value"].as_f64()) {
                (Some(id), Some(task), Some(score)) => Ok((id.to_owned(), task.to_owned(), score)),
                _ => Err(DemoError::Scores { path: path.clone(), line: Some(i + 1), problem: "no question_id, task and value".into() }),
            }
        })
        .collect()
}

/// The differences against the control the Markdown prints for every dimension.
#[derive(Default)]
struct DifferenceColumns {
    /// Motion-aware − motion-control.
    vs_control: BTreeMap<String, Difference>,
    /// Motion-control − visual-only.
    control_vs_visual: BTreeMap<String, Difference>,
}

/// `b − a` over the questions of dimension `dim`, paired by question, its interval resampling
/// the questions' clips.
fn paired(a: &Evaluated, b: &Evaluated, dim: &str, clips: &Clips, resamples: usize, seed: u64) -> Result<Difference, DemoError> {
    let tasks: Vec<&str> = a.results.by_task.iter().filter(|(_, e)| e.dimension.as_deref() == Some(dim)).map(|(t, _)| t.as_str()).collect();
    let theirs: HashMap<String, f64> = scores(b)?.into_iter().map(|(id, _, v)| (id, v)).collect();
    let mut pairs: Vec<(String, f64, f64)> = Vec::new();
    for (id, task, score) in scores(a)?.into_iter().filter(|(_, t, _)| tasks.contains(&t.as_str())) {
        let other = theirs.get(&id).ok_or_else(|| {
            DemoError::Runs(RunsMismatch::DifferentQuestions {
                answered: a.name.clone(),
                other: b.name.clone(),
                question: id.clone(),
                task: task.clone(),
            })
        })?;
        pairs.push((id, score, *other));
    }
    pairs.sort_by(|x, y| x.0.cmp(&y.0));
    let xs: Vec<f64> = pairs.iter().map(|p| p.1).collect();
    let ys: Vec<f64> = pairs.iter().map(|p| p.2).collect();
    let of: Vec<&str> = pairs
        .iter()
        .map(|(id, _, _)| {
            clips.get(id).map(String::as_str).ok_or_else(|| DemoError::Runs(RunsMismatch::UnknownClip { run: a.name.clone(), question: id.clone() }))
        })
        .collect::<Result<_, _>>()?;
    let (mean, ci95) =
        cluster_paired_bootstrap95(&xs, &ys, &of, resamples, seed).map_err(|source| DemoError::Bootstrap { dimension: dim.to_owned(), source })?;
    Ok(Difference { mean, ci95 })
}

/// Spatial-perception questions (the tasks of that dimension and level) pooled.
fn pooled(r: &Results, dim: &str, level: &str) -> Accuracy {
    let entries = r.by_task.iter().filter(|(_, e)| e.dimension.as_deref() == Some(dim) && e.level.as_deref() == Some(level));
    let (correct, n) = entries.fold((0, 0), |(c, n), (_, e)| (c + e.correct, n + e.n));
    Accuracy::of(correct, n)
}

fn pct(a: &Accuracy) -> String {
    format!("{:.1} [{:.1}, {:.1}]", 100.0 * a.accuracy, 100.0 * a.ci95[0], 100.0 * a.ci95[1])
}

fn points(d: &Difference) -> String {
    format!("{:+.1} [{:+.1}, {:+.1}]", 100.0 * d.mean, 100.0 * d.ci95[0], 100.0 * d.ci95[1])
}

fn markdown(runs: &[Evaluated], json: &SummaryJson, columns: &DifferenceColumns, tower: Option<TowerCheck>) -> String {
    let results: Vec<&Results> = runs.iter().map(|r| &r.results).collect();
    let mut out = String::from("# The demo: visual-only vs motion-aware vs the motion control\n\n");
    out += &motionvl_eval::report::table2(&results);
    let _ = writeln!(out, "\n## 95% intervals (Wilson), accuracy in %\n");
    let _ = writeln!(out, "| | n | {} |", runs.iter().map(|r| r.name.as_str()).collect::<Vec<_>>().join(" | "));
    let _ = writeln!(out, "|---|---|{}", "---|".repeat(runs.len()));
    let row = |label: &str, get: &dyn Fn(&Evaluated) -> Option<Accuracy>| -> String {
        let cells: Vec<Option<Accuracy>> = runs.iter().map(get).collect();
        let n = cells.iter().flatten().map(|a| a.n).next().unwrap_or(0);
        let text: Vec<String> = cells.iter().map(|c| c.as_ref().map_or("–".into(), pct)).collect();
        format!("| {label} | {n} | {} |\n", text.join(" | "))
    };
    if let Some(first) = runs.first() {
        for (task, _) in first.results.by_task.iter() {
            out += &row(task, &|r| json.models.get(&r.name).and_then(|m| m.tasks.get(task)).copied());
        }
        for (dim, _) in first.results.by_dimension.iter() {
            for (level, _) in first.results.by_level.iter() {
                out += &row(&format!("*{dim} {level}*"), &|r| Some(pooled(&r.results, dim, level)).filter(|a| a.n > 0));
            }
            out += &row(&format!("**{dim}**"), &|r| json.models.get(&r.name).and_then(|m| m.dimensions.get(dim)).copied());
        }
        out += &row("**Overall**", &|r| json.models.get(&r.name).map(|m| m.overall));
    }
    let _ = writeln!(out, "\n## Differences over the same questions (percentage points; paired bootstrap resampling clips)\n");
    let _ = writeln!(out, "| dimension | {MOTION} − {VISUAL} | {MOTION} − {CONTROL} | {CONTROL} − {VISUAL} |");
    let _ = writeln!(out, "|---|---|---|---|");
    for (dim, d) in &json.difference.motion_vs_visual {
        let cell = |m: &BTreeMap<String, Difference>| m.get(dim).map_or("–".into(), points);
        let _ = writeln!(out, "| {dim} | {} | {} | {} |", points(d), cell(&columns.vs_control), cell(&columns.control_vs_visual));
    }
    let _ = writeln!(out, "\n## The claims, checked\n");
    for (claim, holds) in claims(runs, json) {
        let _ = writeln!(out, "- {} {claim}", if holds { "✅" } else { "❌" });
    }
    if let Some(t) = tower {
        let _ = writeln!(
            out,
            "\nStage 0 on the held-out worlds' descriptions and spatial questions: loss per answer token {:.3} with the pretrained tower, {:.3} with the same pretraining but the tower left random.",
            t.pretrained, t.random_tower
        );
    }
    out
}

/// The demo's claims and whether the numbers bear them out: the visual-only model sees the
/// scene; motion helps self-awareness; and the gain is motion, not capacity — the motion-aware
/// model beats the control, which has the same connector and training but zero flow, and the
/// control alone does not move from the visual-only model.
pub fn claims(runs: &[Evaluated], json: &SummaryJson) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    if let Some(visual) = runs.iter().find(|r| r.name == VISUAL) {
        let sp = pooled(&visual.results, "spatial", "perception");
        out.push((format!("{VISUAL} is above chance on spatial perception: {} excludes 25%", pct(&sp)), sp.ci95[0] > 0.25));
    }
    if let Some(d) = json.difference.motion_vs_visual.get("self") {
        out.push((format!("{MOTION} − {VISUAL} on the self dimension: {} lies above 0", points(d)), d.ci95[0] > 0.0));
    }
    let d = &json.difference.self_vs_control;
    out.push((format!("{MOTION} − {CONTROL} on the self dimension: {} lies above 0 (the gain is motion, not capacity)", points(d)), d.ci95[0] > 0.0));
    let d = &json.difference.self_control_vs_visual;
    out.push((
        format!("{CONTROL} − {VISUAL} on the self dimension: {} contains 0 (the connector without motion adds nothing)", points(d)),
        d.ci95[0] <= 0.0 && 0.0 <= d.ci95[1],
    ));
    out
}

/// Picks one column's accuracy out of a model's summary.
type Pick = Box<dyn Fn(&ModelSummary) -> Option<Accuracy>>;

fn chart(runs: &[Evaluated], json: &SummaryJson) -> Result<Vec<u8>, DemoError> {
    let Some(first) = runs.first() else { return Err(DemoError::Runs(RunsMismatch::NoRuns)) };
    let mut columns: Vec<(Column, Pick)> = Vec::new();
    for (task, e) in first.results.by_task.iter() {
        let label = motionvl_eval::report::short_label(&first.results.benchmark, task);
        let key = task.clone();
        columns.push((Column { label, random: e.random }, Box::new(move |m| m.tasks.get(&key).copied())));
    }
    for (dim, e) in first.results.by_dimension.iter() {
        let key = dim.clone();
        columns.push((Column { label: dim.clone(), random: e.random }, Box::new(move |m| m.dimensions.get(&key).copied())));
    }
    columns.push((Column { label: "All".into(), random: first.results.overall.random }, Box::new(|m| Some(m.overall))));
    let series = runs
        .iter()
        .map(|r| {
            let m = json.models.get(&r.name).ok_or_else(|| DemoError::Runs(RunsMismatch::NoSummary(r.name.clone())))?;
            let bars = columns.iter().map(|(_, get)| get(m).map_or((0.0, [0.0, 0.0]), |a| (a.accuracy, a.ci95))).collect();
            Ok(Series { name: r.name.clone(), bars })
        })
        .collect::<Result<Vec<_>, DemoError>>()?;
    let cols: Vec<Column> = columns.into_iter().map(|(c, _)| c).collect();
    compare_chart::render_png("SIS-Bench on held-out worlds", &cols, &series).map_err(DemoError::Chart)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(self_vs_control: [f64; 2], self_control_vs_visual: [f64; 2]) -> SummaryJson {
        let d = |ci95: [f64; 2]| Difference { mean: (ci95[0] + ci95[1]) / 2.0, ci95 };
        SummaryJson {
            models: BTreeMap::new(),
            difference: Differences {
                motion_vs_visual: BTreeMap::from([("self".to_string(), d([0.04, 0.12]))]),
                self_vs_control: d(self_vs_control),
                self_control_vs_visual: d(self_control_vs_visual),
            },
        }
    }

    #[test]
    fn motion_beats_the_control_only_when_the_whole_interval_is_above_zero() {
        let verdicts = |j: &SummaryJson| claims(&[], j).into_iter().map(|(_, holds)| holds).collect::<Vec<_>>();
        // motion − visual, motion − control, control − visual.
        assert_eq!(verdicts(&json([0.05, 0.14], [-0.04, 0.02])), [true, true, true]);
        assert_eq!(verdicts(&json([-0.01, 0.08], [-0.04, 0.02])), [true, false, true]);
        assert_eq!(verdicts(&json([0.05, 0.14], [0.01, 0.06])), [true, true, false]);
        let text = claims(&[], &json([0.055, 0.137], [-0.04, 0.02]))[1].0.clone();
        assert_eq!(text, "motion-aware − motion-control on the self dimension: +9.6 [+5.5, +13.7] lies above 0 (the gain is motion, not capacity)");
    }

    #[test]
    fn summary_json_keeps_each_dimension_under_its_own_key() {
        let value = serde_json::to_value(json([0.05, 0.14], [-0.04, 0.02])).unwrap_or_default();
        let difference = value["difference"].as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
        assert_eq!(difference, ["self", "self_control_vs_visual", "self_vs_control"]);
        assert_eq!(value["difference"]["self"]["ci95"], serde_json::json!([0.04, 0.12]));
        assert_eq!(value["difference"]["self_vs_control"]["ci95"], serde_json::json!([0.05, 0.14]));
        let back: SummaryJson = serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, json([0.05, 0.14], [-0.04, 0.02]));
    }
}
