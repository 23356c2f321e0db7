//! Multiple choice by likelihood on a tiny random Qwen2.5-VL checkpoint: the option the
//! evaluator picks, and the scores it records, against log-probabilities computed here one
//! option at a time (unpadded, full logits, log-softmax over the vocabulary); the motion-aware
//! model through its motion branch; questions without options decoded greedily; the prompt
//! asking for the form the options are scored in; and the questions ranking cannot answer
//! refused by name.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use motionvl_data::manifest::{Answer, AnswerOption};
use motionvl_data::text::{LabelMask, Message, TemplateOptions};
use motionvl_eval::bench::{self, NotRankable};
use motionvl_eval::config::{AnswerMode, Continuation, Normalisation, RunConfig};
use motionvl_eval::error::EvalError;
use motionvl_eval::infer::{Generate, Prepare, PreparedQuestion, QwenGenerator, QwenPreparer, load_qwen};
use motionvl_eval::item::Item;
use motionvl_flow::media::MotionMedia;
use motionvl_flow::{PseudoImageConfig, estimator_by_name};
use motionvl_models::motion::{Connector, MotionBranch, vision_features};
use motionvl_models::qwen25vl::{PixelInput, PromptBatch, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_models::seeded;

const QUESTION: &str = "Which movement does the drone make in this video?";
/// Of different token lengths, so the option rows are padded against each other.
const OPTIONS: [&str; 4] = ["fly forward", "fly backward", "turn left in place", "ascend"];

/// The tiny checkpoint with a tokenizer trained on the prompt's words. Large weights: the
/// options' log-probabilities differ by nats, not rounding.
fn tiny_checkpoint(dir: &Path) -> PathBuf {
    let corpus: Vec<String> =
        std::iter::once(QUESTION.to_string()).chain(OPTIONS.iter().map(|o| o.to_string())).chain(common::mcq_prompt_words()).collect();
    common::tiny_checkpoint(dir, &corpus, 300, 11)
}

/// Questions over clips of different shades; the last has no options (open-ended).
fn items(dir: &Path) -> Vec<Item> {
    let rows = [("q1", 'C', 40u8), ("q2", 'A', 90), ("q3", 'B', 150), ("q4", 'D', 200), ("open", 'A', 120)];
    rows.iter()
        .map(|&(id, answer, shade)| {
            let video = dir.join(format!("{id}.mp4"));
            common::write_clip(&video, shade);
            let options = if id == "open" { Vec::new() } else { AnswerOption::lettered(&OPTIONS) };
            Item {
                id: id.into(),
                task: "Action Recognition".into(),
                dimension: "self".into(),
                level: Some("perception".into()),
                question: QUESTION.into(),
                options,
                answer: Answer::Choice(answer),
                videos: vec![video],
                images: Vec::new(),
                intervals: Vec::new(),
                file: dir.join("manifest.json"),
                line: 1,
            }
        })
        .collect()
}

fn run_config(dir: &Path, checkpoint: &Path, answer: AnswerMode, normalisation: Normalisation) -> RunConfig {
    let mut cfg = RunConfig { bench: "sisbench".into(), out: dir.join("out"), ..RunConfig::default() };
    cfg.model.checkpoint = checkpoint.display().to_string();
    cfg.generation.max_new_tokens = 5;
    cfg.generation.answer = answer;
    cfg.generation.likelihood_normalisation = normalisation;
    cfg.protocol.min_pixels = 56 * 56;
    cfg.protocol.max_pixels = 56 * 56;
    cfg
}

fn load(cfg: &RunConfig) -> (QwenPreparer, QwenGenerator) {
    load_qwen(cfg, bench::find("sisbench").expect("sisbench")).unwrap_or_else(|e| panic!("{e}"))
}

fn data_pixels(pixels: &[motionvl_data::loader::PixelInput]) -> Option<PixelInput> {
    let first = pixels.first()?;
    let cols = first.pixel_values.ncols();
    let flat: Vec<f32> = pixels.iter().flat_map(|p| p.pixel_values.iter().copied()).collect();
    let rows = flat.len() / cols;
    Some(PixelInput {
        pixel_values: Tensor::from_vec(flat, (rows, cols), &Device::Cpu).expect("pixels"),
        grids: pixels.iter().map(|p| p.grid_thw).collect(),
    })
}

/// `Σ log p(answer token)` and the token count of each option of `q`, computed one option at a
/// time: its own unpadded row, the full logits, a log-softmax over the vocabulary.
fn reference_log_likelihoods(generator: &QwenGenerator, preparer: &QwenPreparer, q: &PreparedQuestion, item: &Item) -> Vec<(f64, usize)> {
    let model = generator.model.qwen25().expect("a Qwen2.5-VL checkpoint");
    let vision = VisionInputs {
        images: None,
        videos: data_pixels(&q.videos),
        video_seconds_per_grid: q.videos.iter().map(|v| v.second_per_grid.unwrap_or(1.0)).collect(),
    };
    let motion = data_pixels(&q.motion);
    let features = vision_features(model, generator.motion.as_ref(), &vision, motion.as_ref()).expect("vision features");
    let template = TemplateOptions { label_mask: LabelMask::AnswerImEnd, max_seq_len: None, ..preparer.template.clone() };
    let grids: Vec<[usize; 3]> = q.videos.iter().map(|v| v.grid_thw).collect();
    item.options
        .iter()
        .map(|option| {
            let messages = [Message::user(q.prompt_text.clone()), Message::assistant(option.text.clone())];
            let sample = preparer.tokenizer.encode_chat(&item.id, &messages, &[], &grids, &template).expect("encodes");
            let kinds = sample.mm_token_type_ids.iter().map(|&t| if t == 2 { TokenKind::Video } else { TokenKind::Text }).collect();
            let batch = PromptBatch::single(sample.input_ids.clone(), kinds);
            let positions = model.positions(&batch, &vision).expect("positions");
            let logits = model.forward_embeds(&model.embed(&batch, &features).expect("embed"), &batch.mask, &positions).expect("forward");
            let logits: Vec<Vec<f32>> = logits.squeeze(0).and_then(|l| l.to_dtype(DType::F32)).and_then(|l| l.to_vec2()).expect("logits");
            let (mut sum, mut tokens) = (0.0, 0);
            for i in 1..sample.labels.len() {
                let Ok(target) = usize::try_from(sample.labels[i]) else { continue };
                let row = &logits[i - 1];
                let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
                let log_z = max + row.iter().map(|&x| (f64::from(x) - max).exp()).sum::<f64>().ln();
                sum += f64::from(row[target]) - log_z;
                tokens += 1;
            }
            (sum, tokens)
        })
        .collect()
}

/// The letter of the highest score, by a plain loop (the first of equals).
fn argmax_letter(scores: &[f64]) -> char {
    let mut best = 0;
    for (i, &s) in scores.iter().enumerate() {
        if s > scores[best] {
            best = i;
        }
    }
    (b'A' + best as u8) as char
}

fn check_against_reference(generator: &mut QwenGenerator, preparer: &QwenPreparer, items: &[Item], normalisation: Normalisation) -> Vec<char> {
    let refs: Vec<&Item> = items.iter().collect();
    let batch = preparer.prepare(&refs).expect("prepares");
    let answers = generator.answer(&batch).expect("answers");
    let sisbench = bench::find("sisbench").expect("sisbench");
    let mut chosen = Vec::new();
    for ((q, item), answer) in batch.questions.iter().zip(items).zip(&answers) {
        if item.options.is_empty() {
            continue;
        }
        assert_eq!(q.option_rows.len(), 4, "{}: every option tokenised", q.id);
        let reference = reference_log_likelihoods(generator, preparer, q, item);
        let expected: Vec<f64> = reference
            .iter()
            .map(|&(sum, tokens)| match normalisation {
                Normalisation::Sum => sum,
                Normalisation::PerToken => sum / tokens as f64,
            })
            .collect();
        let recorded = answer.option_scores.as_ref().expect("likelihood answers record their scores");
        assert_eq!(recorded.iter().map(|&(l, _)| l).collect::<String>(), "ABCD");
        // Batched, left-padded and picked rows against one unpadded row at a time, both in f32
        // summed in f64: at most 2.9e-7 relative measured over the 48 scores of this file
        // (sums of -10 to -80 nats; 2026-12-02, AMD EPYC, AVX2), so 1e-6 leaves 3×.
        for ((letter, got), want) in recorded.iter().zip(&expected) {
            assert!((got - want).abs() < 1e-6 * want.abs().max(1.0), "{} option {letter}: {got} vs reference {want}", q.id);
        }
        let letter = argmax_letter(&expected);
        let text = &OPTIONS[(letter as u8 - b'A') as usize];
        assert_eq!(answer.text, format!("{letter}. {text}"), "{}: scores {expected:?}", q.id);
        // The scorer reads the emitted choice as that letter.
        let score = sisbench.score(item, &answer.text);
        assert_eq!(score.value, if Answer::Choice(letter) == item.answer { 1.0 } else { 0.0 }, "{}: {score:?}", q.id);
        chosen.push(letter);
    }
    chosen
}

#[test]
fn likelihood_picks_the_argmax_of_independently_computed_log_probabilities() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let items = items(dir.path());
    let cfg = run_config(dir.path(), &checkpoint, AnswerMode::Likelihood, Normalisation::Sum);
    let (preparer, mut generator) = load(&cfg);
    let by_sum = check_against_reference(&mut generator, &preparer, &items, Normalisation::Sum);
    assert_eq!(by_sum.len(), 4);
    generator.likelihood_normalisation = Normalisation::PerToken;
    check_against_reference(&mut generator, &preparer, &items, Normalisation::PerToken);

    // The option rows hold the generation prompt, then the answer and `<|im_end|>` as labels.
    let refs: Vec<&Item> = items.iter().collect();
    let batch = preparer.prepare(&refs).expect("prepares");
    let im_end = i64::from(preparer.tokenizer.special().im_end);
    for q in batch.questions.iter().filter(|q| !q.option_rows.is_empty()) {
        let prompt = q.prompt.as_ref().expect("tokenised");
        for row in &q.option_rows {
            let s = &row.sample;
            assert_eq!(s.input_ids[..prompt.input_ids.len()], prompt.input_ids[..], "{} {}", q.id, row.option.label);
            let labelled: Vec<i64> = s.labels.iter().copied().filter(|&l| l != -100).collect();
            let answer = preparer.tokenizer.encode_text(&row.option.text).expect("encodes");
            let expected: Vec<i64> = answer.iter().map(|&t| i64::from(t)).chain([im_end]).collect();
            assert_eq!(labelled, expected, "{} {}: the answer's tokens and <|im_end|>", q.id, row.option.label);
        }
    }
}

