//! The embedded default: a faithful miniature of the SIS-Motion paper, on a machine with
//! nothing downloaded.
//!
//! 1. Render the synthetic UAV world (`construct synth`) and describe its videos.
//! 2. **Stage 0**: pretrain a tiny Qwen2.5-VL-shaped model, every parameter, on the training
//!    worlds' descriptions (which landmarks, their colours, where and in which order) and their
//!    spatial questions — scene content only, never the drone's motion — into a hub-layout
//!    model folder that every later stage loads like a downloaded model.
//! 3. **Stage 1**, the paper's SFT recipe on top, three times with identical settings, data and
//!    steps: visual-only; motion-aware (`--motion dis`: the motion encoder a frozen copy of the
//!    pretrained tower, the connector trained); and the control, the motion-aware architecture
//!    fed pseudo-images of zero flow (`--motion zero`: same connector, same capacity, no
//!    motion).
//! 4. Evaluate all three on the held-out worlds with the SIS-Bench protocol and scorer.
//! 5. Report: the paper's table, Wilson 95% intervals per task, paired bootstraps (resampling
//!    clips) of the differences between the models per dimension, and a chart (see [`summary`]).
//!
//! Every stage reruns only when its inputs changed: the world when its settings did, stage 0
//! when its recipe or data did ([`stamp`]), a stage-1 run when its recipe, data or base model
//! did (an interrupted run resumes from its newest checkpoint), an evaluation when its model
//! did.

pub mod stamp;
pub mod summary;

use std::path::{Path, PathBuf};

use motionvl_construct::synth::describe::write_pretraining_set;
use motionvl_construct::synth::{Split, SynthConfig, SynthSummary, generate_with_progress};
use motionvl_eval::config::{GenerationConfig, ModelConfig, MotionConfig, ProtocolConfig, RunConfig};
use motionvl_eval::results::Results;
use motionvl_flow::{EstimatorName, MotionChoice};
use motionvl_train::checkpoint::latest_complete;
use motionvl_train::pretrain::{MODEL_DIR, Scope, answer_loss, pretrain};
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{Trainer, changes_since_checkpoint};
use serde::Deserialize;
use serde_json::json;

