//! `evaluate run`: ask every question of a manifest, append each answer to `predictions.jsonl`
//! as it comes, then score and write the reports.
//!
//! A run folder holds `run.json` (the settings that decide the predictions: benchmark,
//! manifest, checkpoint, adapter, generation length and protocol), `predictions.jsonl` and the
//! report files. An interrupted run continues with `--resume`: the questions already answered
//! are skipped and the rest are appended; resuming with settings that would change the answers
//! is refused, so one file never mixes two models. A finished run resumed again only re-scores.

use motionvl_models::device::DTypeName;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc::sync_channel;

use motionvl_data::samples::{ReadOptions, RowError};
use motionvl_data::stop::StopFlag;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::bench::{self, Bench};
use crate::config::{AnswerMode, Continuation, ExtractMode, Normalisation, OfficialConfig, ProtocolConfig, ProtocolKind, RunConfig};
use crate::error::{Bookkeeping, EvalError, Result};
use crate::infer::{Generate, Prepare, load_qwen};
use crate::item::Item;
use crate::metrics::Tally;
use crate::official::{Admission, LeftOut, OfficialRow, OfficialRows, UavAccuracy, leave_out};
use crate::predictions::{PREDICTIONS_FILE, PredictionWriter, by_id, read_predictions};
use crate::report::write_reports;
use crate::results::{Results, ScoreInput, score_all, score_one};

/// File name of the run's settings.
pub const RUN_FILE: &str = "run.json";

/// The settings a run's predictions depend on; a resumed run must match them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub bench: String,
    pub manifest: PathBuf,
    /// SHA-256 of the manifest's bytes: a file edited in place is another benchmark.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_sha256: Option<String>,
    pub checkpoint: String,
    pub adapter: Option<PathBuf>,
    pub limit: Option<usize>,
    pub max_new_tokens: usize,
    pub protocol: ProtocolConfig,
    /// `--motion` as given (`None`: the checkpoint's own estimator, if any).
    #[serde(default)]
    pub motion: Option<String>,
    /// The dtype the model runs in (the default resolved: f32 on the CPU, bf16 on CUDA).
    #[serde(default)]
    pub dtype: Option<String>,
    #[serde(default)]
    pub device: Option<String>,
    /// Flow cache use of the last invocation (not compared on resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flow_cache: Option<FlowCacheCounts>,
    /// SHA-256 of the bytes behind each part, by role (`checkpoint`, `adapter`, `motion`,
    /// `flow_weights`, `cvaa`): a retrained adapter or connector under the same path is another model.
    #[serde(default)]
    pub weights: BTreeMap<String, String>,
    /// The CVAA prior's checkpoint, template and windows, when questions carry one.
    #[serde(default)]
    pub cvaa: Option<crate::prior::CvaaPriorConfig>,
    /// How multiple-choice questions were answered, when by likelihood (`None`: generated, as
    /// in records written before the mode existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<LikelihoodRecord>,
    /// The protocol (`None` in records written before the choice: the paper's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_kind: Option<ProtocolKind>,
    /// The official protocol's settings, when it or the vLLM baseline is the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub official: Option<OfficialConfig>,
    /// `[generation] repetition_penalty` as given (`None`: the protocol's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repetition_penalty: Option<f64>,
}

/// The settings of `[generation] answer = "likelihood"` that decide its answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LikelihoodRecord {
    pub continuation: Continuation,
    pub normalisation: Normalisation,
}

