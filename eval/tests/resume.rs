//! An interrupted run resumes where it stopped: answers already on file are kept and never
//! asked again, a torn last line is asked again, and a run folder is never mixed between two
//! models. The model is a scripted stand-in here (the real one is exercised end to end in
//! `end_to_end.rs`); what is under test is the runner's bookkeeping.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use motionvl_data::stop::StopFlag;
use motionvl_eval::bench::Bench;
use motionvl_eval::config::RunConfig;
use motionvl_eval::infer::{Generate, Prepare, PreparedBatch, PreparedQuestion};
use motionvl_eval::predictions::read_predictions;
use motionvl_eval::{EvalError, Item, Result, run_with};
use serde_json::json;

/// Prompts as text only: nothing to decode.
struct TextOnly(&'static dyn Bench);

impl Prepare for TextOnly {
    fn prepare(&self, items: &[&Item]) -> Result<PreparedBatch> {
        let questions = items
            .iter()
            .map(|i| PreparedQuestion {
                id: i.id.clone(),
                prompt_text: self.0.prompt(i),
                prompt: None,
                images: Vec::new(),
                videos: Vec::new(),
                motion: Vec::new(),
                option_rows: Vec::new(),
            })
            .collect();
        Ok(PreparedBatch { questions, failed: Vec::new() })
    }
}

/// Answers from a script, recording what it was asked; fails on batch `fail_on` (0-based);
/// requests `stop` while answering batch `stop_on` (a signal arriving mid-batch).
struct Scripted {
    answers: HashMap<String, String>,
    asked: Arc<Mutex<Vec<String>>>,
    batches: usize,
    fail_on: Option<usize>,
    stop_on: Option<(usize, StopFlag)>,
}

impl Generate for Scripted {
    fn generate(&mut self, batch: &PreparedBatch) -> Result<Vec<String>> {
        if self.fail_on == Some(self.batches) {
            return Err(EvalError::Predictor("simulated crash".into()));
        }
        if let Some((batch, stop)) = &self.stop_on
            && *batch == self.batches
        {
            stop.request();
        }
        self.batches += 1;
        let mut out = Vec::new();
        for q in &batch.questions {
            assert!(q.prompt_text.contains("<video>") && q.prompt_text.contains("Options:"), "{}", q.prompt_text);
            self.asked.lock().expect("lock").push(q.id.clone());
            out.push(self.answers.get(&q.id).cloned().unwrap_or_default());
        }
        Ok(out)
    }
}

const IDS: [&str; 5] = ["q1", "q2", "q3", "q4", "q5"];

fn setup(dir: &Path) -> RunConfig {
    let manifest = dir.join("sis.jsonl");
    let mut text = String::new();
    for (i, id) in IDS.iter().enumerate() {
        std::fs::write(dir.join(format!("{id}.mp4")), b"not decoded by the scripted model").expect("write");
        let row = json!({
            "question_id": id, "task_type": if i < 3 { "Action Recognition" } else { "Landmark Order" },
            "video_path": format!("{id}.mp4"), "question": "Which way?",
            "options": {"A": "forward", "B": "backward", "C": "up", "D": "down"}, "answer": "C",
        });
        text.push_str(&format!("{row}\n"));
    }
    std::fs::write(&manifest, text).expect("write");
    let mut cfg = RunConfig { bench: "sisbench".into(), manifest, out: dir.join("run"), ..RunConfig::default() };
    cfg.model.checkpoint = "scripted-v1".into();
    cfg.generation.batch_size = 2;
    cfg
}

/// q1 right, q2 wrong, q3 unanswered, q4 and q5 right.
fn answers() -> HashMap<String, String> {
    [("q1", "C"), ("q2", "The answer is A."), ("q3", "I can't tell."), ("q4", "(C) up"), ("q5", "up")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn run_scripted(cfg: &RunConfig, asked: &Arc<Mutex<Vec<String>>>, fail_on: Option<usize>) -> Result<motionvl_eval::RunSummary> {
    run_stopping(cfg, asked, fail_on, None)
}

fn run_stopping(
    cfg: &RunConfig,
    asked: &Arc<Mutex<Vec<String>>>,
    fail_on: Option<usize>,
    stop_on: Option<usize>,
) -> Result<motionvl_eval::RunSummary> {
    let asked = asked.clone();
    let stop = StopFlag::new();
    let flag = stop.clone();
    run_with(cfg, false, &stop, &mut move |bench| {
        let generator = Scripted { answers: answers(), asked: asked.clone(), batches: 0, fail_on, stop_on: stop_on.map(|b| (b, flag.clone())) };
        Ok((Box::new(TextOnly(bench)), Box::new(generator)))
    })
}

fn ids_on_file(path: &Path) -> Vec<String> {
    read_predictions(path).expect("predictions parse").into_iter().map(|p| p.question_id).collect()
}

fn predictions_path(cfg: &RunConfig) -> PathBuf {
    cfg.out.join("predictions.jsonl")
}

#[test]
fn interrupted_run_resumes_without_asking_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = setup(dir.path());
    let asked = Arc::new(Mutex::new(Vec::new()));

    // Crash on the second batch: the first batch's two answers are already on disk.
    let err = run_scripted(&cfg, &asked, Some(1)).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("simulated crash"), "{err}");
    assert_eq!(ids_on_file(&predictions_path(&cfg)), ["q1", "q2"]);

    // Without --resume the folder is refused rather than overwritten.
    let err = run_scripted(&cfg, &asked, None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("--resume"), "{err}");

    // A different checkpoint must not continue this run's file.
    cfg.resume = true;
    let mut other = cfg.clone();
    other.model.checkpoint = "scripted-v2".into();
    let err = run_scripted(&other, &asked, None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("checkpoint"), "{err}");

    // Nor may the same model in another dtype, on another device, or with other weights
    // behind the same adapter path.
    let mut bf16 = cfg.clone();
    bf16.model.dtype = Some(motionvl_models::device::DTypeName::Bf16);
    let err = run_scripted(&bf16, &asked, None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("dtype"), "{err}");
    let mut gpu = cfg.clone();
    gpu.model.device = motionvl_models::device::DeviceName::Cuda(None);
    let err = run_scripted(&gpu, &asked, None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("device"), "{err}");
    // Nor may answers ranked by likelihood continue generated ones.
    let mut ranked = cfg.clone();
    ranked.generation.answer = motionvl_eval::config::AnswerMode::Likelihood;
    let err = run_scripted(&ranked, &asked, None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("answer mode"), "{err}");

    asked.lock().expect("lock").clear();
    let summary = run_scripted(&cfg, &asked, None).expect("resumed run completes");
    assert_eq!(*asked.lock().expect("lock"), ["q3", "q4", "q5"], "only the unanswered questions are asked");
    assert_eq!((summary.resumed, summary.generated), (2, 3));
    assert_eq!(ids_on_file(&predictions_path(&cfg)), IDS);
    let r = &summary.results;
    assert_eq!((r.overall.n, r.overall.correct, r.overall.unanswered, r.missing), (5, 3, 1, 0));
    assert!(cfg.out.join("results.json").is_file() && cfg.out.join("chart.png").is_file());

    // A finished run resumed again asks nothing (the model is not even loaded) and re-scores.
    let summary = run_with(&cfg, false, &Default::default(), &mut |_| Err(EvalError::Predictor("the model must not be loaded".into())))
        .expect("nothing left to ask");
    assert_eq!((summary.resumed, summary.generated), (5, 0));
    assert_eq!(summary.results.overall.correct, 3);
}

#[test]
fn torn_last_line_is_asked_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = setup(dir.path());
    let asked = Arc::new(Mutex::new(Vec::new()));
    run_scripted(&cfg, &asked, Some(1)).expect_err("crashes on batch 2");
    // The process died while writing q3's line.
    let path = predictions_path(&cfg);
    let mut text = std::fs::read_to_string(&path).expect("read");
    text.push_str("{\"question_id\": \"q3\", \"predic");
    std::fs::write(&path, text).expect("write");

    cfg.resume = true;
    asked.lock().expect("lock").clear();
    let summary = run_scripted(&cfg, &asked, None).expect("resumes");
    assert_eq!(*asked.lock().expect("lock"), ["q3", "q4", "q5"]);
    assert_eq!(ids_on_file(&path), IDS, "the torn line is gone and q3 answered once");
    assert_eq!(summary.results.predicted, 5);
}

