//! The README's CVAA section run as written on a fresh folder — `construct synth
//! --satellite-only`, both `train cvaa` stages with the committed recipes, `evaluate retrieve`,
//! `evaluate pairs`, `evaluate prompts` and `evaluate run --cvaa` with the committed LinkS²Bench
//! config — and what `evaluate run --cvaa` did with each question's box.
//!
//! CI cannot afford the README's sizes (the default pairs are 480 frames, stage 1 trains 480
//! steps, the config's model is Qwen2.5-VL-3B on CUDA), so each command keeps its flags and adds
//! only small overrides, each said where it is given: two training worlds of 8 frames,
//! `--max-steps 1` with batches of 8 and 56 px views, and a tiny random Qwen2.5-VL-shaped
//! checkpoint on the CPU.

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use motionvl_data::cvaa::read_pairs;
use motionvl_data::text::QwenTokenizer;
use motionvl_data::video::{EncodeSettings, VideoWriter, probe_video};
use motionvl_eval::Item;
use motionvl_eval::config::RunConfig;
use motionvl_eval::infer::{Prepare, PreparedBatch, QwenPreparer, load_qwen};
use serde_json::{Value, json};

use common::{output, repo_root};

fn config(path: &str) -> String {
    repo_root().join(path).display().to_string()
}

fn run(bin: &str, args: &[&str], dir: &Path) -> String {
    output(bin, args, dir).0
}

const CONSTRUCT: &str = env!("CARGO_BIN_EXE_construct");
const TRAIN: &str = env!("CARGO_BIN_EXE_train");
const EVALUATE: &str = env!("CARGO_BIN_EXE_evaluate");

/// `evaluate retrieve`'s top box and the scores, as printed.
fn retrieve(dir: &Path, checkpoint: &str, uav: &str, satellite: &str, top_k: &str) -> (Vec<[f64; 4]>, Vec<f64>) {
    let out = run(EVALUATE, &["retrieve", "--cvaa", checkpoint, "--uav", uav, "--satellite", satellite, "--top-k", top_k], dir);
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("retrieve printed {out}: {e}"));
    let boxes = serde_json::from_value(v["boxes"].clone()).unwrap_or_else(|e| panic!("boxes in {out}: {e}"));
    let scores = serde_json::from_value(v["scores"].clone()).unwrap_or_else(|e| panic!("scores in {out}: {e}"));
    (boxes, scores)
}

const QUESTION: &str = "Is the red tank visible in the UAV video?";

/// A tiny random checkpoint whose tokenizer has seen the prompt's words, the box's digits too.
fn tiny_qwen(dir: &Path, template: &str) -> PathBuf {
    common::tiny_qwen(dir, &[QUESTION, template, "[0.125, 0.375, 0.625, 0.875] yes no"])
}

/// A 2 FPS clip of the given UAV frames in order; its middle (1 s of 2 s) is the third.
fn write_clip(path: &Path, frames: &[PathBuf]) {
    let images: Vec<_> = frames.iter().map(|f| motionvl_data::cvaa::UavView::Image(f.clone()).load().expect("UAV frame")).collect();
    let (h, w) = (images[0].shape()[0], images[0].shape()[1]);
    let mut writer = VideoWriter::create(path, w, h, &EncodeSettings { frame_rate: (2, 1), ..EncodeSettings::default() }).expect("writer");
    for image in &images {
        writer.push(image.view()).expect("frame");
    }
    writer.finish().expect("clip");
}

/// Wraps the evaluator's own preparer and keeps, per question, the user turn and the decoded
/// token ids the model is given.
struct Recording {
    inner: QwenPreparer,
    tokenizer: QwenTokenizer,
    seen: Arc<Mutex<Vec<(String, String, String)>>>,
}

