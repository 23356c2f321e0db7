//! Stage 3: one atomic and one composite mission per landmark, flown, screened, repaired and
//! tested for visibility, then written as trajectories, render requests and manifest rows of
//! the four video task families in UAV-DualCog's sample schema (`stage3_task_suite.py`):
//!
//! | family (`task_family`) | mission | `task_name` | answer |
//! |---|---|---|---|
//! | flight behaviour recognition | atomic | `self_set_instance_recognition` | one of 8 options |
//! | temporal localisation | composite | `self_element_instance_recognition` | every flown maneuver, each with its intervals |
//! | landmark visibility counting | atomic | `env_visibility_reasoning` | how many times the landmark comes into view, and when |
//! | interval reasoning | composite | `env_visibility_reasoning` | the same over the longer flight |
//!
//! Intervals are `[start, end]` seconds at the trajectory's frame rate, `[first / fps,
//! last / fps]` of inclusive frame ranges, as UAV-DualCog writes them. A landmark whose every
//! drawn mission of a kind is rejected is reported with the reasons and gets no rows of it.

use std::collections::BTreeMap;
use std::path::Path;

use motionvl_util::files::write_json_atomic;
use serde_json::{Value, json};

use super::cloud::{PointCloud, VoxelGrid};
use super::error::{DccsError, named_after};
use super::geom::{V3, heading};
use super::instances::Landmark;
use super::maneuvers::{CameraMode, Composite, Element, Maneuver};
use super::trajectory::{Kinematics, Obstacles, Planned, TrajectoryConfig, plan};
use super::visibility::{FrameVisibility, VisibilityConfig, frame_visibility, possible_occluders, runs, seconds};
use crate::synth::rng::{SynthRng, derive_seed};

/// Settings of `construct dccs-video`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage3Config {
    pub seed: u64,
    pub scene_id: String,
    pub trajectory: TrajectoryConfig,
    /// The camera of the visibility test, and of the rendered video.
    pub visibility: VisibilityConfig,
    /// Missions drawn per landmark and kind before the kind is given up.
    pub mission_draws: usize,
    /// Copied into the render requests: what renders them (e.g. the synthetic world's seed).
    pub scene: Value,
}

impl Default for Stage3Config {
    fn default() -> Self {
        Stage3Config {
            seed: 0,
            scene_id: "scene".into(),
            trajectory: TrajectoryConfig::default(),
            visibility: VisibilityConfig::default(),
            mission_draws: 6,
            scene: Value::Null,
        }
    }
}

impl Stage3Config {
    /// Checks the settings before any work: even positive video sizes, a positive frame rate,
    /// clearance and windows.
    pub fn validate(&self) -> Result<(), DccsError> {
        let (v, t) = (&self.visibility, &self.trajectory);
        let bad = |key: &'static str, problem: String| Err(DccsError::Setting { key, problem });
        if v.width == 0 || v.height == 0 || !v.width.is_multiple_of(2) || !v.height.is_multiple_of(2) {
            return bad("visibility.width/height", format!("video size {}x{} must be positive and even", v.width, v.height));
        }
        if !(t.fps > 0.0 && t.clearance_m > 0.0 && v.hfov_deg > 0.0 && v.hfov_deg < 180.0) {
            return bad(
                "trajectory.fps/clearance_m, visibility.hfov_deg",
                format!("fps {}, clearance {} m and field of view {}° must be positive (the view under 180°)", t.fps, t.clearance_m, v.hfov_deg),
            );
        }
        if t.pose_window == 0 || t.forward_window == 0 || v.test_width == 0 {
            return bad(
                "trajectory.pose_window/forward_window, visibility.test_width",
                "smoothing windows and the test width must be at least 1".into(),
            );
        }
        Ok(())
    }
}

/// What a mission flies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissionKind {
    Atomic(Maneuver),
    Composite(Composite),
}

impl MissionKind {
    /// UAV-DualCog's `set_id`.
    pub fn set_id(self) -> String {
        match self {
            MissionKind::Atomic(m) => format!("atomic_{}", m.key()),
            MissionKind::Composite(c) => c.key().to_string(),
        }
    }

