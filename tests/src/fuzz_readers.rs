//! Every reader of user files as one entry point, "given these bytes, run reader X and check
//! its oracle", shared by the bounded fuzzer of CI (`tests/tests/fuzz.rs`) and the cargo-fuzz
//! targets (`fuzz/`, one per [`Target`]). Each entry point writes the bytes under a [`Lab`]
//! folder with the name the reader dispatches on, runs the reader and returns a [`Verdict`]: the
//! items it read, or its typed error as text. An oracle that fails is a bug and panics: a
//! reader that panics, or a round trip that does not hold where a writer exists (what the reader
//! read, written back, reads the same). Memory and time bounds are the caller's: an allocation
//! cap and a per-case clock in `fuzz.rs`, `-rss_limit_mb`/`-malloc_limit_mb`/`-timeout` under
//! libFuzzer.
//!
//! [`Target::seeds`] gives each target's seeds from the repository's own files, or from its
//! writers where the repository ships none; `examples/fuzz_corpus.rs` writes them to
//! `fuzz/corpus/<target>/`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use motionvl_construct::dccs::geom::V3;
use motionvl_construct::dccs::instances::{Category, Landmark, OrientedBox};
use motionvl_data::manifest::{AnswerOption, Benchmark, read_manifest, split_inline_options};
use motionvl_data::samples::{ReadOptions, ReadOutcome, read_training_samples};
use motionvl_eval::extract::{extract_choice, extract_choices, extract_number, extract_timestamp, extract_yes_no, parse_json_lenient};

use crate::repo_root;

/// What one reader made of one input.
pub type Verdict = Result<Items, String>;

/// What a reader read: items (rows, points, landmarks, tensors, frames) and the rows it left
/// out under `skip_bad`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Items {
    pub read: usize,
    pub skipped: usize,
}

impl Items {
    /// `read` items, none left out.
    fn count(read: usize) -> Verdict {
        Ok(Items { read, skipped: 0 })
    }
}

fn refused(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn rows<T, E: std::fmt::Display>(read: Result<ReadOutcome<T>, E>) -> Verdict {
    read.map(|o| Items { read: o.items.len(), skipped: o.skipped.len() }).map_err(refused)
}

/// A folder the entry points write their inputs to, and the fixtures some readers need beside
/// them (a flow cache holding one entry, an adapter's weights).
pub struct Lab {
    dir: PathBuf,
    _owned: Option<tempfile::TempDir>,
    flow_cache: OnceLock<FlowCacheFixture>,
}

impl Lab {
    /// A lab in a temporary folder removed when the lab is dropped.
    pub fn temporary() -> Lab {
        let owned = tempfile::tempdir().expect("a temporary folder for fuzzing");
        Lab { dir: owned.path().to_path_buf(), _owned: Some(owned), flow_cache: OnceLock::new() }
    }

    /// The process's lab for `target`, made on first use and kept (libFuzzer exits without
    /// running destructors): under the system's temporary folder, one per target and process.
    pub fn for_process(target: Target) -> &'static Lab {
        static LAB: OnceLock<Lab> = OnceLock::new();
        LAB.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("motionvl-fuzz-{}-{}", target.name(), std::process::id()));
            std::fs::create_dir_all(&dir).expect("a folder for fuzzing");
            Lab { dir, _owned: None, flow_cache: OnceLock::new() }
        })
    }

    /// Writes `bytes` as `name` in the lab (a failure here is the harness's, not a reader's).
    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("lab folder");
        }
        std::fs::write(&path, bytes).expect("lab file");
        path
    }
}

/// Every reader the fuzzers reach, named as its cargo-fuzz target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    TrainingRows,
    BenchmarkManifests,
    Predictions,
    AnswerExtraction,
    PlyCloud,
    NpyCloud,
    XyzCloud,
    DccsInstances,
    DccsTrajectory,
    Parquet,
    SftRecipe,
    CvaaRecipe,
    EvalConfig,
    ModelConfig,
    AdapterConfig,
    Tokenizer,
    Safetensors,
    PthCheckpoint,
    TorchConnector,
    FlowCacheEntry,
    Video,
    ResumeState,
}

