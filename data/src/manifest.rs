//! Benchmark manifests: one reader per benchmark, one output type, [`Question`].
//!
//! | benchmark | row fields read | answer |
//! |---|---|---|
//! | SIS-Bench | `question_id`, `video_name`, `video_path`, `concat_num`, `task_type`, `question`, `options` {A..D} (or inline in `question`), `answer` | letter |
//! | UrbanVideo-Bench | `Question_id`, `video_id`, `question_category`, `question` (options inside the text, up to A–G), `answer` | letter |
//! | UAV-DualCog (Stage 3 video rows) | `sample_id`, `task_name`, `video_path`, `fps`, `user_prompt`/`prompt_text`, `choice_options` [{option_id, label}], `answer_option_id(s)`, `answer_items[].intervals_sec`, `gold_environment_answer` | letter(s), or a count plus visibility intervals |
//! | UAV-DualCog (Stage 4 image rows) | `sample_id`, `task_type`, `user_prompt`/`prompt_text`, `reference_image(_with_bbox)`, `target_image` or `candidates` [{option_id, image}], `label_options`, `answer_option_id` | letter |
//! | LinkS²Bench | `question_id`, `task`, `question`, `options`?, `answer`, `video_path`?, `satellite_image`? | letter, yes/no, number or timestamp, by task |
//!
//! LinkS²Bench has no public release (see `shared/notes/cvaa_bench.md`); its row schema above is
//! ours, chosen to mirror SIS-Bench's, and `construct` writes it.
//!
//! Every question carries its [`Task`], and through it the dimension and level of the SIS-Bench
//! taxonomy (SPEC §2), LinkS²Bench's four dimensions, UrbanVideo-Bench's four abilities or
//! UAV-DualCog's two task groups. A bad row — unknown task, answer not among the options,
//! missing media file, malformed answer — is a [`RowError`] naming file and line; with
//! [`ReadOptions::skip_bad`] it is left out and reported in [`ReadOutcome::skipped`].
//!
//! Every reader takes JSON, JSONL or Parquet (by extension), so the official UrbanVideo-Bench
//! `MCQ.parquet` is read as it is published.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::samples::{MediaResolver, ReadError, ReadOptions, ReadOutcome, Row, RowProblem, normalise, read_rows};

/// The benchmarks with a reader here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Benchmark {
    SisBench,
    UrbanVideoBench,
    UavDualCog,
    LinkS2Bench,
}

impl Benchmark {
    pub const ALL: [Benchmark; 4] =
        [Benchmark::SisBench, Benchmark::UrbanVideoBench, Benchmark::UavDualCog, Benchmark::LinkS2Bench];

    /// The short name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Benchmark::SisBench => "sisbench",
            Benchmark::UrbanVideoBench => "urbanvideo",
            Benchmark::UavDualCog => "dualcog",
            Benchmark::LinkS2Bench => "links2bench",
        }
    }
}

impl fmt::Display for Benchmark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Benchmark {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match normalise(s).as_str() {
            "sisbench" | "sis" => Ok(Benchmark::SisBench),
            "urbanvideo" | "urbanvideobench" => Ok(Benchmark::UrbanVideoBench),
            "dualcog" | "uavdualcog" => Ok(Benchmark::UavDualCog),
            "links2bench" | "links2" | "links²bench" => Ok(Benchmark::LinkS2Bench),
            _ => Err(format!("unknown benchmark `{s}` (expected sisbench, urbanvideo, dualcog or links2bench)")),
        }
    }
}

/// Evaluation dimension of a task. SIS-Bench uses `Spatial` and `Ego` (printed "self");
/// LinkS²Bench `Perception`, `Localization`, `Relation`, `Reasoning`; UrbanVideo-Bench
/// `Recall`, `Perception`, `Reasoning`, `Navigation`; UAV-DualCog `SelfState`, `Environment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dimension {
    Spatial,
    /// SIS-Bench's "self" dimension (the drone's own motion); `Self` is a Rust keyword.
    Ego,
    Perception,
    Localization,
    Relation,
    Reasoning,
    Recall,
    Navigation,
    SelfState,
    Environment,
}

impl Dimension {
    pub fn name(self) -> &'static str {
        match self {
            Dimension::Spatial => "spatial",
            Dimension::Ego => "self",
            Dimension::Perception => "perception",
            Dimension::Localization => "localization",
            Dimension::Relation => "relation",
            Dimension::Reasoning => "reasoning",
            Dimension::Recall => "recall",
            Dimension::Navigation => "navigation",
            Dimension::SelfState => "self-state",
            Dimension::Environment => "environment",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// SIS-Bench's cognitive level (SPEC §2); other benchmarks have none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    Perception,
    Memory,
    Reasoning,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Perception => "perception",
            Level::Memory => "memory",
            Level::Reasoning => "reasoning",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How a SIS-Bench task's videos were built (SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VideoType {
    Single,
    Concatenated,
    Shuffled,
    Long,
}

/// What form a task's answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
    Choice,
    MultiChoice,
    YesNo,
    Number,
    Timestamp,
}

/// Finds a task by name, comparing only letters and digits case-insensitively, so
/// "Spatio-temporal Consistency", "spatiotemporal_consistency" and "SpatioTemporalConsistency"
/// are one task.
fn by_name<T: Copy>(all: &[T], name_of: impl Fn(T) -> &'static str, s: &str) -> Option<T> {
    let key = normalise(s);
    all.iter().copied().find(|&t| normalise(name_of(t)) == key)
}

/// The 13 SIS-Bench tasks (SPEC §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SisTask {
    ObjectExistence,
    ObjectAttribute,
    RelativeDirection,
    LandmarkOrder,
    LandmarkRecall,
    PositionalRelationship,
    SpatialConsistency,
    SpatioTemporalConsistency,
    ActionRecognition,
    ActionSequence,
    ActionRecall,
    ActionPrediction,
    PathPlanning,
}