#[test]
fn questions_without_options_and_generate_mode_decode_greedily() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let items = items(dir.path());
    let refs: Vec<&Item> = items.iter().collect();

    let (greedy_preparer, mut greedy) = load(&run_config(dir.path(), &checkpoint, AnswerMode::Generate, Normalisation::Sum));
    let generated_batch = greedy_preparer.prepare(&refs).expect("prepares");
    assert!(generated_batch.questions.iter().all(|q| q.option_rows.is_empty()), "generate mode tokenises no option");
    let generated = greedy.answer(&generated_batch).expect("generates");
    assert!(generated.iter().all(|a| a.option_scores.is_none()));

    let (preparer, mut generator) = load(&run_config(dir.path(), &checkpoint, AnswerMode::Likelihood, Normalisation::Sum));
    let batch = preparer.prepare(&refs).expect("prepares");
    let answers = generator.answer(&batch).expect("answers");
    let open = items.iter().position(|i| i.options.is_empty()).expect("an open question");
    assert!(batch.questions[open].option_rows.is_empty());
    // Decoded alone (the other questions were ranked), it is what the whole batch decoded.
    assert_eq!(answers[open].text, generated[open].text);
    assert!(answers[open].option_scores.is_none());
    assert!(answers.iter().enumerate().all(|(i, a)| (i == open) == a.option_scores.is_none()));
    // `generate` returns the same texts as `answer`.
    assert_eq!(generator.generate(&batch).expect("generates"), answers.iter().map(|a| a.text.clone()).collect::<Vec<_>>());
}