impl RunRecord {
    fn of(config: &RunConfig, bench: &dyn Bench) -> Self {
        RunRecord {
            bench: bench.name().to_string(),
            manifest: std::fs::canonicalize(&config.manifest).unwrap_or_else(|_| config.manifest.clone()),
            manifest_sha256: motionvl_data::digest::sha256_contents(&config.manifest).ok(),
            // A local folder by its absolute path, so a resume from another directory matches.
            checkpoint: match std::fs::canonicalize(&config.model.checkpoint) {
                Ok(p) if p.is_dir() => p.display().to_string(),
                _ => config.model.checkpoint.clone(),
            },
            adapter: config.model.adapter.as_ref().map(|a| std::fs::canonicalize(a).unwrap_or_else(|_| a.clone())),
            limit: config.limit,
            max_new_tokens: config.generation.max_new_tokens,
            protocol: config.protocol.clone(),
            motion: config.motion.estimator.map(|m| m.to_string()),
            dtype: Some(config.model.dtype.unwrap_or(if config.model.device.is_cpu() { DTypeName::F32 } else { DTypeName::Bf16 }).to_string()),
            device: Some(config.model.device.to_string()),
            weights: weight_digests(config),
            flow_cache: None,
            cvaa: config.cvaa.checkpoint.is_some().then(|| crate::prior::CvaaPriorConfig {
                checkpoint: config.cvaa.checkpoint.as_ref().map(|c| std::fs::canonicalize(c).unwrap_or_else(|_| c.clone())),
                ..config.cvaa.clone()
            }),
            likelihood: (config.generation.answer == AnswerMode::Likelihood).then_some(LikelihoodRecord {
                continuation: config.generation.likelihood_continuation,
                normalisation: config.generation.likelihood_normalisation,
            }),
            protocol_kind: Some(config.protocol_kind()),
            official: (config.protocol_kind() != ProtocolKind::Paper).then_some(config.official),
            repetition_penalty: config.generation.repetition_penalty,
        }
    }

    /// Names of the settings that differ.
    fn differences(&self, other: &RunRecord) -> Vec<&'static str> {
        let mut d = Vec::new();
        // Records written before a field existed leave it empty: nothing to compare there.
        let same_if_known = |a: &Option<String>, b: &Option<String>| a.is_none() || b.is_none() || a == b;
        let same_weights = self.weights.is_empty() || other.weights.is_empty() || self.weights == other.weights;
        let kind = |r: &RunRecord| r.protocol_kind.unwrap_or(ProtocolKind::Paper);
        let checks: [(&'static str, bool); 17] = [
            ("bench", self.bench == other.bench),
            ("manifest", self.manifest == other.manifest),
            ("manifest contents", same_if_known(&self.manifest_sha256, &other.manifest_sha256)),
            ("checkpoint", self.checkpoint == other.checkpoint),
            ("adapter", self.adapter == other.adapter),
            ("limit", self.limit == other.limit),
            ("max_new_tokens", self.max_new_tokens == other.max_new_tokens),
            ("protocol", self.protocol == other.protocol),
            ("motion", self.motion == other.motion),
            ("dtype", same_if_known(&self.dtype, &other.dtype)),
            ("device", same_if_known(&self.device, &other.device)),
            ("weights (model, adapter, motion branch or flow estimator files changed)", same_weights),
            ("cvaa", self.cvaa == other.cvaa),
            ("answer mode (generation.answer and its likelihood settings)", self.likelihood == other.likelihood),
            ("protocol_kind (--protocol)", kind(self) == kind(other)),
            ("official settings", self.official == other.official),
            ("repetition_penalty", self.repetition_penalty == other.repetition_penalty),
        ];
        for (name, same) in checks {
            if !same {
                d.push(name);
            }
        }
        d
    }
}

/// How a run's flows were obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowCacheCounts {
    pub hits: usize,
    pub computed: usize,
    pub repaired: usize,
}

/// Adds this invocation's flow cache counts to `run.json`.
fn record_flow_cache(out: &Path, counts: FlowCacheCounts) -> Result<()> {
    let path = out.join(RUN_FILE);
    let text = std::fs::read_to_string(&path).map_err(EvalError::io("read", &path))?;
    let mut record: RunRecord = serde_json::from_str(&text).map_err(|e| EvalError::BadFile { path: path.clone(), message: e.to_string() })?;
    record.flow_cache = Some(counts);
    write_record(&path, &record)
}

fn write_record(path: &Path, record: &RunRecord) -> Result<()> {
    Ok(motionvl_data::files::write_json_atomic(path, record)?)
}

