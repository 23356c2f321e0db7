//! `construct synth`: settings, the split/world/clip pipeline, and what it reports.
//!
//! Layout of the output folder:
//!
//! ```text
//! OUT/synth.json                 settings and a summary; written last, so its presence means
//!                                the world is complete
//! OUT/{train,test}/world.json    worlds (terrain, landmarks, sun), clips (behaviour, flight,
//!                                landmarks seen per frame), concatenations, question counts
//! OUT/{train,test}/sisbench.json the questions as a SIS-Bench manifest
//! OUT/{train,test}/conversations.json  the same questions as LLaVA training conversations
//! OUT/{train,test}/annotations.jsonl   every video's exact ground truth in the annotation
//!                                schema of `construct sisbench-qa` (see [`super::annotate`])
//! OUT/{train,test}/videos/*.mp4  clips and concatenations; *.safetensors ground truth per clip
//! ```
//!
//! Train and test worlds come from disjoint seed streams of the one `--seed`, so held-out
//! questions are about terrain and landmark layouts never seen in training. Every random
//! choice draws from a stream derived from the seed and the thing being made (split, world,
//! clip), so the same seed gives byte-identical manifests, descriptions and ground truth, and
//! clips can render in parallel without changing the result.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use motionvl_data::manifest::{Level, SisTask};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::SynthError;
use super::annotate;
use super::behaviours::{Behaviour, Flight, plan_flight};
use super::camera::Intrinsics;
use super::geometry::Vec3;
use super::qa::{self, ClipFacts, Draft, TASKS};
use super::render::RenderedClip;
use super::rng::{SynthRng, derive_seed};
use super::scene::{Colour, LandmarkKind, World, WorldSpec};
use super::write::{AnswerForm, ConversationRow, SisRow, write_ground_truth, write_json, write_video};
use crate::sisbench_qa::{self, AnnotatedType, Pool, VideoAnnotation};
use crate::sisbench_videos::{PARTS, shuffled_order, spatial_parts, spatiotemporal_parts};

/// Which clips get ground-truth files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroundTruth {
    All,
    /// Only held-out clips: what a flow benchmark needs, at a fraction of the disk (about
    /// 13 bytes per pixel per frame).
    Test,
    None,
}

impl FromStr for GroundTruth {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(GroundTruth::All),
            "test" => Ok(GroundTruth::Test),
            "none" => Ok(GroundTruth::None),
            _ => Err(format!("unknown ground-truth choice `{s}` (expected all, test or none)")),
        }
    }
}

/// Train or test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Train,
    Test,
}