impl SisTask {
    pub const ALL: [SisTask; 13] = [
        SisTask::ObjectExistence,
        SisTask::ObjectAttribute,
        SisTask::RelativeDirection,
        SisTask::LandmarkOrder,
        SisTask::LandmarkRecall,
        SisTask::PositionalRelationship,
        SisTask::SpatialConsistency,
        SisTask::SpatioTemporalConsistency,
        SisTask::ActionRecognition,
        SisTask::ActionSequence,
        SisTask::ActionRecall,
        SisTask::ActionPrediction,
        SisTask::PathPlanning,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SisTask::ObjectExistence => "Object Existence",
            SisTask::ObjectAttribute => "Object Attribute",
            SisTask::RelativeDirection => "Relative Direction",
            SisTask::LandmarkOrder => "Landmark Order",
            SisTask::LandmarkRecall => "Landmark Recall",
            SisTask::PositionalRelationship => "Positional Relationship",
            SisTask::SpatialConsistency => "Spatial Consistency",
            SisTask::SpatioTemporalConsistency => "Spatio-temporal Consistency",
            SisTask::ActionRecognition => "Action Recognition",
            SisTask::ActionSequence => "Action Sequence",
            SisTask::ActionRecall => "Action Recall",
            SisTask::ActionPrediction => "Action Prediction",
            SisTask::PathPlanning => "Path Planning",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        by_name(&Self::ALL, Self::name, s)
    }

    pub fn dimension(self) -> Dimension {
        use SisTask::*;
        match self {
            ObjectExistence
            | ObjectAttribute
            | RelativeDirection
            | LandmarkOrder
            | LandmarkRecall
            | PositionalRelationship
            | SpatialConsistency
            | SpatioTemporalConsistency => Dimension::Spatial,
            ActionRecognition | ActionSequence | ActionRecall | ActionPrediction | PathPlanning => Dimension::Ego,
        }
    }

    pub fn level(self) -> Level {
        use SisTask::*;
        match self {
            ObjectExistence | ObjectAttribute | RelativeDirection | ActionRecognition => Level::Perception,
            LandmarkOrder | LandmarkRecall | PositionalRelationship | ActionSequence | ActionRecall => Level::Memory,
            SpatialConsistency | SpatioTemporalConsistency | ActionPrediction | PathPlanning => Level::Reasoning,
        }
    }

    pub fn video_type(self) -> VideoType {
        use SisTask::*;
        match self {
            ObjectExistence | ObjectAttribute | RelativeDirection | ActionRecognition => VideoType::Single,
            LandmarkOrder | LandmarkRecall | PositionalRelationship | ActionSequence | ActionRecall => {
                VideoType::Concatenated
            }
            SpatialConsistency | SpatioTemporalConsistency => VideoType::Shuffled,
            ActionPrediction | PathPlanning => VideoType::Long,
        }
    }
}

/// The 12 LinkS²Bench tasks (SPEC §5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LinkS2Task {
    TargetVisibility,
    SceneAssociation,
    ZoneCounting,
    EventGeoLocalization,
    TrajectoryMatching,
    TemporalGrounding,
    RelativeDistance,
    RelativeDirection,
    OcclusionAttribution,
    SpatiotemporalOrdering,
    RegionInteraction,
    RegionReachability,
}

impl LinkS2Task {
    pub const ALL: [LinkS2Task; 12] = [
        LinkS2Task::TargetVisibility,
        LinkS2Task::SceneAssociation,
        LinkS2Task::ZoneCounting,
        LinkS2Task::EventGeoLocalization,
        LinkS2Task::TrajectoryMatching,
        LinkS2Task::TemporalGrounding,
        LinkS2Task::RelativeDistance,
        LinkS2Task::RelativeDirection,
        LinkS2Task::OcclusionAttribution,
        LinkS2Task::SpatiotemporalOrdering,
        LinkS2Task::RegionInteraction,
        LinkS2Task::RegionReachability,
    ];

    pub fn name(self) -> &'static str {
        use LinkS2Task::*;
        match self {
            TargetVisibility => "Target Visibility",
            SceneAssociation => "Scene Association",
            ZoneCounting => "Zone Counting",
            EventGeoLocalization => "Event Geo-localization",
            TrajectoryMatching => "Trajectory Matching",
            TemporalGrounding => "Temporal Grounding",
            RelativeDistance => "Relative Distance",
            RelativeDirection => "Relative Direction",
            OcclusionAttribution => "Occlusion Attribution",
            SpatiotemporalOrdering => "Spatiotemporal Ordering",
            RegionInteraction => "Region Interaction",
            RegionReachability => "Region Reachability",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        by_name(&Self::ALL, Self::name, s)
    }

    pub fn dimension(self) -> Dimension {
        use LinkS2Task::*;
        match self {
            TargetVisibility | SceneAssociation | ZoneCounting => Dimension::Perception,
            EventGeoLocalization | TrajectoryMatching | TemporalGrounding => Dimension::Localization,
            RelativeDistance | RelativeDirection | OcclusionAttribution => Dimension::Relation,
            SpatiotemporalOrdering | RegionInteraction | RegionReachability => Dimension::Reasoning,
        }
    }

    /// Scored by accuracy (choice, yes/no), MRA (number) or ACC@1s (timestamp).
    pub fn answer_kind(self) -> AnswerKind {
        use LinkS2Task::*;
        match self {
            TargetVisibility | RegionReachability => AnswerKind::YesNo,
            ZoneCounting => AnswerKind::Number,
            TemporalGrounding => AnswerKind::Timestamp,
            _ => AnswerKind::Choice,
        }
    }
}

/// UrbanVideo-Bench's 16 question categories (the generator scripts' `question_categories`),
/// grouped by the benchmark's four abilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UrbanVideoTask {
    TrajectoryCaptioning,
    SequenceRecall,
    ObjectRecall,
    SceneRecall,
    StartEndPosition,
    Proximity,
    Duration,
    LandmarkPosition,
    GoalDetection,
    CognitiveMap,
    Causal,
    Counterfactual,
    Association,
    ProgressEvaluation,
    HighLevelPlanning,
    ActionGeneration,
}

