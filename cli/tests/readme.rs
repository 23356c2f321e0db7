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
    serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Flow entries in the cache at `dir`.
fn cached_flows(dir: &Path) -> usize {
    motionvl_flow::FlowCache::new(dir).and_then(|c| c.entry_count()).unwrap_or(0)
}

// "Network flow estimators: extract once, train and evaluate from the cache", steps 1–4.
// `configs/sft/sis-motion-3b.toml` needs SIS-Motion-54K and Qwen2.5-VL-3B, and MOFNet needs
// `MOF_kitti.pth`: the recipe here is `configs/sft/tiny.toml` (its eight clips, a model trained
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
    let eval = "bench = \"sisbench\"\nmanifest = \"sisbench.jsonl\"\nout = \"runs/eval\"\nprotocol_kind = \"paper\"\n[model]\ncheckpoint = \"runs/sis-motion-tiny/base-model\"\nadapter = \"runs/sis-motion-tiny/checkpoint-1\"\ndevice = \"cpu\"\n[generation]\nbatch_size = 2\nmax_new_tokens = 4\n[protocol]\nmax_frames = 4\nmin_pixels = 3136\nmax_pixels = 3136\n";
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
        let args = [
            "run",
            "--checkpoint",
            &checkpoint,
            "--bench",
            "dualcog",
            "--manifest",
            &manifest,
            "--out",
            out,
            "--max-new-tokens",
            "4",
            "--min-pixels",
            "3136",
            "--max-pixels",
            "3136",
            "--quiet",
        ];
        output(EVALUATE, &args, d);
        let results = read_json(&d.join(out).join("results.json"));
        assert_eq!(
            (results["benchmark"].as_str(), results["questions"].as_u64(), results["missing"].as_u64()),
            (Some("dualcog"), Some(rows), Some(0)),
            "{results}"
        );
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
        let taken: Vec<usize> = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("frame_indices"))
            .and_then(|f| serde_json::from_str(f).ok())
            .unwrap_or_else(|| panic!("{plan}: no frame_indices"));
        assert_eq!(taken, frames, "{plan}");
        let flows = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors").tensor("flows").expect("flows").shape().to_vec();
        assert_eq!((flows[0], flows[1]), (frames.len() - 1, 2), "{plan}: one flow per consecutive pair");
    }
}

/// `{question_id, prediction}` lines answering every question of a manifest with `answer`.
fn predictions(manifest: &Path, out: &Path, answer: &dyn Fn(&Value) -> String) {
    let rows = read_json(manifest);
    let lines: String = rows
        .as_array()
        .expect("a JSON list")
        .iter()
        .map(|r| format!("{}\n", json!({"question_id": r["question_id"], "prediction": answer(r)})))
        .collect();
    std::fs::write(out, lines).expect("predictions");
}

