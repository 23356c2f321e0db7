//! The README's command blocks, run with the flags it gives on a fresh folder. Where a command
//! needs what CI lacks (Qwen2.5-VL-3B, SIS-Motion-54K, MOFNet weights, a GPU), it runs with the
//! same flags on the project's tiny substitutes, and the comment above it says which.
//! The CVAA block is `cvaa.rs`, `train merge` of a motion run `merge_motion.rs`,
//! `construct synth --satellite` `construct.rs`.

mod common;

use std::path::Path;

use common::{failure, output, repo_root};
use serde_json::{Value, json};

const CONSTRUCT: &str = env!("CARGO_BIN_EXE_construct");
const TRAIN: &str = env!("CARGO_BIN_EXE_train");
const FLOW: &str = env!("CARGO_BIN_EXE_flow");
const EVALUATE: &str = env!("CARGO_BIN_EXE_evaluate");

fn read_json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Flow files (not folders, not the weights' digest notes) under `dir`.
fn cached_flows(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| {
        entries.flatten().map(|e| if e.path().is_dir() { cached_flows(&e.path()) } else { usize::from(!e.file_name().to_string_lossy().starts_with('.')) }).sum()
    })
}

// "Network flow estimators: extract once, train and evaluate from the cache", steps 1–4.
// `configs/sft/sis-motion-3b.toml` needs SIS-Motion-54K and Qwen2.5-VL-3B, and MOFNet needs
// `MOF_sintel.pth`: the recipe here is `configs/sft/tiny.toml` (its eight clips, a model trained
// from scratch) with the 3B recipe's `[motion]` section naming `dis`, which needs no weights, so
// `--weights`/`--flow-weights` are left out. The evaluation config is the same substitute of
// `configs/eval/sisbench-3b.toml`: the tiny run's adapter on 4 frames of 56×56.
#[test]
fn the_flow_cache_workflow_trains_and_evaluates_from_the_cache_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let root = repo_root();
    let tiny = std::fs::read_to_string(root.join("configs/sft/tiny.toml")).expect("tiny recipe");
    let quoted = |p: &Path| format!("{:?}", p.display().to_string());
    let recipe = tiny
        .replace("\"runs/tiny\"", "\"runs/sis-motion-tiny\"")
        .replace("\"configs/models/tiny.json\"", &quoted(&root.join("configs/models/tiny.json")))
        .replace("\"tests/data/tiny-sft/train.jsonl\"", &quoted(&root.join("tests/data/tiny-sft/train.jsonl")))
        .replace("[optim]", "[optim]\nmax_steps = 1")
        + "\n[motion]\nestimator = \"dis\"\n";
    assert_ne!(recipe, tiny);
    std::fs::write(d.join("recipe.toml"), &recipe).expect("recipe");
    let manifest = root.join("tests/data/tiny-sft/train.jsonl").display().to_string();

    // 1. train sft --config RECIPE --check-data: one JSON line, no model loaded.
    let (line, _) = output(TRAIN, &["sft", "--config", "recipe.toml", "--check-data"], d);
    let counts: Value = serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("not one JSON line: {line}: {e}"));
    for key in ["samples", "kept", "fitted", "dropped", "failed", "max_tokens", "mean_tokens"] {
        assert!(counts[key].is_number(), "{key} missing: {line}");
    }
    assert_eq!((counts["samples"].as_u64(), counts["kept"].as_u64(), counts["dropped"].as_u64()), (Some(8), Some(8), Some(0)), "{line}");
    assert!(!d.join("runs/sis-motion-tiny/base-model").exists(), "--check-data loads and writes no model");

    // 3 first, on an empty cache: a missing flow is an error before the first step.
    let refused = failure(TRAIN, &["sft", "--config", "recipe.toml", "--flow-cache-only"], d);
    assert!(refused.contains("cache"), "{refused}");
    assert!(!d.join("runs/sis-motion-tiny/checkpoint-1").exists(), "no step was taken");

    // 2. Two disjoint shards at once into the run's own cache.
    let shards: Vec<_> = (0..2)
        .map(|i| {
            std::process::Command::new(FLOW)
                .args(["extract", "--config", "recipe.toml", "--manifest", &manifest, "--shard", &format!("{i}/2")])
                .current_dir(d)
                .output()
                .expect("flow extract runs")
        })
        .collect();
    for out in &shards {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert_eq!(cached_flows(&d.join("runs/sis-motion-tiny/flow-cache")), 8, "one flow per clip, in <output_dir>/flow-cache");

    // 3. Train from the cache only; train.log counts the hits.
    output(TRAIN, &["sft", "--config", "recipe.toml", "--flow-cache-only"], d);
    let log = std::fs::read_to_string(d.join("runs/sis-motion-tiny/train.log")).expect("train.log");
    // Hits count lookups (the pre-flight check of all 8, then the loader's), so only the
    // misses are exact.
    let counts = log.lines().find_map(|l| l.strip_prefix("flow cache: ")).unwrap_or_else(|| panic!("no flow cache line: {log}"));
    let hits: usize = counts.split(' ').next().and_then(|h| h.parse().ok()).unwrap_or_else(|| panic!("{counts}"));
    assert!(hits >= 8 && counts.ends_with("hits, 0 computed, 0 repaired"), "{log}");
    assert!(d.join("runs/sis-motion-tiny/checkpoint-1/motion.safetensors").is_file());

    // 4. The evaluation protocol's own frames, then evaluate from the cache only.
    let rows: String = [("q1", "right-red", "red", "B"), ("q2", "up-blue", "blue", "C")]
        .iter()
        .map(|(id, clip, colour, answer)| {
            let row = json!({"question_id": id, "task_type": "Action Recognition", "video_path": root.join(format!("tests/data/tiny-sft/{clip}.mp4")),
                             "question": format!("In which direction does the {colour} square move?"),
                             "options": {"A": "left", "B": "right", "C": "up", "D": "down"}, "answer": answer});
            format!("{row}\n")
        })
        .collect();
    std::fs::write(d.join("sisbench.jsonl"), rows).expect("manifest");
    let eval = "bench = \"sisbench\"\nmanifest = \"sisbench.jsonl\"\nout = \"runs/eval\"\n[model]\ncheckpoint = \"runs/sis-motion-tiny/base-model\"\nadapter = \"runs/sis-motion-tiny/checkpoint-1\"\ndevice = \"cpu\"\n[generation]\nbatch_size = 2\nmax_new_tokens = 4\n[protocol]\nmax_frames = 4\nmin_pixels = 3136\nmax_pixels = 3136\n";
    std::fs::write(d.join("sisbench-tiny.toml"), eval).expect("eval config");
    let refused = failure(EVALUATE, &["run", "--config", "sisbench-tiny.toml", "--flow-cache-only"], d);
    assert!(refused.contains("cache"), "{refused}");
    let (_, extracted) = output(FLOW, &["extract", "--config", "sisbench-tiny.toml", "--manifest", "sisbench.jsonl"], d);
    assert!(extracted.contains("2 of 2 flows; computed 2"), "{extracted}");
    let (_, answered) = output(EVALUATE, &["run", "--config", "sisbench-tiny.toml", "--flow-cache-only"], d);
    assert!(answered.contains("2 answered now"), "{answered}");
    let record = read_json(&d.join("runs/eval/run.json"));
    assert!(record["weights"]["motion"].is_string(), "evaluated through the motion branch: {record}");
}