#[test]
fn limit_asks_and_scores_only_the_first_questions() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = setup(dir.path());
    cfg.limit = Some(3);
    let asked = Arc::new(Mutex::new(Vec::new()));
    let summary = run_scripted(&cfg, &asked, None).expect("runs");
    assert_eq!(*asked.lock().expect("lock"), ["q1", "q2", "q3"]);
    assert_eq!(summary.results.questions, 3);
    assert_eq!(summary.results.by_task.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["Action Recognition"]);
}

/// A stop requested while a batch is answered (a signal): that batch's answers are written,
/// the run ends with `Stopped` naming what is left, and `--resume` asks only the rest.
#[test]
fn a_stop_finishes_the_batch_in_flight_and_resume_asks_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = setup(dir.path());
    let asked = Arc::new(Mutex::new(Vec::new()));
    match run_stopping(&cfg, &asked, None, Some(1)) {
        Err(EvalError::Stopped { answered: 4, remaining: 1, out }) => assert_eq!(out, cfg.out),
        other => panic!("not stopped after the second batch: {:?}", other.map(|s| s.generated)),
    }
    assert_eq!(ids_on_file(&predictions_path(&cfg)), ["q1", "q2", "q3", "q4"], "both batches answered are on disk");
    cfg.resume = true;
    asked.lock().expect("lock").clear();
    let summary = run_scripted(&cfg, &asked, None).expect("resumed run completes");
    assert_eq!(*asked.lock().expect("lock"), ["q5"]);
    assert_eq!((summary.resumed, summary.generated), (4, 1));
    let r = &summary.results;
    assert_eq!((r.overall.n, r.overall.correct, r.overall.unanswered), (5, 3, 1), "scored as an uninterrupted run");
}

/// A manifest edited in place (same path, other questions) is another benchmark: its answers
/// on file are not continued.
#[test]
fn a_manifest_edited_in_place_is_not_resumed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = setup(dir.path());
    let asked = Arc::new(Mutex::new(Vec::new()));
    run_scripted(&cfg, &asked, Some(1)).expect_err("a crash after the first batch");
    let text = std::fs::read_to_string(&cfg.manifest).expect("manifest");
    std::fs::write(&cfg.manifest, text.replace("up", "upward")).expect("edited");
    cfg.resume = true;
    let err = run_scripted(&cfg, &asked, None).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("manifest contents"), "{err}");
}
