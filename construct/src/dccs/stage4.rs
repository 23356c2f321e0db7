//! Stage 4: image tasks. Per landmark, eight orbit views (front, front-right, right,
//! back-right, back, back-left, left, front-left: where the camera stands, clockwise from the
//! landmark's front, the +x axis of its box) and four task families at two difficulties
//! (`4way`, `8way`), in UAV-DualCog's sample schema (`stage4_qa_generate_and_eval.py`):
//!
//! | `task_type` | group | asks |
//! |---|---|---|
//! | `self_where` | agent-state | landmark-relative position reasoning: from which side of the landmark is image 2 taken |
//! | `self_what` | agent-state | action-conditioned future observation: which of four images follows an orbit of N° |
//! | `env_where` | world-state | self-relative position reasoning: where is the landmark relative to my heading |
//! | `env_how` | world-state | goal-conditioned action decision: which way to fly to get closer |
//!
//! `self_where` and `self_what` share their reference and query views, `env_where` and
//! `env_how` their reference and observation. Every view's pose (distance, elevation, a small
//! yaw jitter) is drawn again until the whole box projects inside the frame with a box of at
//! least 4 pixels and the landmark passes the visibility test; the observation's yaw offset
//! (30°, 0° or −30°) is adjusted in the source's steps until the box is fully in view.

use std::collections::BTreeMap;
use std::path::Path;

use motionvl_util::files::write_json_atomic;
use serde_json::{Value, json};

use super::cloud::PointCloud;
use super::error::DccsError;
use super::geom::{V3, forward_of, heading, round, yaw_pitch};
use super::instances::Landmark;
use super::stage3::{RENDER_FORMAT, Rejection, fnv};
use super::visibility::{Camera, VisibilityConfig, frame_visibility, possible_occluders};
use crate::synth::rng::{SynthRng, derive_seed};

/// The eight orbit views in the source's order, with the camera's angle clockwise from the
/// landmark's front.
pub const VIEWS: [(&str, f64); 8] = [
    ("Front", 0.0),
    ("Front-Right", 45.0),
    ("Right", 90.0),
    ("Back-Right", 135.0),
    ("Back", 180.0),
    ("Back-Left", 225.0),
    ("Left", 270.0),
    ("Front-Left", 315.0),
];

const LABELS_4WAY: [&str; 4] = ["Front", "Right", "Back", "Left"];
const ENV_LABELS_4WAY: [&str; 4] = ["Left", "Front", "Right", "Back"];
const YAW_OFFSETS: [f64; 9] = [0.0, -8.0, 8.0, -15.0, 15.0, -22.0, 22.0, -30.0, 30.0];

/// Settings of `construct dccs-image`.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage4Config {
    pub seed: u64,
    pub scene_id: String,
    /// Image size (4:3) and field of view of the assets, and the visibility thresholds.
    pub visibility: VisibilityConfig,
    /// Pose draws per view before the landmark is given up.
    pub pose_attempts: usize,
    pub jpeg_quality: u8,
    pub scene: Value,
}

impl Default for Stage4Config {
    fn default() -> Self {
        Stage4Config {
            seed: 0,
            scene_id: "scene".into(),
            visibility: VisibilityConfig { width: 4096, height: 3072, ..VisibilityConfig::default() },
            pose_attempts: 32,
            jpeg_quality: 80,
            scene: Value::Null,
        }
    }
}

impl Stage4Config {
    pub fn validate(&self) -> Result<(), DccsError> {
        let v = &self.visibility;
        if v.width * 3 != v.height * 4 || v.width == 0 || !v.width.is_multiple_of(2) || !v.height.is_multiple_of(2) {
            return Err(DccsError::Setting {
                key: "visibility.width/height",
                problem: format!("Stage 4 images are 4:3 with even sides; {}x{} is not", v.width, v.height),
            });
        }
        Ok(())
    }
}

/// A camera pose with the landmark's box in it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct View {
    pub eye: V3,
    pub yaw_deg: f64,
    pub pitch_deg: f64,
    pub bbox: [f64; 4],
}

