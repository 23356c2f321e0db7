//! `construct`: builds benchmark and training data that the `data` readers load unchanged.
//!
//! ```text
//! construct synth --out data/synth            # the demo's synthetic UAV world
//! construct synth --dccs --out data/synth      # a UAV-DualCog set from it, under data/synth/dccs
//! construct dccs-video --instances valid_instances.json --cloud points.ply --out OUT
//! construct dccs-image --instances valid_instances.json --cloud points.ply --out OUT
//! construct split --input airscape/videos --out airscape/split
//! construct nav --input merged_data.json --out bench/nav
//! construct sisbench-qa --annotations bench/annotations.jsonl --out bench/sisbench.json
//! construct sisbench-videos --input visdrone/sequences --out bench --concatenated 300 --shuffled 120
//! construct synth --satellite-only --out data/synth   # its cross-view (CVAA) pairs alone
//! ```

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use motionvl_construct::dccs::pipeline::SynthDccsConfig;
use motionvl_construct::synth::satellite::{self, SatelliteConfig};
use motionvl_construct::synth::{GroundTruth, Split, SynthConfig, SynthSummary, generate_with_progress};
use motionvl_construct::{nav, sisbench_qa, sisbench_videos, split};

#[path = "construct/dccs.rs"]
mod dccs;

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
    DccsVideo(dccs::VideoArgs),
    /// UAV-DualCog Stage 4: image task rows (`stage4.json`) and render requests.
    DccsImage(dccs::ImageArgs),
    /// The AirScape train / benchmark split from clip file names (`{id}_{source}_{split}_...`).
    Split(SplitArgs),
    /// Navigation MCQ from flown trajectories (TravelUAV `merged_data.json` or a CSV of x,y,z).
    Nav(NavArgs),
    /// SIS-Bench questions for all 13 tasks from per-video annotations (JSONL; schema in
    /// `motionvl_construct::sisbench_qa`).
    SisbenchQa(SisbenchQaArgs),
    /// SIS-Bench videos from frame folders and video files: converted (single and long),
    /// concatenated and shuffled, at 15 FPS, with an index of their pieces.
    SisbenchVideos(SisbenchVideosArgs),
}

#[derive(Args)]
struct SisbenchVideosArgs {
    /// Folder of sources: sub-folders of numbered frames and video files.
    #[arg(long)]
    input: PathBuf,
    /// Output folder: videos/{single,long,concatenated,shuffled_*}/ and videos.jsonl.
    #[arg(long)]
    out: PathBuf,
    /// Concatenated videos to make (2, 3 and 4 clips equally often).
    #[arg(long, default_value_t = 0)]
    concatenated: usize,
    /// Shuffled videos of each kind (spatial and spatio-temporal) to make.
    #[arg(long, default_value_t = 0)]
    shuffled: usize,
    /// Frame rate of the outputs.
    #[arg(long, default_value_t = sisbench_videos::VideosConfig::default().fps)]
    fps: u32,
    /// Declared frame rate of frame-folder sources.
    #[arg(long, default_value_t = sisbench_videos::VideosConfig::default().frame_folder_fps)]
    frame_folder_fps: f64,
    /// Sources at least this long (seconds) are long videos, the rest short clips.
    #[arg(long, default_value_t = sisbench_videos::VideosConfig::default().long_min_s)]
    long_min_s: f64,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Args)]
struct SisbenchQaArgs {
    /// Annotations: one JSON object per video (JSONL or a JSON list).
    #[arg(long)]
    annotations: PathBuf,
    /// The SIS-Bench manifest to write (a JSON list); its video paths are as annotated.
    #[arg(long)]
    out: PathBuf,
    /// Start of every question id.
    #[arg(long, default_value = "sis")]
    prefix: String,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Args)]
struct SplitArgs {
    /// A folder of clips, or a text file of clip names (one per line).
    #[arg(long)]
    input: PathBuf,
    /// Output folder: train.txt, benchmark.txt and split.json.
    #[arg(long)]
    out: PathBuf,
    /// WebUAV3M clips kept on the benchmark side.
    #[arg(long, default_value_t = split::SplitConfig::default().webuav_benchmark)]
    webuav_benchmark: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Args)]
struct NavArgs {
    /// TravelUAV / OpenUAV `merged_data.json`, or a CSV with x,y,z (and optional episode) columns.
    #[arg(long)]
    input: PathBuf,
    /// Output folder; the rows go to DIR/nav.json.
    #[arg(long)]
    out: PathBuf,
    /// Each row's video or frame folder, `{id}` standing for the episode id (an episode's own
    /// `video_path` wins).
    #[arg(long, default_value = "{id}")]
    video_pattern: String,
    #[arg(long, default_value_t = 0)]
    seed: u64,
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
            training_answers: motionvl_construct::synth::write::AnswerForm::Letter,
        })
    }
}