    pub fn family(self) -> &'static str {
        match self {
            MissionKind::Atomic(_) => "atomic",
            MissionKind::Composite(_) => "composite",
        }
    }
}

/// A planned mission and what its camera sees.
#[derive(Debug, Clone)]
pub struct Mission {
    pub id: String,
    /// Index into the landmarks.
    pub landmark: usize,
    pub kind: MissionKind,
    pub planned: Planned,
    pub visibility: Vec<FrameVisibility>,
}

impl Mission {
    /// Inclusive frame ranges in which the landmark is visible.
    pub fn visible_runs(&self) -> Vec<(usize, usize)> {
        runs(&self.visibility.iter().map(FrameVisibility::visible).collect::<Vec<_>>())
    }

    pub fn fps(&self) -> f64 {
        self.planned.trajectory.fps
    }

    /// The label of each element and the inclusive frame ranges it is flown in; elements with
    /// the same label share one entry, in order of first appearance.
    pub fn labelled_segments(&self) -> Vec<(String, Vec<(usize, usize)>)> {
        let mut out: Vec<(String, Vec<(usize, usize)>)> = Vec::new();
        for s in &self.planned.trajectory.segments {
            let label = self.planned.elements[s.element].label();
            match out.iter_mut().find(|(l, _)| *l == label) {
                Some((_, ranges)) => ranges.push((s.start, s.end)),
                None => out.push((label, vec![(s.start, s.end)])),
            }
        }
        out
    }
}

/// A mission given up, and why.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Rejection {
    pub landmark: String,
    pub mission: String,
    pub reason: String,
}

/// Where a mission starts: at a drawn bearing, an orbit's default extension beyond the
/// footprint and 8 m above the top, pushed out and up by an opening approach's travel and
/// descent so that the approach ends there.
fn mission_start(target: &Landmark, first: &Element, bearing: f64) -> V3 {
    let b = &target.bbox;
    let (mut out, mut up) = (b.footprint_radius() + 12.0, 8.0);
    if first.maneuver == Maneuver::GradualApproach {
        out += first.get("travel_distance_m");
        up += first.get("descent_m");
    }
    let h = heading(bearing) * out;
    V3::new(b.center.x + h.x, b.center.y + h.y, b.top() + up)
}

/// Plans every landmark's two missions. `progress` is called once per landmark.
pub fn plan_missions(landmarks: &[Landmark], cloud: &PointCloud, cfg: &Stage3Config, progress: &(dyn Fn() + Sync)) -> (Vec<Mission>, Vec<Rejection>) {
    use rayon::prelude::*;
    let grid = VoxelGrid::new(&cloud.points, cfg.trajectory.clearance_m);
    let obstacles = Obstacles { grid: &grid, keepouts: landmarks.iter().map(|l| (l.id.as_str(), l.bbox)).collect() };
    let per_landmark: Vec<(Vec<Mission>, Vec<Rejection>)> = (0..landmarks.len())
        .into_par_iter()
        .map(|li| {
            let out = plan_landmark(landmarks, li, cloud, &obstacles, cfg);
            progress();
            out
        })
        .collect();
    let mut missions = Vec::new();
    let mut rejections = Vec::new();
    for (m, r) in per_landmark {
        missions.extend(m);
        rejections.extend(r);
    }
    (missions, rejections)
}