use summary::{CONTROL, Evaluated, MOTION, Summary, TowerCheck, VISUAL};

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("demo config {path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("synthetic world: {0}")]
    World(#[from] motionvl_construct::synth::SynthError),
    #[error("{stage}: {reason}")]
    Stage { stage: String, reason: String },
    #[error("training the {run} model: {source}")]
    Train { run: String, source: Box<dyn std::error::Error + Send + Sync> },
    #[error("evaluating the {run} model: {source}")]
    Eval { run: String, source: Box<dyn std::error::Error + Send + Sync> },
    /// The held-out manifest could not be read for its clips.
    #[error("summary: {}: {source}", path.display())]
    Manifest { path: PathBuf, source: Box<motionvl_eval::EvalError> },
    /// A run's `scored.jsonl`: unreadable, or a line (1-based) without question id, task and value.
    #[error("summary: {}{}: {problem}", path.display(), line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Scores { path: PathBuf, line: Option<usize>, problem: String },
    /// The runs summarised together disagree: a run missing, or questions one answered and another did not.
    #[error("summary: {0}")]
    Runs(RunsMismatch),
    #[error("summary: {dimension}: {source}")]
    Bootstrap { dimension: String, source: motionvl_eval::stats::StatsError },
    #[error("summary: cannot serialise: {0}")]
    Json(#[from] serde_json::Error),
    #[error("summary: {0}")]
    Write(#[from] motionvl_train::checkpoint::CheckpointError),
    /// The chart renderer's own message (plotters' errors are rendered as text).
    #[error("summary: chart: {0}")]
    Chart(String),
}

/// How the runs of a summary disagree.
#[derive(Debug, thiserror::Error)]
pub enum RunsMismatch {
    #[error("no {0} model among the runs")]
    MissingRun(String),
    #[error("no run to chart")]
    NoRuns,
    #[error("no summary of {0}")]
    NoSummary(String),
    #[error("no question of the {0} dimension")]
    NoDimension(&'static str),
    #[error("{answered} answered {question} ({task}), {other} did not: the runs were asked different questions")]
    DifferentQuestions { answered: String, other: String, question: String, task: String },
    #[error("{run}: question {question} is not in the manifest's clips")]
    UnknownClip { run: String, question: String },
}

/// `configs/demo.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DemoConfig {
    /// Everything the demo writes goes below this folder.
    pub output_dir: PathBuf,
    /// Flow estimator of the motion-aware model.
    pub motion: EstimatorName,
    /// Flow "estimator" of the control (`zero`: pseudo-images without motion).
    pub control: EstimatorName,
    pub world: SynthConfig,
    /// Stage 0: a training recipe without `output_dir` and `data.train`, which the demo fills
    /// in; every parameter is trained (`[lora]` and `[motion]` do not apply).
    pub pretrain: toml::Table,
    /// Also pretrain with the vision tower left random, and compare both on the held-out
    /// worlds' descriptions and spatial questions: what the trained tower adds.
    #[serde(default)]
    pub tower_baseline: bool,
    /// Stage 1: a training recipe without `output_dir`, `data.train`, `model.checkpoint` and
    /// `motion.estimator`, which the demo fills in for each of its three runs.
    pub train: toml::Table,
    pub eval: EvalSection,
    #[serde(default)]
    pub stats: StatsSection,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalSection {
    #[serde(default)]
    pub generation: GenerationConfig,
    #[serde(default)]
    pub protocol: ProtocolConfig,
}

/// The paired bootstrap behind the differences.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StatsSection {
    pub resamples: usize,
    pub seed: u64,
}

impl Default for StatsSection {
    fn default() -> Self {
        Self { resamples: 10_000, seed: 0 }
    }
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

/// One of the three models the demo trains and evaluates.
#[derive(Debug, Clone)]
pub struct DemoRun {
    pub name: String,
    pub motion: MotionChoice,
    pub train_dir: PathBuf,
    pub eval_dir: PathBuf,
    pub final_loss: Option<f64>,
    pub results: Results,
}

pub struct DemoSummary {
    pub world: SynthSummary,
    /// The pretrained model folder (hub layout).
    pub pretrained: PathBuf,
    pub tower: Option<TowerCheck>,
    pub runs: Vec<DemoRun>,
    pub report: Summary,
    /// `summary.json`, `summary.md`, `summary.png`.
    pub written: Vec<PathBuf>,
}

/// Runs the whole demo. `show_progress` draws a progress bar per stage on stderr.
pub fn run(config: &DemoConfig, config_path: &Path, show_progress: bool) -> Result<DemoSummary, DemoError> {
    let world_dir = config.output_dir.join("world");
    let world = match SynthSummary::load(&world_dir)? {
        Some(summary) if summary.config == config.world && asks_as_evaluated(&summary) => summary,
        found => {
            if found.is_some_and(|s| s.config == config.world) {
                eprintln!("the world's training conversations are worded otherwise than the evaluation now asks");
            }
            eprintln!("rendering the synthetic world into {}", world_dir.display());
            let bar = motionvl_data::progress::bar(config.world.total_clips() as u64, "clips", show_progress);
            let summary = generate_with_progress(&config.world, &world_dir, true, &|| bar.inc(1))?;
            bar.finish();
            summary
        }
    };
    let descriptions = write_pretraining_set(&world, Split::Train)?;
    let held_out = write_pretraining_set(&world, Split::Test)?;

    let pretrained = stage0(config, config_path, &world, &descriptions, "pretrain", Scope::All, show_progress)?;
    let tower = if config.tower_baseline {
        let random = stage0(config, config_path, &world, &descriptions, "pretrain-random-tower", Scope::RandomTower, show_progress)?;
        let recipe = pretrain_recipe(config, config_path, &config.output_dir.join("held-out-check"), &held_out)?;
        let loss = |dir: &Path| answer_loss(&recipe, dir).map_err(|e| DemoError::Stage { stage: "stage 0 check".into(), reason: e.to_string() });
        Some(TowerCheck { pretrained: loss(&pretrained)?, random_tower: loss(&random)? })
    } else {
        None
    };

    let mut runs = Vec::new();
    let runs_of =
        [(VISUAL, MotionChoice::None), (MOTION, MotionChoice::Estimator(config.motion)), (CONTROL, MotionChoice::Estimator(config.control))];
    for (name, motion) in runs_of {
        let train_dir = config.output_dir.join(name);
        let recipe = recipe_for(config, config_path, &world, &pretrained, &train_dir, motion)?;
        let final_loss = train(&recipe, &pretrained, name, show_progress)?;
        let eval_dir = train_dir.join("eval");
        let results = evaluate(config, &world, &pretrained, &train_dir, &eval_dir, name, show_progress)?;
        runs.push(DemoRun { name: name.to_owned(), motion, train_dir, eval_dir, final_loss, results });
    }
    let evaluated: Vec<Evaluated> =
        runs.iter().map(|r| Evaluated { name: r.name.clone(), results: r.results.clone(), eval_dir: r.eval_dir.clone() }).collect();
    let clips = clips_of(&world.test_manifest())?;
    let report = summary::summarise(&evaluated, &clips, tower, config.stats.resamples, config.stats.seed)?;
    let written = report.write(&config.output_dir)?;
    Ok(DemoSummary { world, pretrained, tower, runs, report, written })
}

/// Whether the world's training conversations ask for the answer form they answer in, as the
/// evaluation asks for the form it scores: a world rendered by an older version may word them
/// otherwise, and a model trained on it would be evaluated on a prompt it never saw.
fn asks_as_evaluated(world: &SynthSummary) -> bool {
    let instruction = world.config.training_answers.asked().instruction();
    let rows = std::fs::read_to_string(world.train_conversations()).ok().and_then(|text| serde_json::from_str::<Vec<serde_json::Value>>(&text).ok());
    rows.is_some_and(|rows| {
        rows.iter().filter(|r| r["format"] == "mcq").all(|r| r["conversations"][0]["value"].as_str().is_some_and(|p| p.ends_with(instruction)))
    })
}

/// The clip each held-out question is asked about (its video), by question id.
fn clips_of(manifest: &Path) -> Result<summary::Clips, DemoError> {
    use motionvl_eval::bench::Bench as _;
    let opts = motionvl_data::samples::ReadOptions::rows_only();
    let items = motionvl_eval::bench::SIS_BENCH
        .read(manifest, &opts)
        .map_err(|e| DemoError::Manifest { path: manifest.to_path_buf(), source: Box::new(e) })?
        .items;
    Ok(items.into_iter().map(|item| (item.id, item.videos.iter().map(|v| v.display().to_string()).collect::<Vec<_>>().join(" + "))).collect())
}

/// The stage-0 recipe: `[pretrain]` with its output folder and captions filled in.
fn pretrain_recipe(config: &DemoConfig, config_path: &Path, out: &Path, data: &Path) -> Result<Recipe, DemoError> {
    let quoted = |p: &Path| format!("{:?}", p.display().to_string());
    let overrides = vec![("output_dir".to_owned(), quoted(out)), ("data.train".to_owned(), quoted(data))];
    Recipe::from_table(config.pretrain.clone(), config_path, &overrides)
        .map_err(|e| DemoError::Config { path: config_path.to_path_buf(), reason: e.to_string() })
}

/// Stage 0 into `<output_dir>/<folder>`, unless a finished one was made from the same recipe
/// and data; returns the model folder.
fn stage0(
    config: &DemoConfig,
    config_path: &Path,
    world: &SynthSummary,
    descriptions: &Path,
    folder: &str,
    scope: Scope,
    show_progress: bool,
) -> Result<PathBuf, DemoError> {
    let out = config.output_dir.join(folder);
    let mut recipe = pretrain_recipe(config, config_path, &out, descriptions)?;
    recipe.logging.progress_bar = show_progress;
    let inputs = json!({
        "recipe": recipe.to_toml(),
        // The random tower's merger trains (before 6c9e8a3 it stayed random too): a folder
        // pretrained before then is not this baseline.
        "scope": match scope {
            Scope::All => "All",
            Scope::RandomTower => "RandomTower, merger trained",
        },
        "descriptions": stamp::digest(descriptions)?,
        "tokenizer_text": stamp::digest(&world.train_conversations())?,
    });
    let model = out.join(MODEL_DIR);
    if model.join("model.safetensors").is_file() && stamp::matches(&out, &inputs) {
        eprintln!("{folder}: already pretrained ({})", model.display());
        return Ok(model);
    }
    eprintln!(
        "{folder}: pretraining every parameter{} into {}",
        if scope == Scope::RandomTower { " but the vision tower's" } else { "" },
        model.display()
    );
    let done = pretrain(&recipe, &[world.train_conversations()], scope).map_err(|e| DemoError::Train { run: folder.to_owned(), source: e.into() })?;
    stamp::write(&out, &inputs)?;
    Ok(done.model_dir)
}

fn recipe_for(
    config: &DemoConfig,
    config_path: &Path,
    world: &SynthSummary,
    base: &Path,
    train_dir: &Path,
    motion: MotionChoice,
) -> Result<Recipe, DemoError> {
    let quoted = |p: &Path| format!("{:?}", p.display().to_string());
    let overrides = vec![
        ("output_dir".to_owned(), quoted(train_dir)),
        ("data.train".to_owned(), quoted(&world.train_conversations())),
        ("model.checkpoint".to_owned(), quoted(base)),
        ("motion.estimator".to_owned(), format!("{:?}", motion.as_str())),
        ("logging.progress_bar".to_owned(), "true".to_owned()),
    ];
    Recipe::from_table(config.train.clone(), config_path, &overrides)
        .map_err(|e| DemoError::Config { path: config_path.to_path_buf(), reason: e.to_string() })
}

/// Trains (or finishes training) one model; returns the last logged loss.
fn train(recipe: &Recipe, base: &Path, name: &str, show_progress: bool) -> Result<Option<f64>, DemoError> {
    let fail = |e: Box<dyn std::error::Error + Send + Sync>| DemoError::Train { run: name.to_owned(), source: e };
    let clear = || std::fs::remove_dir_all(&recipe.output_dir).map_err(|e| fail(format!("clearing {}: {e}", recipe.output_dir.display()).into()));
    // The recipe names the base model by its folder; a new stage 0 writes other weights there.
    let inputs = json!({ "base_model": stamp::digest(&base.join("model.safetensors"))? });
    if recipe.output_dir.exists() && !stamp::matches(&recipe.output_dir, &inputs) {
        eprintln!("{name}: the pretrained model changed; training again from scratch");
        clear()?;
    }
    if let Some(found) = latest_complete(&recipe.output_dir).map_err(|e| fail(e.into()))? {
        let changed = changes_since_checkpoint(recipe, &found.path).map_err(|e| fail(e.into()))?;
        if !changed.is_empty() {
            // The embedded default owns its run folders: a changed setting retrains from scratch.
            eprintln!("{name}: settings changed since {} ({}); training again from scratch", found.path.display(), changed.join("; "));
            clear()?;
        }
    }
    std::fs::create_dir_all(&recipe.output_dir).map_err(|e| fail(format!("creating {}: {e}", recipe.output_dir.display()).into()))?;
    stamp::write(&recipe.output_dir, &inputs)?;
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

fn evaluate(
    config: &DemoConfig,
    world: &SynthSummary,
    base: &Path,
    train_dir: &Path,
    eval_dir: &Path,
    name: &str,
    show_progress: bool,
) -> Result<Results, DemoError> {
    let fail = |e: Box<dyn std::error::Error + Send + Sync>| DemoError::Eval { run: name.to_owned(), source: e };
    let checkpoint =
        latest_complete(train_dir).map_err(|e| fail(e.into()))?.ok_or_else(|| fail(format!("no checkpoint in {}", train_dir.display()).into()))?;
    let run = RunConfig {
        bench: "sisbench".into(),
        manifest: world.test_manifest(),
        out: eval_dir.to_path_buf(),
        name: Some(name.to_owned()),
        media_root: None,
        skip_bad: false,
        resume: eval_dir.join("predictions.jsonl").is_file(),
        limit: None,
        model: ModelConfig { checkpoint: base.display().to_string(), adapter: Some(checkpoint.path), ..ModelConfig::default() },
        generation: config.eval.generation.clone(),
        protocol: config.eval.protocol.clone(),
        // The visual-only run's adapter has no motion branch, by design.
        motion: MotionConfig { no_motion: name == VISUAL, ..MotionConfig::default() },
        cvaa: Default::default(),
        // The demo's committed numbers were made with the paper's protocol.
        protocol_kind: Some(motionvl_eval::config::ProtocolKind::Paper),
        ..RunConfig::default()
    };
    eprintln!("{name}: evaluating on {}", world.test_manifest().display());
    let summary = match motionvl_eval::run::run(&run, show_progress) {
        // Answers on file from another model or protocol are not continued: asked again.
        Err(why @ (motionvl_eval::EvalError::NotResumed { .. } | motionvl_eval::EvalError::OtherRun { .. })) => {
            eprintln!("{name}: {why}; evaluating again from scratch");
            std::fs::remove_dir_all(eval_dir).map_err(|e| fail(format!("clearing {}: {e}", eval_dir.display()).into()))?;
            motionvl_eval::run::run(&RunConfig { resume: false, ..run }, show_progress)
        }
        other => other,
    }
    .map_err(|e| fail(e.into()))?;
    Ok(summary.results)
}
