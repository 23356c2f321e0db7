//! Report files of a run folder:
//!
//! | file | what |
//! |---|---|
//! | `results.json` | the scores ([`crate::results::Results`], the file contract) |
//! | `by_task.csv`, `by_dimension.csv`, `by_level.csv` | one row per entry of each breakdown (`by_level.csv` only for benchmarks with levels) |
//! | `scored.jsonl` | every question: ground truth, raw prediction, extracted answer, rule, score |
//! | `results.md` | the paper's Table 2 layout (see [`table2`]) |
//! | `chart.png` | per-task bars with the random baselines (see [`chart`]) |
//!
//! [`compare_chart`] draws several models side by side with their confidence intervals.
//!
//! Files are written to a temporary name and renamed, so a reader never sees half a report.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::bench;
use crate::error::{EvalError, Result};
use crate::metrics::Entry;
use crate::results::{Breakdown, RESULTS_FILE, Results, Scored};

pub mod chart;
pub mod compare_chart;

/// Names of the report files.
pub const SCORED_FILE: &str = "scored.jsonl";
pub const MARKDOWN_FILE: &str = "results.md";
pub const CHART_FILE: &str = "chart.png";

/// Writes every report file of a run into `dir`; returns their paths.
pub fn write_reports(dir: &Path, results: &Results, scored: &[Scored]) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(EvalError::io("create", dir))?;
    let mut written = Vec::new();
    let json = serde_json::to_string_pretty(results).map_err(|e| EvalError::BadFile { path: dir.join(RESULTS_FILE), message: e.to_string() })?;
    written.push(write_atomic(&dir.join(RESULTS_FILE), json.as_bytes())?);
    let mut lines = String::new();
    for s in scored {
        let line = serde_json::to_string(s).map_err(|e| EvalError::BadFile { path: dir.join(SCORED_FILE), message: e.to_string() })?;
        lines.push_str(&line);
        lines.push('\n');
    }
    written.push(write_atomic(&dir.join(SCORED_FILE), lines.as_bytes())?);
    for (name, breakdown, with_taxonomy) in
        [("by_task.csv", &results.by_task, true), ("by_dimension.csv", &results.by_dimension, false), ("by_level.csv", &results.by_level, false)]
    {
        if breakdown.is_empty() && name == "by_level.csv" {
            continue;
        }
        let path = dir.join(name);
        let csv = breakdown_csv(breakdown, with_taxonomy, &results.overall).map_err(|message| EvalError::BadFile { path: path.clone(), message })?;
        written.push(write_atomic(&path, &csv)?);
    }
    written.push(write_atomic(&dir.join(MARKDOWN_FILE), table2(&[results]).as_bytes())?);
    let chart_path = dir.join(CHART_FILE);
    let png = chart::render_png(results).map_err(|message| EvalError::Chart { path: chart_path.clone(), message })?;
    written.push(write_atomic(&chart_path, &png)?);
    Ok(written)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    motionvl_data::files::write_atomic(path, bytes)?;
    Ok(path.to_path_buf())
}