impl UrbanVideoTask {
    pub const ALL: [UrbanVideoTask; 16] = [
        UrbanVideoTask::TrajectoryCaptioning,
        UrbanVideoTask::SequenceRecall,
        UrbanVideoTask::ObjectRecall,
        UrbanVideoTask::SceneRecall,
        UrbanVideoTask::StartEndPosition,
        UrbanVideoTask::Proximity,
        UrbanVideoTask::Duration,
        UrbanVideoTask::LandmarkPosition,
        UrbanVideoTask::GoalDetection,
        UrbanVideoTask::CognitiveMap,
        UrbanVideoTask::Causal,
        UrbanVideoTask::Counterfactual,
        UrbanVideoTask::Association,
        UrbanVideoTask::ProgressEvaluation,
        UrbanVideoTask::HighLevelPlanning,
        UrbanVideoTask::ActionGeneration,
    ];

    pub fn name(self) -> &'static str {
        use UrbanVideoTask::*;
        match self {
            TrajectoryCaptioning => "Trajectory Captioning",
            SequenceRecall => "Sequence Recall",
            ObjectRecall => "Object Recall",
            SceneRecall => "Scene Recall",
            StartEndPosition => "Start/End Position",
            Proximity => "Proximity",
            Duration => "Duration",
            LandmarkPosition => "Landmark Position",
            GoalDetection => "Goal Detection",
            CognitiveMap => "Cognitive Map",
            Causal => "Causal",
            Counterfactual => "Counterfactual",
            Association => "Association",
            ProgressEvaluation => "Progress Evaluation",
            HighLevelPlanning => "High-level Planning",
            ActionGeneration => "Action Generation",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        by_name(&Self::ALL, Self::name, s)
    }

    pub fn dimension(self) -> Dimension {
        use UrbanVideoTask::*;
        match self {
            TrajectoryCaptioning | SequenceRecall | ObjectRecall | SceneRecall | StartEndPosition => Dimension::Recall,
            Proximity | Duration | LandmarkPosition | GoalDetection | CognitiveMap => Dimension::Perception,
            Causal | Counterfactual | Association => Dimension::Reasoning,
            ProgressEvaluation | HighLevelPlanning | ActionGeneration => Dimension::Navigation,
        }
    }
}

/// UAV-DualCog tasks: Stage 3 video tasks (`TASK_SPECS` of its `stage3_task_suite.py`) and
/// Stage 4 image tasks (`TASK_SPECS` of its `stage4_qa_generate_and_eval.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DualCogTask {
    JointBehaviorRecognition,
    SetInstanceRecognition,
    ElementInstanceRecognition,
    CompositeInstanceRecognition,
    AtomicInstanceRecognition,
    EnvVisibilityReasoning,
    /// Landmark-relative position reasoning.
    SelfWhere,
    /// Action-conditioned future observation prediction.
    SelfWhat,
    /// Self-relative position reasoning.
    EnvWhere,
    /// Goal-conditioned action decision.
    EnvHow,
}

impl DualCogTask {
    pub const ALL: [DualCogTask; 10] = [
        DualCogTask::JointBehaviorRecognition,
        DualCogTask::SetInstanceRecognition,
        DualCogTask::ElementInstanceRecognition,
        DualCogTask::CompositeInstanceRecognition,
        DualCogTask::AtomicInstanceRecognition,
        DualCogTask::EnvVisibilityReasoning,
        DualCogTask::SelfWhere,
        DualCogTask::SelfWhat,
        DualCogTask::EnvWhere,
        DualCogTask::EnvHow,
    ];

    /// Whether the task is one of Stage 4's image tasks.
    pub fn is_image_task(self) -> bool {
        matches!(self, DualCogTask::SelfWhere | DualCogTask::SelfWhat | DualCogTask::EnvWhere | DualCogTask::EnvHow)
    }

    /// The `task_name` string of the manifests.
    pub fn name(self) -> &'static str {
        use DualCogTask::*;
        match self {
            JointBehaviorRecognition => "self_instance_recognition_joint",
            SetInstanceRecognition => "self_set_instance_recognition",
            ElementInstanceRecognition => "self_element_instance_recognition",
            CompositeInstanceRecognition => "self_composite_instance_recognition",
            AtomicInstanceRecognition => "self_atomic_instance_recognition",
            EnvVisibilityReasoning => "env_visibility_reasoning",
            SelfWhere => "self_where",
            SelfWhat => "self_what",
            EnvWhere => "env_where",
            EnvHow => "env_how",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        by_name(&Self::ALL, Self::name, s)
    }

    pub fn dimension(self) -> Dimension {
        match self {
            DualCogTask::EnvVisibilityReasoning | DualCogTask::EnvWhere | DualCogTask::EnvHow => Dimension::Environment,
            _ => Dimension::SelfState,
        }
    }
}

/// A benchmark task; carries the taxonomy its scores are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Task {
    Sis(SisTask),
    LinkS2(LinkS2Task),
    UrbanVideo(UrbanVideoTask),
    DualCog(DualCogTask),
}

impl Task {
    pub fn name(self) -> &'static str {
        match self {
            Task::Sis(t) => t.name(),
            Task::LinkS2(t) => t.name(),
            Task::UrbanVideo(t) => t.name(),
            Task::DualCog(t) => t.name(),
        }
    }

    pub fn dimension(self) -> Dimension {
        match self {
            Task::Sis(t) => t.dimension(),
            Task::LinkS2(t) => t.dimension(),
            Task::UrbanVideo(t) => t.dimension(),
            Task::DualCog(t) => t.dimension(),
        }
    }

    /// SIS-Bench's level; `None` for the other benchmarks.
    pub fn level(self) -> Option<Level> {
        match self {
            Task::Sis(t) => Some(t.level()),
            _ => None,
        }
    }
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One lettered option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerOption {
    pub label: char,
    pub text: String,
}

/// A ground-truth time interval in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub start: f64,
    pub end: f64,
}

/// A ground-truth answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// One option letter.
    Choice(char),
    /// Every correct letter of a multi-select question, in option order.
    Choices(Vec<char>),
    YesNo(bool),
    Number(f64),
    /// Seconds from the start of the video.
    Timestamp(f64),
}