impl Target {
    pub const ALL: [Target; 22] = [
        Target::TrainingRows,
        Target::BenchmarkManifests,
        Target::Predictions,
        Target::AnswerExtraction,
        Target::PlyCloud,
        Target::NpyCloud,
        Target::XyzCloud,
        Target::DccsInstances,
        Target::DccsTrajectory,
        Target::Parquet,
        Target::SftRecipe,
        Target::CvaaRecipe,
        Target::EvalConfig,
        Target::ModelConfig,
        Target::AdapterConfig,
        Target::Tokenizer,
        Target::Safetensors,
        Target::PthCheckpoint,
        Target::TorchConnector,
        Target::FlowCacheEntry,
        Target::Video,
        Target::ResumeState,
    ];

    /// The name of its file in `fuzz/fuzz_targets/` and its folder in `fuzz/corpus/`.
    pub fn name(self) -> &'static str {
        match self {
            Target::TrainingRows => "training_rows",
            Target::BenchmarkManifests => "benchmark_manifests",
            Target::Predictions => "predictions",
            Target::AnswerExtraction => "answer_extraction",
            Target::PlyCloud => "ply_cloud",
            Target::NpyCloud => "npy_cloud",
            Target::XyzCloud => "xyz_cloud",
            Target::DccsInstances => "dccs_instances",
            Target::DccsTrajectory => "dccs_trajectory",
            Target::Parquet => "parquet",
            Target::SftRecipe => "sft_recipe",
            Target::CvaaRecipe => "cvaa_recipe",
            Target::EvalConfig => "eval_config",
            Target::ModelConfig => "model_config",
            Target::AdapterConfig => "adapter_config",
            Target::Tokenizer => "tokenizer",
            Target::Safetensors => "safetensors",
            Target::PthCheckpoint => "pth_checkpoint",
            Target::TorchConnector => "torch_connector",
            Target::FlowCacheEntry => "flow_cache_entry",
            Target::Video => "video",
            Target::ResumeState => "resume_state",
        }
    }

    /// Its seeds as `(file name, bytes)`: the repository's own files, or what its writers make.
    pub fn seeds(self) -> Vec<(String, Vec<u8>)> {
        let repo = |rel: &str| {
            let path = repo_root().join(rel);
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("fuzz seed {}: {e}", path.display()));
            (Path::new(rel).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), bytes)
        };
        match self {
            Target::TrainingRows | Target::BenchmarkManifests | Target::Predictions => {
                row_seed_files().iter().map(|p| (p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), read(p))).collect()
            }
            Target::AnswerExtraction => ANSWER_SEEDS.iter().enumerate().map(|(i, s)| (format!("answer-{i}.txt"), s.as_bytes().to_vec())).collect(),
            Target::PlyCloud => vec![("cloud.ply".into(), ply_seed(true)), ("ascii.ply".into(), ply_seed(false))],
            Target::NpyCloud => vec![("cloud.npy".into(), npy_seed())],
            Target::XyzCloud => vec![("cloud.xyz".into(), xyz_seed())],
            Target::DccsInstances => vec![("valid_instances.json".into(), instances_seed())],
            Target::DccsTrajectory => vec![("trajectory.json".into(), trajectory_seed())],
            Target::Parquet => vec![repo("data/tests/data/urbanvideo/MCQ.parquet")],
            Target::SftRecipe => vec![repo("configs/sft/sis-motion-7b.toml")],
            Target::CvaaRecipe => vec![repo("configs/cvaa/synth.toml")],
            Target::EvalConfig => vec![repo("configs/eval/sisbench-official-3b.toml")],
            Target::ModelConfig => vec![repo("tests/fixtures/qwen2_5_vl/tiny-a/config.json")],
            Target::AdapterConfig => vec![repo(ADAPTER_CONFIG_SEED)],
            Target::Tokenizer => vec![repo("tests/fixtures/chat_template/tokenizer.json")],
            Target::Safetensors => vec![repo("tests/fixtures/sis_motion_pickle/expected.safetensors")],
            Target::PthCheckpoint => vec![repo("tests/fixtures/flow/mofnet/tiny/checkpoint_sample.pth")],
            Target::TorchConnector => vec![repo(CONNECTOR_SEED)],
            Target::FlowCacheEntry => {
                let lab = Lab::temporary();
                vec![("entry.safetensors".into(), lab.flow_cache().seed.clone())]
            }
            Target::Video => vec![("clip.mp4".into(), video_seed())],
            Target::ResumeState => vec![("motionvl_state.json".into(), resume_state_seed())],
        }
    }
}

