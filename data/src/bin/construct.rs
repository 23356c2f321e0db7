//! `construct`: builds benchmark and training data that the `data` readers load unchanged.
//!
//! ```text
//! construct synth --out data/synth            # the demo's synthetic UAV world
//! construct synth --dccs --out data/synth      # a UAV-DualCog set from it, under data/synth/dccs
//! construct dccs-video --instances valid_instances.json --cloud points.ply --out OUT
//! construct dccs-image --instances valid_instances.json --cloud points.ply --out OUT
//! ```

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use motionvl_data::dccs::pipeline::{self, Progress, SynthDccsConfig};
use motionvl_data::dccs::stage3::Stage3Config;
use motionvl_data::dccs::stage4::Stage4Config;
use motionvl_data::dccs::trajectory::{KinematicLimits, TrajectoryConfig};
use motionvl_data::dccs::visibility::VisibilityConfig;
use motionvl_data::synth::{GroundTruth, Split, SynthConfig, SynthSummary, generate_with_progress};

#[derive(Parser)]
#[command(name = "construct", about = "Build benchmark and training data for motionvl")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Render the synthetic UAV world: clips with exact depth and flow, SIS-Bench-style
    /// questions for a training split and a held-out split of different worlds.
    Synth(SynthArgs),
    /// UAV-DualCog Stage 3: flight missions, trajectories, render requests and video task rows
    /// (`stage3.json`) from reviewed landmarks and the scene's point cloud.
    DccsVideo(DccsVideoArgs),
    /// UAV-DualCog Stage 4: image task rows (`stage4.json`) and render requests.
    DccsImage(DccsImageArgs),
}

/// Inputs and outputs both DCCS stages share.
#[derive(Args)]
struct DccsCommon {
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
}