// "UAV-DualCog construction (DCCS)": the synthetic example. One landmark instead of the default
// three keeps it to a third of the time; the checkpoint is a tiny random one on 56×56 frames
// with 4 new tokens, for `DIR`.
#[test]
fn the_synthetic_dualcog_set_builds_and_evaluates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let (out, _) = output(CONSTRUCT, &["synth", "--dccs", "--out", "data/synth", "--dccs-landmarks", "1"], d);
    assert!(out.contains("stage3.json: 4 rows, 2 missions, 0 missions rejected") && out.contains("stage4.json: 8 rows"), "{out}");
    for file in ["valid_instances.json", "points.ply", "stage3.json", "stage4.json", "videos", "images"] {
        assert!(d.join("data/synth/dccs").join(file).exists(), "data/synth/dccs/{file} missing");
    }
    let checkpoint = common::tiny_qwen(d, &["Which landmark? Answer in JSON", "{\"answer\": \"A\"}"]);
    let checkpoint = checkpoint.display().to_string();
    for (stage, out, rows) in [("stage3", "runs/dccs-video", 4), ("stage4", "runs/dccs-image", 8)] {
        let manifest = format!("data/synth/dccs/{stage}.json");
        let args = ["run", "--checkpoint", &checkpoint, "--bench", "dualcog", "--manifest", &manifest, "--out", out, "--max-new-tokens", "4", "--min-pixels", "3136", "--max-pixels", "3136", "--quiet"];
        output(EVALUATE, &args, d);
        let results = read_json(&d.join(out).join("results.json"));
        assert_eq!((results["benchmark"].as_str(), results["questions"].as_u64(), results["missing"].as_u64()), (Some("dualcog"), Some(rows), Some(0)), "{results}");
    }
}

// Commands table: `flow extract --video FILE --plan training|sisbench|uniform:N|all --out DIR`,
// on one of the committed 2.5 s clips (20 frames at 8 FPS). The frames each plan takes,
// worked out by hand: `sisbench` is 2 FPS under 16 s, 5 frames rounded down to an even 4, at
// linspace(0, 19, 4).round(); `uniform:4` the same four; `training` 2 FPS is 5 frames, raised to
// its minimum of 8, at linspace(0, 19, 8).round(); `all` every frame.
#[test]
fn flow_extract_takes_each_plans_frames_from_a_video() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let video = repo_root().join("tests/data/tiny-sft/right-red.mp4").display().to_string();
    let plans: [(&str, Vec<usize>); 4] = [
        ("training", vec![0, 3, 5, 8, 11, 14, 16, 19]),
        ("sisbench", vec![0, 6, 13, 19]),
        ("uniform:4", vec![0, 6, 13, 19]),
        ("all", (0..20).collect()),
    ];
    for (plan, frames) in plans {
        let out = format!("out-{}", plan.replace(':', "-"));
        let (_, report) = output(FLOW, &["extract", "--video", &video, "--plan", plan, "--out", &out], d);
        if plan != "all" {
            assert!(report.contains("1 of 1 flows; computed 1, already cached 0"), "{plan}: {report}");
        }
        let bytes = std::fs::read(d.join(&out).join("right-red.safetensors")).expect("flow file");
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).expect("safetensors header");
        let taken: Vec<usize> = meta.metadata().as_ref().and_then(|m| m.get("frame_indices")).and_then(|f| serde_json::from_str(f).ok()).unwrap_or_else(|| panic!("{plan}: no frame_indices"));
        assert_eq!(taken, frames, "{plan}");
        let flows = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors").tensor("flows").expect("flows").shape().to_vec();
        assert_eq!((flows[0], flows[1]), (frames.len() - 1, 2), "{plan}: one flow per consecutive pair");
    }
}