impl Answer {
    pub fn kind(&self) -> AnswerKind {
        match self {
            Answer::Choice(_) => AnswerKind::Choice,
            Answer::Choices(_) => AnswerKind::MultiChoice,
            Answer::YesNo(_) => AnswerKind::YesNo,
            Answer::Number(_) => AnswerKind::Number,
            Answer::Timestamp(_) => AnswerKind::Timestamp,
        }
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Choice(c) => write!(f, "{c}"),
            Answer::Choices(cs) => write!(f, "{}", cs.iter().map(char::to_string).collect::<Vec<_>>().join(",")),
            Answer::YesNo(b) => f.write_str(if *b { "yes" } else { "no" }),
            Answer::Number(x) => write!(f, "{x}"),
            Answer::Timestamp(t) => write!(f, "{t}s"),
        }
    }
}

/// One benchmark question, whatever the benchmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Question {
    pub benchmark: Benchmark,
    pub id: String,
    pub task: Task,
    /// The question stem, without the options.
    pub question: String,
    /// Lettered options; empty for yes/no, numeric and timestamp questions.
    pub options: Vec<AnswerOption>,
    pub answer: Answer,
    /// Resolved video paths (files or frame folders).
    pub videos: Vec<PathBuf>,
    /// Resolved image paths (e.g. LinkS²Bench's satellite image).
    pub images: Vec<PathBuf>,
    /// Frame rate the manifest declares for its video (UAV-DualCog), if any.
    pub fps: Option<f64>,
    /// Clips stitched into the video (SIS-Bench `concat_num`), if given.
    pub clip_count: Option<u32>,
    /// Ground-truth intervals (UAV-DualCog behaviour or visibility intervals).
    pub intervals: Vec<Interval>,
    pub file: PathBuf,
    pub line: usize,
}

impl Question {
    pub fn dimension(&self) -> Dimension {
        self.task.dimension()
    }

    pub fn level(&self) -> Option<Level> {
        self.task.level()
    }

    /// The options as prompt lines, `A. text` each.
    pub fn options_text(&self) -> String {
        self.options.iter().map(|o| format!("{}. {}", o.label, o.text)).collect::<Vec<_>>().join("\n")
    }
}

/// Reads a manifest of the given benchmark.
pub fn read_manifest(
    benchmark: Benchmark,
    path: &Path,
    opts: &ReadOptions,
) -> Result<ReadOutcome<Question>, ReadError> {
    match benchmark {
        Benchmark::SisBench => read_sisbench(path, opts),
        Benchmark::UrbanVideoBench => read_urbanvideo(path, opts),
        Benchmark::UavDualCog => read_dualcog(path, opts),
        Benchmark::LinkS2Bench => read_links2bench(path, opts),
    }
}

fn unknown_task(task: &str, known: impl Iterator<Item = &'static str>) -> RowProblem {
    RowProblem::UnknownTask { task: task.to_string(), known: known.collect::<Vec<_>>().join(", ") }
}

/// Common shape of a question before the benchmark-specific parts are filled in.
struct Base {
    benchmark: Benchmark,
    file: PathBuf,
    line: usize,
}

impl Base {
    fn question(
        &self,
        id: String,
        task: Task,
        question: String,
        options: Vec<AnswerOption>,
        answer: Answer,
    ) -> Question {
        Question {
            benchmark: self.benchmark,
            id,
            task,
            question,
            options,
            answer,
            videos: Vec::new(),
            images: Vec::new(),
            fps: None,
            clip_count: None,
            intervals: Vec::new(),
            file: self.file.clone(),
            line: self.line,
        }
    }
}