/// Runs `target`'s reader on `bytes` in `lab`, checking its oracles; one verdict per reader it
/// calls. Training rows and manifests resolve media against `media_root`.
pub fn run(lab: &Lab, target: Target, bytes: &[u8], media_root: &Path) -> Vec<Verdict> {
    match target {
        Target::TrainingRows => [false, true].map(|skip_bad| training_rows(lab, bytes, media_root, skip_bad)).to_vec(),
        Target::BenchmarkManifests => Benchmark::ALL.iter().map(|b| benchmark_manifest(lab, *b, bytes, media_root)).collect(),
        Target::Predictions => predictions(lab, bytes).to_vec(),
        Target::AnswerExtraction => vec![answer_extraction(bytes)],
        Target::PlyCloud => vec![point_cloud(lab, "cloud.ply", bytes)],
        Target::NpyCloud => vec![point_cloud(lab, "cloud.npy", bytes)],
        Target::XyzCloud => vec![point_cloud(lab, "cloud.xyz", bytes)],
        Target::DccsInstances => vec![dccs_instances(lab, bytes)],
        Target::DccsTrajectory => vec![dccs_trajectory(bytes)],
        Target::Parquet => vec![parquet(lab, bytes)],
        Target::SftRecipe => vec![sft_recipe(lab, bytes)],
        Target::CvaaRecipe => vec![cvaa_recipe(lab, bytes)],
        Target::EvalConfig => vec![eval_config(lab, bytes)],
        Target::ModelConfig => vec![model_config(lab, bytes)],
        Target::AdapterConfig => vec![adapter_config(lab, bytes)],
        Target::Tokenizer => vec![tokenizer(lab, bytes)],
        Target::Safetensors => vec![safetensors(lab, bytes)],
        Target::PthCheckpoint => vec![pth_checkpoint(lab, bytes)],
        Target::TorchConnector => vec![torch_connector(lab, bytes)],
        Target::FlowCacheEntry => vec![flow_cache_entry(lab, bytes)],
        Target::Video => vec![video(lab, bytes)],
        Target::ResumeState => vec![resume_state(lab, bytes)],
    }
}

/// A cargo-fuzz target's body: [`run`] in the process's lab, media resolved against the
/// repository's test data.
pub fn fuzz(target: Target, bytes: &[u8]) {
    static MEDIA: OnceLock<PathBuf> = OnceLock::new();
    let media = MEDIA.get_or_init(|| repo_root().join("data/tests/data"));
    let _ = run(Lab::for_process(target), target, bytes, media);
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("fuzz seed {}: {e}", path.display()))
}

/// The training-row, manifest and prediction files the row readers are seeded with.
pub fn row_seed_files() -> Vec<PathBuf> {
    [
        "data/tests/data/dualcog.json",
        "data/tests/data/lf.jsonl",
        "data/tests/data/links2bench.jsonl",
        "data/tests/data/llava.json",
        "data/tests/data/sisbench.json",
        "tests/data/tiny-sft/train.jsonl",
        "tests/data/fuzz/predictions.jsonl",
    ]
    .iter()
    .map(|f| repo_root().join(f))
    .collect()
}

