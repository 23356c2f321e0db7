//! The UAV-DualCog arms of `construct`: `dccs-video`, `dccs-image` and `synth --dccs`, thin over
//! `motionvl_construct::dccs::pipeline`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use motionvl_construct::dccs::DccsError;
use motionvl_construct::dccs::pipeline::{self, Progress, SynthDccsConfig};
use motionvl_construct::dccs::stage3::Stage3Config;
use motionvl_construct::dccs::stage4::Stage4Config;
use motionvl_construct::dccs::trajectory::{KinematicLimits, TrajectoryConfig};
use motionvl_construct::dccs::visibility::VisibilityConfig;

/// Inputs and outputs both DCCS stages share.
#[derive(Args)]
pub struct DccsCommon {
    /// Stage 2's reviewed landmarks.
    #[arg(long)]
    instances: PathBuf,
    /// The scene's obstacle point cloud: .ply, .xyz/.txt/.pts or .npy.
    #[arg(long)]
    cloud: PathBuf,
    /// Output folder (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Seed of every draw; the same seed gives the same files.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Scene id in sample ids and manifests.
    #[arg(long, default_value = "scene")]
    scene_id: String,
    /// JSON file with the `scene` block copied into the render requests (what renders them);
    /// `{"engine": "motionvl_synth", ...}` lets `--render` render them here.
    #[arg(long)]
    scene: Option<PathBuf>,
    /// Render the requests with the synthetic world named by `--scene`.
    #[arg(long)]
    render: bool,
}

impl DccsCommon {
    fn scene(&self) -> Result<serde_json::Value> {
        match &self.scene {
            None => Ok(serde_json::Value::Null),
            Some(p) => {
                let text = std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
                serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", p.display()))
            }
        }
    }

    /// What both stage commands do around their stage: a progress bar, the stage itself
    /// (`build`), its render requests rendered when `--render` asks, and one line of summary
    /// (`report`) after the manifest's name.
    fn run_stage<S>(&self, stage: u8, build: impl FnOnce(&Bar) -> Result<S, DccsError>, report: impl FnOnce(&S) -> String) -> Result<()> {
        let bar = Bar::new();
        let summary = build(&bar).with_context(|| format!("Stage {stage}"))?;
        if self.render {
            let requests = self.out.join(format!("stage{stage}_render_requests.json"));
            pipeline::render(&requests, stage, &bar).with_context(|| format!("rendering Stage {stage}"))?;
        }
        bar.0.finish_and_clear();
        println!("stage{stage}.json in {}: {}", self.out.display(), report(&summary));
        Ok(())
    }
}

#[derive(Args)]
pub struct VideoArgs {
    #[command(flatten)]
    common: DccsCommon,
    /// Video width in pixels (even).
    #[arg(long, default_value_t = 640)]
    width: usize,
    /// Video height in pixels (even).
    #[arg(long, default_value_t = 480)]
    height: usize,
    /// Clearance from every cloud point, metres.
    #[arg(long, default_value_t = 2.0)]
    clearance: f64,
    /// Check every mission against 8 m/s, 10 m/s² and 120°/s and record the verdict in its rows
    /// (`kinematics_feasible`); missions are kept either way, as in UAV-DualCog.
    #[arg(long)]
    check_kinematics: bool,
    /// Obstacle points cover this half-size in metres in the visibility test (0: one pixel).
    #[arg(long, default_value_t = 0.0)]
    splat_radius: f64,
}

#[derive(Args)]
pub struct ImageArgs {
    #[command(flatten)]
    common: DccsCommon,
    /// Image width in pixels (4:3 with the height).
    #[arg(long, default_value_t = 4096)]
    width: usize,
    /// Image height in pixels.
    #[arg(long, default_value_t = 3072)]
    height: usize,
    /// Obstacle points cover this half-size in metres in the visibility test (0: one pixel).
    #[arg(long, default_value_t = 0.0)]
    splat_radius: f64,
}

/// The camera of both stages' visibility tests, at the size each stage's flags give.
fn visibility(width: usize, height: usize, splat_radius: f64) -> VisibilityConfig {
    VisibilityConfig { width, height, splat_radius_m: splat_radius, ..VisibilityConfig::default() }
}

/// An indicatif bar per phase.
struct Bar(indicatif::ProgressBar);

impl Bar {
    fn new() -> Self {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template("{msg:>9} {bar:30} {pos}/{len} · {elapsed} · eta {eta}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Bar(bar)
    }
}

impl Progress for Bar {
    fn start(&self, phase: &str, steps: u64) {
        self.0.reset();
        self.0.set_length(steps);
        self.0.set_message(phase.to_string());
    }

    fn tick(&self) {
        self.0.inc(1);
    }
}

/// `construct synth --dccs`.
pub fn synth(out: &Path, seed: u64, landmarks: usize) -> Result<()> {
    let cfg = SynthDccsConfig { seed, landmarks, ..SynthDccsConfig::default() };
    let bar = Bar::new();
    let start = Instant::now();
    let s = pipeline::synthetic(out, &cfg, &bar).with_context(|| format!("building the synthetic DCCS set in {}", out.display()))?;
    bar.0.finish_and_clear();
    println!("UAV-DualCog set in {} ({:.1} s)", s.dir.display(), start.elapsed().as_secs_f64());
    println!("  landmarks: {}", s.landmarks);
    println!("  stage3.json: {} rows, {} missions, {} missions rejected", s.stage3.rows, s.stage3.missions, s.stage3.rejections);
    println!("  stage4.json: {} rows, {} images, {} rejections", s.stage4.rows, s.stage4.assets, s.stage4.rejections);
    Ok(())
}

pub fn video(args: &VideoArgs) -> Result<()> {
    let c = &args.common;
    let cfg = Stage3Config {
        seed: c.seed,
        scene_id: c.scene_id.clone(),
        trajectory: TrajectoryConfig {
            clearance_m: args.clearance,
            kinematics: args.check_kinematics.then(KinematicLimits::default),
            ..TrajectoryConfig::default()
        },
        visibility: visibility(args.width, args.height, args.splat_radius),
        scene: c.scene()?,
        ..Stage3Config::default()
    };
    c.run_stage(
        3,
        |bar| pipeline::run_stage3(&c.instances, &c.cloud, &c.out, &cfg, bar),
        |s| format!("{} rows from {} missions; {} missions rejected (stage3_rejections.json)", s.rows, s.missions, s.rejections),
    )
}

pub fn image(args: &ImageArgs) -> Result<()> {
    let c = &args.common;
    let cfg = Stage4Config {
        seed: c.seed,
        scene_id: c.scene_id.clone(),
        visibility: visibility(args.width, args.height, args.splat_radius),
        scene: c.scene()?,
        ..Stage4Config::default()
    };
    c.run_stage(
        4,
        |bar| pipeline::run_stage4(&c.instances, &c.cloud, &c.out, &cfg, bar),
        |s| format!("{} rows, {} images requested; {} rejections (stage4_rejections.json)", s.rows, s.assets, s.rejections),
    )
}