impl Prepare for Recording {
    fn prepare(&self, items: &[&Item]) -> motionvl_eval::Result<PreparedBatch> {
        let batch = self.inner.prepare(items)?;
        let mut seen = self.seen.lock().expect("recording lock");
        for q in &batch.questions {
            let ids = &q.prompt.as_ref().expect("a tokenised prompt").input_ids;
            seen.push((q.id.clone(), q.prompt_text.clone(), self.tokenizer.decode(ids, false).expect("ids decode")));
        }
        Ok(batch)
    }
}

#[test]
fn readme_cvaa_commands_and_evaluate_run_records_and_prompts_each_box() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();

    // README: construct synth --satellite-only --out data/synth (2 training worlds of 8 frames
    // and 1 held-out world of 4, instead of 8 + 2 worlds of 48).
    let out = run(
        CONSTRUCT,
        &[
            "synth",
            "--satellite-only",
            "--out",
            "data/synth",
            "--train-worlds",
            "2",
            "--test-worlds",
            "1",
            "--satellite-train-frames",
            "8",
            "--satellite-test-frames",
            "4",
        ],
        d,
    );
    assert!(out.contains("cross-view pairs: data/synth/train/cvaa_pairs.jsonl (16 pairs), data/synth/test/cvaa_pairs.jsonl (4 pairs)"), "{out}");
    assert!(!d.join("data/synth/synth.json").exists(), "--satellite-only renders no clips");

    // README: both stages with the committed recipes (1 step each, batches of 8 for 16 pairs,
    // 56 px views instead of 112, which halves the time of every retrieval below; stage 2
    // starts from stage 1's checkpoint, which is checkpoint-1 here, not 480).
    let small = [
        "--max-steps",
        "1",
        "--optim.batch_size",
        "8",
        "--model.uav_size",
        "[56, 56]",
        "--model.satellite_size",
        "56",
        "--model.init.image_size",
        "56",
    ];
    let stage1 = config("configs/cvaa/synth.toml");
    let (_, log) = output(TRAIN, &[&["cvaa", "--config", &stage1][..], &small].concat(), d);
    assert!(log.contains("done: step 1"), "{log}");
    let stage2 = config("configs/cvaa/synth-hard.toml");
    run(TRAIN, &[&["cvaa", "--config", &stage2, "--model.init_from", "runs/cvaa-synth/checkpoint-1"][..], &small].concat(), d);
    let ckpt = "runs/cvaa-synth-hard/checkpoint-1";
    let resolved = std::fs::read_to_string(d.join("runs/cvaa-synth-hard/config.toml")).expect("resolved recipe");
    assert!(resolved.contains("same_image_batches = true") && resolved.contains("runs/cvaa-synth/checkpoint-1"), "{resolved}");

    // README: evaluate retrieve … --top-k 3 prints 3 boxes inside the image, best first.
    let (boxes, scores) = retrieve(d, ckpt, "data/synth/test/cvaa_uav/world-00-000.png", "data/synth/test/satellite/world-00.png", "3");
    assert_eq!((boxes.len(), scores.len()), (3, 3));
    assert!(scores.windows(2).all(|s| s[0] >= s[1]), "best first: {scores:?}");
    assert!(boxes.iter().all(|b| b.iter().all(|v| (0.0..=1.0).contains(v)) && b[0] < b[2] && b[1] < b[3]), "{boxes:?}");

    // README: evaluate pairs --cvaa CKPT --pairs FILE [--untrained].
    for extra in [&[][..], &["--untrained"][..]] {
        let mut args = vec!["pairs", "--cvaa", ckpt, "--pairs", "data/synth/test/cvaa_pairs.jsonl"];
        args.extend(extra);
        let report: Value = serde_json::from_str(&run(EVALUATE, &args, d)).expect("pairs report is JSON");
        assert_eq!((report["pairs"].as_u64(), report["drone_to_satellite"]["queries"].as_u64()), (Some(4), Some(4)), "{report}");
        assert_eq!(report["windowed"]["windows_per_image"].as_u64(), Some(211), "211 windows on a square image: {report}");
        assert!(report["windowed"]["random_hit_rate"].is_number() && report["satellite_to_drone"]["ap"].is_number(), "{report}");
    }

    // A LinkS²Bench manifest: a UAV clip with a satellite image, a UAV image with a satellite
    // image, and a clip alone. The clip's frames differ, so its middle frame is the one asked.
    let test = read_pairs(&d.join("data/synth/test/cvaa_pairs.jsonl")).expect("test pairs");
    let train = read_pairs(&d.join("data/synth/train/cvaa_pairs.jsonl")).expect("train pairs");
    let frame = |p: &motionvl_data::cvaa::Pair| match &p.uav {
        motionvl_data::cvaa::UavView::Image(path) => path.clone(),
        other => panic!("synthetic pairs are images, not {other:?}"),
    };
    write_clip(&d.join("clip.mp4"), &test.iter().map(frame).collect::<Vec<_>>());
    let uav_image = frame(&train[9]);
    let satellite_world_01 = train[9].satellite.clone();
    let rows = [
        json!({"question_id": "clip", "task": "Target Visibility", "question": QUESTION, "answer": "yes",
               "video_path": "clip.mp4", "satellite_image": "data/synth/test/satellite/world-00.png"}),
        json!({"question_id": "image", "task": "Target Visibility", "question": QUESTION, "answer": "no",
               "images": [uav_image, satellite_world_01]}),
        json!({"question_id": "video-only", "task": "Target Visibility", "question": QUESTION, "answer": "no", "video_path": "clip.mp4"}),
    ];
    std::fs::write(d.join("LINKS2.jsonl"), rows.iter().map(|r| format!("{r}\n")).collect::<String>()).expect("manifest");

    // What `evaluate retrieve` says for the same views: the clip's middle frame, the image.
    let middle = probe_video(&d.join("clip.mp4")).expect("probe").duration_s / 2.0;
    let (clip_box, clip_score) = retrieve(d, ckpt, &format!("clip.mp4@{middle}"), "data/synth/test/satellite/world-00.png", "1");
    let (image_box, image_score) = retrieve(d, ckpt, &uav_image.display().to_string(), &satellite_world_01.display().to_string(), "1");
    let (_, first_frame_score) = retrieve(d, ckpt, "clip.mp4@0", "data/synth/test/satellite/world-00.png", "1");
    // After one training step two frames may share their best window, not its score: the score
    // tells the middle frame from the first.
    assert!(
        (first_frame_score[0] - clip_score[0]).abs() > 1e-4,
        "the clip's first and middle frames score alike: {first_frame_score:?} {clip_score:?}"
    );

    // README: evaluate run --config configs/eval/links2bench-3b.toml --manifest LINKS2.jsonl
    // --cvaa CKPT --out runs/links2-cvaa (with a tiny random checkpoint on the CPU, 4 new tokens
    // and small frames instead of Qwen2.5-VL-3B on CUDA).
    let template = RunConfig::from_file(&repo_root().join("configs/eval/links2bench-3b.toml")).expect("config").cvaa.template;
    let qwen = tiny_qwen(d, &template);
    let qwen_arg = qwen.display().to_string();
    let small = ["--checkpoint", &qwen_arg, "--device", "cpu", "--max-new-tokens", "4", "--min-pixels", "3136", "--max-pixels", "3136", "--quiet"];
    let eval_config = config("configs/eval/links2bench-3b.toml");
    let mut args = vec!["run", "--config", &eval_config, "--manifest", "LINKS2.jsonl", "--cvaa", ckpt, "--out", "runs/links2-cvaa"];
    args.extend(small);
    run(EVALUATE, &args, d);
    let predictions: Vec<Value> = std::fs::read_to_string(d.join("runs/links2-cvaa/predictions.jsonl"))
        .expect("predictions")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let by_id = |id: &str| predictions.iter().find(|p| p["question_id"] == id).unwrap_or_else(|| panic!("no prediction for {id}"));
    let recorded =
        |id: &str| -> [f64; 4] { serde_json::from_value(by_id(id)["cvaa_box"].clone()).unwrap_or_else(|e| panic!("{id}'s cvaa_box: {e}")) };
    assert_eq!(predictions.len(), 3);
    assert_eq!(recorded("clip"), clip_box[0], "the clip's box is the one retrieved for its middle frame");
    assert_eq!(recorded("image"), image_box[0]);
    assert!((by_id("clip")["cvaa_score"].as_f64().expect("score") - clip_score[0]).abs() < 1e-6, "the middle frame's score");
    assert!((by_id("image")["cvaa_score"].as_f64().expect("score") - image_score[0]).abs() < 1e-6);
    assert!(by_id("video-only")["cvaa_box"].is_null(), "no satellite image, no box");

    // README: evaluate prompts --bench links2 --cvaa CKPT --manifest FILE --out prompts.jsonl
    // writes the same boxes in the prompts, for a model outside the toolkit.
    run(EVALUATE, &["prompts", "--bench", "links2", "--cvaa", ckpt, "--manifest", "LINKS2.jsonl", "--out", "prompts.jsonl"], d);
    let prompts: Vec<Value> =
        std::fs::read_to_string(d.join("prompts.jsonl")).expect("prompts").lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let prompt_box =
        |id: &str| prompts.iter().find(|p| p["question_id"] == id).map(|p| p["box"].clone()).unwrap_or_else(|| panic!("no prompt for {id}"));
    assert_eq!((prompt_box("clip"), prompt_box("image"), prompt_box("video-only")), (json!(clip_box[0]), json!(image_box[0]), Value::Null));

    // The prompt the model saw: the same run in-process, recording the evaluator's own inputs.
    let mut cfg = RunConfig::from_file(&repo_root().join("configs/eval/links2bench-3b.toml")).expect("config");
    cfg.manifest = d.join("LINKS2.jsonl");
    cfg.out = d.join("runs/links2-cvaa-recorded");
    cfg.cvaa.checkpoint = Some(d.join(ckpt));
    cfg.model.checkpoint = qwen_arg.clone();
    cfg.model.device = motionvl_models::device::DeviceName::Cpu;
    cfg.generation.max_new_tokens = 4;
    (cfg.protocol.min_pixels, cfg.protocol.max_pixels) = (3136, 3136);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tokenizer = QwenTokenizer::from_file(qwen.join("tokenizer.json")).expect("tokenizer");
    motionvl_eval::run_with(&cfg, false, &Default::default(), &mut |bench| {
        let (inner, generator) = load_qwen(&cfg, bench)?;
        let recording = Recording { inner, tokenizer: tokenizer.clone(), seen: seen.clone() };
        Ok((Box::new(recording), Box::new(generator)))
    })
    .expect("recorded run");
    let seen = seen.lock().expect("recording").clone();
    assert_eq!(seen.len(), 3);
    for (id, bbox) in [("clip", clip_box[0]), ("image", image_box[0])] {
        let b = bbox.map(|v| format!("{v:.3}"));
        let prior = template.replace("{box}", &format!("[{}, {}, {}, {}]", b[0], b[1], b[2], b[3]));
        let (_, text, tokens) = seen.iter().find(|s| s.0 == id).unwrap_or_else(|| panic!("{id} was not asked"));
        assert!(text.contains(QUESTION) && text.contains(&prior), "{id}: {text}");
        assert!(tokens.contains(&format!("{QUESTION}\n{prior}")), "{id}: the model's tokens lack the prior: {tokens}");
    }
    let (_, text, _) = seen.iter().find(|s| s.0 == "video-only").expect("video-only asked");
    assert!(!text.contains("Alignment prior"), "{text}");
}