#[test]
fn the_motion_aware_model_ranks_options_through_its_motion_branch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let items: Vec<Item> = items(dir.path()).into_iter().filter(|i| !i.options.is_empty()).collect();
    let cfg = run_config(dir.path(), &checkpoint, AnswerMode::Likelihood, Normalisation::Sum);
    let (mut preparer, mut generator) = load(&cfg);
    let refs: Vec<&Item> = items.iter().collect();
    let visual_only = generator.answer(&preparer.prepare(&refs).expect("prepares")).expect("answers");

    // A connector whose output is not zero (W₂ drawn at random), fed DIS flow.
    let width = generator.model.qwen25().expect("a Qwen2.5-VL checkpoint").config().vision.out_hidden_size;
    let vars = Connector::init_vars(width, 5, &Device::Cpu).expect("connector");
    for (name, var) in &vars {
        if name == "connector.fc2.weight" {
            var.set(&seeded::randn((width, width), 0.5, 1, &Device::Cpu).expect("randn")).expect("set");
        }
    }
    generator.motion = Some(MotionBranch::from_visual(generator.model.motion_tower(), &vars).expect("branch"));
    let estimator = estimator_by_name("dis", None, &Device::Cpu).expect("dis");
    preparer.motion = Some(MotionMedia::new(preparer.media.clone(), Arc::from(estimator), None, PseudoImageConfig::default()));

    check_against_reference(&mut generator, &preparer, &items, Normalisation::Sum);
    let motion_aware = generator.answer(&preparer.prepare(&refs).expect("prepares")).expect("answers");
    let scores =
        |a: &[motionvl_eval::infer::Answer]| -> Vec<f64> { a.iter().flat_map(|a| a.option_scores.iter().flatten().map(|&(_, s)| s)).collect() };
    // A wiring check, not a value check (the values are checked against the reference above):
    // the branch's tokens reach the scores, so that reference is not the visual-only one.
    assert_ne!(scores(&motion_aware), scores(&visual_only), "wiring: the motion branch does not reach the options' scores");

    // Without its motion pixels the motion-aware model refuses rather than scoring without them.
    preparer.motion = None;
    let err = generator.answer(&preparer.prepare(&refs).expect("prepares")).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("motion"), "{err}");
}