// "Building benchmarks". Substitutes for the real sources: VisDrone-style sequences are one
// folder of 120 numbered PNGs (4 s at 30 FPS) and four of the committed 2.5 s clips, with
// `--concatenated 3 --shuffled 1` instead of 300 and 120; the annotations are the index it
// writes plus objects, landmarks and actions made up here (enough for three of the 13 tasks:
// every task's rule is tested on the library, `eval/tests/construct_scoring.rs`); AirScape's
// clips are five empty files with its names; TravelUAV's `merged_data.json` two episodes.
#[test]
fn the_benchmark_builders_write_what_evaluate_scores() {
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let sequences = d.join("visdrone/sequences");
    std::fs::create_dir_all(sequences.join("uav0000013")).expect("sequence folder");
    for i in 0..120u32 {
        let frame = image::RgbImage::from_fn(64, 48, |x, y| image::Rgb([((x + i) % 64 * 4) as u8, (y * 5) as u8, 100]));
        frame.save(sequences.join(format!("uav0000013/{:07}.png", i + 1))).expect("frame");
    }
    for clip in ["right-red", "up-blue", "left-red", "down-blue"] {
        std::fs::copy(repo_root().join(format!("tests/data/tiny-sft/{clip}.mp4")), sequences.join(format!("{clip}.mp4"))).expect("clip");
    }
    let (out, _) = output(
        CONSTRUCT,
        &["sisbench-videos", "--input", "visdrone/sequences", "--out", "bench", "--frame-folder-fps", "30", "--concatenated", "3", "--shuffled", "1"],
        d,
    );
    assert!(
        out.starts_with("10 videos from 5 sources in bench (10 encoded, 0 already there"),
        "5 single, 3 concatenated, 1 of each shuffled kind: {out}"
    );
    let index = std::fs::read_to_string(d.join("bench/videos.jsonl")).expect("videos.jsonl");
    let (categories, colours) = (["car", "truck", "bus", "person", "bicycle", "boat"], ["red", "blue", "white", "black", "green", "yellow"]);
    let (landmarks, actions) = (
        ["water tower", "church", "bridge", "stadium", "silo", "lighthouse", "factory", "school"],
        ["fly forward", "turn left", "ascend", "descend", "fly backward", "turn right"],
    );
    let annotations: String = index
        .lines()
        .enumerate()
        .map(|(i, line)| {
            let mut row: Value = serde_json::from_str(line).expect("an index row");
            let d = row["duration_s"].as_f64().expect("duration_s");
            let k = [0.0, 1.0];
            row["objects"] = json!(k.map(|k| json!({"category": categories[(i + k as usize) % 6], "attribute": colours[(i + 2 * k as usize) % 6],
                                                   "intervals": [[0.1 * k, d * 0.5 + 0.1 * k]], "positions": [{"t": 0.1 * k + 0.05, "x": 0.2 + 0.3 * k, "y": 0.7 - 0.2 * k}]})));
            row["landmarks"] = json!(k.map(|k| json!({"name": landmarks[(i + k as usize) % 8], "intervals": [[d * k / 2.0, d * (k + 1.0) / 2.0]]})));
            row["actions"] = json!(k.map(|k| json!({"action": actions[(i + k as usize) % 6], "start_s": d * k / 2.0, "end_s": d * (k + 1.0) / 2.0})));
            format!("{row}\n")
        })
        .collect();
    std::fs::write(d.join("bench/annotations.jsonl"), annotations).expect("annotations");
    let (out, _) = output(CONSTRUCT, &["sisbench-qa", "--annotations", "bench/annotations.jsonl", "--out", "bench/sisbench.json"], d);
    assert!(out.starts_with("12 questions about 10 videos in bench/sisbench.json"), "{out}");

    // evaluate score --manifest bench/sisbench.json --predictions preds.jsonl --out scores: the
    // answers score 100%; one letter throughout scores 25% on every task (letters balanced).
    let manifest = d.join("bench/sisbench.json");
    predictions(&manifest, &d.join("preds.jsonl"), &|r| r["answer"].as_str().expect("answer").to_string());
    output(EVALUATE, &["score", "--manifest", "bench/sisbench.json", "--predictions", "preds.jsonl", "--out", "scores"], d);
    let results = read_json(&d.join("scores/results.json"));
    assert_eq!((results["overall"]["correct"].as_u64(), results["overall"]["n"].as_u64()), (Some(12), Some(12)), "{results}");
    predictions(&manifest, &d.join("letter-a.jsonl"), &|_| "A".into());
    output(EVALUATE, &["score", "--manifest", "bench/sisbench.json", "--predictions", "letter-a.jsonl", "--out", "scores-a"], d);
    let by_task = read_json(&d.join("scores-a/results.json"))["by_task"].clone();
    assert!(by_task.as_object().is_some_and(|t| t.len() == 3 && t.values().all(|e| e["accuracy"].as_f64() == Some(0.25))), "{by_task}");

    // construct split --input airscape/videos --out airscape/split --webuav-benchmark 700 (1 here).
    std::fs::create_dir_all(d.join("airscape/videos")).expect("clips folder");
    for clip in [
        "00001_urbanvideo_test_A_1.mp4",
        "00002_NAT2021_train_N_1.mp4",
        "00005_NAT2021_test_N_2.mp4",
        "00003_WebUAV3M_test_W_1.mp4",
        "00004_WebUAV3M_train_W_1.mp4",
    ] {
        std::fs::write(d.join("airscape/videos").join(clip), b"").expect("clip");
    }
    output(CONSTRUCT, &["split", "--input", "airscape/videos", "--out", "airscape/split", "--webuav-benchmark", "1"], d);
    let benchmark = std::fs::read_to_string(d.join("airscape/split/benchmark.txt")).expect("benchmark.txt");
    let benchmark: Vec<&str> = benchmark.lines().collect();
    assert!(benchmark.contains(&"00001_urbanvideo_test_A_1.mp4") && benchmark.contains(&"00005_NAT2021_test_N_2.mp4"), "{benchmark:?}");
    assert_eq!(
        (benchmark.len(), benchmark.iter().filter(|c| c.contains("WebUAV3M")).count()),
        (3, 1),
        "UrbanVideo, NAT2021's test clip and one WebUAV3M clip: {benchmark:?}"
    );

    // construct nav --input merged_data.json --out bench/nav --video-pattern "videos/{id}.mp4",
    // then evaluate score --bench nav. The true paths, by the README's step rules: climb 9 m
    // (take-off), 30 m east (cruise), 25 m north (a 90° counter-clockwise turn: left); and 40 m
    // east, 30 m south (a clockwise turn: right), then 30 m east while descending 8 m (landing).
    let episodes = json!({"episodes": [
        {"episode_id": "e1", "trajectory": [[0, 0, 0, 0], [0, 0, 9, 0], [30, 0, 9, 0], [30, 25, 9, 0]]},
        {"episode_id": "e2", "trajectory": [[0, 0, 0, 0], [40, 0, 0, 0], [40, -30, 0, 0], [70, -30, -8, 0]]},
    ]});
    std::fs::write(d.join("merged_data.json"), episodes.to_string()).expect("episodes");
    output(CONSTRUCT, &["nav", "--input", "merged_data.json", "--out", "bench/nav", "--video-pattern", "videos/{id}.mp4"], d);
    let rows = read_json(&d.join("bench/nav/nav.json"));
    let kinds =
        |row: &Value| row["segments"].as_array().expect("segments").iter().map(|s| s["kind"].as_str().expect("kind").to_string()).collect::<Vec<_>>();
    assert_eq!(
        (rows[0]["video_path"].as_str(), kinds(&rows[0])),
        (Some("videos/e1.mp4"), vec!["take_off".to_string(), "cruise".into(), "turn_left".into()]),
        "{rows}"
    );
    assert_eq!(kinds(&rows[1]), ["cruise", "turn_right", "landing"], "{rows}");
    predictions(&d.join("bench/nav/nav.json"), &d.join("nav-preds.jsonl"), &|r| r["answer"].as_str().expect("answer").to_string());
    output(EVALUATE, &["score", "--bench", "nav", "--manifest", "bench/nav/nav.json", "--predictions", "nav-preds.jsonl", "--out", "nav-scores"], d);
    let results = read_json(&d.join("nav-scores/results.json"));
    assert_eq!(
        (results["benchmark"].as_str(), results["overall"]["correct"].as_u64(), results["overall"]["n"].as_u64()),
        (Some("nav"), Some(2), Some(2)),
        "{results}"
    );
}