// ---- rows: training files, benchmark manifests, predictions, answers ----

pub fn training_rows(lab: &Lab, bytes: &[u8], media_root: &Path, skip_bad: bool) -> Verdict {
    let path = lab.file("training.json", bytes);
    rows(read_training_samples(&path, &ReadOptions { skip_bad, media_root: Some(media_root.to_path_buf()), ..ReadOptions::default() }))
}

pub fn benchmark_manifest(lab: &Lab, benchmark: Benchmark, bytes: &[u8], media_root: &Path) -> Verdict {
    let path = lab.file("manifest.json", bytes);
    rows(read_manifest(benchmark, &path, &ReadOptions { skip_bad: true, media_root: Some(media_root.to_path_buf()), ..ReadOptions::default() }))
}

/// `read_predictions`, then resuming a predictions file (which rewrites its torn tail).
pub fn predictions(lab: &Lab, bytes: &[u8]) -> [Verdict; 2] {
    let path = lab.file("predictions.jsonl", bytes);
    let read = motionvl_eval::predictions::read_predictions(&path).map(|rows| Items { read: rows.len(), skipped: 0 }).map_err(refused);
    let resumed =
        motionvl_eval::predictions::PredictionWriter::resume(&path).map(|(_, rows)| Items { read: rows.len(), skipped: 0 }).map_err(refused);
    [read, resumed]
}

const ANSWER_SEEDS: [&str; 5] = [
    "The answer is B. turn left",
    "A. up\nB. down\nC) left (D) right",
    "{\"answer\": \"C\", \"time\": \"00:12\"}",
    "Yes, 12.5 meters at 1:02.5",
    "B and D",
];

/// Inline option splitting and every answer extractor, on the bytes as (lossy) text; no
/// extractor refuses, so the verdict counts the extractors that found something.
pub fn answer_extraction(bytes: &[u8]) -> Verdict {
    let text = String::from_utf8_lossy(bytes);
    let options = AnswerOption::lettered(&["move forward", "turn left", "ascend", "3.5 m"]);
    let _ = split_inline_options(&text);
    let found = [
        extract_choice(&text, &options).answer.is_some(),
        extract_choices(&text, &options).answer.is_some(),
        extract_yes_no(&text).answer.is_some(),
        extract_number(&text).answer.is_some(),
        extract_timestamp(&text).answer.is_some(),
        parse_json_lenient(&text).is_some(),
    ];
    Items::count(found.iter().filter(|f| **f).count())
}

// ---- DCCS inputs: point clouds, instances, trajectories ----

/// The seeds' 40 points.
pub fn seed_points() -> Vec<V3> {
    (0..40).map(|i| V3::new(i as f64 * 0.5, (i * i % 7) as f64 - 3.0, 10.0 + (i % 5) as f64)).collect()
}

fn ply_seed(binary: bool) -> Vec<u8> {
    let lab = Lab::temporary();
    let path = lab.dir.join("seed.ply");
    motionvl_construct::dccs::cloud::write_ply(&path, &seed_points(), binary).expect("ply seed");
    read(&path)
}

fn npy_seed() -> Vec<u8> {
    let header = "{'descr': '<f4', 'fortran_order': False, 'shape': (40, 3), }";
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend((header.len() as u16).to_le_bytes());
    npy.extend(header.as_bytes());
    npy.extend(seed_points().iter().flat_map(|p| [p.x as f32, p.y as f32, p.z as f32]).flat_map(f32::to_le_bytes));
    npy
}

fn xyz_seed() -> Vec<u8> {
    seed_points().iter().map(|p| format!("{} {} {}\n", p.x, p.y, p.z)).collect::<String>().into_bytes()
}