fn plan_landmark(
    landmarks: &[Landmark],
    li: usize,
    cloud: &PointCloud,
    obstacles: &Obstacles<'_>,
    cfg: &Stage3Config,
) -> (Vec<Mission>, Vec<Rejection>) {
    let target = &landmarks[li];
    let mut rng = SynthRng::new(derive_seed(cfg.seed, li as u64));
    let mut atomic: Vec<MissionKind> = Maneuver::ALL.iter().map(|&m| MissionKind::Atomic(m)).collect();
    let mut composite: Vec<MissionKind> = Composite::ALL.iter().map(|&c| MissionKind::Composite(c)).collect();
    rng.shuffle(&mut atomic);
    rng.shuffle(&mut composite);
    let mut missions = Vec::new();
    let mut rejections = Vec::new();
    for kinds in [atomic, composite] {
        for &kind in kinds.iter().take(cfg.mission_draws.max(1)) {
            let elements = match kind {
                MissionKind::Atomic(m) => vec![Element::drawn(m, m.atomic_camera(), &mut rng)],
                MissionKind::Composite(c) => c.elements(&mut rng),
            };
            let start = mission_start(target, &elements[0], rng.range(0.0, 360.0));
            let id = format!("{}_{}", target.id, kind.set_id());
            match plan(elements, &target.bbox, start, obstacles, &cfg.trajectory) {
                Ok(planned) => {
                    let eyes: Vec<V3> = planned.trajectory.frames.iter().map(|f| f.pos).collect();
                    let v = &cfg.visibility;
                    let occluders = possible_occluders(&cloud.points, &eyes, &target.support_points, v.splat_radius_m);
                    let visibility = planned
                        .trajectory
                        .frames
                        .iter()
                        .map(|f| frame_visibility(&v.camera(f.pos, f.forward), &target.support_points, &occluders, v))
                        .collect();
                    missions.push(Mission { id, landmark: li, kind, planned, visibility });
                    break;
                }
                Err(reason) => rejections.push(Rejection { landmark: target.id.clone(), mission: id, reason }),
            }
        }
    }
    (missions, rejections)
}

/// Paths of one mission's files, relative to the manifest's folder.
pub fn video_path(mission: &Mission) -> String {
    format!("videos/{}.mp4", mission.id)
}

pub fn trajectory_path(mission: &Mission) -> String {
    format!("trajectories/{}.json", mission.id)
}

/// What [`write_stage3`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage3Summary {
    pub missions: usize,
    pub rows: usize,
    pub rejections: usize,
}

const FAMILY_BEHAVIOUR: &str = "flight_behavior_recognition";
const FAMILY_LOCALISATION: &str = "temporal_localization";
const FAMILY_COUNTING: &str = "visibility_counting";
const FAMILY_INTERVALS: &str = "interval_reasoning";