#[derive(Args)]
struct DccsVideoArgs {
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
struct DccsImageArgs {
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

#[derive(Args)]
struct SynthArgs {
    /// Output folder (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Worlds (terrain and landmark layouts) of the training split.
    #[arg(long, default_value_t = SynthConfig::default().train_worlds)]
    train_worlds: usize,
    /// Worlds of the held-out split; never the same as a training world.
    #[arg(long, default_value_t = SynthConfig::default().test_worlds)]
    test_worlds: usize,
    /// Single clips per world, one flown behaviour each.
    #[arg(long, default_value_t = SynthConfig::default().clips_per_world)]
    clips_per_world: usize,
    /// Concatenated videos (of 2, 3 and 4 clips in turn) per world.
    #[arg(long, default_value_t = SynthConfig::default().concats_per_world)]
    concats_per_world: usize,
    /// Named landmarks per world (distinct colour and kind each).
    #[arg(long, default_value_t = SynthConfig::default().landmarks_per_world)]
    landmarks_per_world: usize,
    /// Frame width in pixels (even).
    #[arg(long, default_value_t = SynthConfig::default().width)]
    width: usize,
    /// Frame height in pixels (even).
    #[arg(long, default_value_t = SynthConfig::default().height)]
    height: usize,
    /// Frames per second of the rendered clips.
    #[arg(long, default_value_t = SynthConfig::default().fps)]
    fps: u32,
    /// Length of each clip in seconds.
    #[arg(long, default_value_t = SynthConfig::default().seconds)]
    seconds: f32,
    /// Seed of everything; the same seed gives the same manifests and ground truth.
    #[arg(long, default_value_t = SynthConfig::default().seed)]
    seed: u64,
    /// Which clips get exact flow/depth files: all, test or none.
    #[arg(long, default_value = "test")]
    ground_truth: GroundTruth,
    /// Ask Action Recognition over exactly these four movements in this order (comma-separated,
    /// e.g. forward,backward,yaw_left,yaw_right); by default each clip gets a drawn option set.
    #[arg(long, value_delimiter = ',')]
    recognition_movements: Vec<String>,
    /// Replace a world already in --out.
    #[arg(long)]
    force: bool,
    /// Build a UAV-DualCog (DCCS) set instead: landmarks, point cloud, Stage 3 and Stage 4
    /// manifests and their rendered media (160×120) under `--out/dccs`, from `--seed` and
    /// `--dccs-landmarks`.
    #[arg(long)]
    dccs: bool,
    /// Landmarks of the DCCS world.
    #[arg(long, default_value_t = SynthDccsConfig::default().landmarks)]
    dccs_landmarks: usize,
}

impl SynthArgs {
    fn config(&self) -> Result<SynthConfig> {
        let recognition_movements = self
            .recognition_movements
            .iter()
            .map(|name| {
                serde_json::from_value(serde_json::Value::String(name.clone()))
                    .with_context(|| format!("unknown movement `{name}`"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(SynthConfig {
            train_worlds: self.train_worlds,
            test_worlds: self.test_worlds,
            clips_per_world: self.clips_per_world,
            concats_per_world: self.concats_per_world,
            landmarks_per_world: self.landmarks_per_world,
            width: self.width,
            height: self.height,
            fps: self.fps,
            seconds: self.seconds,
            seed: self.seed,
            ground_truth: self.ground_truth,
            recognition_movements,
        })
    }
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Synth(args) if args.dccs => synth_dccs(&args),
        Command::Synth(args) => synth(&args),
        Command::DccsVideo(args) => dccs_video(&args),
        Command::DccsImage(args) => dccs_image(&args),
    }
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

fn synth_dccs(args: &SynthArgs) -> Result<()> {
    let cfg = SynthDccsConfig { seed: args.seed, landmarks: args.dccs_landmarks, ..SynthDccsConfig::default() };
    let bar = Bar::new();
    let start = Instant::now();
    let s = pipeline::synthetic(&args.out, &cfg, &bar)
        .with_context(|| format!("building the synthetic DCCS set in {}", args.out.display()))?;
    bar.0.finish_and_clear();
    println!("UAV-DualCog set in {} ({:.1} s)", s.dir.display(), start.elapsed().as_secs_f64());
    println!("  landmarks: {}", s.landmarks);
    println!(
        "  stage3.json: {} rows, {} missions, {} missions rejected",
        s.stage3.rows, s.stage3.missions, s.stage3.rejections
    );
    println!("  stage4.json: {} rows, {} images, {} rejections", s.stage4.rows, s.stage4.assets, s.stage4.rejections);
    Ok(())
}

fn dccs_video(args: &DccsVideoArgs) -> Result<()> {
    let c = &args.common;
    let cfg = Stage3Config {
        seed: c.seed,
        scene_id: c.scene_id.clone(),
        trajectory: TrajectoryConfig {
            clearance_m: args.clearance,
            kinematics: args.check_kinematics.then(KinematicLimits::default),
            ..TrajectoryConfig::default()
        },
        visibility: VisibilityConfig {
            width: args.width,
            height: args.height,
            splat_radius_m: args.splat_radius,
            ..VisibilityConfig::default()
        },
        scene: c.scene()?,
        ..Stage3Config::default()
    };
    let bar = Bar::new();
    let s = pipeline::run_stage3(&c.instances, &c.cloud, &c.out, &cfg, &bar).context("Stage 3")?;
    if c.render {
        pipeline::render(&c.out.join("stage3_render_requests.json"), 3, &bar).context("rendering Stage 3")?;
    }
    bar.0.finish_and_clear();
    println!(
        "stage3.json in {}: {} rows from {} missions; {} missions rejected (stage3_rejections.json)",
        c.out.display(),
        s.rows,
        s.missions,
        s.rejections
    );
    Ok(())
}

fn dccs_image(args: &DccsImageArgs) -> Result<()> {
    let c = &args.common;
    let cfg = Stage4Config {
        seed: c.seed,
        scene_id: c.scene_id.clone(),
        visibility: VisibilityConfig {
            width: args.width,
            height: args.height,
            splat_radius_m: args.splat_radius,
            ..VisibilityConfig::default()
        },
        scene: c.scene()?,
        ..Stage4Config::default()
    };
    let bar = Bar::new();
    let s = pipeline::run_stage4(&c.instances, &c.cloud, &c.out, &cfg, &bar).context("Stage 4")?;
    if c.render {
        pipeline::render(&c.out.join("stage4_render_requests.json"), 4, &bar).context("rendering Stage 4")?;
    }
    bar.0.finish_and_clear();
    println!(
        "stage4.json in {}: {} rows, {} images requested; {} rejections (stage4_rejections.json)",
        c.out.display(),
        s.rows,
        s.assets,
        s.rejections
    );
    Ok(())
}

fn synth(args: &SynthArgs) -> Result<()> {
    let config = args.config()?;
    config.validate()?;
    let bar = indicatif::ProgressBar::new(config.total_clips() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} clips · {elapsed} · eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let summary = generate_with_progress(&config, &args.out, args.force, &|| bar.inc(1))
        .with_context(|| format!("generating the synthetic world in {}", args.out.display()))?;
    bar.finish_and_clear();
    report(&summary, start.elapsed().as_secs_f64());
    Ok(())
}

fn report(summary: &SynthSummary, seconds: f64) {
    println!("synthetic world in {} ({seconds:.1} s)", summary.out_dir.display());
    for split in [Split::Train, Split::Test] {
        let s = summary.split(split);
        let questions: Vec<String> = s.questions.iter().map(|(t, n)| format!("{t} {n}")).collect();
        println!(
            "  {split}: {} worlds, {} clips, {} concatenated videos; questions: {}",
            s.world_seeds.len(),
            s.clips,
            s.concatenations,
            questions.join(", ")
        );
    }
    println!("  training conversations: {}", summary.train_conversations().display());
    println!("  held-out manifest:      {}", summary.test_manifest().display());
}