/// Wraps a per-row parser with the id lookup and error attachment every reader shares.
fn read_questions(
    benchmark: Benchmark,
    path: &Path,
    opts: &ReadOptions,
    id_keys: &[&'static str],
    media: MediaResolver,
    parse: impl Fn(&Row<'_>, String, &Base, &MediaResolver) -> Result<Question, RowProblem>,
) -> Result<ReadOutcome<Question>, ReadError> {
    read_rows(path, opts, |value: &Value, line| {
        let row = Row::new(value).map_err(|p| (None, p))?;
        let id = row.required_string(id_keys).map_err(|p| (None, p))?;
        let base = Base { benchmark, file: path.to_path_buf(), line };
        let q = parse(&row, id.clone(), &base, &media).map_err(|p| (Some(id.clone()), p))?;
        Ok((q, id))
    })
}

/// SIS-Bench rows (the HF `choucsan/SIS-Bench` JSON). The video is `video_path`, else
/// `video_name`, resolved against the media root. Rows without `options` carry them inline in
/// the question (`A. ...` lines or markers), parsed by [`split_inline_options`].
pub fn read_sisbench(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media = MediaResolver::new(path, opts);
    read_questions(Benchmark::SisBench, path, opts, &["question_id"], media, |row, id, base, media| {
        let task_name = row.required_string(&["task_type"])?;
        let task = SisTask::from_name(&task_name)
            .ok_or_else(|| unknown_task(&task_name, SisTask::ALL.iter().map(|t| t.name())))?;
        let text = row.required_string(&["question"])?;
        let (question, options) = match row.get(&["options"]) {
            Some(_) => (text, parse_options(row, &["options"])?),
            None => split_inline_options(&text),
        };
        if options.len() < 2 {
            return Err(RowProblem::NoOptions(" (give `options` or `A. ...` lines in the question)".into()));
        }
        let answer = parse_choice(&row.required_string(&["answer"])?, &options)?;
        let video = row.string(&["video_path", "video_name"])?.ok_or(RowProblem::MissingField("video_path"))?;
        let mut q = base.question(id, Task::Sis(task), question, options, answer);
        q.videos.push(media.resolve(&video)?);
        q.clip_count = row.number(&["concat_num"])?.map(|n| n as u32);
        Ok(q)
    })
}

/// UrbanVideo-Bench rows (`MCQ.parquet`, or the same rows as JSON / JSONL). The options are
/// parsed out of the question text; the video is `video_id` under the media root, which defaults to the
/// `videos/` folder beside the manifest when that exists (the dataset's layout).
pub fn read_urbanvideo(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media = match &opts.media_root {
        Some(_) => MediaResolver::new(path, opts),
        None => {
            let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
            let videos = dir.join("videos");
            MediaResolver::with_root(if videos.is_dir() { videos } else { dir }, opts)
        }
    };
    read_questions(
        Benchmark::UrbanVideoBench,
        path,
        opts,
        &["Question_id", "question_id"],
        media,
        |row, id, base, media| {
            let category = row.required_string(&["question_category"])?;
            let task = UrbanVideoTask::from_name(&category)
                .ok_or_else(|| unknown_task(&category, UrbanVideoTask::ALL.iter().map(|t| t.name())))?;
            let text = row.required_string(&["question"])?;
            let (stem, options) = split_inline_options(&text);
            if options.len() < 2 {
                return Err(RowProblem::NoOptions(" in the question text (expected lines such as `A. ...`)".into()));
            }
            let answer = parse_choice(&row.required_string(&["answer"])?, &options)?;
            let video = row.required_string(&["video_id"])?;
            let mut q = base.question(id, Task::UrbanVideo(task), stem, options, answer);
            q.videos.push(media.resolve(&video)?);
            Ok(q)
        },
    )
}

/// UAV-DualCog Stage 3 and Stage 4 manifests (`{"samples": [...]}` or JSONL). Choice tasks
/// give their letters in `answer_option_ids` (multi-select) or `answer_option_id`, and the
/// intervals of the correct items; `env_visibility_reasoning` gives the visible count as a
/// number and the visibility intervals — for multi-landmark rows (`targets`, one count per
/// landmark) the total over the targets and every target's intervals. Stage 4 rows
/// (`task_type`) are image questions: the reference image (with its box drawn, when given),
/// then the query image or the four candidate images that `candidates` offers as options.
pub fn read_dualcog(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media = MediaResolver::new(path, opts);
    read_questions(Benchmark::UavDualCog, path, opts, &["sample_id"], media, |row, id, base, media| {
        let task_name = row.required_string(&["task_name", "form", "task_type"])?;
        let task = DualCogTask::from_name(&task_name)
            .ok_or_else(|| unknown_task(&task_name, DualCogTask::ALL.iter().map(|t| t.name())))?;
        let question = row.required_string(&["user_prompt", "prompt_text", "question"])?;
        if task.is_image_task() {
            return read_dualcog_image(row, id, base, media, task, question);
        }
        let video = row.required_string(&["video_path"])?;
        let fps = row.number(&["fps"])?;
        let (options, answer, intervals) = if task == DualCogTask::EnvVisibilityReasoning {
            let (_, gold) =
                row.get(&["gold_environment_answer"]).ok_or(RowProblem::MissingField("gold_environment_answer"))?;
            let gold = Row::new(gold).map_err(|_| RowProblem::WrongType {
                field: "gold_environment_answer".into(),
                expected: "an object",
            })?;
            let (count, intervals) = match gold.get(&["targets"]) {
                Some((_, Value::Array(targets))) if !targets.is_empty() => {
                    let mut total = 0.0;
                    let mut intervals = Vec::new();
                    for t in targets {
                        let t = Row::new(t).map_err(|_| RowProblem::WrongType {
                            field: "gold_environment_answer.targets".into(),
                            expected: "a list of objects",
                        })?;
                        let (count, mut ivs) = visible_count_and_intervals(&t)?;
                        total += count;
                        intervals.append(&mut ivs);
                    }
                    (total, intervals)
                }
                Some(_) => {
                    return Err(RowProblem::WrongType {
                        field: "gold_environment_answer.targets".into(),
                        expected: "a non-empty list of targets",
                    });
                }
                None => visible_count_and_intervals(&gold)?,
            };
            (Vec::new(), Answer::Number(count), intervals)
        } else {
            let options = parse_options(row, &["choice_options"])?;
            let answer = match row.get(&["answer_option_ids"]) {
                Some((_, Value::Array(ids))) if !ids.is_empty() => {
                    let mut letters = Vec::with_capacity(ids.len());
                    for v in ids {
                        let s = v.as_str().ok_or(RowProblem::WrongType {
                            field: "answer_option_ids".into(),
                            expected: "a list of option letters",
                        })?;
                        letters.push(parse_letter(s, &options)?);
                    }
                    let multi = matches!(row.get(&["multi_select"]), Some((_, Value::Bool(true))));
                    if letters.len() == 1 && !multi {
                        Answer::Choice(letters[0])
                    } else {
                        letters.sort_unstable();
                        letters.dedup();
                        Answer::Choices(letters)
                    }
                }
                Some((_, Value::Array(_))) | None => {
                    parse_choice(&row.required_string(&["answer_option_id"])?, &options)?
                }
                Some(_) => {
                    return Err(RowProblem::WrongType {
                        field: "answer_option_ids".into(),
                        expected: "a list of option letters",
                    });
                }
            };
            let mut intervals = Vec::new();
            if let Some((_, Value::Array(items))) = row.get(&["answer_items"]) {
                for item in items {
                    if let Some(v) = item.get("intervals_sec") {
                        intervals.extend(parse_intervals(v, "answer_items[].intervals_sec")?);
                    }
                }
            }
            (options, answer, intervals)
        };
        let mut q = base.question(id, Task::DualCog(task), question, options, answer);
        q.videos.push(media.resolve(&video)?);
        q.fps = fps;
        q.intervals = intervals;
        Ok(q)
    })
}

/// `visible_count` and `visible_intervals_sec` of a visibility answer or of one of its targets.
fn visible_count_and_intervals(gold: &Row<'_>) -> Result<(f64, Vec<Interval>), RowProblem> {
    let count = gold.number(&["visible_count"])?.ok_or(RowProblem::MissingField("visible_count"))?;
    let intervals = match gold.get(&["visible_intervals_sec"]) {
        Some((_, v)) => parse_intervals(v, "visible_intervals_sec")?,
        None => Vec::new(),
    };
    Ok((count, intervals))
}

/// A UAV-DualCog Stage 4 row: options from `label_options`, or `Image 2` … `Image 5` for the
/// `candidates`, whose images follow the reference image.
fn read_dualcog_image(
    row: &Row<'_>,
    id: String,
    base: &Base,
    media: &MediaResolver,
    task: DualCogTask,
    question: String,
) -> Result<Question, RowProblem> {
    let reference = row.required_string(&["reference_image_with_bbox", "reference_image"])?;
    let mut images = vec![media.resolve(&reference)?];
    let options = match row.get(&["candidates"]) {
        Some((_, Value::Array(candidates))) if !candidates.is_empty() => {
            let wrong = || RowProblem::WrongType {
                field: "candidates".into(),
                expected: "a list of {option_id, image} objects",
            };
            let mut options = Vec::with_capacity(candidates.len());
            for c in candidates {
                let letter = c.get("option_id").and_then(Value::as_str).and_then(option_letter).ok_or_else(wrong)?;
                let image = c.get("image").and_then(Value::as_str).ok_or_else(wrong)?;
                images.push(media.resolve(image)?);
                options.push(AnswerOption { label: letter, text: format!("Image {}", images.len()) });
            }
            options
        }
        Some(_) => return Err(RowProblem::WrongType { field: "candidates".into(), expected: "a non-empty list" }),
        None => {
            images.push(media.resolve(&row.required_string(&["target_image"])?)?);
            parse_options(row, &["label_options", "choice_options"])?
        }
    };
    let answer = parse_choice(&row.required_string(&["answer_option_id"])?, &options)?;
    let mut q = base.question(id, Task::DualCog(task), question, options, answer);
    q.images = images;
    Ok(q)
}

/// LinkS²Bench-style rows (our schema, see the module docs). The task decides the answer's
/// form: a letter among `options`, yes/no, a number, or a timestamp (seconds, `mm:ss(.f)`,
/// `hh:mm:ss(.f)` or `12.5s`). At least one of the UAV video and the satellite image is
/// required.
pub fn read_links2bench(path: &Path, opts: &ReadOptions) -> Result<ReadOutcome<Question>, ReadError> {
    let media = MediaResolver::new(path, opts);
    read_questions(Benchmark::LinkS2Bench, path, opts, &["question_id"], media, |row, id, base, media| {
        let task_name = row.required_string(&["task", "task_type"])?;
        let task = LinkS2Task::from_name(&task_name)
            .ok_or_else(|| unknown_task(&task_name, LinkS2Task::ALL.iter().map(|t| t.name())))?;
        let question = row.required_string(&["question"])?;
        let raw = row.get(&["answer"]).ok_or(RowProblem::MissingField("answer"))?.1;
        let raw_text = match raw {
            Value::String(s) => s.trim().to_string(),
            other => other.to_string(),
        };
        let (options, answer) = match task.answer_kind() {
            AnswerKind::Choice => {
                let options = parse_options(row, &["options"])?;
                let answer = parse_choice(&raw_text, &options)?;
                (options, answer)
            }
            AnswerKind::YesNo => {
                let yes = match raw {
                    Value::Bool(b) => Some(*b),
                    _ => match raw_text.to_ascii_lowercase().trim_end_matches('.') {
                        "yes" | "true" => Some(true),
                        "no" | "false" => Some(false),
                        _ => None,
                    },
                };
                let yes = yes.ok_or(RowProblem::BadAnswer { answer: raw_text.clone(), expected: "yes or no" })?;
                (Vec::new(), Answer::YesNo(yes))
            }
            AnswerKind::Number => {
                let x: f64 = raw_text
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite())
                    .ok_or(RowProblem::BadAnswer { answer: raw_text.clone(), expected: "a number" })?;
                (Vec::new(), Answer::Number(x))
            }
            AnswerKind::Timestamp | AnswerKind::MultiChoice => {
                let t = parse_timestamp(&raw_text)
                    .ok_or(RowProblem::BadAnswer { answer: raw_text.clone(), expected: "a timestamp" })?;
                (Vec::new(), Answer::Timestamp(t))
            }
        };
        let videos = row.paths(&["video_path", "uav_video", "videos"])?;
        let images = row.paths(&["satellite_image", "satellite_path", "image_path", "images"])?;
        if videos.is_empty() && images.is_empty() {
            return Err(RowProblem::MissingField("video_path"));
        }
        let mut q = base.question(id, Task::LinkS2(task), question, options, answer);
        q.videos = videos.iter().map(|v| media.resolve(v)).collect::<Result<_, _>>()?;
        q.images = images.iter().map(|v| media.resolve(v)).collect::<Result<_, _>>()?;
        Ok(q)
    })
}

/// Options from a `{ "A": text, ... }` map, a list of `"A. text"` strings, a list of plain
/// strings (lettered A, B, ... in order) or a list of `{option_id, label}` objects.
fn parse_options(row: &Row<'_>, keys: &[&'static str]) -> Result<Vec<AnswerOption>, RowProblem> {
    let (field, value) = row.get(keys).ok_or(RowProblem::MissingField(keys[0]))?;
    let wrong = || RowProblem::WrongType {
        field: field.to_string(),
        expected: "a map of letters to texts or a list of options",
    };
    let mut options = Vec::new();
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let label = option_letter(k).ok_or_else(wrong)?;
                options.push(AnswerOption { label, text: value_text(v).ok_or_else(wrong)? });
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let option = match item {
                    Value::String(s) => match split_label(s) {
                        Some((label, text)) => AnswerOption { label, text },
                        None => AnswerOption { label: letter_at(i).ok_or_else(wrong)?, text: s.trim().to_string() },
                    },
                    Value::Object(obj) => {
                        let id = obj.get("option_id").or_else(|| obj.get("label_id")).and_then(Value::as_str);
                        let label = id.and_then(option_letter).ok_or_else(wrong)?;
                        let text =
                            obj.get("label").or_else(|| obj.get("text")).and_then(value_text).unwrap_or_default();
                        AnswerOption { label, text }
                    }
                    _ => return Err(wrong()),
                };
                options.push(option);
            }
        }
        _ => return Err(wrong()),
    }
    if options.is_empty() {
        return Err(RowProblem::NoOptions(format!(" in `{field}`")));
    }
    options.sort_by_key(|o| o.label);
    if options.windows(2).any(|w| w[0].label == w[1].label) {
        return Err(RowProblem::WrongType { field: field.to_string(), expected: "options with distinct letters" });
    }
    Ok(options)
}

fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn letter_at(i: usize) -> Option<char> {
    (i < 26).then(|| (b'A' + i as u8) as char)
}

/// A single upper-case option letter, possibly written `(A)`, `A.` or `A)`.
fn option_letter(s: &str) -> Option<char> {
    let t = s.trim().trim_start_matches('(').trim_end_matches(['.', ')', ':']);
    let mut chars = t.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_uppercase() => Some(c),
        _ => None,
    }
}

/// `"A. text"`, `"(A) text"`, `"A) text"`, `"A: text"` → (A, text).
fn split_label(s: &str) -> Option<(char, String)> {
    let t = s.trim_start();
    let (inner, rest) = if let Some(r) = t.strip_prefix('(') {
        let mut cs = r.chars();
        let c = cs.next()?;
        (c, cs.as_str().strip_prefix(')')?)
    } else {
        let mut cs = t.chars();
        let c = cs.next()?;
        let rest = cs.as_str();
        let sep = rest.chars().next()?;
        if !matches!(sep, '.' | ')' | ':' | '．' | '、') {
            return None;
        }
        (c, &rest[sep.len_utf8()..])
    };
    if !inner.is_ascii_uppercase() {
        return None;
    }
    Some((inner, rest.trim().to_string()))
}

/// An answer letter (`B`, `B.`, `(B)`, `B. text`) that must be one of the options.
fn parse_letter(raw: &str, options: &[AnswerOption]) -> Result<char, RowProblem> {
    let letters = || options.iter().map(|o| o.label.to_string()).collect::<Vec<_>>().join("/");
    let label = option_letter(raw).or_else(|| split_label(raw).map(|(c, _)| c));
    match label {
        Some(c) if options.iter().any(|o| o.label == c) => Ok(c),
        _ => Err(RowProblem::AnswerNotInOptions { answer: raw.to_string(), options: letters() }),
    }
}