/// Content digests of the files a run's answers depend on (see [`RunRecord::weights`]).
fn weight_digests(config: &RunConfig) -> BTreeMap<String, String> {
    use motionvl_data::digest::{sha256_file, sha256_files};
    let mut out = BTreeMap::new();
    let checkpoint = Path::new(&config.model.checkpoint);
    if checkpoint.is_dir() {
        let mut shards: Vec<PathBuf> = std::fs::read_dir(checkpoint)
            .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|x| x == "safetensors")).collect())
            .unwrap_or_default();
        shards.sort();
        if let Ok(d) = sha256_files(&shards) {
            out.insert("checkpoint".to_string(), d);
        }
    }
    let mut motion_dirs = vec![checkpoint.to_path_buf()];
    if let Some(adapter) = &config.model.adapter {
        for file in [adapter.join("adapter_model.safetensors"), adapter.join("adapter").join("adapter_model.safetensors")] {
            if let Ok(d) = sha256_file(&file) {
                out.insert("adapter".to_string(), d);
                break;
            }
        }
        motion_dirs.insert(0, adapter.clone());
        if let Some(parent) = adapter.parent() {
            motion_dirs.insert(1, parent.to_path_buf());
        }
    }
    if let Some(d) = motion_dirs.iter().find_map(|dir| sha256_file(&dir.join(motionvl_models::motion::MOTION_WEIGHTS_FILE)).ok()) {
        out.insert("motion".to_string(), d);
    }
    if let Some(d) = config.motion.weights.as_deref().and_then(|w| sha256_file(w).ok()) {
        out.insert("flow_weights".to_string(), d);
    }
    // A released SIS-Motion package carries its connector and MOFNet weights itself.
    if let Some(package) = config.model.adapter.as_deref().and_then(|a| motionvl_models::sis_package::SisPackage::detect(a).ok().flatten()) {
        if let Ok(d) = sha256_file(&package.connector_path()) {
            out.insert("motion".to_string(), d);
        }
        if let (None, Ok(d)) = (config.motion.weights.as_ref(), sha256_file(&package.videoflow_path())) {
            out.insert("flow_weights".to_string(), d);
        }
    }
    if let Some(d) = config.cvaa.checkpoint.as_deref().and_then(|c| sha256_file(&c.join(motionvl_models::cvaa::WEIGHTS_FILE)).ok()) {
        out.insert("cvaa".to_string(), d);
    }
    out
}

/// What a run did.
#[derive(Debug)]
pub struct RunSummary {
    pub results: Results,
    /// Questions answered in this invocation (not counting those resumed from the file).
    pub generated: usize,
    /// Questions that were already answered when the run started.
    pub resumed: usize,
    /// Manifest rows left out under `--skip-bad`.
    pub skipped_rows: Vec<RowError>,
    /// `(question id, why)` of questions whose media or prompt failed under `--skip-bad`.
    pub failed: Vec<(String, String)>,
    /// Questions the protocol left out (the official one's missing or too-short media).
    pub left_out: Vec<LeftOut>,
    /// Report files written.
    pub reports: Vec<PathBuf>,
}

/// Builds the predictor of a run, once it is known that something is left to ask.
pub type PredictorFactory<'a> = dyn FnMut(&'static dyn Bench) -> Result<(Box<dyn Prepare>, Box<dyn Generate>)> + 'a;

/// Runs an evaluation with the Qwen2.5-VL checkpoint of `config.model`.
pub fn run(config: &RunConfig, show_progress: bool) -> Result<RunSummary> {
    run_until(config, show_progress, &StopFlag::new())
}

/// [`run`], ending with [`EvalError::Stopped`] after the batch in flight once `stop` is
/// requested (a signal): what was answered is on disk, and `--resume` continues.
pub fn run_until(config: &RunConfig, show_progress: bool, stop: &StopFlag) -> Result<RunSummary> {
    run_with(config, show_progress, stop, &mut |bench| {
        let (p, g) = load_qwen(config, bench)?;
        Ok((Box::new(p), Box::new(g)))
    })
}