/// Writes `stage3.json` (the manifest), `stage3_render_requests.json`, `trajectories/*.json` and
/// `stage3_rejections.json` under `out`. Rows are built from the missions alone, so writing the
/// same missions again gives the same bytes.
pub fn write_stage3(
    out: &Path,
    landmarks: &[Landmark],
    missions: &[Mission],
    rejections: &[Rejection],
    cfg: &Stage3Config,
) -> Result<Stage3Summary, DccsError> {
    // Every file a mission names (its trajectory here, its video at render time) stays under
    // `out`, checked before anything is written: ids come from the handoff file.
    let trajectories = missions
        .iter()
        .map(|m| {
            let whose = || format!("mission `{}`", m.id);
            named_after(out, &landmarks[m.landmark].id, &video_path(m), whose)?;
            named_after(out, &landmarks[m.landmark].id, &trajectory_path(m), whose)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut samples = Vec::new();
    let mut requests = Vec::new();
    for (m, path) in missions.iter().zip(&trajectories) {
        write_json_atomic(path, &m.planned.trajectory.to_json())?;
        let mut rng = SynthRng::new(derive_seed(cfg.seed ^ 0x5354_4733, fnv(&m.id)));
        let lm = &landmarks[m.landmark];
        let rows = match m.kind {
            MissionKind::Atomic(_) => {
                vec![behaviour_row(m, lm, cfg, &mut rng), visibility_row(m, lm, cfg, FAMILY_COUNTING)]
            }
            MissionKind::Composite(_) => {
                vec![localisation_row(m, lm, cfg, &mut rng), visibility_row(m, lm, cfg, FAMILY_INTERVALS)]
            }
        };
        let ids: Vec<Value> = rows.iter().map(|r| r["sample_id"].clone()).collect();
        requests.push(json!({
            "request_id": m.id,
            "kind": "video",
            "output_path": video_path(m),
            "trajectory_path": trajectory_path(m),
            "fps": m.fps(),
            "frame_count": m.planned.trajectory.frames.len(),
            "landmark_id": lm.id,
            "sample_ids": ids,
        }));
        samples.extend(rows);
    }
    let v = &cfg.visibility;
    write_json_atomic(
        &out.join("stage3_render_requests.json"),
        &json!({
            "format": RENDER_FORMAT,
            "stage": 3,
            "scene_id": cfg.scene_id,
            "scene": cfg.scene,
            "camera": {"hfov_deg": v.hfov_deg, "width": v.width, "height": v.height, "roll_deg": 0.0},
            "requests": requests,
        }),
    )?;
    write_json_atomic(&out.join("stage3_rejections.json"), &json!({ "rejections": rejections }))?;
    let rows = samples.len();
    write_json_atomic(
        &out.join("stage3.json"),
        &json!({
            "generation_id": format!("{}_stage3_seed{}", cfg.scene_id, cfg.seed),
            "scene_id": cfg.scene_id,
            "mode": "single-landmark",
            "seed": cfg.seed,
            "sample_count": rows,
            "include_temporal_localization": true,
            "forms": ["self_set_instance_recognition", "self_element_instance_recognition", "env_visibility_reasoning"],
            "samples": samples,
        }),
    )?;
    Ok(Stage3Summary { missions: missions.len(), rows, rejections: rejections.len() })
}

/// The `format` of render-request files.
pub const RENDER_FORMAT: &str = "motionvl.dccs.render_requests/1";

/// A stable 64-bit hash of a string (FNV-1a), to seed per-mission draws.
pub(crate) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn secs(ranges: &[(usize, usize)], fps: f64) -> Vec<[f64; 2]> {
    ranges.iter().map(|&r| seconds(r, fps)).collect()
}

fn letters(n: usize) -> impl Iterator<Item = String> {
    (0..n).map(|i| char::from(b'A' + i as u8).to_string())
}

/// The fields every Stage 3 row shares (`_base_manifest_sample`).
fn base_row(m: &Mission, lm: &Landmark, cfg: &Stage3Config, task_name: &str, family: &str) -> BTreeMap<String, Value> {
    let fps = m.fps();
    let frames = m.planned.trajectory.frames.len();
    let runs = m.visible_runs();
    let elements: Vec<Value> = m
        .planned
        .elements
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let mut params: serde_json::Map<String, Value> = e.params.iter().map(|(k, v)| (k.clone(), json!(v))).collect();
            params.insert("camera_mode".into(), json!(e.camera.key()));
            params.insert("direction".into(), json!(e.direction));
            json!({
                "element_instance_id": format!("{}_e{i}", m.id),
                "element_class": e.maneuver.key(),
                "target_instance_id": lm.id,
                "label": e.label(),
                "lift_m": e.lift_m,
                "params": params,
            })
        })
        .collect();
    let behaviour: Vec<Value> = m
        .planned
        .trajectory
        .segments
        .iter()
        .map(|s| {
            let [a, b] = seconds((s.start, s.end), fps);
            json!({
                "element_instance_id": format!("{}_e{}", m.id, s.element),
                "element_class": m.planned.elements[s.element].maneuver.key(),
                "target_instance_id": lm.id,
                "start_frame": s.start, "end_frame": s.end,
                "intervals_sec": [{"start_sec": a, "end_sec": b}],
            })
        })
        .collect();
    let keyframes: Vec<Value> = m
        .visibility
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.bbox.map(|b| json!({"frame_index": i, "time_sec": seconds((i, i), fps)[0], "bbox_xyxy_norm": b})))
        .collect();
    let visible_count = runs.len();
    let group = if task_name.starts_with("self_") { "self-state" } else { "environmental" };
    let display = match family {
        FAMILY_BEHAVIOUR => "Flight Behavior Recognition",
        FAMILY_LOCALISATION => "Temporal Localization",
        FAMILY_COUNTING => "Landmark Visibility Counting",
        _ => "Interval Reasoning",
    };
    let kind = if task_name.starts_with("self_") { "choice_with_optional_intervals" } else { "count_and_intervals" };
    let v = &cfg.visibility;
    [
        ("sample_id", json!(format!("{}_{}_{}", cfg.scene_id, m.id, family))),
        ("scene_id", json!(cfg.scene_id)),
        ("mode", json!("single-landmark")),
        ("form", json!(task_name)),
        ("task_group", json!(group)),
        ("task_name", json!(task_name)),
        ("task_family", json!(family)),
        ("task_display_name", json!(display)),
        ("response_kind", json!(kind)),
        ("mission_id", json!(m.id)),
        ("mission_family", json!(m.kind.family())),
        ("set_id", json!(m.kind.set_id())),
        ("set_name", json!(set_label(m))),
        ("element_instances", json!(elements)),
        ("element_sequence", json!(m.planned.elements.iter().map(|e| e.maneuver.key()).collect::<Vec<_>>())),
        ("behavior_intervals_sec", json!(behaviour)),
        ("repairs", json!(m.planned.repairs)),
        ("kinematics_checked", json!(m.planned.kinematics != Kinematics::NotChecked)),
        (
            "kinematics_feasible",
            match &m.planned.kinematics {
                Kinematics::NotChecked => Value::Null,
                k => json!(*k == Kinematics::Feasible),
            },
        ),
        (
            "kinematics_violation",
            match &m.planned.kinematics {
                Kinematics::Infeasible(v) => json!(v),
                _ => Value::Null,
            },
        ),
        ("landmark_id", json!(lm.id)),
        ("landmark_ids", json!([lm.id])),
        ("landmark_category", json!(lm.category.name())),
        ("landmark_subcategory", json!(lm.subcategory)),
        ("landmark_description", json!(lm.description)),
        ("reference_bbox_xyxy_norm", json!(keyframes.first().map(|k| k["bbox_xyxy_norm"].clone()))),
        ("video_path", json!(video_path(m))),
        ("trajectory_path", json!(trajectory_path(m))),
        ("fps", json!(fps)),
        ("frame_count", json!(frames)),
        ("video_width", json!(v.width)),
        ("video_height", json!(v.height)),
        ("visible_count", json!(visible_count)),
        ("visible_intervals_sec", json!(secs(&runs, fps))),
        ("keyframe_gt_dense", json!(keyframes)),
        ("difficulty_band", json!(difficulty_band(visible_count))),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn difficulty_band(visible_count: usize) -> &'static str {
    match visible_count {
        0..=1 => "1",
        2..=3 => "2-3",
        4..=5 => "4-5",
        _ => "6+",
    }
}