fn parse_choice(raw: &str, options: &[AnswerOption]) -> Result<Answer, RowProblem> {
    parse_letter(raw, options).map(Answer::Choice)
}

/// Splits UrbanVideo-style text (`Question: ...\nChoices:\nA. ...\nB. ...`) into its stem and
/// options. Options starting lines are preferred; when there are fewer than two, markers
/// inside a line (`... A. x B. y`) are used. Letters must run A, B, C, ... in order; the last
/// complete run wins, so an "A." inside the stem does not start the list.
pub fn split_inline_options(text: &str) -> (String, Vec<AnswerOption>) {
    // Line-based.
    let mut best: Option<(usize, Vec<AnswerOption>)> = None;
    let mut run: Option<(usize, Vec<AnswerOption>)> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        match split_label(line.trim()) {
            Some((c, body)) if c == 'A' => {
                if let Some(r) = run.take().filter(|r| r.1.len() >= 2) {
                    best = Some(r);
                }
                run = Some((start, vec![AnswerOption { label: c, text: body }]));
            }
            Some((c, body))
                if run.as_ref().is_some_and(|r| r.1.last().is_some_and(|o| o.label as u8 + 1 == c as u8)) =>
            {
                if let Some(r) = run.as_mut() {
                    r.1.push(AnswerOption { label: c, text: body });
                }
            }
            _ => {
                // A continuation line of the current option.
                let t = line.trim();
                if let Some(last) = run.as_mut().and_then(|r| r.1.last_mut())
                    && !t.is_empty()
                {
                    last.text.push(' ');
                    last.text.push_str(t);
                }
            }
        }
    }
    if let Some(r) = run.filter(|r| r.1.len() >= 2) {
        best = Some(r);
    }
    if let Some((start, options)) = best {
        return (clean_stem(&text[..start]), options);
    }
    // Inline markers: "A." preceded by start, whitespace or '('.
    let bytes = text.as_bytes();
    let marker_at = |pos: usize, c: u8| -> Option<usize> {
        if bytes.get(pos) != Some(&c) {
            return None;
        }
        let before_ok = pos == 0 || bytes[pos - 1].is_ascii_whitespace() || bytes[pos - 1] == b'(';
        let after = bytes.get(pos + 1).copied();
        let after_ok = matches!(after, Some(b'.' | b')' | b':'));
        (before_ok && after_ok).then_some(pos + 2)
    };
    // Every marker of every letter in one pass, so that looking for the next one is a binary
    // search: scanning the text again from each `A.` made long texts quadratic.
    let mut markers: [Vec<(usize, usize)>; 26] = Default::default();
    for (p, &b) in bytes.iter().enumerate() {
        if b.is_ascii_uppercase()
            && let Some(end) = marker_at(p, b)
        {
            markers[(b - b'A') as usize].push((p, end));
        }
    }
    let find = |from: usize, c: u8| {
        let list = markers.get((c.wrapping_sub(b'A')) as usize)?;
        list.get(list.partition_point(|m| m.0 < from)).copied()
    };
    // (start of the run, [(letter, marker start, text start)]).
    type Marks = Vec<(char, usize, usize)>;
    let mut best_inline: Option<(usize, Marks)> = None;
    let mut from = 0;
    while let Some((a_pos, a_end)) = find(from, b'A') {
        let mut marks = vec![('A', a_pos, a_end)];
        let mut c = b'B';
        while let Some((p, e)) = find(marks.last().map(|m| m.2).unwrap_or(0), c) {
            marks.push((c as char, p, e));
            c += 1;
        }
        if marks.len() >= 2 {
            best_inline = Some((a_pos, marks));
        }
        from = a_end;
    }
    match best_inline {
        Some((start, marks)) => {
            let mut options = Vec::with_capacity(marks.len());
            // An option ends where the next marker (or its opening parenthesis) begins.
            let open_at = |p: usize| if p > 0 && bytes[p - 1] == b'(' { p - 1 } else { p };
            for (i, &(c, _, end)) in marks.iter().enumerate() {
                let stop = marks.get(i + 1).map(|m| open_at(m.1)).unwrap_or(text.len()).max(end);
                options.push(AnswerOption { label: c, text: text[end..stop].trim().to_string() });
            }
            (clean_stem(&text[..open_at(start)]), options)
        }
        None => (clean_stem(text), Vec::new()),
    }
}