/// A point cloud by its extension (`.ply`, `.npy`, `.xyz`). Round trip: the points read, as the
/// PLY writer stores them (f32), written and read back, are the same points.
pub fn point_cloud(lab: &Lab, name: &str, bytes: &[u8]) -> Verdict {
    use motionvl_construct::dccs::cloud::{read_cloud, write_ply};
    let cloud = read_cloud(&lab.file(name, bytes)).map_err(refused)?;
    let stored = |p: &V3| [p.x as f32, p.y as f32, p.z as f32];
    if cloud.points.iter().flat_map(stored).all(f32::is_finite) {
        for binary in [true, false] {
            let again = lab.dir.join(if binary { "again.ply" } else { "again-ascii.ply" });
            write_ply(&again, &cloud.points, binary).unwrap_or_else(|e| panic!("{name}: the PLY writer fails on what the reader read: {e}"));
            let back = read_cloud(&again).unwrap_or_else(|e| panic!("{name}: the written PLY (binary: {binary}) does not read: {e}"));
            let same = back.points.len() == cloud.points.len() && back.points.iter().zip(&cloud.points).all(|(b, a)| stored(b) == stored(a));
            assert!(same, "{name}: the points written as PLY (binary: {binary}) read back otherwise");
        }
    }
    Items::count(cloud.points.len())
}

/// The seeds' two landmarks.
pub fn seed_landmarks() -> Vec<Landmark> {
    vec![
        Landmark {
            id: "silo_1".into(),
            category: Category::IndustrialInfrastructure,
            subcategory: "silo".into(),
            description: "a red grain silo".into(),
            bbox: OrientedBox { center: V3::new(3.0, -2.0, 9.0), size: V3::new(6.0, 5.0, 18.0), yaw_deg: 20.0 },
            support_points: vec![V3::new(3.0, 0.0, 5.0), V3::new(0.0, 2.0, 17.0)],
        },
        Landmark {
            id: "tower_2".into(),
            category: Category::Building,
            subcategory: String::new(),
            description: "a glass tower".into(),
            bbox: OrientedBox { center: V3::new(-20.0, 14.0, 30.0), size: V3::new(10.0, 12.0, 60.0), yaw_deg: -5.0 },
            support_points: vec![V3::new(-20.0, 14.0, 59.0)],
        },
    ]
}

fn instances_seed() -> Vec<u8> {
    let lab = Lab::temporary();
    let path = lab.dir.join("valid_instances.json");
    motionvl_construct::dccs::instances::write_instances(&path, &seed_landmarks()).expect("instances seed");
    read(&path)
}

/// Equal up to the last bits JSON's decimal form may move.
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

fn close3(a: V3, b: V3) -> bool {
    close(a.x, b.x) && close(a.y, b.y) && close(a.z, b.z)
}

/// `valid_instances.json`. Round trip: the landmarks read, written and read back, are the same.
pub fn dccs_instances(lab: &Lab, bytes: &[u8]) -> Verdict {
    use motionvl_construct::dccs::instances::{read_instances, write_instances};
    let landmarks = read_instances(&lab.file("valid_instances.json", bytes)).map_err(refused)?;
    let again = lab.dir.join("again_instances.json");
    write_instances(&again, &landmarks).unwrap_or_else(|e| panic!("instances: the writer fails on what the reader read: {e}"));
    let back = read_instances(&again).unwrap_or_else(|e| panic!("instances: the written file does not read: {e}"));
    let same = back.len() == landmarks.len()
        && back.iter().zip(&landmarks).all(|(b, a)| {
            (&b.id, b.category, &b.subcategory, &b.description) == (&a.id, a.category, &a.subcategory, &a.description)
                && close3(b.bbox.center, a.bbox.center)
                && close3(b.bbox.size, a.bbox.size)
                && close(b.bbox.yaw_deg, a.bbox.yaw_deg)
                && b.support_points.len() == a.support_points.len()
                && b.support_points.iter().zip(&a.support_points).all(|(p, q)| close3(*p, *q))
        });
    assert!(same, "instances: the landmarks written back read otherwise");
    Items::count(landmarks.len())
}