#[test]
fn the_prompt_asks_for_the_form_its_options_are_scored_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let items: Vec<Item> = items(dir.path()).into_iter().take(1).collect();
    let refs: Vec<&Item> = items.iter().collect();
    let (mut preparer, _) = load(&run_config(dir.path(), &checkpoint, AnswerMode::Likelihood, Normalisation::Sum));
    let options = "Options:\nA. fly forward\nB. fly backward\nC. turn left in place\nD. ascend\n";
    let letter = "Answer with the option's letter from the given choices directly.";
    for (form, instruction) in [
        (Some(Continuation::Text), "Answer with the option's text from the given choices directly."),
        (Some(Continuation::Letter), letter),
        (Some(Continuation::LetterText), "Answer with the option's letter and text from the given choices directly."),
        // Generated answers are asked for the letter (SPEC §2).
        (None, letter),
    ] {
        preparer.likelihood = form;
        let batch = preparer.prepare(&refs).expect("prepares");
        let q = &batch.questions[0];
        let expected = format!("<video>\n{QUESTION}\n{options}{instruction}");
        assert_eq!(q.prompt_text, expected, "{form:?}");
        // The option rows are scored after exactly that prompt.
        let prompt = q.prompt.as_ref().expect("tokenised");
        for row in &q.option_rows {
            assert_eq!(row.sample.input_ids[..prompt.input_ids.len()], prompt.input_ids[..], "{form:?} {}", row.option.label);
        }
        assert_eq!(q.option_rows.len(), if form.is_some() { 4 } else { 0 }, "{form:?}");
    }
}

#[test]
fn likelihood_refuses_multi_select_questions_and_json_benchmarks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let mut multi = items(dir.path()).swap_remove(0);
    multi.answer = Answer::Choices(vec!['A', 'C']);
    let (preparer, _) = load(&run_config(dir.path(), &checkpoint, AnswerMode::Likelihood, Normalisation::Sum));
    match preparer.prepare(&[&multi]) {
        Err(EvalError::NotRankable { bench: "sisbench", question: Some(q), reason: NotRankable::MultiSelect }) => {
            assert_eq!(q, multi.location());
        }
        Err(e) => panic!("not the multi-select refusal: {e}"),
        Ok(batch) => panic!("a multi-select question was prepared with {} option rows", batch.questions[0].option_rows.len()),
    }

    // UAV-DualCog asks for JSON: the whole run is refused before any model is loaded.
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/tests/data/dualcog.json");
    let mut cfg = run_config(dir.path(), &checkpoint, AnswerMode::Likelihood, Normalisation::Sum);
    (cfg.bench, cfg.manifest) = ("dualcog".into(), manifest);
    let err = motionvl_eval::run::run_with(&cfg, false, &Default::default(), &mut |_| panic!("the predictor of a refused run was built"));
    match err {
        Err(e @ EvalError::NotRankable { bench: "dualcog", question: None, reason: NotRankable::JsonAnswers }) => {
            let message = e.to_string();
            assert!(message.contains("JSON") && message.contains("answer = \"generate\""), "{message}");
        }
        Err(e) => panic!("not the JSON refusal: {e}"),
        Ok(_) => panic!("a likelihood run of UAV-DualCog went ahead"),
    }
    assert!(!cfg.out.join("predictions.jsonl").exists(), "nothing was asked");
}

#[test]
fn continuation_forms_are_what_the_option_rows_label() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let items: Vec<Item> = items(dir.path()).into_iter().take(1).collect();
    let mut cfg = run_config(dir.path(), &checkpoint, AnswerMode::Likelihood, Normalisation::Sum);
    cfg.generation.likelihood_continuation = Continuation::Letter;
    let (preparer, _) = load(&cfg);
    let batch = preparer.prepare(&items.iter().collect::<Vec<_>>()).expect("prepares");
    let im_end = i64::from(preparer.tokenizer.special().im_end);
    for row in &batch.questions[0].option_rows {
        let labelled: Vec<i64> = row.sample.labels.iter().copied().filter(|&l| l != -100).collect();
        let letter = preparer.tokenizer.encode_text(&row.option.label.to_string()).expect("encodes");
        assert_eq!(labelled, letter.iter().map(|&t| i64::from(t)).chain([im_end]).collect::<Vec<_>>());
    }
}
