//! A tiny random Qwen3-VL checkpoint evaluated end to end: `evaluate run` takes it with no other
//! flag. Its prompts are Qwen3-VL's (no default system turn, a `<t seconds>` block per temporal
//! step, the official protocol's presampled frames timed k/2 s), left padding changes no output,
//! and options ranked by likelihood score what a forward pass of each gives.

mod common;

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use motionvl_data::manifest::{Answer, AnswerOption};
use motionvl_eval::bench;
use motionvl_eval::config::ProtocolKind;
use motionvl_eval::config::{AnswerMode, RunConfig};
use motionvl_eval::infer::{Generate, Prepare, load_qwen};
use motionvl_eval::item::Item;
use motionvl_eval::likelihood::log_sum_exp;
use motionvl_eval::official::OfficialRows;
use motionvl_eval::predictions::read_predictions;
use motionvl_eval::run;
use motionvl_models::backbone::Backbone;
use motionvl_models::prompt::{PixelInput, PromptBatch, VisionInputs};
use motionvl_models::rope::TokenKind;
use serde_json::json;

const QUESTION: &str = "How does the drone move in this clip?";
const OPTIONS: [&str; 4] = ["move forward", "move backward", "ascend", "descend"];

fn checkpoint(dir: &Path) -> PathBuf {
    let corpus: Vec<String> = std::iter::once(QUESTION.to_string())
        .chain(OPTIONS.iter().map(|o| o.to_string()))
        .chain(common::mcq_prompt_words())
        .chain(["Please select the correct answer.".to_string(), "<0.2 seconds> <1.2 seconds> <2.2 seconds>".to_string()])
        .collect();
    common::tiny_qwen3_checkpoint(dir, &corpus, 320, 5)
}

/// Three questions on clips written here; rows as SIS-Bench writes them.
fn manifest(dir: &Path) -> PathBuf {
    let mut text = String::new();
    for (id, answer, shade) in [("e1", "C", 40u8), ("e2", "A", 90), ("e3", "B", 150)] {
        common::write_clip(&dir.join(format!("{id}.mp4")), shade);
        let options: serde_json::Map<String, serde_json::Value> =
            OPTIONS.iter().enumerate().map(|(i, o)| (((b'A' + i as u8) as char).to_string(), json!(o))).collect();
        let row = json!({"question_id": id, "task_type": "Action Recognition", "video_path": format!("{id}.mp4"), "video_name": format!("{id}.mp4"),
                         "question": QUESTION, "options": options, "answer": answer});
        text.push_str(&format!("{row}\n"));
    }
    let path = dir.join("SIS-Bench.jsonl");
    std::fs::write(&path, text).expect("manifest");
    path
}

fn config(dir: &Path, checkpoint: &Path, manifest: &Path, out: &str, batch_size: usize, protocol: Option<ProtocolKind>) -> RunConfig {
    let mut cfg = RunConfig { bench: "sisbench".into(), manifest: manifest.to_path_buf(), out: dir.join(out), ..RunConfig::default() };
    cfg.model.checkpoint = checkpoint.display().to_string();
    cfg.generation.batch_size = batch_size;
    cfg.generation.max_new_tokens = 6;
    cfg.protocol_kind = protocol;
    // Small frames keep the tiny model fast (a 32-px side is one merge unit of patch 16).
    cfg.protocol.min_pixels = 64 * 64;
    cfg.protocol.max_pixels = 64 * 64;
    cfg
}

fn outputs(path: &Path) -> Vec<(String, String)> {
    read_predictions(path).expect("predictions").into_iter().map(|p| (p.question_id, p.prediction)).collect()
}

#[test]
fn a_qwen3_vl_checkpoint_evaluates_with_no_other_flag() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = checkpoint(dir.path());
    let manifest = manifest(dir.path());
    for protocol in [None, Some(ProtocolKind::Official)] {
        let name = protocol.map_or("paper", ProtocolKind::as_str);
        let batched = config(dir.path(), &checkpoint, &manifest, &format!("{name}-batched"), 2, protocol);
        let summary = run(&batched, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((summary.generated, summary.failed.len()), (3, 0), "{name}");
        let single = config(dir.path(), &checkpoint, &manifest, &format!("{name}-single"), 1, protocol);
        run(&single, false).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (b, s) = (outputs(&batched.out.join("predictions.jsonl")), outputs(&single.out.join("predictions.jsonl")));
        assert_eq!(b, s, "{name}: batch size changes no output");
        assert_eq!(b.len(), 3);
    }
}

