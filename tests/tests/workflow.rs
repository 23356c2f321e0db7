//! The paper's workflow as a researcher runs it: flows extracted once with the run's own config
//! and reused by training and evaluation (`--flow-cache-only`), long samples fitted to
//! `max_seq_len` rather than dropped, and runs that refuse to resume under changed settings.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::Device;
use motionvl_cli::config_media::{MotionOverrides, config_media};
use motionvl_data::budget::VideoLimits;
use motionvl_data::loader::MediaProcessor;
use motionvl_data::samples::{ReadOptions, read_training_samples};
use motionvl_data::video::{EncodeSettings, VideoWriter};
use motionvl_eval::config::RunConfig;
use motionvl_flow::extract::plan_jobs;
use motionvl_flow::media::MotionMedia;
use motionvl_flow::{FlowEstimator, PseudoImageConfig, estimator_by_name};
use motionvl_tests::repo_root;
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{Start, Trainer, check_data};

fn quoted(p: &Path) -> String {
    format!("{:?}", p.display().to_string())
}

/// The tiny recipe with the motion branch on DIS, its flows cached in `cache`.
fn tiny_motion(run: &Path, cache: &Path, extra: &[(&str, &str)]) -> Recipe {
    let root = repo_root();
    let mut overrides: Vec<(String, String)> = vec![
        ("output_dir".into(), quoted(run)),
        ("model.init_config".into(), quoted(&root.join("configs/models/tiny.json"))),
        ("data.train".into(), quoted(&root.join("tests/data/tiny-sft/train.jsonl"))),
        ("logging.progress_bar".into(), "false".into()),
        ("motion.estimator".into(), "\"dis\"".into()),
        ("motion.cache_dir".into(), quoted(cache)),
    ];
    overrides.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Recipe::load(&root.join("configs/sft/tiny.toml"), &overrides).expect("tiny recipe loads")
}

/// What `flow extract --config CONFIG --manifest MANIFEST` does (the binary is a thin wrapper
/// over these calls): every flow of the run, computed into the run's cache. Returns the count.
fn extract(config: &Path, manifest: &Path) -> usize {
    let settings = config_media(config, &MotionOverrides::default(), &Device::Cpu).expect("config reads");
    let media = settings.motion.clone();
    let (jobs, warning) = plan_jobs(&[], Some(manifest), Some(&settings), &media.qwen, None).expect("jobs");
    assert_eq!(warning, None);
    for job in &jobs {
        job.run(&media).expect("flow extracted");
    }
    assert_eq!(media.counts.snapshot(), (0, jobs.len(), 0), "every job computed once");
    jobs.len()
}