impl View {
    fn camera(&self, v: &VisibilityConfig) -> Camera {
        v.camera(self.eye, forward_of(self.yaw_deg, self.pitch_deg))
    }
}

fn check_view(eye: V3, yaw: f64, pitch: f64, lm: &Landmark, cloud: &PointCloud, v: &VisibilityConfig) -> Option<View> {
    let camera = v.camera(eye, forward_of(yaw, pitch));
    let bbox = camera.full_box(&lm.bbox.corners(), v.min_box_px)?;
    frame_visibility(&camera, &lm.support_points, &cloud.points, v).bbox?;
    Some(View { eye, yaw_deg: yaw, pitch_deg: pitch, bbox })
}

/// The pose of orbit view `angle` (degrees clockwise from the front), drawn until it is valid.
fn orbit_view(lm: &Landmark, angle: f64, cloud: &PointCloud, cfg: &Stage4Config, rng: &mut SynthRng) -> Option<View> {
    let v = &cfg.visibility;
    let b = &lm.bbox;
    let fit = fit_distance(lm, cfg);
    let outward = heading(b.yaw_deg - angle);
    (0..cfg.pose_attempts).find_map(|_| {
        let distance = fit * rng.range(1.15, MAX_FIT);
        let elevation = rng.range(15.0, 40.0).to_radians();
        let eye = b.center + outward * (distance * elevation.cos()) + V3::new(0.0, 0.0, distance * elevation.sin());
        let (yaw, pitch) = yaw_pitch(b.center - eye);
        check_view(eye, yaw + rng.range(-5.0, 5.0), pitch, lm, cloud, v)
    })
}

/// Views stand at most this many fit distances from the landmark's centre.
const MAX_FIT: f64 = 1.8;

/// The distance at which the box's bounding sphere just fills the vertical field of view.
fn fit_distance(lm: &Landmark, cfg: &Stage4Config) -> f64 {
    let v = &cfg.visibility;
    let half_vfov = ((v.height as f64 / v.width as f64) * (v.hfov_deg.to_radians() / 2.0).tan()).atan();
    0.5 * lm.bbox.size.length() / half_vfov.sin()
}

/// A landmark with all eight of its views.
struct Prepared<'a> {
    lm: &'a Landmark,
    views: Vec<View>,
}

/// Direction of the landmark's centre from the camera, in the label space of `difficulty`.
fn direction_label(camera: &Camera, target: V3, eight: bool) -> &'static str {
    let (x, z) = camera.side(target);
    let centred = x.abs() <= (z.abs() * 0.001).max(1e-6);
    match (z >= 0.0, centred, eight, x > 0.0) {
        (true, true, _, _) => "Front",
        (false, true, _, _) => "Back",
        (_, false, false, true) => "Right",
        (_, false, false, false) => "Left",
        (true, false, true, true) => "Front-Right",
        (true, false, true, false) => "Front-Left",
        (false, false, true, true) => "Back-Right",
        (false, false, true, false) => "Back-Left",
    }
}

fn view_key(label: &str) -> String {
    label.to_ascii_lowercase().replace('-', "_")
}

/// Four options holding `gold`, drawn from `space`, shuffled; with the gold letter.
fn four_options(space: &[&str], gold: &str, rng: &mut SynthRng) -> (Vec<Value>, String) {
    let mut others: Vec<&str> = space.iter().copied().filter(|l| *l != gold).collect();
    rng.shuffle(&mut others);
    let mut picked: Vec<&str> = std::iter::once(gold).chain(others.into_iter().take(3)).collect();
    rng.shuffle(&mut picked);
    let options: Vec<Value> =
        picked.iter().enumerate().map(|(i, l)| json!({"option_id": char::from(b'A' + i as u8).to_string(), "label": l})).collect();
    let answer = picked.iter().position(|l| *l == gold).map_or('A', |i| char::from(b'A' + i as u8)).to_string();
    (options, answer)
}

/// What [`build_stage4`] produced.
#[derive(Debug, Clone)]
pub struct Stage4Output {
    pub samples: Vec<Value>,
    pub requests: Vec<Value>,
    pub rejections: Vec<Rejection>,
}

