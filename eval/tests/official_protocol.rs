//! `--protocol official` end to end on a tiny random Qwen2.5-VL checkpoint: the prompt's ids
//! are the official chat text's (no newline after the video, options sorted and untrimmed), the
//! repetition penalty of the checkpoint's `generation_config.json` is applied, batches decode
//! the same ids as one question at a time, `predictions.jsonl` carries the output ids, questions
//! with missing or too-short media are left out with their reason, and `uav_accuracy.json` has
//! the official shape.

mod common;

use std::path::{Path, PathBuf};

use motionvl_data::samples::ReadOptions;
use motionvl_data::text::{DEFAULT_SYSTEM_PROMPT, IM_END, IM_START, VIDEO_PAD, VISION_END, VISION_START};
use motionvl_data::video::{EncodeSettings, VideoWriter};
use motionvl_eval::bench;
use motionvl_eval::config::{OfficialConfig, ProtocolKind, RunConfig};
use motionvl_eval::infer::{Prepare, load_qwen};
use motionvl_eval::{Results, run};
use serde_json::{Value, json};

const QUESTION: &str = "  Which way does the drone turn?";

/// Options as a row writes them: out of order, with the spaces the official prompt keeps.
fn options() -> Value {
    json!({"C": "ascend ", "A": "turn left", "D": " descend", "B": "turn right"})
}

fn tiny_checkpoint(dir: &Path) -> PathBuf {
    let corpus: Vec<String> =
        [QUESTION, "turn left", "turn right", "ascend", "descend", "Please select the correct answer.", "A. B. C. D."].map(String::from).to_vec();
    let checkpoint = common::tiny_checkpoint(dir, &corpus, 300, 11);
    let special = motionvl_data::text::QwenTokenizer::from_file(checkpoint.join("tokenizer.json")).expect("tokenizer");
    let ids = special.special();
    // What Qwen2.5-VL's generation_config.json carries besides sampling settings greedy ignores.
    let generation = json!({"repetition_penalty": 1.05, "eos_token_id": [ids.im_end, ids.endoftext], "do_sample": true, "top_k": 1});
    std::fs::write(checkpoint.join("generation_config.json"), generation.to_string()).expect("generation config");
    checkpoint
}

/// A 64×48 clip of `frames` frames at 10 FPS: a bright bar sliding right over a vertical ramp.
fn write_clip(path: &Path, frames: usize, shade: u8) {
    let settings = EncodeSettings { frame_rate: (10, 1), ..EncodeSettings::default() };
    let mut writer = VideoWriter::create(path, 64, 48, &settings).expect("video writer");
    for t in 0..frames {
        let mut frame = ndarray::Array3::<u8>::zeros((48, 64, 3));
        for y in 0..48 {
            for x in 0..64 {
                frame[[y, x, 0]] = shade.wrapping_add((y * 3) as u8);
                frame[[y, x, 2]] = (x * 2) as u8;
                if (t * 5..t * 5 + 9).contains(&x) {
                    frame[[y, x, 1]] = 230;
                }
            }
        }
        writer.push(frame.view()).expect("push frame");
    }
    writer.finish().expect("finish clip");
}

/// Five questions: three asked (two splits, two tasks), one whose 5-frame clip is too short,
/// one whose video is missing.
fn manifest(dir: &Path) -> PathBuf {
    let rows = [
        ("o1", "Action Recognition", "val", "C", 8, 30u8),
        ("o2", "Path Planning", "test", "A", 9, 120),
        ("short", "Action Recognition", "val", "B", 5, 60),
        ("o3", "Action Recognition", "test", "D", 8, 200),
        ("gone", "Path Planning", "val", "A", 0, 0),
    ];
    let mut text = String::new();
    for (id, task, split, answer, frames, shade) in rows {
        if frames > 0 {
            write_clip(&dir.join(format!("{id}.mp4")), frames, shade);
        }
        let row = json!({"question_id": id, "task_type": task, "split": split, "video_name": format!("{id}.mp4"),
                         "question": QUESTION, "options": options(), "answer": answer});
        text.push_str(&format!("{row}\n"));
    }
    let path = dir.join("SIS-Bench.jsonl");
    std::fs::write(&path, text).expect("manifest");
    path
}