#[test]
fn flows_extracted_with_the_run_config_serve_training_and_evaluation() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (run, cache) = (dir.path().join("run"), dir.path().join("flow-cache"));
    let recipe = tiny_motion(&run, &cache, &[("optim.max_steps", "2"), ("checkpoint.every", "2")]);
    let recipe_file = dir.path().join("recipe.toml");
    std::fs::write(&recipe_file, recipe.to_toml()).expect("recipe written");
    let strict = Recipe { motion: motionvl_train::recipe::MotionSection { cache_only: true, ..recipe.motion.clone() }, ..recipe.clone() };

    // Nothing extracted yet: refused before the first step, naming video, frames and cache.
    let err = Trainer::new(&strict, None).err().expect("a cache-only run without flows fails").to_string();
    assert!(err.contains("no cached flow for") && err.contains(".mp4") && err.contains(&cache.display().to_string()), "{err}");
    assert!(!run.join("trainer_log.jsonl").exists(), "no step was taken");

    let train_file = repo_root().join("tests/data/tiny-sft/train.jsonl");
    assert_eq!(extract(&recipe_file, &train_file), 8);
    let logs = Trainer::new(&strict, None).expect("every flow is cached").run().expect("trains from the cache");
    assert_eq!(logs.len(), 2);
    let log = std::fs::read_to_string(run.join("train.log")).expect("train.log");
    assert!(log.contains(" hits, 0 computed"), "{log}");

    // Evaluation of the trained checkpoint, with its own protocol, reads only the cache too.
    let manifest = dir.path().join("sis.jsonl");
    let rows: String = read_training_samples(&train_file, &ReadOptions::default())
        .expect("samples")
        .items
        .iter()
        .map(|s| {
            let row = serde_json::json!({"question_id": s.id, "task_type": "Action Recognition", "video_path": s.videos[0],
                "question": "In which direction does the square move?", "options": {"A": "left", "B": "right", "C": "up", "D": "down"}, "answer": "B"});
            format!("{row}\n")
        })
        .collect();
    std::fs::write(&manifest, rows).expect("manifest");
    let eval_file = dir.path().join("eval.toml");
    let eval_toml = format!(
        "bench = \"sisbench\"\nmanifest = {}\nout = {}\n[model]\ncheckpoint = {}\nadapter = {}\n[generation]\nmax_new_tokens = 3\n[protocol]\nmin_pixels = 3136\nmax_pixels = 6272\n[motion]\ncache_dir = {}\n",
        quoted(&manifest),
        quoted(&dir.path().join("eval")),
        quoted(&run.join("base-model")),
        quoted(&run.join("checkpoint-2")),
        quoted(&dir.path().join("eval-cache")),
    );
    std::fs::write(&eval_file, eval_toml).expect("eval config");
    let mut eval = RunConfig::from_file(&eval_file).expect("eval config reads");
    eval.motion.cache_only = true;
    let err = motionvl_eval::run(&eval, false).expect_err("no flows for the eval protocol yet").to_string();
    assert!(err.contains("no cached flow for"), "{err}");
    assert_eq!(extract(&eval_file, &manifest), 8);
    let summary = motionvl_eval::run(&eval, false).expect("evaluates from the cache");
    assert_eq!(summary.generated, 8);
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("eval/run.json")).expect("run.json")).expect("json");
    assert_eq!(record["flow_cache"]["computed"], 0, "{record}");

    // The official protocol plans other frames (floor-linspace, its own pixel bounds): the
    // config says so with `protocol_kind`, and extraction follows it.
    let official_file = dir.path().join("eval-official.toml");
    let official_toml = std::fs::read_to_string(&eval_file)
        .expect("eval config")
        .replace("[model]", "protocol_kind = \"official\"\n[model]")
        .replace("eval-cache", "eval-official-cache")
        .replace("/eval\"", "/eval-official\"");
    std::fs::write(&official_file, official_toml).expect("official eval config");
    let mut official = RunConfig::from_file(&official_file).expect("official config reads");
    official.motion.cache_only = true;
    assert_eq!(extract(&official_file, &manifest), 8);
    let summary = motionvl_eval::run(&official, false).expect("evaluates from the cache under the official protocol");
    assert_eq!(summary.generated, 8, "no clip is left out: each has the official 8 frames or more");
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("eval-official/run.json")).expect("run.json")).expect("json");
    assert_eq!((record["flow_cache"]["computed"].as_u64(), record["flow_cache"]["hits"].as_u64()), (Some(0), Some(8)), "{record}");
}

#[test]
fn a_resume_under_a_changed_recipe_or_data_is_refused_naming_what_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shipped = repo_root().join("tests/data/tiny-sft");
    let train = dir.path().join("train.jsonl");
    std::fs::copy(shipped.join("train.jsonl"), &train).expect("copy");
    let run = dir.path().join("run");
    let recipe = |extra: &[(&str, &str)]| {
        // No warmup: step 1 then moves the weights, so the resume below can tell them apart.
        let mut all = vec![("optim.max_steps", "2"), ("checkpoint.every", "1"), ("optim.warmup_ratio", "0")];
        all.extend_from_slice(extra);
        let media_root = quoted(&shipped);
        let train = quoted(&train);
        all.push(("data.media_root", &media_root));
        all.push(("data.train", &train));
        tiny_motion(&run, &dir.path().join("cache"), &all)
    };
    let mut trainer = Trainer::new(&recipe(&[]), None).expect("setup");
    let initial = trained_values(&trainer);
    trainer.train_step().expect("one step");
    let trained = trained_values(&trainer);
    assert!(trained != initial, "step 1 moved the weights");
    drop(trainer);
    let err = Trainer::new(&recipe(&[("optim.lr", "0.5")]), Some("auto")).err().expect("refused").to_string();
    assert!(err.contains("optim.lr") && err.contains("0.01") && err.contains("0.5"), "{err}");
    // What a resume may change: when to stop, logging, checkpoint cadence, loader threads.
    let ok = recipe(&[("optim.max_steps", "3"), ("data.workers", "1"), ("checkpoint.keep", "5"), ("logging.tensorboard", "false")]);
    let resumed = Trainer::new(&ok, Some("auto")).expect("a resume under allowed changes");
    assert_eq!((resumed.step_count(), resumed.target_steps()), (1, 3), "resumes after step 1 of the new 3");
    assert!(trained_values(&resumed) == trained, "the resumed adapter and connector are the ones step 1 saved");
    drop(resumed);
    // The same file name with other rows is other data.
    let text = std::fs::read_to_string(&train).expect("read");
    std::fs::write(&train, text.replace("B. right", "right")).expect("rewrite");
    let err = Trainer::new(&recipe(&[]), Some("auto")).err().expect("refused").to_string();
    assert!(err.contains("contents of") && err.contains("train.jsonl"), "{err}");
}