/// Builds every landmark's eight rows and the render requests of their assets; `progress` is
/// called once per landmark.
pub fn build_stage4(landmarks: &[Landmark], cloud: &PointCloud, cfg: &Stage4Config, progress: &(dyn Fn() + Sync)) -> Result<Stage4Output, DccsError> {
    use rayon::prelude::*;
    cfg.validate()?;
    // Each landmark's images are named after its id, which comes from the handoff file.
    for lm in landmarks {
        motionvl_util::confine::safe_name(&lm.id).map_err(|source| DccsError::Escape { whose: format!("landmark `{}`", lm.id), source })?;
    }
    let parts: Vec<LandmarkRows> = landmarks
        .par_iter()
        .map(|lm| {
            let part = landmark_rows(lm, cloud, cfg);
            progress();
            part
        })
        .collect();
    let mut out = Stage4Output { samples: Vec::new(), requests: Vec::new(), rejections: Vec::new() };
    let mut requested = BTreeMap::new();
    for (samples, requests, rejections) in parts {
        out.samples.extend(samples);
        requested.extend(requests);
        out.rejections.extend(rejections);
    }
    out.requests = requested.into_values().collect();
    Ok(out)
}

/// One landmark's rows, the requests of their images (by output path) and its rejections.
type LandmarkRows = (Vec<Value>, BTreeMap<String, Value>, Vec<Rejection>);

/// [`LandmarkRows`] of one landmark; a difficulty whose observation fails adds neither rows nor
/// requests.
fn landmark_rows(lm: &Landmark, cloud: &PointCloud, cfg: &Stage4Config) -> LandmarkRows {
    let mut rng = SynthRng::new(derive_seed(cfg.seed ^ 0x5354_4734, fnv(&lm.id)));
    let (mut samples, mut requested, mut rejections) = (Vec::new(), BTreeMap::new(), Vec::new());
    // Every eye lies within MAX_FIT fit distances of the centre: the corners of that cube bound them.
    let reach = MAX_FIT * fit_distance(lm, cfg);
    let corners: Vec<V3> = (0..8)
        .map(|i| {
            let pick = |bit: usize| if i & bit == 0 { -reach } else { reach };
            lm.bbox.center + V3::new(pick(1), pick(2), pick(4))
        })
        .collect();
    let cloud = &PointCloud { points: possible_occluders(&cloud.points, &corners, &lm.support_points, cfg.visibility.splat_radius_m) };
    let mut views = Vec::with_capacity(VIEWS.len());
    for (label, angle) in VIEWS {
        match orbit_view(lm, angle, cloud, cfg, &mut rng) {
            Some(v) => views.push(v),
            None => {
                rejections.push(Rejection {
                    landmark: lm.id.clone(),
                    mission: format!("stage4 view {label}"),
                    reason: format!("no pose with the landmark fully visible in {} draws", cfg.pose_attempts),
                });
                return (samples, requested, rejections);
            }
        }
    }
    let prepared = Prepared { lm, views };
    for difficulty in ["4way", "8way"] {
        let mut these = BTreeMap::new();
        let self_rows = self_pair(&prepared, difficulty, cfg, &mut rng, &mut these);
        match env_pair(&prepared, difficulty, cloud, cfg, &mut rng, &mut these) {
            Some(env_rows) => {
                samples.extend(self_rows);
                samples.extend(env_rows);
                requested.extend(these);
            }
            None => rejections.push(Rejection {
                landmark: lm.id.clone(),
                mission: format!("stage4 {difficulty} observation"),
                reason: "no observation yaw keeps the whole box in view".into(),
            }),
        }
    }
    (samples, requested, rejections)
}