impl Split {
    pub fn name(self) -> &'static str {
        match self {
            Split::Train => "train",
            Split::Test => "test",
        }
    }

    /// Label of the split's seed stream.
    fn label(self) -> u64 {
        match self {
            Split::Train => 0x7124_1000,
            Split::Test => 0x7e57_2000,
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Settings of `construct synth`. The defaults make the demo's world: a few hundred questions
/// that render in well under a minute on two cores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthConfig {
    pub train_worlds: usize,
    pub test_worlds: usize,
    pub clips_per_world: usize,
    /// Concatenated videos (2, 3 and 4 clips in turn) per world.
    pub concats_per_world: usize,
    pub landmarks_per_world: usize,
    pub width: usize,
    pub height: usize,
    pub fps: u32,
    /// Length of one clip.
    pub seconds: f32,
    pub seed: u64,
    pub ground_truth: GroundTruth,
    /// Ask Action Recognition over exactly these four movements, listed in this order (see
    /// [`qa::fixed_recognition_plans`]); empty draws a fresh option set per clip.
    #[serde(default)]
    pub recognition_movements: Vec<Behaviour>,
    /// How training conversations answer (the held-out manifest always holds letters).
    #[serde(default)]
    pub training_answers: AnswerForm,
}

impl Default for SynthConfig {
    fn default() -> Self {
        SynthConfig {
            train_worlds: 8,
            test_worlds: 2,
            clips_per_world: 12,
            concats_per_world: 6,
            landmarks_per_world: 10,
            width: 224,
            height: 168,
            fps: 10,
            seconds: 3.0,
            seed: 0,
            ground_truth: GroundTruth::Test,
            recognition_movements: Vec::new(),
            training_answers: AnswerForm::Letter,
        }
    }
}

impl SynthConfig {
    /// Checks the settings, saying which one to change.
    pub fn validate(&self) -> Result<(), SynthError> {
        let bad = |key: &'static str, problem: String| Err(SynthError::Setting { key, problem });
        if self.train_worlds == 0 || self.test_worlds == 0 {
            return bad("--train-worlds/--test-worlds", "both must be at least 1".into());
        }
        if self.clips_per_world == 0 {
            return bad("--clips-per-world", "must be at least 1".into());
        }
        if self.concats_per_world > 0 && self.clips_per_world < 2 {
            return bad("--clips-per-world", "concatenated videos need at least 2".into());
        }
        if self.width < 16 || self.height < 16 || self.width % 2 == 1 || self.height % 2 == 1 {
            return bad("--width/--height", format!("{}x{}: sizes must be even and at least 16 (4:2:0 video)", self.width, self.height));
        }
        if self.width > 4096 || self.height > 4096 {
            return bad("--width/--height", format!("{}x{}: at most 4096 pixels a side", self.width, self.height));
        }
        if self.fps == 0 || self.fps > 120 {
            return bad("--fps", format!("{} must be between 1 and 120", self.fps));
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0 && self.seconds <= 60.0) {
            return bad("--seconds", format!("{} must be in (0, 60]", self.seconds));
        }
        if let Some(fixed) = self.fixed_recognition()?
            && (0..4).any(|i| (i + 1..4).any(|j| fixed[i].nested_with(fixed[j])))
        {
            return bad("recognition movements", format!("{fixed:?} must be four distinct movements, none part of another"));
        }
        if self.frames_per_clip() < 2 {
            return bad("--seconds/--fps", format!("{} s at {} fps is under two frames; no flow without a pair", self.seconds, self.fps));
        }
        Ok(())
    }

    /// The fixed Action Recognition movements, when set.
    pub fn fixed_recognition(&self) -> Result<Option<[Behaviour; 4]>, SynthError> {
        if self.recognition_movements.is_empty() {
            return Ok(None);
        }
        let list: [Behaviour; 4] = self
            .recognition_movements
            .clone()
            .try_into()
            .map_err(|v: Vec<Behaviour>| SynthError::Setting { key: "recognition movements", problem: format!("give exactly 4, not {}", v.len()) })?;
        Ok(Some(list))
    }

    pub fn frames_per_clip(&self) -> usize {
        (self.seconds * self.fps as f32).round() as usize
    }

    /// Clips rendered over both splits (the unit of progress).
    pub fn total_clips(&self) -> usize {
        (self.train_worlds + self.test_worlds) * self.clips_per_world
    }

    fn worlds(&self, split: Split) -> usize {
        match split {
            Split::Train => self.train_worlds,
            Split::Test => self.test_worlds,
        }
    }

    fn writes_ground_truth(&self, split: Split) -> bool {
        match self.ground_truth {
            GroundTruth::All => true,
            GroundTruth::Test => split == Split::Test,
            GroundTruth::None => false,
        }
    }

    /// The world seeds of a split: a stream of its own per split.
    pub fn world_seeds(&self, split: Split) -> Vec<u64> {
        (0..self.worlds(split)).map(|i| derive_seed(derive_seed(self.seed, split.label()), i as u64)).collect()
    }
}

/// What one split holds; paths are relative to the output folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitSummary {
    pub split: Split,
    pub world_seeds: Vec<u64>,
    pub clips: usize,
    pub concatenations: usize,
    /// Questions per SIS-Bench task name.
    pub questions: BTreeMap<String, usize>,
    pub world_file: PathBuf,
    pub manifest: PathBuf,
    pub conversations: PathBuf,
}

/// What `construct synth` made: `synth.json`, plus the folder it is in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SynthSummary {
    #[serde(skip)]
    pub out_dir: PathBuf,
    pub config: SynthConfig,
    pub train: SplitSummary,
    pub test: SplitSummary,
}