/// The trained LoRA and connector weights by name.
fn trained_values(trainer: &Trainer) -> Vec<(String, Vec<f32>)> {
    let connector = trainer.connector_vars().unwrap_or_default().to_vec();
    trainer
        .lora()
        .named_vars()
        .into_iter()
        .chain(connector)
        .map(|(name, var)| (name, var.as_tensor().flatten_all().and_then(|t| t.to_vec1()).expect("weights")))
        .collect()
}

/// A `seconds`-long 1280×720 clip at `fps` with a bar sliding across.
fn write_720p(path: &Path, seconds: usize, fps: u32) {
    let settings = EncodeSettings { frame_rate: (fps as i32, 1), ..EncodeSettings::default() };
    let mut writer = VideoWriter::create(path, 1280, 720, &settings).expect("writer");
    for t in 0..seconds * fps as usize {
        let mut frame = ndarray::Array3::<u8>::from_elem((720, 1280, 3), 90);
        frame.slice_mut(ndarray::s![.., (t * 7) % 1200..(t * 7) % 1200 + 80, 1]).fill(230);
        writer.push(frame.view()).expect("frame");
    }
    writer.finish().expect("finish");
}

#[test]
fn the_paper_recipe_fits_thirty_second_720p_clips_instead_of_dropping_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rows = String::new();
    for (name, seconds) in [("long", 30), ("mid", 12)] {
        write_720p(&dir.path().join(format!("{name}.mp4")), seconds, 4);
        let row = serde_json::json!({"id": name, "video": format!("{name}.mp4"), "conversations": [
            {"from": "human", "value": "<video>\nHow does the drone move?"}, {"from": "gpt", "value": "It flies forward and turns left."}]});
        rows.push_str(&format!("{row}\n"));
    }
    let train = dir.path().join("train.jsonl");
    std::fs::write(&train, rows).expect("train file");
    let root = repo_root();
    let overrides = [
        ("output_dir".to_string(), quoted(&dir.path().join("run"))),
        ("data.train".to_string(), quoted(&train)),
        // A fresh tokenizer stands in for the 3B one (nothing is downloaded); the data settings
        // are the paper's: 2 FPS, 8–32 frames, 128–512 × 28² pixels, max_seq_len 2048.
        ("model.init_config".to_string(), quoted(&root.join("configs/models/tiny.json"))),
        ("logging.progress_bar".to_string(), "false".to_string()),
    ];
    let recipe = Recipe::load(&root.join("configs/sft/sis-motion-3b.toml"), &overrides).expect("paper recipe");
    assert_eq!((recipe.data.max_seq_len, recipe.data.max_frames, recipe.data.max_pixels), (2048, 32, 512 * 784));
    let report = check_data(&recipe).expect("data check");
    assert_eq!((report.samples, report.dropped, report.fitted), (2, 0, 2), "{report:?}");
    assert!(report.max_tokens <= 2048, "{report:?}");

    // A fitted sample keeps its real timing: its frames still span the whole clip.
    let media = recipe.data.video().media();
    let sample = &read_training_samples(&train, &ReadOptions::default()).expect("samples").items[0];
    let budget = media.video_budget(sample).expect("budget").expect("probe");
    let full = budget.grids(budget.unlimited()).expect("grids")[0];
    let smallest = VideoLimits { max_pixels: recipe.data.min_pixels, max_frames: recipe.data.min_frames };
    assert!(budget.grids(smallest).expect("grids")[0][0] < full[0]);
    let fitted = budget.candidates().into_iter().find(|l| l.max_frames < 32).expect("a frame-lowering candidate");
    let plan = media.limited(fitted).video_policy.plan(budget.videos[0].2).expect("plan");
    let per_slot = plan.second_per_grid(2);
    let slots = plan.len().div_ceil(2) as f64;
    assert!((slots * per_slot - 30.0).abs() <= per_slot, "{} slots of {per_slot:.3} s should cover the 30 s clip", slots);
    assert!(plan.timestamps.last().is_some_and(|t| *t > 29.0), "{:?}", plan.timestamps);
}