#[test]
fn the_official_prompt_is_qwen3_vls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = checkpoint(dir.path());
    let manifest = manifest(dir.path());
    let cfg = config(dir.path(), &checkpoint, &manifest, "prompt", 1, Some(ProtocolKind::Official));
    let (preparer, _) = load_qwen(&cfg, bench::find("sisbench").expect("sisbench")).unwrap_or_else(|e| panic!("{e}"));
    let rows = OfficialRows::read(&manifest).expect("rows");
    let options = AnswerOption::lettered(&OPTIONS);
    let item = Item {
        id: "e1".into(),
        task: "Action Recognition".into(),
        dimension: "self".into(),
        level: None,
        question: QUESTION.into(),
        options,
        answer: Answer::Choice('C'),
        videos: vec![dir.path().join("e1.mp4")],
        images: Vec::new(),
        intervals: Vec::new(),
        file: manifest.clone(),
        line: 1,
    };
    assert!(rows.row(&item).is_ok(), "the manifest row is found");
    let batch = preparer.prepare(&[&item]).expect("prepares");
    let prompt = batch.questions[0].prompt.as_ref().expect("tokenised");
    let text = preparer.tokenizer.decode(&prompt.input_ids, false).expect("decodes");
    // 2 s at 10 fps: 20 frames, all kept (≤ 32), handed over as 0..19 at 2 fps: ten temporal
    // steps at (2k + 2k + 1) / 4 s.
    // transformers 4.57's layout (the official code's): each step's block in place of the
    // template's `<|vision_start|><|video_pad|><|vision_end|>`.
    assert!(text.starts_with("<|im_start|>user\n<0.2 seconds><|vision_start|>"), "{text}");
    assert!(text.contains("<|vision_end|><1.2 seconds><|vision_start|>") && text.contains("<9.2 seconds>"), "{text}");
    assert!(!text.contains("system"), "Qwen3-VL's template writes no default system turn: {text}");
    let video = &batch.questions[0].videos[0];
    assert_eq!(video.grid_thw[0], 10, "twenty frames in temporal pairs");
    assert_eq!(
        prompt.input_ids.iter().filter(|&&id| id == preparer.tokenizer.special().video_pad).count(),
        video.grid_thw.iter().product::<usize>() / 4
    );
}

/// Ranking by likelihood scores each option with the log-probabilities a plain forward pass of
/// its own row gives its answer tokens (left-padded rows, DeepStack repeated per row, the LM head
/// on the answer rows only, against the whole-sequence logits of one row at a time).
#[test]
fn likelihood_ranking_on_qwen3_vl_equals_per_row_forward_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = checkpoint(dir.path());
    let manifest = manifest(dir.path());
    let mut cfg = config(dir.path(), &checkpoint, &manifest, "likelihood", 1, None);
    cfg.generation.answer = AnswerMode::Likelihood;
    let (preparer, mut generator) = load_qwen(&cfg, bench::find("sisbench").expect("sisbench")).unwrap_or_else(|e| panic!("{e}"));
    let item = Item {
        id: "e2".into(),
        task: "Action Recognition".into(),
        dimension: "self".into(),
        level: None,
        question: QUESTION.into(),
        options: AnswerOption::lettered(&OPTIONS),
        answer: Answer::Choice('A'),
        videos: vec![dir.path().join("e2.mp4")],
        images: Vec::new(),
        intervals: Vec::new(),
        file: manifest.clone(),
        line: 2,
    };
    let batch = preparer.prepare(&[&item]).expect("prepares");
    let q = &batch.questions[0];
    assert_eq!(q.option_rows.len(), 4, "every option is a row");
    let scores = generator.answer(&batch).expect("ranks").remove(0).option_scores.expect("scores");
    let Backbone::Qwen3(model) = &generator.model else { panic!("a Qwen3-VL checkpoint") };
    let video = &q.videos[0];
    let (rows, cols) = video.pixel_values.dim();
    let pixels = Tensor::from_vec(video.pixel_values.iter().copied().collect::<Vec<f32>>(), (rows, cols), &Device::Cpu).expect("pixels");
    let inputs = VisionInputs { videos: Some(PixelInput { pixel_values: pixels, grids: vec![video.grid_thw] }), ..VisionInputs::default() };
    for (row, &(label, score)) in q.option_rows.iter().zip(&scores) {
        let kinds = row.sample.mm_token_type_ids.iter().map(|&t| TokenKind::from_id(i64::from(t)).expect("kind")).collect();
        let logits = model.forward(&PromptBatch::single(row.sample.input_ids.clone(), kinds), &inputs, None).expect("forward");
        let logits: Vec<Vec<f32>> = logits.squeeze(0).and_then(|l| l.to_vec2()).expect("logits");
        // log p = logit − ln Σ exp(logits), in f64 (`log_sum_exp` is checked against the direct
        // formula in its own test).
        let want: f64 = (1..row.sample.labels.len())
            .filter(|&i| row.sample.labels[i] != -100)
            .map(|i| f64::from(logits[i - 1][row.sample.labels[i] as usize]) - log_sum_exp(&logits[i - 1]))
            .sum();
        assert!((score - want).abs() <= 1e-4, "option {label}: ranked {score}, a forward pass of its row gives {want}");
    }
    assert!(scores.iter().any(|&(_, s)| (s - scores[0].1).abs() > 1e-3), "the options score differently: {scores:?}");
}