/// Runs an evaluation with any predictor (an API client, a test double, ...), stopping as
/// [`run_until`] does.
pub fn run_with(config: &RunConfig, show_progress: bool, stop: &StopFlag, factory: &mut PredictorFactory<'_>) -> Result<RunSummary> {
    config.validate()?;
    let bench = bench::find(&config.bench)?;
    let likelihood = config.generation.answer == AnswerMode::Likelihood;
    if likelihood {
        // A JSON benchmark is refused before its manifest is read.
        bench::check_rankable(bench, &[])?;
    }
    let admission = match config.protocol_kind() {
        ProtocolKind::Official => Some(Admission::MinFrames(config.official.min_frames)),
        ProtocolKind::VllmBaseline => Some(Admission::NonEmpty),
        ProtocolKind::Paper => None,
    };
    let opts = ReadOptions {
        media_root: config.media_root.clone(),
        // The released evaluators leave questions without media out instead (below).
        check_media: admission.is_none(),
        skip_bad: config.skip_bad,
    };
    let outcome = bench.read(&config.manifest, &opts)?;
    require_questions(&config.manifest, bench, outcome.items.len(), outcome.skipped.len())?;
    let mut items = outcome.items;
    if let Some(limit) = config.limit {
        items.truncate(limit);
    }
    let left_out = match admission {
        Some(admission) => official_questions(&mut items, admission)?,
        None => Vec::new(),
    };
    let rows = if config.extract_mode() == ExtractMode::Official { Some(official_rows(&config.manifest, &items)?) } else { None };
    if likelihood {
        bench::check_rankable(bench, &items)?;
    }

    let out = &config.out;
    let _lock = motionvl_data::run_dir::RunLock::acquire(out)?;
    let record = RunRecord::of(config, bench);
    check_record(out, &record)?;
    // The box (and its score) each question was prompted with, recorded beside its answer;
    // retrieved once the folder is this run's, so a refused run wastes no retrieval.
    let priors: HashMap<String, crate::prior::Prior> = crate::prior::add_priors(&mut items, &config.cvaa, &config.model.device.open()?, &|| {})?
        .into_iter()
        .map(|p| (p.question_id.clone(), p))
        .collect();
    let predictions_path = out.join(PREDICTIONS_FILE);
    let answered = std::fs::metadata(&predictions_path).is_ok_and(|m| m.len() > 0);
    if !answered && predictions_path.exists() {
        // Left empty by a run that failed before its first answer.
        std::fs::remove_file(&predictions_path).map_err(EvalError::io("remove", &predictions_path))?;
    }
    let (mut writer, existing) = if answered {
        if !config.resume {
            return Err(EvalError::NotResumed { out: out.to_path_buf() });
        }
        PredictionWriter::resume(&predictions_path)?
    } else {
        (PredictionWriter::create(&predictions_path)?, Vec::new())
    };

    let done: HashSet<&str> = existing.iter().map(|p| p.question_id.as_str()).collect();
    let pending: Vec<&Item> = items.iter().filter(|i| !done.contains(i.id.as_str())).collect();
    let resumed = items.len() - pending.len();

    // Running accuracy starts from the answers already on file.
    let mut tally = Tally::default();
    let existing_by_id = by_id(&existing);
    for item in &items {
        if let Some(text) = existing_by_id.get(item.id.as_str()) {
            tally.add(&score_one(bench, rows.as_ref(), item, text));
        }
    }
    let bar = motionvl_data::progress::bar(items.len() as u64, "questions", show_progress);
    bar.set_position(resumed as u64);
    bar.set_message(running_message(&tally));

    let mut failed = Vec::new();
    let mut generated = 0;
    if !pending.is_empty() {
        let (preparer, mut generator) = factory(bench)?;
        preparer.check_ready(&pending)?;
        let batch_size = config.generation.batch_size;
        let outcome = std::thread::scope(|scope| -> Result<()> {
            let (tx, rx) = sync_channel(1);
            let preparer = &*preparer;
            let chunks: Vec<&[&Item]> = pending.chunks(batch_size).collect();
            let producer_chunks = chunks.clone();
            scope.spawn(move || {
                for chunk in producer_chunks {
                    // The receiver is gone when the main loop stopped on an error.
                    if tx.send(preparer.prepare(chunk)).is_err() {
                        break;
                    }
                }
            });
            let mut asked = 0;
            for chunk in chunks {
                if stop.is_requested() {
                    return Err(EvalError::Stopped { answered: generated, remaining: pending.len() - asked, out: out.to_path_buf() });
                }
                asked += chunk.len();
                let batch = match rx.recv() {
                    Ok(batch) => batch?,
                    Err(_) => return Err(EvalError::Bookkeeping(Bookkeeping::PreparerStopped)),
                };
                let outputs = generator.answer(&batch)?;
                if outputs.len() != batch.questions.len() {
                    return Err(EvalError::Bookkeeping(Bookkeeping::OutputCount { outputs: outputs.len(), questions: batch.questions.len() }));
                }
                for (q, answer) in batch.questions.iter().zip(&outputs) {
                    let text = &answer.text;
                    let Some(item) = chunk.iter().find(|i| i.id == q.id) else {
                        return Err(EvalError::Bookkeeping(Bookkeeping::Unasked(q.id.clone())));
                    };
                    let mut extra = Map::new();
                    extra.insert("task".into(), Value::String(item.task.clone()));
                    if let Some(prior) = priors.get(&item.id) {
                        extra.insert("cvaa_box".into(), serde_json::json!(prior.bbox));
                        extra.insert("cvaa_score".into(), serde_json::json!(prior.score));
                    }
                    if let Some(scores) = &answer.option_scores {
                        let by_letter: Map<String, Value> = scores.iter().map(|(l, s)| (l.to_string(), serde_json::json!(s))).collect();
                        extra.insert("option_scores".into(), Value::Object(by_letter));
                    }
                    if let Some(ids) = &answer.output_ids {
                        extra.insert("output_ids".into(), serde_json::json!(ids));
                    }
                    writer.append(&q.id, text, &extra)?;
                    tally.add(&score_one(bench, rows.as_ref(), item, text));
                    generated += 1;
                }
                writer.sync()?;
                for (id, why) in &batch.failed {
                    bar.println(format!("skipped {id}: {why}"));
                }
                failed.extend(batch.failed.iter().cloned());
                bar.inc(chunk.len() as u64);
                bar.set_message(running_message(&tally));
            }
            Ok(())
        });
        bar.abandon();
        if let Some((hits, computed, repaired)) = preparer.flow_cache_counts() {
            record_flow_cache(out, FlowCacheCounts { hits, computed, repaired })?;
        }
        outcome?;
    } else {
        bar.finish();
    }

    let all = read_predictions(&predictions_path)?;
    let predictions = by_id(&all);
    let input = ScoreInput {
        bench,
        items: &items,
        predictions: &predictions,
        run: config.run_name(),
        manifest: &config.manifest,
        skipped_rows: outcome.skipped.len(),
        official: rows.as_ref(),
    };
    let (mut results, scored) = score_all(&input);
    results.left_out = left_out.clone();
    let mut reports = write_reports(out, &results, &scored)?;
    if let Some(rows) = &rows {
        reports.push(uav_accuracy(rows, &items, &scored).write(out)?);
    }
    Ok(RunSummary { results, generated, resumed, skipped_rows: outcome.skipped, failed, left_out, reports })
}