/// Adds (once) the request for the image of `view`, optionally with its box drawn; returns the
/// image's path relative to the manifest.
fn request(requested: &mut BTreeMap<String, Value>, cfg: &Stage4Config, path: String, view: &View, overlay: bool) -> String {
    requested.entry(path.clone()).or_insert_with(|| {
        json!({
            "request_id": path.trim_end_matches(".jpg").replace('/', "_"),
            "kind": "image",
            "output_path": path,
            "eye": [round(view.eye.x, 4), round(view.eye.y, 4), round(view.eye.z, 4)],
            "yaw_deg": round(view.yaw_deg, 4),
            "pitch_deg": round(view.pitch_deg, 4),
            "jpeg_quality": cfg.jpeg_quality,
            "bbox_xyxy_norm": view.bbox.map(|c| round(c, 5)),
            "overlay_bbox_xyxy_norm": overlay.then(|| view.bbox.map(|c| round(c, 5))),
        })
    });
    path
}

fn view_image(p: &Prepared<'_>, i: usize, cfg: &Stage4Config, requested: &mut BTreeMap<String, Value>, overlay: bool) -> String {
    let suffix = if overlay { "_bbox" } else { "" };
    let path = format!("images/{}/{}{suffix}.jpg", p.lm.id, view_key(VIEWS[i].0));
    request(requested, cfg, path, &p.views[i], overlay)
}

fn bbox_json(b: [f64; 4]) -> Value {
    json!(b.map(|c| round(c, 5)))
}