/// Name of the summary file, written last.
pub const SUMMARY_FILE: &str = "synth.json";

impl SynthSummary {
    /// Reads `OUT/synth.json`: `Ok(None)` when there is none yet (nothing, or an unfinished run).
    pub fn load(out_dir: &Path) -> Result<Option<Self>, SynthError> {
        let path = out_dir.join(SUMMARY_FILE);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SynthError::Io { path, source: e }),
        };
        let mut summary: SynthSummary = serde_json::from_str(&text).map_err(|source| SynthError::Json { path: path.clone(), source })?;
        summary.out_dir = out_dir.to_path_buf();
        Ok(Some(summary))
    }

    pub fn split(&self, split: Split) -> &SplitSummary {
        match split {
            Split::Train => &self.train,
            Split::Test => &self.test,
        }
    }

    /// The training conversations (LLaVA form) for `samples::read_training_samples`.
    pub fn train_conversations(&self) -> PathBuf {
        self.out_dir.join(&self.train.conversations)
    }

    /// The held-out SIS-Bench manifest for `manifest::read_sisbench`.
    pub fn test_manifest(&self) -> PathBuf {
        self.out_dir.join(&self.test.manifest)
    }

    /// Any split's manifest or conversations, as absolute-or-relative paths under `out_dir`.
    pub fn manifest(&self, split: Split) -> PathBuf {
        self.out_dir.join(&self.split(split).manifest)
    }

    pub fn conversations(&self, split: Split) -> PathBuf {
        self.out_dir.join(&self.split(split).conversations)
    }
}

/// Builds the whole world into `out_dir`.
pub fn generate(config: &SynthConfig, out_dir: &Path, force: bool) -> Result<SynthSummary, SynthError> {
    generate_with_progress(config, out_dir, force, &|| {})
}

/// [`generate`], calling `on_clip` after each rendered clip (for a progress bar; there are
/// [`SynthConfig::total_clips`] of them).
pub fn generate_with_progress(config: &SynthConfig, out_dir: &Path, force: bool, on_clip: &(dyn Fn() + Sync)) -> Result<SynthSummary, SynthError> {
    config.validate()?;
    prepare_out_dir(out_dir, force)?;
    let train_seeds = config.world_seeds(Split::Train);
    let test_seeds = config.world_seeds(Split::Test);
    let train_set: BTreeSet<u64> = train_seeds.iter().copied().collect();
    if train_set.len() != train_seeds.len() || test_seeds.iter().any(|s| train_set.contains(s)) {
        return Err(SynthError::Setting { key: "--seed", problem: format!("{} gives overlapping world seeds; choose another", config.seed) });
    }
    let train = build_split(config, Split::Train, &train_seeds, out_dir, on_clip)?;
    let test = build_split(config, Split::Test, &test_seeds, out_dir, on_clip)?;
    let summary = SynthSummary { out_dir: out_dir.to_path_buf(), config: config.clone(), train, test };
    write_json(&out_dir.join(SUMMARY_FILE), &summary)?;
    Ok(summary)
}

/// What `construct synth --satellite` writes into each split's folder beside a world: the
/// cross-view pairs and their satellite images and UAV frames ([`super::satellite`]).
pub const CROSS_VIEW_PAIRS: &str = "cvaa_pairs.jsonl";
pub const CROSS_VIEW_DIRS: [&str; 2] = ["satellite", "cvaa_uav"];

/// Refuses to mix with an earlier world unless `force`, in which case only what this command
/// writes (`synth.json` and the world's files in `train/` and `test/`) is removed. Cross-view
/// pairs are not a world: a folder holding only them (`--satellite-only`) takes a world
/// without `--force`, and keeps them.
fn prepare_out_dir(out_dir: &Path, force: bool) -> Result<(), SynthError> {
    let mut ours = vec![out_dir.join(SUMMARY_FILE)];
    for split in [Split::Train, Split::Test] {
        let dir = out_dir.join(split.name());
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(SynthError::Io { path: dir, source: e }),
        };
        for entry in entries {
            let name = entry.map_err(SynthError::io(&dir))?.file_name();
            if name != CROSS_VIEW_PAIRS && !CROSS_VIEW_DIRS.iter().any(|d| name == *d) {
                ours.push(dir.join(name));
            }
        }
    }
    ours.retain(|p| p.exists());
    if !ours.is_empty() {
        if !force {
            return Err(SynthError::Exists(out_dir.to_path_buf()));
        }
        for p in &ours {
            if p.is_dir() {
                fs::remove_dir_all(p).map_err(SynthError::io(p))?;
            } else {
                fs::remove_file(p).map_err(SynthError::io(p))?;
            }
        }
    }
    fs::create_dir_all(out_dir).map_err(SynthError::io(out_dir))
}