fn config(dir: &Path, checkpoint: &Path, manifest: &Path, out: &str, batch_size: usize) -> RunConfig {
    let mut cfg = RunConfig {
        bench: "sisbench".into(),
        manifest: manifest.to_path_buf(),
        out: dir.join(out),
        protocol_kind: Some(ProtocolKind::Official),
        official: OfficialConfig::default(),
        ..RunConfig::default()
    };
    cfg.model.checkpoint = checkpoint.display().to_string();
    cfg.generation.batch_size = batch_size;
    cfg.generation.max_new_tokens = 5;
    cfg
}

fn prediction_lines(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("predictions.jsonl"))
        .expect("predictions")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn official_prompt_ids_are_the_official_chat_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let manifest = manifest(dir.path());
    let cfg = config(dir.path(), &checkpoint, &manifest, "prompt", 1);
    let bench = bench::find("sisbench").expect("sisbench");
    let items = bench.read(&manifest, &ReadOptions { check_media: false, ..ReadOptions::default() }).expect("rows").items;
    let (preparer, _) = load_qwen(&cfg, bench).expect("model loads");
    let batch = preparer.prepare(&[&items[0]]).expect("prepares");
    let q = &batch.questions[0];
    let video = &q.videos[0];
    // 8 frames kept whole, 64×48 lifted to at least 128·28² pixels on a 28-pixel grid.
    let [t, h, w] = video.grid_thw;
    assert_eq!(t, 4, "8 frames in temporal pairs");
    assert!(h * w * 14 * 14 >= 128 * 28 * 28 && h * w * 14 * 14 <= 512 * 28 * 28, "{h}x{w} patches");
    assert_eq!(video.second_per_grid, Some(1.0), "the processor's fps 2 over pairs of frames");
    let expected = format!(
        "{IM_START}system\n{DEFAULT_SYSTEM_PROMPT}{IM_END}\n{IM_START}user\n{VISION_START}{pads}{VISION_END}{QUESTION}\n\
         A. turn left\nB. turn right\nC. ascend \nD.  descend\nPlease select the correct answer.{IM_END}\n{IM_START}assistant\n",
        pads = VIDEO_PAD.repeat(t * h * w / 4)
    );
    let prompt = q.prompt.as_ref().expect("tokenised");
    let decoded = preparer.tokenizer.decode(&prompt.input_ids, false).expect("decodes");
    assert_eq!(decoded, expected);
    let vision_end = preparer.tokenizer.special().vision_end;
    let after = prompt.input_ids.iter().position(|&id| id == vision_end).map(|i| prompt.input_ids[i + 1]);
    let newline = preparer.tokenizer.encode_text("\n").expect("encodes");
    assert!(after.is_some() && after != newline.first().copied(), "no newline token after the video");
}

#[test]
fn official_run_leaves_out_short_media_decodes_batches_as_singles_and_writes_uav_accuracy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let manifest = manifest(dir.path());

    let batched = config(dir.path(), &checkpoint, &manifest, "batched", 2);
    let summary = run(&batched, false).expect("official run");
    assert_eq!(summary.generated, 3);
    let left: Vec<(&str, &str)> = summary.left_out.iter().map(|l| (l.question_id.as_str(), l.reason.as_str())).collect();
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(left[0].0 == "short" && left[0].1.contains("5 frames, fewer than min_frames 8"), "{left:?}");
    assert!(left[1].0 == "gone" && left[1].1.starts_with("media not found"), "{left:?}");

    let lines = prediction_lines(&batched.out);
    let ids: Vec<&str> = lines.iter().filter_map(|l| l["question_id"].as_str()).collect();
    assert_eq!(ids, ["o1", "o2", "o3"]);
    for line in &lines {
        let output_ids = line["output_ids"].as_array().expect("output_ids written");
        assert!(!output_ids.is_empty() && output_ids.len() <= 5, "{line}");
    }

    // One question at a time decodes the same ids.
    let single = config(dir.path(), &checkpoint, &manifest, "single", 1);
    run(&single, false).expect("unbatched run");
    let singles = prediction_lines(&single.out);
    for (b, s) in lines.iter().zip(&singles) {
        assert_eq!((&b["question_id"], &b["output_ids"], &b["prediction"]), (&s["question_id"], &s["output_ids"], &s["prediction"]));
    }

    // The penalty is applied: a strong one changes what decoding with the checkpoint's 1.05 says.
    let mut strong = config(dir.path(), &checkpoint, &manifest, "strong", 3);
    strong.generation.repetition_penalty = Some(50.0);
    run(&strong, false).expect("strong penalty");
    let ids_of = |out: &Path| prediction_lines(out).into_iter().map(|l| l["output_ids"].clone()).collect::<Vec<_>>();
    assert_ne!(ids_of(&batched.out), ids_of(&strong.out), "a penalty of 50 changes some output");

    // results.json counts the three asked questions and names the two left out.
    let r = Results::read_run(&batched.out).expect("results.json");
    assert_eq!((r.questions, r.predicted, r.left_out.len()), (3, 3, 2));
    assert!(r.extraction.keys().all(|k| k.starts_with("official_") || k == "none"), "{:?}", r.extraction);

    // uav_accuracy.json: the official keys, categories and splits in order of appearance.
    let text = std::fs::read_to_string(batched.out.join("uav_accuracy.json")).expect("uav_accuracy.json");
    assert!(text.starts_with("{\n    \"overall\": {\n        \"correct\": "), "{text}");
    let acc: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(acc["overall"]["total"], 3);
    assert_eq!(acc["overall"]["correct"].as_u64(), Some(r.overall.correct as u64));
    let percent = 100.0 * r.overall.correct as f64 / 3.0;
    assert_eq!(acc["overall"]["accuracy"].as_f64(), Some(percent));
    let order = |key: &str| text.find(key).unwrap_or(usize::MAX);
    assert!(order("\"Action Recognition\"") < order("\"Path Planning\""), "{text}");
    assert!(order("\"val\"") < order("\"test\""), "{text}");
    assert_eq!(acc["per_category"]["Action Recognition"]["total"], 2);
    assert_eq!(acc["per_split"]["test"]["total"], 2);
    let run_json: Value = serde_json::from_str(&std::fs::read_to_string(batched.out.join("run.json")).expect("run.json")).expect("JSON");
    assert_eq!(run_json["protocol_kind"], "official");
}