#[test]
fn max_steps_beyond_the_epochs_is_the_schedule_and_never_rewarms() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 8 samples, grad_accum 2: 4 steps per epoch; 10 steps span 2.5 epochs.
    let root = repo_root();
    let overrides = [
        ("output_dir".to_string(), quoted(dir.path())),
        ("model.init_config".to_string(), quoted(&root.join("configs/models/tiny.json"))),
        ("data.train".to_string(), quoted(&root.join("tests/data/tiny-sft/train.jsonl"))),
        ("logging.progress_bar".to_string(), "false".to_string()),
        ("optim.epochs".to_string(), "1".to_string()),
        ("optim.max_steps".to_string(), "10".to_string()),
    ];
    let recipe = Recipe::load(&root.join("configs/sft/tiny.toml"), &overrides).expect("recipe");
    let logs = Trainer::new(&recipe, None).expect("setup").run().expect("trains");
    let lrs: Vec<f64> = logs.iter().map(|l| l.lr).collect();
    assert_eq!(lrs.len(), 10);
    let peak = lrs.iter().cloned().fold(0.0, f64::max);
    let at_peak = lrs.iter().position(|l| *l == peak).unwrap_or(0);
    assert!(lrs[at_peak..].windows(2).all(|w| w[1] <= w[0]), "{lrs:?}");
    assert!(lrs[9] < 0.05 * peak, "the schedule ends at step 10: {lrs:?}");
}

#[test]
fn samples_over_max_seq_len_are_trained_at_a_fitted_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = repo_root();
    let recipe_with = |max_seq_len: usize| {
        let overrides = [
            ("output_dir".to_string(), quoted(dir.path())),
            ("model.init_config".to_string(), quoted(&root.join("configs/models/tiny.json"))),
            ("data.train".to_string(), quoted(&root.join("tests/data/tiny-sft/train.jsonl"))),
            ("logging.progress_bar".to_string(), "false".to_string()),
            // The clips are 64×64: 56² as they are, 28² at the floor.
            ("data.min_pixels".to_string(), "784".to_string()),
            ("data.max_pixels".to_string(), "3136".to_string()),
            ("data.max_frames".to_string(), "8".to_string()),
            ("data.max_seq_len".to_string(), max_seq_len.to_string()),
            ("optim.max_steps".to_string(), "4".to_string()),
        ];
        Recipe::load(&root.join("configs/sft/tiny.toml"), &overrides).expect("recipe")
    };
    let roomy = check_data(&recipe_with(100_000)).expect("check");
    assert_eq!((roomy.kept, roomy.fitted), (8, 0));
    let tight = recipe_with(roomy.max_tokens - 1);
    let report = check_data(&tight).expect("check");
    assert_eq!((report.dropped, report.usable()), (0, 8), "{report:?}");
    assert!(report.fitted >= 1 && report.max_tokens < roomy.max_tokens, "{report:?}");
    let logs = Trainer::new(&tight, None).expect("setup").run().expect("trains");
    assert_eq!(logs.len(), 4);
    let log = std::fs::read_to_string(dir.path().join("train.log")).expect("train.log");
    assert!(!log.contains("skipped sample"), "{log}");
    assert!(log.contains(&format!("\"fitted\":{}", report.fitted)), "{log}");

    // Nothing fits at all: an error before the first step naming the longest sample.
    let none = recipe_with(10);
    let err = Trainer::start(&none, Start::Overwrite).err().expect("refused").to_string();
    assert!(err.contains("no sample of") && err.contains("the longest is sample"), "{err}");
}

/// An MP4 whose index declares `frames` frames of which only the first ~30% of the bytes
/// remain, and a one-frame clip: what full disks and broken exports leave.
fn damaged_clips(dir: &Path) -> (PathBuf, PathBuf) {
    let settings = EncodeSettings {
        frame_rate: (10, 1),
        codec: Some("mpeg4".into()),
        gop_size: 1,
        muxer_options: vec![("movflags".into(), "+faststart".into())],
        ..EncodeSettings::default()
    };
    let write = |path: &Path, frames: usize| {
        let mut writer = VideoWriter::create(path, 64, 64, &settings).expect("writer");
        for t in 0..frames {
            let mut frame = ndarray::Array3::<u8>::from_elem((64, 64, 3), 60);
            frame.slice_mut(ndarray::s![.., (t * 3) % 56..(t * 3) % 56 + 8, 0]).fill(220);
            writer.push(frame.view()).expect("frame");
        }
        writer.finish().expect("finish");
    };
    let (cut, single) = (dir.join("cut.mp4"), dir.join("single.mp4"));
    write(&cut, 40);
    let bytes = std::fs::read(&cut).expect("read");
    std::fs::write(&cut, &bytes[..bytes.len() * 3 / 10]).expect("cut");
    write(&single, 1);
    (cut, single)
}

