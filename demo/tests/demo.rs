//! A shortened demo, as CI runs it: a small world, a few training steps per model, both models
//! evaluated, and the run files checked.

use std::path::Path;

use motionvl_demo::{run, DemoConfig};

#[test]
fn shortened_demo_trains_and_evaluates_both_models() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = tempfile::tempdir().unwrap();
    let set = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    let overrides = vec![
        set("output_dir", &format!("{:?}", out.path().display().to_string())),
        set("world.train_worlds", "1"),
        set("world.test_worlds", "1"),
        set("world.clips_per_world", "4"),
        set("world.concats_per_world", "2"),
        set("world.landmarks_per_world", "4"),
        set("world.width", "112"),
        set("world.height", "84"),
        set("world.seconds", "2.0"),
        set("train.model.init_config", &format!("{:?}", root.join("configs/models/tiny.json").display().to_string())),
        set("train.optim.max_steps", "2"),
        set("train.optim.grad_accum", "1"),
        set("train.data.workers", "1"),
        set("eval.generation.max_new_tokens", "2"),
    ];
    let config = DemoConfig::load(&root.join("configs/demo.toml"), &overrides).unwrap();
    let summary = run(&config, &root.join("configs/demo.toml"), false).unwrap();

    assert_eq!(summary.runs.len(), 2);
    let questions = summary.runs[0].results.questions;
    assert!(questions > 0);
    for r in &summary.runs {
        assert_eq!(r.results.questions, questions, "{}: both models answer the same held-out questions", r.name);
        assert_eq!(r.results.predicted, questions, "{}: every question got a prediction", r.name);
        assert!(r.final_loss.is_some_and(f64::is_finite), "{}", r.name);
        for file in ["trainer_log.jsonl", "train.log", "config.toml", "checkpoint-2/adapter_model.safetensors", "adapter_model.safetensors"] {
            assert!(r.train_dir.join(file).is_file(), "{}: missing {file}", r.name);
        }
        assert!(std::fs::read_dir(r.train_dir.join("tensorboard")).unwrap().next().is_some(), "{}: no TensorBoard events", r.name);
        for file in ["results.json", "predictions.jsonl", "results.md", "chart.png"] {
            assert!(r.eval_dir.join(file).is_file(), "{}: missing report {file}", r.name);
        }
    }
    assert_eq!(summary.runs[1].motion, "dis");
    assert!(summary.runs[1].train_dir.join("checkpoint-2/motion.json").is_file(), "the motion-aware run keeps its connector");
    assert!(!summary.runs[0].train_dir.join("checkpoint-2/motion.json").exists(), "the visual-only run has no motion branch");
    assert!(summary.table.contains("visual-only") && summary.table.contains("motion-aware"), "{}", summary.table);

    // A rerun finds everything done: it rewrites no checkpoint, log or prediction, and reports
    // the same results.
    let stamp = |path: &std::path::Path| {
        let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        (meta.len(), meta.modified().unwrap_or_else(|e| panic!("{}: {e}", path.display())))
    };
    let outputs: Vec<std::path::PathBuf> = summary
        .runs
        .iter()
        .flat_map(|r| {
            [r.train_dir.join("checkpoint-2/adapter_model.safetensors"), r.train_dir.join("trainer_log.jsonl"), r.eval_dir.join("predictions.jsonl")]
        })
        .collect();
    let before: Vec<_> = outputs.iter().map(|p| stamp(p)).collect();
    let again = run(&config, &root.join("configs/demo.toml"), false).unwrap();
    let after: Vec<_> = outputs.iter().map(|p| stamp(p)).collect();
    for ((path, b), a) in outputs.iter().zip(&before).zip(&after) {
        assert_eq!(b, a, "the rerun rewrote {}", path.display());
    }
    for (r, s) in again.runs.iter().zip(&summary.runs) {
        assert_eq!(r.results.overall.accuracy, s.results.overall.accuracy, "{}", r.name);
        assert_eq!(r.results.questions, s.results.questions, "{}", r.name);
    }
}