fn main() -> Result<()> {
    motionvl_cli::install_progress_bars();
    match Cli::parse().command {
        Command::Synth(args) if args.dccs => dccs::synth(&args.out, args.seed, args.dccs_landmarks),
        Command::Synth(args) => synth(&args),
        Command::DccsVideo(args) => dccs::video(&args),
        Command::DccsImage(args) => dccs::image(&args),
        Command::Split(args) => split_clips(&args),
        Command::Nav(args) => nav(&args),
        Command::SisbenchQa(args) => sisbench_qa_manifest(&args),
        Command::SisbenchVideos(args) => sisbench_videos_build(&args),
    }
}

fn sisbench_videos_build(args: &SisbenchVideosArgs) -> Result<()> {
    let config = sisbench_videos::VideosConfig {
        fps: args.fps,
        frame_folder_fps: args.frame_folder_fps,
        long_min_s: args.long_min_s,
        concatenated: args.concatenated,
        shuffled: args.shuffled,
        seed: args.seed,
    };
    anyhow::ensure!(config.fps > 0, "--fps must be positive");
    let sources = sisbench_videos::find_sources(&args.input, config.frame_folder_fps)?;
    let jobs = sisbench_videos::plan_videos(&sources, &config)?;
    let bar = indicatif::ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} videos · {elapsed} · eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let start = Instant::now();
    let summary = sisbench_videos::build_videos(&sources, &jobs, &config, &args.out, &|| bar.inc(1))
        .with_context(|| format!("building videos into {}", args.out.display()))?;
    bar.finish_and_clear();
    println!(
        "{} videos from {} sources in {} ({} encoded, {} already there; {:.1} s)",
        summary.rows.len(),
        sources.len(),
        args.out.display(),
        summary.encoded,
        summary.kept,
        start.elapsed().as_secs_f64()
    );
    println!("  index: {}", summary.index.display());
    Ok(())
}

fn sisbench_qa_manifest(args: &SisbenchQaArgs) -> Result<()> {
    let videos = sisbench_qa::read_annotations(&args.annotations)?;
    let questions = sisbench_qa::build_questions(&videos, &args.prefix, args.seed);
    sisbench_qa::write_manifest(&args.out, &questions)?;
    println!("{} questions about {} videos in {}", questions.len(), videos.len(), args.out.display());
    for (task, n) in sisbench_qa::count_by_task(&questions) {
        println!("  {:<28} {n:>6}", task.name());
    }
    Ok(())
}

fn split_clips(args: &SplitArgs) -> Result<()> {
    let clips = split::read_clip_names(&args.input)?;
    let config = split::SplitConfig { webuav_benchmark: args.webuav_benchmark, seed: args.seed };
    let outcome = split::split_clips(&clips, &config).with_context(|| format!("splitting {}", args.input.display()))?;
    split::write_split(&args.out, &outcome)?;
    println!("{} clips split into {}", clips.len(), args.out.display());
    println!("  {:<11} {:>8} {:>10}", "source", "training", "benchmark");
    for (source, counts) in &outcome.counts {
        println!("  {:<11} {:>8} {:>10}", source.name(), counts.train, counts.benchmark);
    }
    println!("  {:<11} {:>8} {:>10}", "total", outcome.train.len(), outcome.benchmark.len());
    Ok(())
}

fn nav(args: &NavArgs) -> Result<()> {
    let episodes = nav::read_episodes(&args.input, &args.video_pattern)?;
    let (rows, skipped) = nav::build_rows(&episodes, &nav::StepRules::default(), args.seed);
    for (id, why) in &skipped {
        eprintln!("episode {id} left out: {why}");
    }
    let path = nav::write_rows(&args.out, &rows)?;
    println!("{} navigation questions from {} episodes in {}", rows.len(), episodes.len(), path.display());
    Ok(())
}

fn synth(args: &SynthArgs) -> Result<()> {
    let config = args.config()?;
    config.validate()?;
    if args.satellite_only {
        return satellite_pairs(args, &config);
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
    // The pairs go beside the finished world, in its `train/` and `test/` (whose guard leaves
    // cross-view files alone).
    if args.satellite {
        satellite_pairs(args, &config)?;
    }
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
    println!(
        "cross-view pairs: {} ({} pairs), {} ({} pairs)",
        summary.train_pairs.display(),
        summary.pairs[0],
        summary.test_pairs.display(),
        summary.pairs[1]
    );
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