fn trajectory_seed() -> Vec<u8> {
    use motionvl_construct::dccs::trajectory::Trajectory;
    let frames: Vec<serde_json::Value> = (0..12)
        .map(|i| serde_json::json!({"t": i as f64 / 5.0, "x": i as f64, "y": 2.0 * i as f64, "z": 30.0, "yaw": 15.0 * i as f64, "pitch": -30.0}))
        .collect();
    let parsed = Trajectory::from_json(&serde_json::json!({"fps": 5.0, "frames": frames})).expect("trajectory seed");
    parsed.to_json().to_string().into_bytes()
}

/// A trajectory file. Round trip: what it reads, written (to 4 decimals) and read back, has the
/// same frames.
pub fn dccs_trajectory(bytes: &[u8]) -> Verdict {
    use motionvl_construct::dccs::trajectory::Trajectory;
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(refused)?;
    let trajectory = Trajectory::from_json(&value)?;
    let back = Trajectory::from_json(&trajectory.to_json()).unwrap_or_else(|e| panic!("trajectory: the written form does not read: {e}"));
    let near = |a: f64, b: f64| (a - b).abs() <= 1e-4_f64.max(1e-9 * a.abs());
    let near3 = |a: V3, b: V3| near(a.x, b.x) && near(a.y, b.y) && near(a.z, b.z);
    let same = close(back.fps, trajectory.fps)
        && back.frames.len() == trajectory.frames.len()
        && back.frames.iter().zip(&trajectory.frames).all(|(b, a)| near3(b.pos, a.pos) && near3(b.forward, a.forward));
    assert!(same, "trajectory: the frames written back read otherwise");
    Items::count(trajectory.frames.len())
}

// ---- configuration: recipes, evaluation configs, model and adapter configs, tokenizers ----

pub fn parquet(lab: &Lab, bytes: &[u8]) -> Verdict {
    let rows = motionvl_data::parquet_rows::read_parquet_rows(&lab.file("MCQ.parquet", bytes)).map_err(refused)?;
    Items::count(rows.len())
}

/// An SFT recipe. Round trip: the recipe read, written and read back, writes the same TOML.
pub fn sft_recipe(lab: &Lab, bytes: &[u8]) -> Verdict {
    use motionvl_train::recipe::Recipe;
    let recipe = Recipe::load(&lab.file("recipe.toml", bytes), &[]).map_err(refused)?;
    let written = recipe.to_toml();
    let back =
        Recipe::load(&lab.file("again.toml", written.as_bytes()), &[]).unwrap_or_else(|e| panic!("recipe: the written recipe does not read: {e}"));
    assert_eq!(back.to_toml(), written, "recipe: the recipe written back reads otherwise");
    Items::count(1)
}

/// A CVAA recipe. Round trip as [`sft_recipe`].
pub fn cvaa_recipe(lab: &Lab, bytes: &[u8]) -> Verdict {
    use motionvl_train::cvaa::CvaaRecipe;
    let recipe = CvaaRecipe::load(&lab.file("cvaa.toml", bytes), &[]).map_err(refused)?;
    let written = recipe.to_toml();
    let back = CvaaRecipe::load(&lab.file("again-cvaa.toml", written.as_bytes()), &[])
        .unwrap_or_else(|e| panic!("cvaa recipe: the written recipe does not read: {e}"));
    assert_eq!(back.to_toml(), written, "cvaa recipe: the recipe written back reads otherwise");
    Items::count(1)
}

pub fn eval_config(lab: &Lab, bytes: &[u8]) -> Verdict {
    motionvl_eval::config::RunConfig::from_file(&lab.file("eval.toml", bytes)).map_err(refused)?;
    Items::count(1)
}

pub fn model_config(lab: &Lab, bytes: &[u8]) -> Verdict {
    motionvl_models::Qwen25VlConfig::from_file(&lab.file("config.json", bytes)).map_err(refused)?;
    Items::count(1)
}