/// A breakdown as CSV, with an `overall` row last. Side-metric columns are the union over the
/// rows, empty where a row lacks one.
fn breakdown_csv(breakdown: &Breakdown, with_taxonomy: bool, overall: &Entry) -> std::result::Result<Vec<u8>, String> {
    let extras: BTreeSet<&str> = breakdown.iter().flat_map(|(_, e)| e.extras.keys().map(String::as_str)).collect();
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header = vec!["name"];
    if with_taxonomy {
        header.extend(["dimension", "level"]);
    }
    header.extend(["accuracy", "n", "correct", "unanswered", "random", "metric", "macro_accuracy"]);
    header.extend(extras.iter().copied());
    w.write_record(&header).map_err(|e| e.to_string())?;
    let opt = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
    let rows = breakdown.iter().map(|(n, e)| (n.as_str(), e)).chain(std::iter::once(("overall", overall)));
    for (name, e) in rows {
        let mut row = vec![name.to_string()];
        if with_taxonomy {
            row.push(e.dimension.clone().unwrap_or_default());
            row.push(e.level.clone().unwrap_or_default());
        }
        row.extend([
            format!("{:.6}", e.accuracy),
            e.n.to_string(),
            e.correct.to_string(),
            e.unanswered.to_string(),
            opt(e.random),
            e.metric.clone(),
            opt(e.macro_accuracy),
        ]);
        row.extend(extras.iter().map(|k| opt(e.extras.get(*k).copied())));
        w.write_record(&row).map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// Percent with one decimal, as papers print accuracies.
fn pct(x: f64) -> String {
    format!("{:.1}", 100.0 * x)
}

/// The column heading of a task: the benchmark's short name, else the task's initials.
pub fn short_label(benchmark: &str, task: &str) -> String {
    if let Ok(b) = bench::find(benchmark)
        && let Some(col) = b.layout().into_iter().find(|c| c.task == task)
    {
        return col.short.to_string();
    }
    let initials: String = task.split(|c: char| !c.is_alphanumeric()).filter_map(|w| w.chars().next()).collect();
    if initials.len() >= 2 { initials.to_uppercase() } else { task.chars().take(6).collect() }
}

/// One column of a Table 2-style table.
enum Col<'a> {
    Task {
        name: &'a str,
        dimension: &'a str,
        level: Option<&'a str>,
    },
    /// The dimension's mean task accuracy.
    DimAvg(&'a str),
    Overall,
}

/// Markdown in the layout of the SIS-Motion paper's Table 2: tasks as columns, grouped by
/// dimension (first row) and level (second row), an "Avg." column closing each dimension of
/// several tasks (the mean of its task accuracies), then "Overall" (over all questions); one row
/// per run and a "Random" row with the option-count baselines. Numbers are percentages. Task
/// columns come from the first run; a run lacking a task shows "–".
pub fn table2(runs: &[&Results]) -> String {
    let Some(first) = runs.first() else {
        return String::new();
    };
    let mut cols: Vec<Col<'_>> = Vec::new();
    let dims: Vec<&str> = first.by_dimension.iter().map(|(d, _)| d.as_str()).collect();
    for dim in &dims {
        let tasks: Vec<(&str, &Entry)> =
            first.by_task.iter().filter(|(_, e)| e.dimension.as_deref() == Some(*dim)).map(|(n, e)| (n.as_str(), e)).collect();
        for (name, e) in &tasks {
            cols.push(Col::Task { name, dimension: dim, level: e.level.as_deref() });
        }
        if tasks.len() > 1 && dims.len() > 1 {
            cols.push(Col::DimAvg(dim));
        }
    }
    cols.push(Col::Overall);
    let has_levels = first.by_task.iter().any(|(_, e)| e.level.is_some());

    let mut out = String::new();
    let _ = writeln!(out, "## {} — {}\n", first.title, runs.iter().map(|r| r.run.as_str()).collect::<Vec<_>>().join(" vs "));
    // Row 1 (the Markdown header): dimension names over their first column.
    let mut row = vec![String::new()];
    let mut last_dim = None;
    for c in &cols {
        let dim = match c {
            Col::Task { dimension, .. } => Some(*dimension),
            Col::DimAvg(d) => Some(*d),
            Col::Overall => None,
        };
        row.push(match dim {
            Some(d) if last_dim != Some(d) => capitalise(d),
            _ => String::new(),
        });
        last_dim = dim;
    }
    push_row(&mut out, &row);
    push_row(&mut out, &vec!["---".to_string(); row.len()]);
    // Row 2: level names over their first task.
    if has_levels {
        let mut row = vec![String::new()];
        let mut last = None;
        for c in &cols {
            let key = match c {
                Col::Task { dimension, level, .. } => level.map(|l| (*dimension, l)),
                _ => None,
            };
            row.push(match key {
                Some(k) if last != Some(k) => format!("*{}*", capitalise(k.1)),
                _ => String::new(),
            });
            last = key;
        }
        push_row(&mut out, &row);
    }
    // Row 3: task headings.
    let mut row = vec!["**Model**".to_string()];
    for c in &cols {
        row.push(match c {
            Col::Task { name, .. } => format!("**{}**", short_label(&first.benchmark, name)),
            Col::DimAvg(_) => "**Avg.**".to_string(),
            Col::Overall => "**Overall**".to_string(),
        });
    }
    push_row(&mut out, &row);
    for run in runs {
        let mut row = vec![run.run.clone()];
        for c in &cols {
            row.push(match c {
                Col::Task { name, .. } => run.by_task.get(name).map_or("–".into(), |e| pct(e.accuracy)),
                Col::DimAvg(d) => run.by_dimension.get(d).and_then(|e| e.macro_accuracy).map_or("–".into(), pct),
                Col::Overall => pct(run.overall.accuracy),
            });
        }
        push_row(&mut out, &row);
    }
    if first.by_task.iter().any(|(_, e)| e.random.is_some()) {
        let mut row = vec!["Random".to_string()];
        for c in &cols {
            row.push(match c {
                Col::Task { name, .. } => first.by_task.get(name).and_then(|e| e.random).map_or("–".into(), pct),
                Col::DimAvg(d) => {
                    let r: Option<Vec<f64>> =
                        first.by_task.iter().filter(|(_, e)| e.dimension.as_deref() == Some(*d)).map(|(_, e)| e.random).collect();
                    r.filter(|v| !v.is_empty()).map_or("–".into(), |v| pct(v.iter().sum::<f64>() / v.len() as f64))
                }
                Col::Overall => first.overall.random.map_or("–".into(), pct),
            });
        }
        push_row(&mut out, &row);
    }
    let _ = writeln!(out);
    let legend: Vec<String> = first
        .by_task
        .iter()
        .map(|(name, e)| {
            let metric = if e.metric == "accuracy" { String::new() } else { format!(", {}", e.metric) };
            format!("{} = {} (n={}{metric})", short_label(&first.benchmark, name), name, e.n)
        })
        .collect();
    let _ = writeln!(out, "{}.\n", legend.join("; "));
    let _ = writeln!(
        out,
        "Accuracy in %. Avg. = mean of the dimension's task accuracies; Overall = over all {} questions{}.",
        first.questions,
        if first.missing > 0 { format!(" ({} without a prediction, scored wrong)", first.missing) } else { String::new() }
    );
    out
}

fn push_row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// `evaluate compare`: per-task, per-dimension, per-level and overall accuracy of two runs and
/// B − A in points, as an aligned text table.
pub fn compare(a: &Results, b: &Results) -> String {
    let mut rows: Vec<[String; 4]> = Vec::new();
    let fmt = |e: Option<&Entry>| e.map_or("–".to_string(), |e| format!("{:.1}", 100.0 * e.accuracy));
    let delta = |x: Option<&Entry>, y: Option<&Entry>| match (x, y) {
        (Some(x), Some(y)) => format!("{:+.1}", 100.0 * (y.accuracy - x.accuracy)),
        _ => "–".to_string(),
    };
    let mut section = |title: &str, ba: &Breakdown, bb: &Breakdown| {
        let mut names: Vec<&str> = ba.iter().map(|(n, _)| n.as_str()).collect();
        for (n, _) in bb.iter() {
            if !names.contains(&n.as_str()) {
                names.push(n);
            }
        }
        if names.is_empty() {
            return;
        }
        rows.push([title.to_string(), String::new(), String::new(), String::new()]);
        for n in names {
            let (x, y) = (ba.get(n), bb.get(n));
            rows.push([format!("  {n}"), fmt(x), fmt(y), delta(x, y)]);
        }
    };
    section("task", &a.by_task, &b.by_task);
    section("dimension", &a.by_dimension, &b.by_dimension);
    section("level", &a.by_level, &b.by_level);
    rows.push(["overall".to_string(), fmt(Some(&a.overall)), fmt(Some(&b.overall)), delta(Some(&a.overall), Some(&b.overall))]);
    let header = ["".to_string(), format!("A: {}", a.run), format!("B: {}", b.run), "B − A".to_string()];
    let widths: Vec<usize> = (0..4).map(|i| rows.iter().chain(std::iter::once(&header)).map(|r| r[i].chars().count()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    if a.benchmark != b.benchmark {
        let _ = writeln!(out, "note: A is {} and B is {}", a.title, b.title);
    }
    let _ = writeln!(out, "accuracy in %, {} ({} questions) vs {} ({} questions)", a.title, a.questions, b.title, b.questions);
    for r in std::iter::once(&header).chain(rows.iter()) {
        let line =
            format!("{:<w0$}  {:>w1$}  {:>w2$}  {:>w3$}", r[0], r[1], r[2], r[3], w0 = widths[0], w1 = widths[1], w2 = widths[2], w3 = widths[3]);
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out
}