#[test]
fn vllm_baseline_asks_with_one_image_per_frame_and_keeps_short_clips() {
    use motionvl_data::text::IMAGE_PAD;
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let manifest = manifest(dir.path());
    let mut cfg = config(dir.path(), &checkpoint, &manifest, "vllm", 2);
    cfg.protocol_kind = Some(ProtocolKind::VllmBaseline);
    cfg.generation.max_new_tokens = 3;

    let bench = bench::find("sisbench").expect("sisbench");
    let items = bench.read(&manifest, &ReadOptions { check_media: false, ..ReadOptions::default() }).expect("rows").items;
    let (preparer, _) = load_qwen(&cfg, bench).expect("model loads");
    let batch = preparer.prepare(&[&items[0]]).expect("prepares");
    let q = &batch.questions[0];
    assert!(q.videos.is_empty(), "frames are images");
    // 8 frames of 48×64, each lifted into [256, 512]·28² by Pillow then rounded to 392×504
    // (tests/fixtures/vllm_frames' "small" case).
    assert_eq!(q.images.iter().map(|p| p.grid_thw).collect::<Vec<_>>(), vec![[1, 28, 36]; 8]);
    let block = format!("{VISION_START}{}{VISION_END}", IMAGE_PAD.repeat(28 * 36 / 4));
    let expected = format!(
        "{IM_START}system\n{DEFAULT_SYSTEM_PROMPT}{IM_END}\n{IM_START}user\n{}Watch the video carefully and answer the following \
         multiple choice question.\n\nQuestion:\n{QUESTION}\n\nOptions:\nA. turn left\nB. turn right\nC. ascend \nD.  descend\n\n\
         Please select the correct answer from the options above. Only output the letter (A, B, C, or D) corresponding to your \
         answer.{IM_END}\n{IM_START}assistant\n",
        block.repeat(8)
    );
    let prompt = q.prompt.as_ref().expect("tokenised");
    assert_eq!(preparer.tokenizer.decode(&prompt.input_ids, false).expect("decodes"), expected);

    let summary = run(&cfg, false).expect("vLLM baseline run");
    assert_eq!(summary.generated, 4, "the 5-frame clip is asked too");
    let left: Vec<&str> = summary.left_out.iter().map(|l| l.question_id.as_str()).collect();
    assert_eq!(left, ["gone"]);
    let acc: Value = serde_json::from_str(&std::fs::read_to_string(cfg.out.join("uav_accuracy.json")).expect("uav_accuracy.json")).expect("JSON");
    assert_eq!(acc["overall"]["total"], 4);
    assert!(prediction_lines(&cfg.out).iter().all(|l| l["output_ids"].as_array().is_some_and(|ids| !ids.is_empty())));
}
