//! A tiny random Qwen2.5-VL checkpoint evaluated end to end on a SIS-Bench manifest and videos
//! written here: real decoding with the evaluation frame plan, the chat template, batched
//! left-padded greedy generation with the KV cache, then scoring and every report file.

mod common;

use std::path::{Path, PathBuf};

use candle_core::Device;
use motionvl_eval::config::RunConfig;
use motionvl_eval::predictions::read_predictions;
use motionvl_eval::{Results, run};
use motionvl_models::lora::{LoraConfig, LoraWeights};
use motionvl_models::qwen25vl::Qwen25Vl;
use serde_json::json;

const QUESTION: &str = "How does the drone move in this clip?";
const OPTIONS: [&str; 4] = ["move forward", "move backward", "ascend", "descend"];

/// A tiny Qwen2.5-VL-shaped checkpoint with a tokenizer trained on the prompts' words; the
/// config's token ids come from that tokenizer.
fn tiny_checkpoint(dir: &Path) -> PathBuf {
    let corpus: Vec<String> =
        std::iter::once(QUESTION.to_string()).chain(OPTIONS.iter().map(|o| o.to_string())).chain(common::mcq_prompt_words()).collect();
    common::tiny_checkpoint(dir, &corpus, 300, 7)
}

fn manifest(dir: &Path) -> PathBuf {
    let rows = [("e1", "Action Recognition", "C", 40u8), ("e2", "Action Recognition", "A", 90), ("e3", "Object Existence", "B", 150)];
    let mut text = String::new();
    for (id, task, answer, shade) in rows {
        common::write_clip(&dir.join(format!("{id}.mp4")), shade);
        let options: serde_json::Map<String, serde_json::Value> =
            OPTIONS.iter().enumerate().map(|(i, o)| (((b'A' + i as u8) as char).to_string(), json!(o))).collect();
        let row = json!({"question_id": id, "task_type": task, "video_path": format!("{id}.mp4"),
                         "question": QUESTION, "options": options, "answer": answer});
        text.push_str(&format!("{row}\n"));
    }
    let path = dir.join("sis.jsonl");
    std::fs::write(&path, text).expect("manifest");
    path
}

fn config(dir: &Path, checkpoint: &Path, manifest: &Path, out: &str, batch_size: usize) -> RunConfig {
    let mut cfg = RunConfig { bench: "sisbench".into(), manifest: manifest.to_path_buf(), out: dir.join(out), ..RunConfig::default() };
    cfg.model.checkpoint = checkpoint.display().to_string();
    cfg.generation.batch_size = batch_size;
    cfg.generation.max_new_tokens = 6;
    // Small frames keep the tiny model fast; the frame plan is the protocol's (2 s → 2 FPS).
    cfg.protocol.min_pixels = 56 * 56;
    cfg.protocol.max_pixels = 56 * 56;
    cfg
}

fn outputs(path: &Path) -> Vec<(String, String)> {
    read_predictions(path).expect("predictions").into_iter().map(|p| (p.question_id, p.prediction)).collect()
}

