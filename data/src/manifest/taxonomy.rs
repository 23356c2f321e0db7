//! The tasks of every benchmark and the taxonomy they belong to (SIS-Bench's dimensions and
//! levels, LinkS²Bench's, UrbanVideo-Bench's and UAV-DualCog's groups).

use std::collections::HashSet;
use std::fmt;
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::records::normalise;

/// The benchmarks with a reader here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Benchmark {
    SisBench,
    UrbanVideoBench,
    UavDualCog,
    LinkS2Bench,
}

impl Benchmark {
    pub const ALL: [Benchmark; 4] = [Benchmark::SisBench, Benchmark::UrbanVideoBench, Benchmark::UavDualCog, Benchmark::LinkS2Bench];

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
    /// The dimension of a task no taxonomy here lists ([`UnlistedTask`]).
    Unlisted,
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
            Dimension::Unlisted => "unlisted",
        }
    }
}

impl fmt::Display for Dimension {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// SIS-Bench's cognitive level; other benchmarks have none.
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

/// How a SIS-Bench task's videos were built.
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

/// The 13 SIS-Bench tasks.
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

    /// The key the released `SIS-Bench.jsonl` writes in `task_type` (lmms-eval's `sis_bench`
    /// task lists the same 13 keys).
    pub fn released_key(self) -> &'static str {
        match self {
            SisTask::ObjectExistence => "object_existence",
            SisTask::ObjectAttribute => "object_attribute",
            SisTask::RelativeDirection => "relative_direction",
            SisTask::LandmarkOrder => "landmark_appearance_order",
            SisTask::LandmarkRecall => "landmark_recall",
            SisTask::PositionalRelationship => "positional_relationship",
            SisTask::SpatialConsistency => "spatial_consistency",
            SisTask::SpatioTemporalConsistency => "spatio-temporal_consistency",
            SisTask::ActionRecognition => "action_recognition",
            SisTask::ActionSequence => "action_sequence",
            SisTask::ActionRecall => "action_recall",
            SisTask::ActionPrediction => "action_prediction",
            SisTask::PathPlanning => "path_planning",
        }
    }

    /// The task a name or released key means (`Landmark Order`, `landmark_order`,
    /// `landmark_appearance_order`).
    pub fn from_name(s: &str) -> Option<Self> {
        by_name(&Self::ALL, Self::name, s).or_else(|| by_name(&Self::ALL, Self::released_key, s))
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
            LandmarkOrder | LandmarkRecall | PositionalRelationship | ActionSequence | ActionRecall => VideoType::Concatenated,
            SpatialConsistency | SpatioTemporalConsistency => VideoType::Shuffled,
            ActionPrediction | PathPlanning => VideoType::Long,
        }
    }
}

/// The 12 LinkS²Bench tasks.
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

/// A task name a released manifest uses that no taxonomy here lists (an OpenUAV-QA task,
/// UrbanVideo-Bench's "Association Reasoning"): the official scorers group by whatever
/// `task_type` says, so such a row is kept under its own name rather than refused.
///
/// The name is interned (each distinct name is stored once for the life of the process) so
/// that [`Task`] stays `Copy`; a manifest holds a handful of distinct task names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct UnlistedTask {
    pub benchmark: Benchmark,
    name: &'static str,
}

impl<'de> Deserialize<'de> for UnlistedTask {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Owned {
            benchmark: Benchmark,
            name: String,
        }
        let owned = Owned::deserialize(d)?;
        Ok(UnlistedTask::new(owned.benchmark, &owned.name))
    }
}

impl UnlistedTask {
    pub fn new(benchmark: Benchmark, name: &str) -> Self {
        UnlistedTask { benchmark, name: intern(name) }
    }

    pub fn name(self) -> &'static str {
        self.name
    }
}

fn intern(name: &str) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(known) = names.get(name) {
        return known;
    }
    let stored: &'static str = Box::leak(name.to_string().into_boxed_str());
    names.insert(stored);
    stored
}

/// A benchmark task; carries the taxonomy its scores are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Task {
    Sis(SisTask),
    LinkS2(LinkS2Task),
    UrbanVideo(UrbanVideoTask),
    DualCog(DualCogTask),
    Unlisted(UnlistedTask),
}

impl Task {
    pub fn name(self) -> &'static str {
        match self {
            Task::Sis(t) => t.name(),
            Task::LinkS2(t) => t.name(),
            Task::UrbanVideo(t) => t.name(),
            Task::DualCog(t) => t.name(),
            Task::Unlisted(t) => t.name(),
        }
    }

    pub fn dimension(self) -> Dimension {
        match self {
            Task::Sis(t) => t.dimension(),
            Task::LinkS2(t) => t.dimension(),
            Task::UrbanVideo(t) => t.dimension(),
            Task::DualCog(t) => t.dimension(),
            Task::Unlisted(_) => Dimension::Unlisted,
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

    /// lmms-eval's `sis_bench` task keys (`lmms_eval/tasks/sis_bench/utils.py`), the
    /// `task_type` values of the released file.
    #[test]
    fn released_keys_name_the_thirteen_tasks() {
        let keys = [
            "object_existence",
            "object_attribute",
            "relative_direction",
            "landmark_appearance_order",
            "landmark_recall",
            "positional_relationship",
            "spatial_consistency",
            "spatio-temporal_consistency",
            "action_recognition",
            "action_sequence",
            "action_recall",
            "action_prediction",
            "path_planning",
        ];
        let tasks: Vec<SisTask> = keys.iter().filter_map(|k| SisTask::from_name(k)).collect();
        assert_eq!(tasks, SisTask::ALL);
        assert!(SisTask::ALL.iter().zip(keys).all(|(t, k)| t.released_key() == k));
        assert_eq!(SisTask::from_name("landmark_appearance_order"), Some(SisTask::LandmarkOrder));
    }

    #[test]
    fn unlisted_tasks_keep_their_names() {
        let a = UnlistedTask::new(Benchmark::UrbanVideoBench, "Association Reasoning");
        let b = UnlistedTask::new(Benchmark::UrbanVideoBench, &String::from("Association Reasoning"));
        assert_eq!(a, b);
        assert!(std::ptr::eq(a.name(), b.name()), "one stored copy per name");
        let task = Task::Unlisted(a);
        assert_eq!((task.name(), task.dimension(), task.level()), ("Association Reasoning", Dimension::Unlisted, None));
        let json = serde_json::to_string(&task).expect("serialise");
        assert_eq!(serde_json::from_str::<Task>(&json).expect("deserialise"), task);
    }
}