/// A landmark as seen in one clip.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sighting {
    pub landmark: String,
    pub index: usize,
    pub first_frame: usize,
    /// Frames showing at least one pixel of it.
    pub frames_visible: usize,
    pub max_pixels: u32,
    /// Shown large enough, long enough, for questions to name it as present.
    pub clear: bool,
}

/// One rendered clip, as `world.json` describes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClipRecord {
    pub id: String,
    pub video: String,
    pub ground_truth: Option<String>,
    pub behaviour: Behaviour,
    pub phrase: String,
    pub frames: usize,
    pub fps: u32,
    /// The landmark the flight was aimed at (none in a world without landmarks).
    pub target: Option<String>,
    pub flight: Flight,
    pub landmarks_seen: Vec<Sighting>,
}

/// A concatenated video.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConcatRecord {
    pub id: String,
    pub video: String,
    pub concat_num: usize,
    pub clips: Vec<String>,
    /// For Landmark Order: one landmark per clip that no other clip of the video shows.
    pub key_landmarks: Option<Vec<String>>,
}

/// One world of a split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorldRecord {
    pub index: usize,
    pub world: World,
    pub clips: Vec<ClipRecord>,
    pub concatenations: Vec<ConcatRecord>,
}

/// `world.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitRecord {
    pub split: Split,
    pub config: SynthConfig,
    pub intrinsics: Intrinsics,
    /// How the ground-truth files and poses are to be read.
    pub conventions: BTreeMap<String, String>,
    pub worlds: Vec<WorldRecord>,
    pub questions: BTreeMap<String, usize>,
}