fn set_label(m: &Mission) -> String {
    match m.kind {
        MissionKind::Atomic(_) => m.planned.elements[0].label(),
        MissionKind::Composite(c) => c.name().to_string(),
    }
}

fn options_block(options: &[Value]) -> String {
    options
        .iter()
        .map(|o| format!("{}. {}", o["option_id"].as_str().unwrap_or_default(), o["label"].as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join("\n")
}

fn finish(mut row: BTreeMap<String, Value>, user: String, system: &str) -> Value {
    row.insert("prompt_text".into(), json!(user));
    row.insert("user_prompt".into(), json!(user));
    row.insert("system_prompt".into(), json!(system));
    json!(row)
}

const CHOICE_SYSTEM: &str = "You are a UAV pilot reviewing your own flight video. Return exactly one valid JSON object and nothing else: {\"answers\": [{\"option_id\": \"A\", \"intervals_sec\": [[start, end]]}]}, with times in seconds from the start of the video.";
const COUNT_SYSTEM: &str = "You are a UAV pilot reviewing your own flight video. Return exactly one valid JSON object and nothing else: {\"visible_count\": N, \"visible_intervals_sec\": [[start, end], ...]}, with times in seconds from the start of the video.";

/// Flight behaviour recognition: which of eight flights did the atomic mission fly.
fn behaviour_row(m: &Mission, lm: &Landmark, cfg: &Stage3Config, rng: &mut SynthRng) -> Value {
    let own = &m.planned.elements[0];
    let mut others: Vec<Maneuver> = Maneuver::ALL.into_iter().filter(|&x| x != own.maneuver).collect();
    rng.shuffle(&mut others);
    let mut labels = vec![own.label()];
    for x in others {
        let label = Element::drawn(x, x.atomic_camera(), rng).label();
        if labels.len() < 8 && !labels.contains(&label) {
            labels.push(label);
        }
    }
    rng.shuffle(&mut labels);
    let options: Vec<Value> = letters(labels.len()).zip(&labels).map(|(id, l)| json!({"option_id": id, "label": l})).collect();
    let correct = labels.iter().position(|l| *l == own.label()).unwrap_or(0);
    let answer = options[correct]["option_id"].clone();
    let mut row = base_row(m, lm, cfg, "self_set_instance_recognition", FAMILY_BEHAVIOUR);
    row.insert("multi_select".into(), json!(false));
    row.insert("include_temporal_localization".into(), json!(false));
    row.insert("answer_option_id".into(), answer.clone());
    row.insert("answer_items".into(), json!([{"option_id": answer, "label": own.label(), "intervals_sec": []}]));
    row.insert("choice_options".into(), json!(options));
    let user = format!(
        "The video was recorded by your camera while you flew around {} ({}). Which flight did you perform?\nOptions:\n{}\nChoose exactly one option.",
        lm.description,
        lm.category.name().replace('_', " "),
        options_block(&options)
    );
    finish(row, user, CHOICE_SYSTEM)
}

/// Temporal localisation: every maneuver of the composite mission, each with when it was flown.
fn localisation_row(m: &Mission, lm: &Landmark, cfg: &Stage3Config, rng: &mut SynthRng) -> Value {
    let fps = m.fps();
    let flown = m.labelled_segments();
    let mut labels: Vec<String> = flown.iter().map(|(l, _)| l.clone()).collect();
    let mut pool: Vec<Maneuver> = Maneuver::ALL.into_iter().collect();
    rng.shuffle(&mut pool);
    for x in pool.into_iter().cycle().take(40) {
        if labels.len() >= 8 {
            break;
        }
        let camera = if rng.chance(0.5) { CameraMode::LandmarkTrack } else { CameraMode::LookForward };
        let label = Element::drawn(x, camera, rng).label();
        if !labels.contains(&label) {
            labels.push(label);
        }
    }
    rng.shuffle(&mut labels);
    let options: Vec<Value> = letters(labels.len()).zip(&labels).map(|(id, l)| json!({"option_id": id, "label": l})).collect();
    let items: Vec<Value> = options
        .iter()
        .filter_map(|o| {
            let (_, ranges) = flown.iter().find(|(l, _)| o["label"] == json!(l))?;
            Some(json!({"option_id": o["option_id"], "label": o["label"], "intervals_sec": secs(ranges, fps)}))
        })
        .collect();
    let mut row = base_row(m, lm, cfg, "self_element_instance_recognition", FAMILY_LOCALISATION);
    row.insert("multi_select".into(), json!(true));
    row.insert("include_temporal_localization".into(), json!(true));
    row.insert("answer_option_ids".into(), json!(items.iter().map(|i| i["option_id"].clone()).collect::<Vec<_>>()));
    row.insert("answer_items".into(), json!(items));
    row.insert("choice_options".into(), json!(options));
    let user = format!(
        "The video was recorded by your camera during an inspection flight around {} ({}). Select every maneuver you performed and give, for each, the time intervals in seconds when you performed it.\nOptions:\n{}",
        lm.description,
        lm.category.name().replace('_', " "),
        options_block(&options)
    );
    finish(row, user, CHOICE_SYSTEM)
}

/// Landmark visibility: how many separate times the landmark is in view, and when.
fn visibility_row(m: &Mission, lm: &Landmark, cfg: &Stage3Config, family: &str) -> Value {
    let runs = m.visible_runs();
    let mut row = base_row(m, lm, cfg, "env_visibility_reasoning", family);
    row.insert("gold_environment_answer".into(), json!({"visible_count": runs.len(), "visible_intervals_sec": secs(&runs, m.fps())}));
    let ask = if family == FAMILY_COUNTING {
        "How many separate times does it come into view, and in which time intervals (seconds) is it visible?"
    } else {
        "In which time intervals (seconds) is it visible, and how many separate intervals are there?"
    };
    let user = format!(
        "Watch the flight video. The landmark of interest is {} ({}). {ask} A landmark counts as visible when enough of it is unoccluded in the frame.",
        lm.description,
        lm.category.name().replace('_', " ")
    );
    finish(row, user, COUNT_SYSTEM)
}