#[test]
fn tiny_checkpoint_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let manifest = manifest(dir.path());

    // Batched: three questions in batches of two (the second batch has one row).
    let cfg = config(dir.path(), &checkpoint, &manifest, "batched", 2);
    let summary = run(&cfg, false).expect("evaluation runs");
    assert_eq!((summary.generated, summary.resumed, summary.failed.len()), (3, 0, 0));
    let batched = outputs(&cfg.out.join("predictions.jsonl"));
    assert_eq!(batched.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(), ["e1", "e2", "e3"]);
    assert!(batched.iter().all(|(_, text)| !text.contains("<|im_end|>")), "special tokens are stripped");

    // Report files present and consistent with the predictions.
    for name in ["run.json", "results.json", "scored.jsonl", "by_task.csv", "by_dimension.csv", "by_level.csv", "results.md", "chart.png"] {
        assert!(cfg.out.join(name).is_file(), "{name} written");
    }
    let r = Results::read_run(&cfg.out).expect("results.json reads back");
    assert_eq!(r, summary.results);
    assert_eq!((r.questions, r.predicted, r.missing), (3, 3, 0));
    assert_eq!(r.run, "batched");
    assert_eq!(r.by_task.get("Action Recognition").map(|e| e.n), Some(2));
    assert_eq!(r.by_task.get("Object Existence").map(|e| e.n), Some(1));
    assert_eq!(r.by_dimension.iter().map(|(d, _)| d.as_str()).collect::<Vec<_>>(), ["spatial", "self"]);
    let scored = std::fs::read_to_string(cfg.out.join("scored.jsonl")).expect("scored");
    let correct = scored.lines().filter(|l| l.contains("\"value\":1.0")).count();
    assert_eq!(correct, r.overall.correct, "scored.jsonl agrees with results.json");
    let md = std::fs::read_to_string(cfg.out.join("results.md")).expect("markdown");
    assert!(md.contains("| **Model** | **OE** | **ARg** | **Overall** |"), "{md}");
    let png = image::open(cfg.out.join("chart.png")).expect("chart decodes");
    assert_eq!(png.height(), 480);

    // One question at a time gives the same greedy outputs: left padding is invisible.
    let single = config(dir.path(), &checkpoint, &manifest, "single", 1);
    run(&single, false).expect("unbatched run");
    assert_eq!(outputs(&single.out.join("predictions.jsonl")), batched, "batch size changes no output");

    // A freshly initialised LoRA adapter (B = 0) loads, attaches and changes nothing; the same
    // adapter with B filled in answers as the base model with the update folded into its
    // weights (W + scale·BA, written as a plain checkpoint) does.
    let files = motionvl_models::CheckpointFiles::from_dir(&checkpoint).expect("files");
    let model = Qwen25Vl::load(&files, candle_core::DType::F32, &Device::Cpu).expect("model loads");
    let lora =
        LoraWeights::init(&model.linear_shapes(), &LoraConfig { rank: 4, alpha: 8.0, ..LoraConfig::default() }, 3, &Device::Cpu).expect("lora");
    let zero = dir.path().join("adapter-zero");
    lora.save_peft(&zero, None).expect("adapter saved");
    for pair in lora.modules.values() {
        let n = pair.b.elem_count();
        let values: Vec<f32> = (0..n).map(|i| 0.5 * (i as f32 * 0.37).sin()).collect();
        let b = candle_core::Tensor::from_vec(values, pair.b.shape(), &Device::Cpu).expect("tensor");
        pair.b.set(&b).expect("set B");
    }
    let trained = dir.path().join("checkpoint-7");
    lora.save_peft(&trained.join("adapter"), None).expect("adapter saved");

    let mut with_zero = config(dir.path(), &checkpoint, &manifest, "adapter-zero", 2);
    with_zero.model.adapter = Some(zero);
    with_zero.motion.no_motion = true;
    run(&with_zero, false).expect("run with a zero adapter");
    assert_eq!(outputs(&with_zero.out.join("predictions.jsonl")), batched);

    // A trainer checkpoint folder is accepted: its adapter/ is used.
    let mut with_trained = config(dir.path(), &checkpoint, &manifest, "adapter-trained", 2);
    with_trained.model.adapter = Some(trained);
    with_trained.motion.no_motion = true;
    run(&with_trained, false).expect("run with a trained adapter");
    let adapted = outputs(&with_trained.out.join("predictions.jsonl"));
    let mut tensors = candle_core::safetensors::load(checkpoint.join("model.safetensors"), &Device::Cpu).expect("base weights");
    lora.merge_into(&mut tensors).expect("merges");
    let merged = dir.path().join("merged-model");
    motionvl_models::init::save_checkpoint(&merged, &model.config().to_hub_json(), &tensors).expect("merged checkpoint saved");
    std::fs::copy(checkpoint.join("tokenizer.json"), merged.join("tokenizer.json")).expect("tokenizer copied");
    let folded = config(dir.path(), &merged, &manifest, "merged", 2);
    run(&folded, false).expect("run of the merged model");
    assert_eq!(adapted, outputs(&folded.out.join("predictions.jsonl")), "the adapter at run time answers as its merged weights");
    // Not vacuous: the update changes what the model answers.
    assert_ne!(adapted, batched, "the filled-in adapter answers as the base model");
}

#[test]
fn motion_aware_checkpoint_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let checkpoint = tiny_checkpoint(dir.path());
    let manifest = manifest(dir.path());
    let base = config(dir.path(), &checkpoint, &manifest, "visual", 2);
    run(&base, false).expect("visual-only run");
    let visual = outputs(&base.out.join("predictions.jsonl"));

    // Step 0 (connector's last layer zero): exactly the visual-only answers, through the whole
    // flow → pseudo-image → motion encoder → connector path.
    let mut step0 = config(dir.path(), &checkpoint, &manifest, "motion-step0", 2);
    step0.model.adapter = Some(common::motion_checkpoint(dir.path(), &checkpoint, "checkpoint-0", false));
    run(&step0, false).expect("motion run at step 0");
    assert_eq!(outputs(&step0.out.join("predictions.jsonl")), visual);
    assert!(step0.out.join("flow-cache").is_dir(), "flows are cached in the run folder");

    let mut trained = config(dir.path(), &checkpoint, &manifest, "motion-trained", 2);
    trained.model.adapter = Some(common::motion_checkpoint(dir.path(), &checkpoint, "checkpoint-9", true));
    run(&trained, false).expect("motion run");
    // A wiring check, not a value check (the motion-aware answers are checked against an
    // independent computation in `likelihood.rs`): the motion tokens reach the decoder.
    assert_ne!(outputs(&trained.out.join("predictions.jsonl")), visual, "wiring: the trained connector does not reach the answers");

    // The estimator must be the one the checkpoint was trained with, unless forced.
    let mut other = trained.clone();
    other.out = dir.path().join("motion-other");
    other.motion.estimator = Some("dis-fast".parse().expect("a motion choice"));
    let err = run(&other, false).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("--force-motion"), "{err}");
    other.motion.estimator = Some("none".parse().expect("a motion choice"));
    let err = run(&other, false).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("motion-aware"), "{err}");

    // --motion on a visual-only checkpoint has nothing to drive.
    let mut plain = config(dir.path(), &checkpoint, &manifest, "plain-motion", 2);
    plain.motion.estimator = Some("dis".parse().expect("a motion choice"));
    let err = run(&plain, false).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("no motion branch"), "{err}");
}