/// Leaves out of `items` the questions a released evaluator does not ask (missing media, and
/// what `admission` refuses), returning them with the reason.
fn official_questions(items: &mut Vec<Item>, admission: Admission) -> Result<Vec<LeftOut>> {
    use rayon::prelude::*;
    let reasons: Vec<Option<String>> = items.par_iter().map(|item| leave_out(item, admission)).collect::<Result<_>>()?;
    let mut left_out = Vec::new();
    let mut kept = Vec::with_capacity(items.len());
    for (item, reason) in items.drain(..).zip(reasons) {
        match reason {
            Some(reason) => left_out.push(LeftOut { question_id: item.id, reason }),
            None => kept.push(item),
        }
    }
    *items = kept;
    Ok(left_out)
}

/// The rows of `items` as written, by question id (an error names the first unreadable one).
fn official_rows(manifest: &Path, items: &[Item]) -> Result<HashMap<String, OfficialRow>> {
    let rows = OfficialRows::read(manifest)?;
    items.iter().map(|item| Ok((item.id.clone(), rows.row(item)?))).collect()
}

/// `uav_accuracy.json` over the scored questions, in the order they were asked.
fn uav_accuracy(rows: &HashMap<String, OfficialRow>, items: &[Item], scored: &[crate::results::Scored]) -> UavAccuracy {
    UavAccuracy::count(items.iter().zip(scored).filter_map(|(item, s)| rows.get(&item.id).map(|row| (row, s.score.correct()))))
}

/// A manifest without a single question is a mistake (a wrong file, a wrong `--bench`), not
/// a benchmark scored at 0 of 0.
fn require_questions(manifest: &Path, bench: &dyn Bench, questions: usize, skipped: usize) -> Result<()> {
    if questions > 0 {
        return Ok(());
    }
    let why = if skipped > 0 { format!("all {skipped} rows were bad and skipped") } else { "it has no rows".to_string() };
    Err(EvalError::BadFile { path: manifest.to_path_buf(), message: format!("no {} question to ask: {why}", bench.name()) })
}

