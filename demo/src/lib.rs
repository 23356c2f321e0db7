//! The embedded default: everything motionvl does, on a machine with nothing downloaded.
//!
//! 1. Render the synthetic UAV world (`construct synth`) unless it is there already.
//! 2. Train a tiny Qwen2.5-VL-shaped model twice with identical settings: visual-only
//!    (`--motion none`) and motion-aware (`--motion dis` by default).
//! 3. Evaluate both on the held-out worlds with the SIS-Bench protocol and scorer.
//! 4. Put the two results side by side, task by task.
//!
//! Every step resumes: a rerun after an interruption skips what is finished and continues
//! training from the newest checkpoint.

use std::path::{Path, PathBuf};

use motionvl_data::synth::{generate_with_progress, SynthConfig, SynthSummary};
use motionvl_eval::config::{GenerationConfig, ModelConfig, MotionConfig, ProtocolConfig, RunConfig};
use motionvl_eval::results::Results;
use motionvl_train::checkpoint::latest_complete;
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{Trainer, changes_since_checkpoint};
use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("demo config {path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("synthetic world: {0}")]
    World(#[from] motionvl_data::synth::SynthError),
    #[error("training the {run} model: {source}")]
    Train { run: String, source: Box<dyn std::error::Error + Send + Sync> },
    #[error("evaluating the {run} model: {source}")]
    Eval { run: String, source: Box<dyn std::error::Error + Send + Sync> },
}

/// `configs/demo.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoConfig {
    /// Everything the demo writes goes below this folder.
    pub output_dir: PathBuf,
    /// Flow estimator of the motion-aware model.
    pub motion: String,
    pub world: SynthConfig,
    /// A training recipe without `output_dir`, `data.train` and `motion.estimator`, which the
    /// demo fills in for each of its two runs.
    pub train: toml::Table,
    pub eval: EvalSection,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSection {
    #[serde(default)]
    pub generation: GenerationConfig,
    #[serde(default)]
    pub protocol: ProtocolConfig,
}

impl DemoConfig {
    /// Reads the config; `overrides` are `(dotted.key, value)` pairs like the trainer's.
    pub fn load(path: &Path, overrides: &[(String, String)]) -> Result<Self, DemoError> {
        let bad = |reason: String| DemoError::Config { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let mut table: toml::Table = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        for (key, value) in overrides {
            motionvl_train::recipe::set_dotted(&mut table, key, value).map_err(|e| bad(e.to_string()))?;
        }
        table.try_into().map_err(|e: toml::de::Error| bad(e.to_string()))
    }
}

/// One of the two models the demo trains and evaluates.
#[derive(Debug, Clone)]
pub struct DemoRun {
    pub name: String,
    pub motion: String,
    pub train_dir: PathBuf,
    pub eval_dir: PathBuf,
    pub final_loss: Option<f64>,
    pub results: Results,
}

#[derive(Debug, Clone)]
pub struct DemoSummary {
    pub world: SynthSummary,
    pub runs: Vec<DemoRun>,
    /// The per-task table of both runs (Markdown).
    pub table: String,
}

/// Runs the whole demo. `show_progress` draws progress bars on stderr.
pub fn run(config: &DemoConfig, config_path: &Path, show_progress: bool) -> Result<DemoSummary, DemoError> {
    let world_dir = config.output_dir.join("world");
    let world = match SynthSummary::load(&world_dir)? {
        Some(summary) if summary.config == config.world => summary,
        _ => {
            eprintln!("rendering the synthetic world into {}", world_dir.display());
            let bar = motionvl_data::progress::bar(config.world.total_clips() as u64, "clips", show_progress);
            let summary = generate_with_progress(&config.world, &world_dir, true, &|| bar.inc(1))?;
            bar.finish();
            summary
        }
    };

    let mut runs = Vec::new();
    for (name, motion) in [("visual-only", "none"), ("motion-aware", config.motion.as_str())] {
        let train_dir = config.output_dir.join(name);
        let recipe = recipe_for(config, config_path, &world, &train_dir, motion)?;
        let final_loss = train(&recipe, name, show_progress)?;
        let eval_dir = train_dir.join("eval");
        let results = evaluate(config, &world, &train_dir, &eval_dir, name, show_progress)?;
        runs.push(DemoRun { name: name.to_owned(), motion: motion.to_owned(), train_dir, eval_dir, final_loss, results });
    }
    let table = motionvl_eval::report::table2(&runs.iter().map(|r| &r.results).collect::<Vec<_>>());
    Ok(DemoSummary { world, runs, table })
}

fn recipe_for(config: &DemoConfig, config_path: &Path, world: &SynthSummary, train_dir: &Path, motion: &str) -> Result<Recipe, DemoError> {
    let quoted = |p: &Path| format!("{:?}", p.display().to_string());
    let overrides = vec![
        ("output_dir".to_owned(), quoted(train_dir)),
        ("data.train".to_owned(), quoted(&world.train_conversations())),
        ("motion.estimator".to_owned(), format!("{motion:?}")),
        ("logging.progress_bar".to_owned(), "true".to_owned()),
    ];
    Recipe::from_table(config.train.clone(), config_path, &overrides).map_err(|e| DemoError::Config { path: config_path.to_path_buf(), reason: e.to_string() })
}

/// Trains (or finishes training) one model; returns the last logged loss.
fn train(recipe: &Recipe, name: &str, show_progress: bool) -> Result<Option<f64>, DemoError> {
    let fail = |e: Box<dyn std::error::Error + Send + Sync>| DemoError::Train { run: name.to_owned(), source: e };
    if let Some(found) = latest_complete(&recipe.output_dir).map_err(|e| fail(e.into()))? {
        let changed = changes_since_checkpoint(recipe, &found.path).map_err(|e| fail(e.into()))?;
        if !changed.is_empty() {
            // The embedded default owns its run folders: a changed setting retrains from scratch.
            eprintln!("{name}: settings changed since {} ({}); training again from scratch", found.path.display(), changed.join("; "));
            std::fs::remove_dir_all(&recipe.output_dir).map_err(|e| fail(format!("clearing {}: {e}", recipe.output_dir.display()).into()))?;
        }
    }
    let mut recipe = recipe.clone();
    recipe.logging.progress_bar = show_progress;
    // Continues an interrupted run of the same settings, or starts one.
    let trainer = Trainer::new(&recipe, Some("auto")).map_err(|e| fail(e.into()))?;
    if trainer.step_count() >= trainer.target_steps() {
        eprintln!("{name}: already trained ({} steps)", trainer.step_count());
        return Ok(last_logged_loss(&recipe.output_dir));
    }
    eprintln!("{name}: training {} steps into {}", trainer.target_steps(), recipe.output_dir.display());
    let logs = trainer.run().map_err(|e| fail(e.into()))?;
    Ok(logs.last().map(|l| l.loss).or_else(|| last_logged_loss(&recipe.output_dir)))
}

fn last_logged_loss(dir: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(dir.join("trainer_log.jsonl")).ok()?;
    let last = text.lines().last()?;
    serde_json::from_str::<serde_json::Value>(last).ok()?["loss"].as_f64()
}

fn evaluate(config: &DemoConfig, world: &SynthSummary, train_dir: &Path, eval_dir: &Path, name: &str, show_progress: bool) -> Result<Results, DemoError> {
    let fail = |e: Box<dyn std::error::Error + Send + Sync>| DemoError::Eval { run: name.to_owned(), source: e };
    let checkpoint = latest_complete(train_dir).map_err(|e| fail(e.into()))?.ok_or_else(|| fail(format!("no checkpoint in {}", train_dir.display()).into()))?;
    let run = RunConfig {
        bench: "sisbench".into(),
        manifest: world.test_manifest(),
        out: eval_dir.to_path_buf(),
        name: Some(name.to_owned()),
        media_root: None,
        skip_bad: false,
        resume: eval_dir.join("predictions.jsonl").is_file(),
        limit: None,
        model: ModelConfig { checkpoint: train_dir.join("base-model").display().to_string(), adapter: Some(checkpoint.path), dtype: None, device: "cpu".into() },
        generation: config.eval.generation.clone(),
        protocol: config.eval.protocol.clone(),
        motion: MotionConfig::default(),
        cvaa: Default::default(),
    };
    eprintln!("{name}: evaluating on {}", world.test_manifest().display());
    let summary = match motionvl_eval::run::run(&run, show_progress) {
        // Answers on file from another model or protocol are not continued: asked again.
        Err(motionvl_eval::EvalError::Resume(why)) => {
            eprintln!("{name}: {why}; evaluating again from scratch");
            std::fs::remove_dir_all(eval_dir).map_err(|e| fail(format!("clearing {}: {e}", eval_dir.display()).into()))?;
            motionvl_eval::run::run(&RunConfig { resume: false, ..run }, show_progress)
        }
        other => other,
    }
    .map_err(|e| fail(e.into()))?;
    Ok(summary.results)
}