fn shared(p: &Prepared<'_>, cfg: &Stage4Config, group: &str, difficulty: &str) -> BTreeMap<String, Value> {
    let lm = p.lm;
    [
        ("scene_id", json!(cfg.scene_id)),
        ("landmark_id", json!(lm.id)),
        ("landmark_category", json!(lm.category.name())),
        ("landmark_subcategory", json!(lm.subcategory)),
        ("landmark_description", json!(lm.description)),
        ("task_family", json!("qa")),
        ("task_group", json!(group)),
        ("difficulty", json!(difficulty)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn with_prompt(mut row: BTreeMap<String, Value>, user: String, system: &str) -> Value {
    row.insert("prompt_text".into(), json!(user));
    row.insert("user_prompt".into(), json!(user));
    row.insert("system_prompt".into(), json!(system));
    json!(row)
}

fn options_text(options: &[Value]) -> String {
    options
        .iter()
        .map(|o| format!("{}. {}", o["option_id"].as_str().unwrap_or_default(), o["label"].as_str().unwrap_or_default()))
        .collect::<Vec<_>>()
        .join("\n")
}

const SYSTEM: &str = "You are a UAV agent. Return exactly one valid JSON object and nothing else, following this schema: {\"answer_option_id\":\"A\",\"bbox_xyxy_norm\":[0.1,0.2,0.3,0.4]} (the landmark's normalised box in the image you answer about).";

/// `self_where` and `self_what`, sharing the reference view R and the query view Q.
fn self_pair(p: &Prepared<'_>, difficulty: &str, cfg: &Stage4Config, rng: &mut SynthRng, requested: &mut BTreeMap<String, Value>) -> Vec<Value> {
    let space: Vec<&str> = if difficulty == "4way" { LABELS_4WAY.to_vec() } else { VIEWS.map(|v| v.0).to_vec() };
    let index = |l: &str| VIEWS.iter().position(|v| v.0 == l).unwrap_or(0);
    let r = index(space[rng.index(space.len())]);
    let rest: Vec<&str> = space.iter().copied().filter(|l| *l != VIEWS[r].0).collect();
    let q = index(rest[rng.index(rest.len())]);
    let (rl, ql) = (VIEWS[r].0, VIEWS[q].0);
    let reference = view_image(p, r, cfg, requested, false);
    let reference_bbox = view_image(p, r, cfg, requested, true);
    let query = view_image(p, q, cfg, requested, false);
    let prefix = format!("{}_{}_self_shared_{difficulty}", cfg.scene_id, p.lm.id);
    let mut base = shared(p, cfg, "self-aware", difficulty);
    for (k, v) in [
        ("reference_image", json!(reference)),
        ("reference_image_with_bbox", json!(reference_bbox)),
        ("reference_bbox_xyxy_norm", bbox_json(p.views[r].bbox)),
        ("reference_object_view", json!(rl)),
        ("reference_view", json!(rl)),
        ("answer_bbox_xyxy_norm", bbox_json(p.views[q].bbox)),
        ("view_definition", json!("Self-Aware")),
        ("metadata", json!({"reference_label": rl, "query_label": ql})),
    ] {
        base.insert(k.into(), v);
    }

    let (options, answer) = four_options(&space, ql, rng);
    let mut where_row = base.clone();
    where_row.insert("sample_id".into(), json!(format!("{prefix}_where")));
    where_row.insert("task_type".into(), json!("self_where"));
    where_row.insert("target_image".into(), json!(query));
    where_row.insert("label_options".into(), json!(options));
    where_row.insert("answer_option_id".into(), json!(answer));
    where_row.insert("answer_label".into(), json!(ql));
    let user = format!(
        "Image 1 shows the {rl} facade of {} in the landmark-centric coordinate frame. Based on that reference, what is your position relative to the landmark in image 2? Select one option and return the normalized bounding box of the landmark in image 2.\n\nOptions:\n{}",
        p.lm.description,
        options_text(&options)
    );
    let where_row = with_prompt(where_row, user, SYSTEM);

    // The orbit that carries the camera from R to Q, the shorter way round (clockwise on ties).
    let cw = (VIEWS[q].1 - VIEWS[r].1).rem_euclid(360.0);
    let (direction, delta) = if cw <= 180.0 { ("clockwise", cw) } else { ("counterclockwise", 360.0 - cw) };
    let action = format!("a {delta:.0}-degree {direction} turn around the landmark");
    let mut others: Vec<usize> = (0..VIEWS.len()).filter(|&i| i != r && i != q).collect();
    rng.shuffle(&mut others);
    let mut picked = vec![q];
    picked.extend(others.into_iter().take(3));
    rng.shuffle(&mut picked);
    let candidates: Vec<Value> = picked
        .iter()
        .enumerate()
        .map(|(k, &i)| {
            json!({
                "option_id": char::from(b'A' + k as u8).to_string(),
                "image": view_image(p, i, cfg, requested, false),
                "view_under_definition": VIEWS[i].0,
                "bbox_xyxy_norm": bbox_json(p.views[i].bbox),
            })
        })
        .collect();
    let answer = picked.iter().position(|&i| i == q).map_or('A', |k| char::from(b'A' + k as u8)).to_string();
    let mut what_row = base;
    what_row.insert("sample_id".into(), json!(format!("{prefix}_what")));
    what_row.insert("task_type".into(), json!("self_what"));
    what_row.insert("multi_select".into(), json!(false));
    what_row.insert("behavior_instance".into(), json!(action));
    what_row.insert("orbit_direction".into(), json!(if direction == "clockwise" { "cw" } else { "ccw" }));
    what_row.insert("orbit_delta_deg".into(), json!(delta));
    what_row.insert("candidates".into(), json!(candidates));
    what_row.insert("answer_option_id".into(), json!(answer));
    what_row.insert("answer_option_ids".into(), json!([answer]));
    what_row.insert("query_image".into(), json!(query));
    let user = format!(
        "Image 1 shows the {rl} facade of {} in the landmark-centric coordinate frame. Which candidate image is the resulting future view after taking {action}? Select one option and return the normalized bounding box of the landmark in the selected image.\n\nOptions:\nA. Image 2\nB. Image 3\nC. Image 4\nD. Image 5",
        p.lm.description
    );
    vec![where_row, with_prompt(what_row, user, SYSTEM)]
}

/// `env_where` and `env_how`, sharing the front reference view and one observation.
fn env_pair(
    p: &Prepared<'_>,
    difficulty: &str,
    cloud: &PointCloud,
    cfg: &Stage4Config,
    rng: &mut SynthRng,
    requested: &mut BTreeMap<String, Value>,
) -> Option<Vec<Value>> {
    let eight = difficulty == "8way";
    let space: Vec<&str> = if eight { VIEWS.map(|v| v.0).to_vec() } else { ENV_LABELS_4WAY.to_vec() };
    let views: Vec<usize> = if eight { (1..8).collect() } else { vec![2, 4, 6] };
    let from = views[rng.index(views.len())];
    let base_view = p.views[from];
    let wanted = [30.0, 0.0, -30.0][rng.index(3)];
    let observed = YAW_OFFSETS
        .iter()
        .find_map(|off| check_view(base_view.eye, base_view.yaw_deg + wanted + off, base_view.pitch_deg, p.lm, cloud, &cfg.visibility))?;
    let label = direction_label(&observed.camera(&cfg.visibility), p.lm.bbox.center, eight);
    let reference = view_image(p, 0, cfg, requested, false);
    let reference_bbox = view_image(p, 0, cfg, requested, true);
    let target = request(requested, cfg, format!("images/{}/env_{difficulty}.jpg", p.lm.id), &observed, false);
    let prefix = format!("{}_{}_env_shared_{difficulty}", cfg.scene_id, p.lm.id);
    let mut base = shared(p, cfg, "environment-aware", difficulty);
    for (k, v) in [
        ("view_definition", json!("Environment-Aware")),
        ("reference_image", json!(reference)),
        ("reference_image_with_bbox", json!(reference_bbox)),
        ("reference_bbox_xyxy_norm", bbox_json(p.views[0].bbox)),
        ("reference_object_view", json!("Front")),
        ("target_image", json!(target)),
        ("answer_bbox_xyxy_norm", bbox_json(observed.bbox)),
        ("answer_label", json!(label)),
        ("metadata", json!({"observed_from": VIEWS[from].0, "yaw_delta_deg": round(observed.yaw_deg - base_view.yaw_deg, 3)})),
    ] {
        base.insert(k.into(), v);
    }
    let ask = [
        ("where", "env_where", "In image 2, what is this landmark's position relative to your forward direction?"),
        ("how", "env_how", "In image 2, which direction should you fly to get closer to this landmark?"),
    ];
    Some(
        ask.iter()
            .map(|(suffix, task, question)| {
                let (options, answer) = four_options(&space, label, rng);
                let mut row = base.clone();
                row.insert("sample_id".into(), json!(format!("{prefix}_{suffix}")));
                row.insert("task_type".into(), json!(task));
                row.insert("label_options".into(), json!(options));
                row.insert("answer_option_id".into(), json!(answer));
                let user = format!(
                    "Image 1 shows the Front facade of {} in the landmark-centric coordinate frame. {question} Select one option and return the normalized bounding box of the landmark in image 2.\n\nOptions:\n{}",
                    p.lm.description,
                    options_text(&options)
                );
                with_prompt(row, user, SYSTEM)
            })
            .collect(),
    )
}

/// Writes `stage4.json`, `stage4_render_requests.json` and `stage4_rejections.json` under `out`.
pub fn write_stage4(out: &Path, built: &Stage4Output, cfg: &Stage4Config) -> Result<(), DccsError> {
    // Every image a request names stays under `out`, checked before the requests are written.
    for r in &built.requests {
        let id = r.get("request_id").and_then(Value::as_str).unwrap_or("?");
        let rel = r.get("output_path").and_then(Value::as_str).unwrap_or_default();
        motionvl_util::confine::confined_join(out, rel).map_err(|source| DccsError::Escape { whose: format!("request `{id}`"), source })?;
    }
    let v = &cfg.visibility;
    write_json_atomic(
        &out.join("stage4_render_requests.json"),
        &json!({
            "format": RENDER_FORMAT,
            "stage": 4,
            "scene_id": cfg.scene_id,
            "scene": cfg.scene,
            "camera": {"hfov_deg": v.hfov_deg, "width": v.width, "height": v.height, "roll_deg": 0.0},
            "requests": built.requests,
        }),
    )?;
    write_json_atomic(&out.join("stage4_rejections.json"), &json!({ "rejections": built.rejections }))?;
    Ok(write_json_atomic(
        &out.join("stage4.json"),
        &json!({
            "generation_id": format!("{}_qa_manifest_seed{}", cfg.scene_id, cfg.seed),
            "scene_id": cfg.scene_id,
            "seed": cfg.seed,
            "sample_count": built.samples.len(),
            "difficulties": ["4way", "8way"],
            "task_types": ["self_where", "self_what", "env_where", "env_how"],
            "samples": built.samples,
        }),
    )?)
}