#[test]
fn damaged_media_are_named_errors_in_training_evaluation_and_flow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cut, single) = damaged_clips(dir.path());
    let root = repo_root();
    for (video, expected) in [(&cut, "damaged or truncated"), (&single, "fewer than the plan's min_frames")] {
        let name = video.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let train = dir.path().join(format!("{name}.jsonl"));
        let row = serde_json::json!({"id": name, "video": name, "conversations": [{"from": "human", "value": "<video>\nWhere to?"}, {"from": "gpt", "value": "Left."}]});
        std::fs::write(&train, format!("{row}\n")).expect("train file");
        let run = dir.path().join(format!("run-{name}"));
        let overrides = [
            ("output_dir".to_string(), quoted(&run)),
            ("model.init_config".to_string(), quoted(&root.join("configs/models/tiny.json"))),
            ("data.train".to_string(), quoted(&train)),
            ("logging.progress_bar".to_string(), "false".to_string()),
            ("motion.estimator".to_string(), "\"dis\"".to_string()),
            ("optim.max_steps".to_string(), "1".to_string()),
        ];
        let recipe = Recipe::load(&root.join("configs/sft/tiny.toml"), &overrides).expect("recipe");
        let err = match Trainer::new(&recipe, None) {
            Ok(trainer) => trainer.run().err().map(|e| e.to_string()).unwrap_or_default(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(&name) && err.contains(expected), "train: {err}");

        // Flow extraction for the same recipe.
        let estimator: Arc<dyn FlowEstimator> = estimator_by_name("dis", None, &Device::Cpu).expect("dis").into();
        let media = MotionMedia::new(recipe.data.video().media(), estimator, None, PseudoImageConfig::default());
        let err =
            motionvl_flow::extract::Job { video: video.to_path_buf(), limits: None }.run(&media).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(&name) && err.contains(expected), "flow: {err}");
    }

    // Evaluation decodes with its own protocol: the truncated file is refused there too.
    let manifest = dir.path().join("sis.jsonl");
    let row = serde_json::json!({"question_id": "q1", "task_type": "Action Recognition", "video_path": "cut.mp4", "question": "Where?", "options": {"A": "l", "B": "r", "C": "u", "D": "d"}, "answer": "A"});
    std::fs::write(&manifest, format!("{row}\n")).expect("manifest");
    // The tiny base model the training attempt above built (set-up succeeds; decoding fails).
    let checkpoint = dir.path().join("run-cut.mp4/base-model");
    let mut eval = RunConfig { bench: "sisbench".into(), manifest, out: dir.path().join("eval"), ..RunConfig::default() };
    eval.model.checkpoint = checkpoint.display().to_string();
    eval.protocol.min_pixels = 3136;
    eval.protocol.max_pixels = 3136;
    let err = motionvl_eval::run(&eval, false).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("cut.mp4") && err.contains("damaged or truncated"), "eval: {err}");
    std::fs::write(&eval.manifest, format!("{}\n", row.to_string().replace("cut.mp4", "single.mp4"))).expect("manifest");
    let err = motionvl_eval::run(&RunConfig { out: dir.path().join("eval-single"), ..eval.clone() }, false)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("single.mp4") && err.contains("fewer than the plan's min_frames 2"), "eval: {err}");

    // A manifest without a question is a mistake, not a score of 0 of 0.
    std::fs::write(&eval.manifest, "").expect("empty manifest");
    let err =
        motionvl_eval::run(&RunConfig { out: dir.path().join("eval-empty"), ..eval.clone() }, false).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("sis.jsonl") && err.contains("no sisbench question"), "empty: {err}");
    let predictions = dir.path().join("p.jsonl");
    std::fs::write(&predictions, "").expect("predictions");
    let err = motionvl_eval::score_predictions("sisbench", &eval.manifest, &predictions, &dir.path().join("score"), None, &ReadOptions::default())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("no sisbench question"), "score: {err}");
}