const ADAPTER_CONFIG_SEED: &str = "tests/fixtures/sis_motion/tiny-b/package/adapter_config.json";

/// A PEFT `adapter_config.json`, beside the fixture's own adapter weights.
pub fn adapter_config(lab: &Lab, bytes: &[u8]) -> Verdict {
    let dir = lab.dir.join("adapter");
    let weights = dir.join("adapter_model.safetensors");
    if !weights.is_file() {
        let fixture = repo_root().join(ADAPTER_CONFIG_SEED).with_file_name("adapter_model.safetensors");
        lab.file("adapter/adapter_model.safetensors", &read(&fixture));
    }
    lab.file("adapter/adapter_config.json", bytes);
    let adapter = motionvl_models::lora::LoraWeights::load_peft(&dir, &candle_core::Device::Cpu).map_err(refused)?;
    Items::count(adapter.modules.len())
}

pub fn tokenizer(lab: &Lab, bytes: &[u8]) -> Verdict {
    motionvl_data::text::QwenTokenizer::from_file(lab.file("tokenizer.json", bytes)).map_err(refused)?;
    Items::count(1)
}

// ---- weights: safetensors, PyTorch pickles, flow-cache entries ----

/// A safetensors file: header and every tensor.
pub fn safetensors(lab: &Lab, bytes: &[u8]) -> Verdict {
    let weights = motionvl_models::CheckpointWeights::open(&[lab.file("weights.safetensors", bytes)]).map_err(refused)?;
    let names: Vec<String> = weights.names().map(str::to_owned).collect();
    for name in &names {
        weights.load_stored(name, &candle_core::Device::Cpu).map_err(refused)?;
    }
    Items::count(names.len())
}

/// A MOFNet checkpoint as torch saved it.
pub fn pth_checkpoint(lab: &Lab, bytes: &[u8]) -> Verdict {
    let tensors = motionvl_flow::state_dict::read_pth(&lab.file("checkpoint.pth", bytes)).map_err(refused)?;
    Items::count(tensors.len())
}

const CONNECTOR_SEED: &str = "tests/fixtures/sis_motion_pickle/torch_connector.pt";

/// The connector's width d, from its LayerNorm as torch saved it.
fn connector_width() -> usize {
    static WIDTH: OnceLock<usize> = OnceLock::new();
    *WIDTH.get_or_init(|| {
        let saved = candle_core::pickle::read_all(repo_root().join(CONNECTOR_SEED)).expect("torch's own connector reads");
        saved.iter().find(|(n, _)| n == "ln.weight").map(|(_, t)| t.dims()[0]).expect("the connector has ln.weight")
    })
}

/// A SIS-Motion connector as torch saved it.
pub fn torch_connector(lab: &Lab, bytes: &[u8]) -> Verdict {
    let vars = motionvl_models::sis_package::read_connector(&lab.file("connector_weights.pt", bytes), connector_width(), &candle_core::Device::Cpu)
        .map_err(refused)?;
    Items::count(vars.len())
}

/// A flow cache holding one entry, whose file the fuzzer's bytes replace.
struct FlowCacheFixture {
    root: PathBuf,
    key: motionvl_flow::cache::CacheKey,
    entry: PathBuf,
    seed: Vec<u8>,
}

impl Lab {
    fn flow_cache(&self) -> &FlowCacheFixture {
        self.flow_cache.get_or_init(|| {
            use motionvl_flow::cache::{CacheKey, FlowCache, Precision};
            let root = self.dir.join("flow-cache");
            let cache = FlowCache::new(&root).expect("cache");
            let estimator = motionvl_flow::estimator_by_name("zero", None, &candle_core::Device::Cpu).expect("zero");
            let frames = ndarray::Array4::from_shape_fn((3, 8, 12, 3), |(t, y, x, c)| (t * 40 + y * 9 + x * 5 + c * 3) as u8);
            let key = CacheKey::new(frames.view(), "fuzz", estimator.as_ref());
            let flows = ndarray::Array4::from_shape_fn((2, 2, 8, 12), |(t, c, y, x)| t as f32 - 0.5 * c as f32 + 0.25 * y as f32 - x as f32 / 16.0);
            cache.put(&key, &flows, "zero", Precision::Single).expect("put");
            assert_eq!(cache.get(&key).expect("get"), Some(flows), "flow cache entry round trip");
            let entry = cache.path_of(&key);
            let seed = read(&entry);
            FlowCacheFixture { root, key, entry, seed }
        })
    }
}