/// A motion-aware Qwen3-VL checkpoint (the `train sft --motion` layout) evaluates with no other
/// flag: at step 0 (the connector's last layer zero) it answers as the visual-only model through
/// the whole flow → pseudo-image → Qwen3-VL tower → connector path, and a trained connector
/// moves the options' likelihoods. (This tiny random model's greedy text ignores its clips —
/// two shades give the same answer — so the wiring is read off the scores; the fused tokens'
/// values are checked against transformers in `tests/tests/qwen3vl_motion.rs`.)
#[test]
fn a_motion_aware_qwen3_vl_checkpoint_evaluates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = checkpoint(dir.path());
    let manifest = manifest(dir.path());
    let visual = config(dir.path(), &checkpoint, &manifest, "visual", 2, None);
    run(&visual, false).expect("visual-only run");

    let mut step0 = config(dir.path(), &checkpoint, &manifest, "motion-step0", 2, None);
    step0.model.adapter = Some(common::motion_checkpoint(dir.path(), &checkpoint, "checkpoint-0", false));
    run(&step0, false).expect("motion run at step 0");
    assert_eq!(outputs(&step0.out.join("predictions.jsonl")), outputs(&visual.out.join("predictions.jsonl")));
    assert!(step0.out.join("flow-cache").is_dir(), "flows are cached in the run folder");

    let trained_adapter = common::motion_checkpoint(dir.path(), &checkpoint, "checkpoint-9", true);
    let mut trained = config(dir.path(), &checkpoint, &manifest, "motion-trained", 2, None);
    trained.model.adapter = Some(trained_adapter.clone());
    let summary = run(&trained, false).expect("motion run");
    assert_eq!((summary.generated, summary.failed.len()), (3, 0));

    let scores = |adapter: Option<PathBuf>, out: &str| {
        let mut cfg = config(dir.path(), &checkpoint, &manifest, out, 2, None);
        cfg.model.adapter = adapter;
        cfg.generation.answer = AnswerMode::Likelihood;
        run(&cfg, false).unwrap_or_else(|e| panic!("{out}: {e}"));
        let text = std::fs::read_to_string(cfg.out.join("predictions.jsonl")).expect("predictions");
        text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON row")["option_scores"].clone()).collect::<Vec<_>>()
    };
    let (plain, moved) = (scores(None, "ranked-visual"), scores(Some(trained_adapter), "ranked-motion"));
    assert_eq!(plain.len(), 3);
    assert!(plain.iter().all(|s| s.as_object().is_some_and(|m| m.len() == OPTIONS.len())), "{plain:?}");
    for (a, b) in plain.iter().zip(&moved) {
        assert_ne!(a, b, "wiring: the trained connector does not reach the options' likelihoods");
    }
}