/// Trims a question stem and drops a trailing `Choices:` / `Options:` heading and a leading
/// `Question:` label.
fn clean_stem(s: &str) -> String {
    let mut t = s.trim();
    for heading in ["Choices:", "Options:", "Choices", "Options"] {
        if let Some(stripped) = t.strip_suffix(heading) {
            t = stripped.trim_end();
            break;
        }
    }
    t.strip_prefix("Question:").map(str::trim_start).unwrap_or(t).to_string()
}

/// Intervals as `[[s, e], ...]`, `[{start_sec, end_sec}, ...]` or one `[s, e]`.
fn parse_intervals(v: &Value, field: &'static str) -> Result<Vec<Interval>, RowProblem> {
    let wrong = || RowProblem::WrongType { field: field.to_string(), expected: "a list of [start, end] seconds" };
    let items = v.as_array().ok_or_else(wrong)?;
    if items.len() == 2 && items.iter().all(Value::is_number) {
        return one_interval(&items[0], &items[1]).map(|i| vec![i]).ok_or_else(wrong);
    }
    items
        .iter()
        .map(|it| {
            match it {
                Value::Array(pair) if pair.len() == 2 => one_interval(&pair[0], &pair[1]),
                Value::Object(o) => {
                    match (o.get("start_sec").or_else(|| o.get("start")), o.get("end_sec").or_else(|| o.get("end"))) {
                        (Some(s), Some(e)) => one_interval(s, e),
                        _ => None,
                    }
                }
                _ => None,
            }
            .ok_or_else(wrong)
        })
        .collect()
}

fn one_interval(s: &Value, e: &Value) -> Option<Interval> {
    let (start, end) = (s.as_f64()?, e.as_f64()?);
    (start.is_finite() && end.is_finite() && start <= end).then_some(Interval { start, end })
}

/// Seconds from `12.5`, `12.5s`, `01:02.5` (mm:ss) or `1:02:03` (hh:mm:ss).
pub fn parse_timestamp(s: &str) -> Option<f64> {
    let t = s.trim();
    let t = t.strip_suffix('s').map(str::trim_end).unwrap_or(t);
    let parts: Vec<&str> = t.split(':').collect();
    if parts.len() > 3 || parts.iter().any(|p| p.trim().is_empty()) {
        return None;
    }
    let mut secs = 0.0;
    for (i, p) in parts.iter().enumerate() {
        let v: f64 = p.trim().parse().ok()?;
        if !v.is_finite() || v < 0.0 || (i > 0 && v >= 60.0) {
            return None;
        }
        secs = secs * 60.0 + v;
    }
    Some(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taxonomy_matches_spec_counts() {
        let count = |d: Dimension| SisTask::ALL.iter().filter(|t| t.dimension() == d).count();
        assert_eq!((count(Dimension::Spatial), count(Dimension::Ego)), (8, 5));
        let level = |l: Level| SisTask::ALL.iter().filter(|t| t.level() == l).count();
        assert_eq!((level(Level::Perception), level(Level::Memory), level(Level::Reasoning)), (4, 5, 4));
        assert_eq!(LinkS2Task::ALL.iter().filter(|t| t.dimension() == Dimension::Reasoning).count(), 3);
        assert_eq!(SisTask::from_name("spatiotemporal_consistency"), Some(SisTask::SpatioTemporalConsistency));
        assert_eq!(SisTask::from_name("Object existence"), Some(SisTask::ObjectExistence));
        assert_eq!(SisTask::from_name("Object"), None);
        assert_eq!(UrbanVideoTask::from_name("start/end position"), Some(UrbanVideoTask::StartEndPosition));
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("12.5"), Some(12.5));
        assert_eq!(parse_timestamp("12.5s"), Some(12.5));
        assert_eq!(parse_timestamp("01:02.5"), Some(62.5));
        assert_eq!(parse_timestamp("1:02:03"), Some(3723.0));
        assert_eq!(parse_timestamp("1:75"), None);
        assert_eq!(parse_timestamp("soon"), None);
        assert_eq!(parse_timestamp("-3"), None);
    }

    #[test]
    fn inline_options_line_and_inline_forms() {
        let text = "Question: You pass point A. Where is the tower?\nChoices:\nA.\tLeft of you.\nB.\tRight\nof you.\nC. Behind.";
        let (stem, opts) = split_inline_options(text);
        assert_eq!(stem, "You pass point A. Where is the tower?");
        let got: Vec<(char, &str)> = opts.iter().map(|o| (o.label, o.text.as_str())).collect();
        assert_eq!(got, vec![('A', "Left of you."), ('B', "Right of you."), ('C', "Behind.")]);

        let (stem, opts) = split_inline_options("Which way? (A) up (B) down (C) left");
        assert_eq!(stem, "Which way?");
        let got: Vec<(char, &str)> = opts.iter().map(|o| (o.label, o.text.as_str())).collect();
        assert_eq!(got, vec![('A', "up"), ('B', "down"), ('C', "left")]);

        let (_, opts) = split_inline_options("Near A. the gate? A. yes B. no");
        assert_eq!(opts.iter().map(|o| o.text.as_str()).collect::<Vec<_>>(), vec!["yes", "no"]);

        assert!(split_inline_options("No options here.").1.is_empty());
    }

    #[test]
    fn choices_and_labels() {
        let opts: Vec<AnswerOption> = "ABCD".chars().map(|c| AnswerOption { label: c, text: c.to_string() }).collect();
        assert_eq!(parse_choice("B", &opts), Ok(Answer::Choice('B')));
        assert_eq!(parse_choice("(C)", &opts), Ok(Answer::Choice('C')));
        assert_eq!(parse_choice("D. descend", &opts), Ok(Answer::Choice('D')));
        assert!(matches!(parse_choice("E", &opts), Err(RowProblem::AnswerNotInOptions { .. })));
        assert!(matches!(parse_choice("Both", &opts), Err(RowProblem::AnswerNotInOptions { .. })));
    }
}
