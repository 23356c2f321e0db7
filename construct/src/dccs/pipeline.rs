//! The stages end to end, as `construct` runs them: Stage 3 and Stage 4 from handoff files,
//! and the synthetic world's whole DCCS set (`construct synth --dccs`).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::cloud::{read_cloud, write_ply};
use super::error::DccsError;
use super::instances::{read_instances, write_instances};
use super::render::{render_stage3, render_stage4};
use super::stage3::{Stage3Config, Stage3Summary, plan_missions, write_stage3};
use super::stage4::{Stage4Config, build_stage4, write_stage4};
use super::visibility::VisibilityConfig;
use super::world::{Sampling, export, scene_block};
use crate::synth::scene::{World, WorldSpec};

/// Reports long work: a phase with its number of steps, then one tick per step.
pub trait Progress: Sync {
    fn start(&self, phase: &str, steps: u64);
    fn tick(&self);
}

/// No reporting.
impl Progress for () {
    fn start(&self, _: &str, _: u64) {}
    fn tick(&self) {}
}

/// Stage 3 from `valid_instances.json` and a point cloud into `out`.
pub fn run_stage3(instances: &Path, cloud: &Path, out: &Path, cfg: &Stage3Config, progress: &dyn Progress) -> Result<Stage3Summary, DccsError> {
    cfg.validate()?;
    let landmarks = read_instances(instances)?;
    let cloud = read_cloud(cloud)?;
    progress.start("missions", landmarks.len() as u64);
    let (missions, rejections) = plan_missions(&landmarks, &cloud, cfg, &|| progress.tick());
    write_stage3(out, &landmarks, &missions, &rejections, cfg)
}

/// What Stage 4 wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage4Summary {
    pub rows: usize,
    pub assets: usize,
    pub rejections: usize,
}

/// Stage 4 from `valid_instances.json` and a point cloud into `out`.
pub fn run_stage4(instances: &Path, cloud: &Path, out: &Path, cfg: &Stage4Config, progress: &dyn Progress) -> Result<Stage4Summary, DccsError> {
    cfg.validate()?;
    let landmarks = read_instances(instances)?;
    let cloud = read_cloud(cloud)?;
    progress.start("views", landmarks.len() as u64);
    let built = build_stage4(&landmarks, &cloud, cfg, &|| progress.tick())?;
    write_stage4(out, &built, cfg)?;
    Ok(Stage4Summary { rows: built.samples.len(), assets: built.requests.len(), rejections: built.rejections.len() })
}

/// Renders a request file with the synthetic world it names.
pub fn render(requests: &Path, stage: u8, progress: &dyn Progress) -> Result<usize, DccsError> {
    let count = super::error::read_json(requests)?.get("requests").and_then(Value::as_array).map_or(0, Vec::len);
    progress.start(if stage == 3 { "videos" } else { "images" }, count as u64);
    match stage {
        3 => render_stage3(requests, &|| progress.tick()),
        _ => render_stage4(requests, &|| progress.tick()),
    }
}

/// Settings of `construct synth --dccs`.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthDccsConfig {
    pub seed: u64,
    pub landmarks: usize,
    pub extent: f32,
    pub video_size: (usize, usize),
    pub image_size: (usize, usize),
    pub sampling: Sampling,
    pub binary_ply: bool,
}

impl Default for SynthDccsConfig {
    fn default() -> Self {
        SynthDccsConfig {
            seed: 7,
            landmarks: 3,
            extent: 90.0,
            video_size: (160, 120),
            image_size: (160, 120),
            sampling: Sampling::default(),
            binary_ply: true,
        }
    }
}

/// What `synth --dccs` wrote under `DIR/dccs/`.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthDccsSummary {
    pub dir: PathBuf,
    pub landmarks: usize,
    pub stage3: Stage3Summary,
    pub stage4: Stage4Summary,
}

/// The synthetic world as Stage 2 files, then Stages 3 and 4 from those files exactly as from
/// real ones, then their render requests rendered: a complete set with media under `out/dccs`.
pub fn synthetic(out: &Path, cfg: &SynthDccsConfig, progress: &dyn Progress) -> Result<SynthDccsSummary, DccsError> {
    let dir = out.join("dccs");
    let spec = WorldSpec { landmarks: cfg.landmarks, extent: cfg.extent };
    let world = World::generate(cfg.seed, &spec)?;
    let (landmarks, points) = export(&world, &spec, &cfg.sampling);
    let instances = dir.join("valid_instances.json");
    let cloud = dir.join("points.ply");
    write_instances(&instances, &landmarks)?;
    write_ply(&cloud, &points, cfg.binary_ply)?;
    // Sparse surface points still hide what lies behind them when each covers its spacing.
    let splat = cfg.sampling.surface_m * 0.5;
    let scene = scene_block(cfg.seed, &spec);
    let scene_id = format!("synth_{}", cfg.seed);
    let video = VisibilityConfig { width: cfg.video_size.0, height: cfg.video_size.1, splat_radius_m: splat, ..VisibilityConfig::default() };
    let s3 = Stage3Config { seed: cfg.seed, scene_id: scene_id.clone(), visibility: video, scene: scene.clone(), ..Stage3Config::default() };
    let stage3 = run_stage3(&instances, &cloud, &dir, &s3, progress)?;
    let image = VisibilityConfig { width: cfg.image_size.0, height: cfg.image_size.1, splat_radius_m: splat, ..VisibilityConfig::default() };
    let s4 = Stage4Config { seed: cfg.seed, scene_id, visibility: image, scene, ..Stage4Config::default() };
    let stage4 = run_stage4(&instances, &cloud, &dir, &s4, progress)?;
    render(&dir.join("stage3_render_requests.json"), 3, progress)?;
    render(&dir.join("stage4_render_requests.json"), 4, progress)?;
    Ok(SynthDccsSummary { dir, landmarks: landmarks.len(), stage3, stage4 })
}