fn running_message(t: &Tally) -> String {
    if t.n == 0 {
        return String::new();
    }
    format!("acc {:.1}% ({} scored, {} unanswered)", 100.0 * t.accuracy(), t.n, t.unanswered)
}

/// Writes `run.json` for a new run, or checks that a resumed run's settings match it. Only a
/// folder that already holds predictions is protected: a run that failed before answering
/// anything (a wrong flag, say) leaves nothing to mix, and its `run.json` is replaced.
fn check_record(out: &Path, record: &RunRecord) -> Result<()> {
    let path = out.join(RUN_FILE);
    let answered = std::fs::metadata(out.join(PREDICTIONS_FILE)).is_ok_and(|m| m.len() > 0);
    if path.exists() && answered {
        let text = std::fs::read_to_string(&path).map_err(EvalError::io("read", &path))?;
        let old: RunRecord = serde_json::from_str(&text).map_err(|e| EvalError::BadFile { path: path.clone(), message: e.to_string() })?;
        let diff = old.differences(record);
        if !diff.is_empty() {
            return Err(EvalError::OtherRun { record: path, differences: diff });
        }
        return Ok(());
    }
    write_record(&path, record)
}

/// `evaluate score`: scores a predictions file made by any model against a manifest and writes
/// the reports into `out`, with the benchmark's own extraction.
pub fn score_predictions(
    bench_name: &str,
    manifest: &Path,
    predictions_path: &Path,
    out: &Path,
    name: Option<String>,
    opts: &ReadOptions,
) -> Result<(Results, Vec<PathBuf>)> {
    score_predictions_as(bench_name, manifest, predictions_path, out, name, opts, ExtractMode::Motionvl)
}

/// [`score_predictions`] with the extraction `extract`; the official one also writes
/// `uav_accuracy.json` (every question of the manifest counts: which ones the official code
/// would have left out depends on media this command does not read).
pub fn score_predictions_as(
    bench_name: &str,
    manifest: &Path,
    predictions_path: &Path,
    out: &Path,
    name: Option<String>,
    opts: &ReadOptions,
    extract: ExtractMode,
) -> Result<(Results, Vec<PathBuf>)> {
    let bench = bench::find(bench_name)?;
    let outcome = bench.read(manifest, opts)?;
    require_questions(manifest, bench, outcome.items.len(), outcome.skipped.len())?;
    let rows = if extract == ExtractMode::Official { Some(official_rows(manifest, &outcome.items)?) } else { None };
    let all = read_predictions(predictions_path)?;
    let predictions = by_id(&all);
    let run = name.unwrap_or_else(|| predictions_path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "predictions".into()));
    let input = ScoreInput {
        bench,
        items: &outcome.items,
        predictions: &predictions,
        run,
        manifest,
        skipped_rows: outcome.skipped.len(),
        official: rows.as_ref(),
    };
    let (results, scored) = score_all(&input);
    let mut reports = write_reports(out, &results, &scored)?;
    if let Some(rows) = &rows {
        reports.push(uav_accuracy(rows, &outcome.items, &scored).write(out)?);
    }
    Ok((results, reports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_without_a_protocol_is_the_papers_and_another_protocol_is_refused() {
        let config = |kind: Option<ProtocolKind>| RunConfig { bench: "sisbench".into(), protocol_kind: kind, ..RunConfig::default() };
        let old = RunRecord { protocol_kind: None, ..RunRecord::of(&config(None), &bench::SIS_BENCH) };
        let paper = RunRecord::of(&config(Some(ProtocolKind::Paper)), &bench::SIS_BENCH);
        assert!(old.differences(&paper).is_empty(), "{:?}", old.differences(&paper));
        let official = RunRecord::of(&config(Some(ProtocolKind::Official)), &bench::SIS_BENCH);
        assert_eq!(paper.differences(&official), ["protocol_kind (--protocol)", "official settings"]);
        let vllm = RunRecord::of(&config(Some(ProtocolKind::VllmBaseline)), &bench::SIS_BENCH);
        assert_eq!(official.differences(&vllm), ["protocol_kind (--protocol)"]);
    }
}