/// A flow-cache entry: a mutated entry is a miss or a corrupt entry, and the header check
/// agrees with the full read.
pub fn flow_cache_entry(lab: &Lab, bytes: &[u8]) -> Verdict {
    use motionvl_flow::cache::FlowCache;
    let fixture = lab.flow_cache();
    std::fs::write(&fixture.entry, bytes).expect("lab file");
    let cache = FlowCache::new(&fixture.root).map_err(refused)?;
    let header = cache.has_entry(fixture.key.as_str());
    match cache.get(&fixture.key) {
        Ok(Some(flows)) => {
            assert!(header.is_ok(), "the full read accepts an entry the header check refuses: {header:?}");
            Items::count(flows.shape()[0])
        }
        Ok(None) => Err("missing".into()),
        Err(e) => Err(e.to_string()),
    }
}

// ---- videos and checkpoint state ----

fn video_seed() -> Vec<u8> {
    use motionvl_data::video::{EncodeSettings, VideoWriter};
    let lab = Lab::temporary();
    let clip = lab.dir.join("clip.mp4");
    let mut writer = VideoWriter::create(&clip, 32, 24, &EncodeSettings { frame_rate: (10, 1), ..EncodeSettings::default() }).expect("writer");
    for t in 0..6u8 {
        let frame = ndarray::Array3::from_shape_fn((24, 32, 3), |(y, x, c)| (t as usize * 30 + y * 7 + x * 3 + c * 50) as u8);
        writer.push(frame.view()).expect("frame");
    }
    writer.finish().expect("video");
    read(&clip)
}

/// A video: container headers and every frame.
pub fn video(lab: &Lab, bytes: &[u8]) -> Verdict {
    let path = lab.file("clip.mp4", bytes);
    motionvl_data::video::probe_video(&path).map_err(refused)?;
    let frames = motionvl_data::video::decode_all(&path).map_err(refused)?;
    Items::count(frames.timestamps.len())
}

fn resume_state_seed() -> Vec<u8> {
    let state = motionvl_train::sft::TrainerState {
        step: 40,
        position: motionvl_data::loader::Position { epoch: 1, index: 17 },
        seed: 42,
        total_steps: 100,
        data_sha256: Some("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08".into()),
    };
    serde_json::to_vec_pretty(&state).expect("state seed")
}

/// A checkpoint's `motionvl_state.json`, as a resume reads it. Round trip: the state read,
/// saved and read back, is the same.
pub fn resume_state(lab: &Lab, bytes: &[u8]) -> Verdict {
    use motionvl_train::checkpoint as ckpt;
    use motionvl_train::hf_layout::{RESUME_STATE_FILE, read_resume_state};
    use motionvl_train::sft::TrainerState;
    let dir = lab.dir.join("checkpoint");
    lab.file(&format!("checkpoint/{RESUME_STATE_FILE}"), bytes);
    let state: TrainerState = read_resume_state(&dir).map_err(refused)?;
    ckpt::save_json(dir.join(RESUME_STATE_FILE), &state).unwrap_or_else(|e| panic!("resume state: the writer fails on what the reader read: {e}"));
    let back: TrainerState = read_resume_state(&dir).unwrap_or_else(|e| panic!("resume state: the saved state does not read: {e}"));
    assert_eq!(back, state, "resume state: the state saved back reads otherwise");
    Items::count(1)
}