fn conventions() -> BTreeMap<String, String> {
    [
        ("axes", "world x east, y north, z up, metres; ground plane z = 0"),
        ("yaw", "heading in radians counter-clockwise from +x seen from above"),
        ("pitch", "optical-axis elevation in radians, negative looks down"),
        ("pixels", "pixel (i, j) has its centre at (i, j); x right, y down"),
        ("flow", "f32 [N-1, 2, H, W], forward t -> t+1, pixels, channel 0 = x, 1 = y"),
        ("valid", "u8 [N-1, H, W], 1 where the point is in view and unoccluded in frame t+1"),
        ("depth", "f32 [N, H, W], z-depth in metres, 0 for sky"),
        ("camera_to_world", "f32 [N, 3, 4], columns right, down, forward, position"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn build_split(config: &SynthConfig, split: Split, seeds: &[u64], out_dir: &Path, on_clip: &(dyn Fn() + Sync)) -> Result<SplitSummary, SynthError> {
    let dir = out_dir.join(split.name());
    let videos = dir.join("videos");
    fs::create_dir_all(&videos).map_err(SynthError::io(&videos))?;
    let mut rng = SynthRng::new(derive_seed(config.seed, split.label() ^ 0xba1a));

    // Each clip's behaviour comes with its Action Recognition options (see `qa`).
    let total = seeds.len() * config.clips_per_world;
    let fixed = config.fixed_recognition()?;
    let plans: Vec<(Behaviour, [Behaviour; 3])> = match &fixed {
        Some(movements) => qa::fixed_recognition_plans(movements, total, &mut rng),
        None => (0..total).map(|_| qa::recognition_set(&mut rng)).collect(),
    };

    let k = Intrinsics::drone(config.width, config.height);
    let mut worlds = Vec::with_capacity(seeds.len());
    let mut drafts = Vec::new();
    let mut annotations = Vec::new();
    for (index, &seed) in seeds.iter().enumerate() {
        let clips = &plans[index * config.clips_per_world..(index + 1) * config.clips_per_world];
        let job = WorldJob { config, split, index, seed, k, dir: &dir };
        let (record, world_drafts, world_annotations) = job.build(clips, on_clip)?;
        worlds.push(record);
        drafts.extend(world_drafts);
        annotations.extend(world_annotations);
    }
    let mcqs = qa::balance(drafts, split.name(), &mut rng);
    let mut questions = BTreeMap::new();
    for t in TASKS {
        questions.insert(t.name().to_string(), mcqs.iter().filter(|q| q.task == t).count());
    }

    let rel = |name: &str| PathBuf::from(split.name()).join(name);
    let summary = SplitSummary {
        split,
        world_seeds: seeds.to_vec(),
        clips: worlds.iter().map(|w| w.clips.len()).sum(),
        concatenations: worlds.iter().map(|w| w.concatenations.len()).sum(),
        questions: questions.clone(),
        world_file: rel("world.json"),
        manifest: rel("sisbench.json"),
        conversations: rel("conversations.json"),
    };
    write_json(&out_dir.join(&summary.manifest), &mcqs.iter().map(SisRow::new).collect::<Vec<_>>())?;
    write_json(&out_dir.join(&summary.conversations), &mcqs.iter().map(|q| ConversationRow::new(q, config.training_answers)).collect::<Vec<_>>())?;
    let annotations_file = out_dir.join(rel("annotations.jsonl"));
    let mut jsonl = String::new();
    for a in &annotations {
        jsonl += &serde_json::to_string(a).map_err(|source| SynthError::Json { path: annotations_file.clone(), source })?;
        jsonl.push('\n');
    }
    fs::write(&annotations_file, jsonl).map_err(SynthError::io(&annotations_file))?;
    let record = SplitRecord { split, config: config.clone(), intrinsics: k, conventions: conventions(), worlds, questions };
    write_json(&out_dir.join(&summary.world_file), &record)?;
    Ok(summary)
}

/// A concatenated video's record, its questions and the annotations of it and its cuts.
type Concatenation = (ConcatRecord, Vec<Draft>, Vec<VideoAnnotation>);

/// Everything needed to build one world of a split.
struct WorldJob<'a> {
    config: &'a SynthConfig,
    split: Split,
    index: usize,
    seed: u64,
    k: Intrinsics,
    dir: &'a Path,
}

/// A rendered clip's frames and what was seen, kept until the world's concatenations are made.
struct ClipOutput {
    record: ClipRecord,
    facts: ClipFacts,
    annotation: VideoAnnotation,
    rgb: Vec<Vec<u8>>,
}

impl WorldJob<'_> {
    fn build(
        &self,
        plans: &[(Behaviour, [Behaviour; 3])],
        on_clip: &(dyn Fn() + Sync),
    ) -> Result<(WorldRecord, Vec<Draft>, Vec<VideoAnnotation>), SynthError> {
        let spec = WorldSpec { landmarks: self.config.landmarks_per_world, ..WorldSpec::default() };
        let world = World::generate(self.seed, &spec)?;
        let behaviours: Vec<Behaviour> = plans.iter().map(|p| p.0).collect();
        let flights = self.plan_flights(&world, &behaviours)?;
        let outputs: Vec<ClipOutput> = flights
            .into_par_iter()
            .enumerate()
            .map(|(c, (flight, target))| {
                let out = self.render_clip(&world, c, flight, target);
                on_clip();
                out
            })
            .collect::<Result<_, _>>()?;

        let mut drafts = Vec::new();
        let mut qrng = SynthRng::new(derive_seed(self.seed, 0x9a));
        for (o, (behaviour, distractors)) in outputs.iter().zip(plans) {
            drafts.extend(qa::action_recognition(&o.record.video, *behaviour, *distractors, self.config.fixed_recognition()?.as_ref()));
        }
        for (c, o) in outputs.iter().enumerate() {
            let elsewhere: Vec<(LandmarkKind, Colour)> = outputs
                .iter()
                .enumerate()
                .filter(|(other, _)| *other != c)
                .flat_map(|(_, other)| other.facts.present.iter().map(|&l| (world.landmarks[l].kind, world.landmarks[l].colour)))
                .collect();
            drafts.extend(qa::object_existence(&o.record.video, &world, &o.facts, &elsewhere, &mut qrng));
        }
        let mut annotations: Vec<VideoAnnotation> = outputs.iter().map(|o| o.annotation.clone()).collect();
        let pool = Pool::new(&annotations);
        for (c, a) in annotations.iter().enumerate() {
            let mut arng = SynthRng::new(derive_seed(self.seed, 0xa000 + c as u64));
            for task in [SisTask::ObjectAttribute, SisTask::RelativeDirection] {
                drafts.extend(sisbench_qa::draft_task(task, a, &pool, &mut arng));
            }
        }
        let mut concatenations = Vec::new();
        for c in 0..self.config.concats_per_world {
            let global = self.index * self.config.concats_per_world + c;
            if let Some((record, world_drafts, joined)) = self.concatenate(&world, &outputs, &pool, c, 2 + global % 3)? {
                concatenations.push(record);
                drafts.extend(world_drafts);
                annotations.extend(joined);
            }
        }
        let clips = outputs.into_iter().map(|o| o.record).collect();
        Ok((WorldRecord { index: self.index, world, clips, concatenations }, drafts, annotations))
    }

    /// Whether this split asks `task`: the held-out split all 13, the training split none of
    /// the reasoning level, as SIS-Motion-54K holds none.
    fn asks(&self, task: SisTask) -> bool {
        self.split == Split::Test || task.level() != Level::Reasoning
    }

    fn name(&self, what: &str) -> String {
        format!("{}-w{:03}-{what}", self.split.name(), self.index)
    }

    /// A flight per clip, each aimed at a landmark in turn (shuffled), falling back to the
    /// next landmark when a flight cannot keep clear of the solids.
    fn plan_flights(&self, world: &World, behaviours: &[Behaviour]) -> Result<Vec<(Flight, Option<usize>)>, SynthError> {
        let duration = self.config.frames_per_clip() as f32 / self.config.fps as f32;
        let mut order: Vec<usize> = (0..world.landmarks.len()).collect();
        SynthRng::new(derive_seed(self.seed, 0x7a6)).shuffle(&mut order);
        behaviours
            .iter()
            .enumerate()
            .map(|(c, &behaviour)| {
                let mut rng = SynthRng::new(derive_seed(self.seed, 0x1000 + c as u64));
                if order.is_empty() {
                    return plan_flight(world, behaviour, Vec3::default(), duration, &mut rng).map(|f| (f, None));
                }
                (0..order.len())
                    .map(|step| order[(c + step) % order.len()])
                    .find_map(|t| plan_flight(world, behaviour, world.landmarks[t].centre, duration, &mut rng).map(|f| (f, Some(t))))
            })
            .map(|planned| {
                planned.ok_or_else(|| SynthError::Planning { seed: self.seed, detail: "no collision-free flight found; use fewer landmarks".into() })
            })
            .collect()
    }

    fn render_clip(&self, world: &World, c: usize, flight: Flight, target: Option<usize>) -> Result<ClipOutput, SynthError> {
        let frames = self.config.frames_per_clip();
        let id = self.name(&format!("c{c:02}"));
        let video = format!("videos/{id}.mp4");
        let clip = RenderedClip::render(world, &self.k, flight.poses(self.config.fps as f32, frames));
        let clear_pixels = ((self.k.width * self.k.height) as f64 * 0.008).max(12.0) as u32;
        let annotation = annotate::clip_annotation(&video, world, &clip, flight.behaviour.phrase(), self.config.fps, clear_pixels);
        write_video(&self.dir.join(&video), clip.frames.iter().map(|f| f.rgb.as_slice()), self.k.width, self.k.height, self.config.fps)?;
        let ground_truth = if self.config.writes_ground_truth(self.split) {
            let gt = format!("videos/{id}.safetensors");
            let meta = serde_json::json!({
                "clip": id,
                "behaviour": flight.behaviour.id(),
                "fps": self.config.fps,
                "width": self.k.width,
                "height": self.k.height,
                "world_seed": self.seed,
            });
            write_ground_truth(&self.dir.join(&gt), &clip, &self.k, meta.to_string())?;
            Some(gt)
        } else {
            None
        };

        let clear_frames = (frames / 5).max(2);
        let visibility = clip.visibility(world.landmarks.len());
        let mut sightings = Vec::new();
        let mut absent = Vec::new();
        for (i, counts) in visibility.iter().enumerate() {
            let Some(first_frame) = counts.iter().position(|&n| n > 0) else {
                absent.push(i);
                continue;
            };
            let max_pixels = counts.iter().copied().max().unwrap_or(0);
            let clear = counts.iter().filter(|&&n| n >= clear_pixels).count() >= clear_frames;
            sightings.push(Sighting {
                landmark: world.landmarks[i].name.clone(),
                index: i,
                first_frame,
                frames_visible: counts.iter().filter(|&&n| n > 0).count(),
                max_pixels,
                clear,
            });
        }
        let mut present: Vec<&Sighting> = sightings.iter().filter(|s| s.clear).collect();
        present.sort_by_key(|s| std::cmp::Reverse(s.max_pixels));
        let facts = ClipFacts { behaviour: flight.behaviour, present: present.iter().map(|s| s.index).collect(), absent };
        let record = ClipRecord {
            id,
            video,
            ground_truth,
            behaviour: flight.behaviour,
            phrase: flight.behaviour.phrase().to_string(),
            frames,
            fps: self.config.fps,
            target: target.map(|t| world.landmarks[t].name.clone()),
            flight,
            landmarks_seen: sightings,
        };
        Ok(ClipOutput { record, facts, annotation, rgb: clip.frames.into_iter().map(|f| f.rgb).collect() })
    }

    /// Picks `n` clips with distinct behaviours (preferring a choice where each clip shows a
    /// landmark no other chosen clip shows), writes the joined video (and, held out, for three
    /// clips or more, its two shuffled cuts) and drafts their questions; returns their
    /// annotations.
    fn concatenate(&self, world: &World, clips: &[ClipOutput], pool: &Pool, c: usize, n: usize) -> Result<Option<Concatenation>, SynthError> {
        let n = n.min(clips.len());
        if n < 2 {
            return Ok(None);
        }
        let mut rng = SynthRng::new(derive_seed(self.seed, 0x5000 + c as u64));
        let mut fallback: Option<Vec<usize>> = None;
        let mut chosen: Option<(Vec<usize>, Vec<usize>)> = None;
        for _ in 0..64 {
            let mut all: Vec<usize> = (0..clips.len()).collect();
            rng.shuffle(&mut all);
            all.truncate(n);
            let behaviours: Vec<Behaviour> = all.iter().map(|&i| clips[i].facts.behaviour).collect();
            if (0..n).any(|i| behaviours[i + 1..].contains(&behaviours[i])) {
                continue;
            }
            if let Some(keys) = key_landmarks(clips, &all) {
                chosen = Some((all, keys));
                break;
            }
            fallback.get_or_insert(all);
        }
        let (selection, keys) = match (chosen, fallback) {
            (Some((s, k)), _) => (s, Some(k)),
            (None, Some(s)) => (s, None),
            (None, None) => return Ok(None),
        };

        let id = self.name(&format!("cat{c:02}"));
        let video = format!("videos/{id}.mp4");
        let frames = selection.iter().flat_map(|&i| clips[i].rgb.iter().map(Vec::as_slice));
        write_video(&self.dir.join(&video), frames, self.k.width, self.k.height, self.config.fps)?;

        let mut drafts = Vec::new();
        let behaviours: Vec<Behaviour> = selection.iter().map(|&i| clips[i].facts.behaviour).collect();
        drafts.extend(qa::action_sequence(&video, &behaviours, &mut rng));
        if let Some(keys) = &keys {
            let unseen: Vec<usize> = (0..world.landmarks.len()).filter(|l| selection.iter().all(|&i| clips[i].facts.absent.contains(l))).collect();
            drafts.extend(qa::landmark_order(&video, world, keys, &unseen, &mut rng));
        }
        let chosen: Vec<&ClipOutput> = selection.iter().map(|&i| &clips[i]).collect();
        let (annotated_drafts, annotations) = self.annotated_questions(&id, &video, &chosen, pool, c)?;
        drafts.extend(annotated_drafts);
        let record = ConcatRecord {
            id,
            video,
            concat_num: n,
            clips: selection.iter().map(|&i| clips[i].record.id.clone()).collect(),
            key_landmarks: keys.map(|ks| ks.iter().map(|&l| world.landmarks[l].name.clone()).collect()),
        };
        Ok(Some((record, drafts, annotations)))
    }

    /// The joined video's questions asked from its annotations (those of the concatenated and,
    /// standing in for them, the long-video tasks; see [`annotate`]), plus, in the held-out split
    /// and for three clips or more, its two shuffled cuts, written and asked about. Returns the drafts and the
    /// annotations of the joined video and its cuts.
    fn annotated_questions(
        &self,
        id: &str,
        video: &str,
        chosen: &[&ClipOutput],
        pool: &Pool,
        c: usize,
    ) -> Result<(Vec<Draft>, Vec<VideoAnnotation>), SynthError> {
        let parts: Vec<&VideoAnnotation> = chosen.iter().map(|o| &o.annotation).collect();
        let joined = annotate::joined(video, &parts);
        let long = VideoAnnotation { video_type: AnnotatedType::Long, ..joined.clone() };
        let mut rng = SynthRng::new(derive_seed(self.seed, 0xb000 + c as u64));
        let mut drafts = Vec::new();
        use SisTask::*;
        for (task, a) in
            [(LandmarkRecall, &joined), (PositionalRelationship, &joined), (ActionRecall, &joined), (ActionPrediction, &long), (PathPlanning, &long)]
        {
            if self.asks(task) {
                drafts.extend(sisbench_qa::draft_task(task, a, pool, &mut rng));
            }
        }
        let mut annotations = vec![joined];
        if chosen.len() < 3 || !self.asks(SpatialConsistency) {
            return Ok((drafts, annotations));
        }
        let frames: Vec<&[u8]> = chosen.iter().flat_map(|o| o.rgb.iter().map(Vec::as_slice)).collect();
        let fps = self.config.fps;
        let duration = frames.len() as f64 / fps as f64;
        let in_frames = |p: Vec<[f64; 2]>| -> Vec<[usize; 2]> {
            p.iter().map(|s| [(s[0] * fps as f64).round() as usize, (s[1] * fps as f64).round() as usize]).collect()
        };
        let cuts = [
            (AnnotatedType::ShuffledSpatial, "sc", Some(spatial_parts(duration, &mut rng))),
            (AnnotatedType::ShuffledSpatiotemporal, "stc", spatiotemporal_parts(duration)),
        ];
        for (kind, tag, seconds) in cuts {
            let Some(seconds) = seconds else { continue };
            let parts = in_frames(seconds);
            // A part rounded to no frame at this rate cannot be shown.
            if parts.iter().any(|p| p[1] <= p[0]) {
                continue;
            }
            let order = shuffled_order(PARTS, &mut rng);
            let cut = format!("videos/{id}-{tag}.mp4");
            let played = order.iter().flat_map(|&o| frames[parts[o][0]..parts[o][1]].iter().copied());
            write_video(&self.dir.join(&cut), played, self.k.width, self.k.height, fps)?;
            let shuffled = annotate::shuffled(&cut, &annotations[0], kind, &parts, &order, fps);
            drafts.extend(sisbench_qa::consistency(&shuffled, &mut rng));
            annotations.push(shuffled);
        }
        Ok((drafts, annotations))
    }
}

/// For each selected clip, its most prominent clearly seen landmark that every other selected
/// clip never shows; `None` unless every clip has one (then the order in which they first
/// appear is the clip order).
fn key_landmarks(clips: &[ClipOutput], selection: &[usize]) -> Option<Vec<usize>> {
    selection
        .iter()
        .map(|&i| clips[i].facts.present.iter().copied().find(|l| selection.iter().filter(|&&j| j != i).all(|&j| clips[j].facts.absent.contains(l))))
        .collect()
}
