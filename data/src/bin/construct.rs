//! `construct`: builds benchmark and training data that the `data` readers load unchanged.
//!
//! ```text
//! construct synth --out data/synth            # the demo's synthetic UAV world
//! construct synth --satellite-only --out data/synth   # its cross-view (CVAA) pairs alone
//! ```

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use motionvl_data::synth::satellite::{self, SatelliteConfig};
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
    /// Also write cross-view pairs: a satellite image of every world and UAV frames over it,
    /// listed with their footprint boxes in `<split>/cvaa_pairs.jsonl`.
    #[arg(long)]
    satellite: bool,
    /// Write only the cross-view pairs, no clips.
    #[arg(long)]
    satellite_only: bool,
    /// UAV frames per training world for the cross-view pairs.
    #[arg(long, default_value_t = SatelliteConfig::default().train_frames_per_world)]
    satellite_train_frames: usize,
    /// UAV frames per held-out world for the cross-view pairs.
    #[arg(long, default_value_t = SatelliteConfig::default().test_frames_per_world)]
    satellite_test_frames: usize,
}

impl SynthArgs {
    fn config(&self) -> Result<SynthConfig> {
        let recognition_movements = self
            .recognition_movements
            .iter()
            .map(|name| serde_json::from_value(serde_json::Value::String(name.clone())).with_context(|| format!("unknown movement `{name}`")))
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
        Command::Synth(args) => synth(&args),
    }
}

fn synth(args: &SynthArgs) -> Result<()> {
    let config = args.config()?;
    config.validate()?;
    if args.satellite || args.satellite_only {
        satellite_pairs(args, &config)?;
    }
    if args.satellite_only {
        return Ok(());
    }
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

fn satellite_pairs(args: &SynthArgs, config: &SynthConfig) -> Result<()> {
    let cfg = SatelliteConfig {
        train_frames_per_world: args.satellite_train_frames,
        test_frames_per_world: args.satellite_test_frames,
        ..SatelliteConfig::default()
    };
    let bar = indicatif::ProgressBar::new(satellite::total_frames(config, &cfg) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} cross-view frames · eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let summary = satellite::write_pairs(config, &cfg, &args.out, &|| bar.inc(1))
        .with_context(|| format!("writing cross-view pairs in {}", args.out.display()))?;
    bar.finish_and_clear();
    println!("cross-view pairs: {} ({} pairs), {} ({} pairs)", summary.train_pairs.display(), summary.pairs[0], summary.test_pairs.display(), summary.pairs[1]);
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
