//! From maneuvers to a flown trajectory: linear resampling at the flight speed, moving-average
//! smoothing that keeps both endpoints (camera forward vectors smoothed on their own, with a
//! wider window), screening against the obstacle cloud and the landmarks' keep-out boxes,
//! repair, and the optional kinematic check.
//!
//! Defaults follow UAV-DualCog: 10 FPS, pose window 7, camera window 15, 2.0 m clearance,
//! keep-out boxes grown by max(0.2, 0.25·clearance) sideways and max(0.1, 0.15·clearance)
//! vertically, 8 repair attempts lifting at most 2 m a step and 24 m in all, and limits of
//! 8 m/s, 10 m/s², 120°/s when the kinematic check is on. As there, the check is off by
//! default and, when on, records whether each mission is feasible rather than rejecting it:
//! the library's 15–25 m/s maneuvers are faster than those limits.

use std::fmt;

use serde::Serialize;

use super::cloud::VoxelGrid;
use super::geom::{V3, forward_of, heading, round, wrap_deg, yaw_pitch};
use super::instances::OrientedBox;
use super::maneuvers::{CameraMode, Element, straight};

/// Settings of trajectory generation and screening.
#[derive(Debug, Clone, PartialEq)]
pub struct TrajectoryConfig {
    pub fps: f64,
    pub pose_window: usize,
    pub forward_window: usize,
    pub clearance_m: f64,
    pub repair_attempts: usize,
    pub lift_step_m: f64,
    pub max_lift_m: f64,
    /// `Some` turns the kinematic check on.
    pub kinematics: Option<KinematicLimits>,
}

impl Default for TrajectoryConfig {
    fn default() -> Self {
        TrajectoryConfig {
            fps: 10.0,
            pose_window: 7,
            forward_window: 15,
            clearance_m: 2.0,
            repair_attempts: 8,
            lift_step_m: 2.0,
            max_lift_m: 24.0,
            kinematics: None,
        }
    }
}

impl TrajectoryConfig {
    pub fn keepout_margins(&self) -> (f64, f64) {
        ((0.25 * self.clearance_m).max(0.2), (0.15 * self.clearance_m).max(0.1))
    }
}

/// Speed, acceleration and yaw-rate limits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KinematicLimits {
    pub max_speed: f64,
    pub max_accel: f64,
    pub max_yaw_rate_deg: f64,
}

impl Default for KinematicLimits {
    fn default() -> Self {
        KinematicLimits { max_speed: 8.0, max_accel: 10.0, max_yaw_rate_deg: 120.0 }
    }
}

/// One camera pose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Frame {
    pub pos: V3,
    /// Unit optical axis.
    pub forward: V3,
}

impl Frame {
    pub fn yaw_pitch(&self) -> (f64, f64) {
        yaw_pitch(self.forward)
    }
}

/// Frames `start..=end` fly element `element`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Segment {
    pub element: usize,
    pub start: usize,
    pub end: usize,
}

/// A flown mission at a fixed frame rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Trajectory {
    pub fps: f64,
    pub frames: Vec<Frame>,
    pub segments: Vec<Segment>,
}

impl Trajectory {
    /// `{"fps", "frames": [{"t", "x", "y", "z", "yaw", "pitch"}]}`: metres and degrees.
    pub fn to_json(&self) -> serde_json::Value {
        let frames: Vec<serde_json::Value> = self
            .frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let (yaw, pitch) = f.yaw_pitch();
                serde_json::json!({
                    "t": round(i as f64 / self.fps, 4),
                    "x": round(f.pos.x, 4), "y": round(f.pos.y, 4), "z": round(f.pos.z, 4),
                    "yaw": round(yaw, 4), "pitch": round(pitch, 4),
                })
            })
            .collect();
        serde_json::json!({ "fps": self.fps, "frames": frames })
    }

    /// Reads the JSON of [`Trajectory::to_json`] (segments are not part of it).
    pub fn from_json(v: &serde_json::Value) -> Result<Trajectory, String> {
        let fps = v.get("fps").and_then(serde_json::Value::as_f64).ok_or("missing `fps`")?;
        let frames = v.get("frames").and_then(serde_json::Value::as_array).ok_or("missing `frames`")?;
        let frames = frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let n = |k: &str| f.get(k).and_then(serde_json::Value::as_f64).ok_or(format!("frame {i}: missing `{k}`"));
                Ok(Frame { pos: V3::new(n("x")?, n("y")?, n("z")?), forward: forward_of(n("yaw")?, n("pitch")?) })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Trajectory { fps, frames, segments: Vec::new() })
    }
}

/// Points `spacing` apart along the polyline's arc length, first and last kept.
pub fn resample(points: &[V3], spacing: f64) -> Vec<V3> {
    let Some(&first) = points.first() else {
        return Vec::new();
    };
    let mut cumulative = vec![0.0];
    for w in points.windows(2) {
        cumulative.push(cumulative[cumulative.len() - 1] + (w[1] - w[0]).length());
    }
    let total = cumulative[cumulative.len() - 1];
    if total < 1e-9 {
        return vec![first];
    }
    let n = ((total / spacing).round() as usize).max(1);
    let mut out = Vec::with_capacity(n + 1);
    let mut seg = 0;
    for i in 0..=n {
        let s = total * i as f64 / n as f64;
        while seg + 2 < cumulative.len() && cumulative[seg + 1] < s {
            seg += 1;
        }
        let len = cumulative[seg + 1] - cumulative[seg];
        let t = if len > 0.0 { ((s - cumulative[seg]) / len).clamp(0.0, 1.0) } else { 0.0 };
        out.push(points[seg].lerp(points[seg + 1], t));
    }
    out
}

/// Centred moving average over `window` points; the window shrinks symmetrically near the
/// ends, so the first and last points stay where they are.
pub fn smooth(points: &[V3], window: usize) -> Vec<V3> {
    let half = window / 2;
    (0..points.len())
        .map(|i| {
            let h = half.min(i).min(points.len() - 1 - i);
            let sum = points[i - h..=i + h].iter().fold(V3::default(), |a, &p| a + p);
            sum * (1.0 / (2 * h + 1) as f64)
        })
        .collect()
}

/// [`smooth`] for unit directions, renormalised (a zero mean keeps the original).
pub fn smooth_directions(dirs: &[V3], window: usize) -> Vec<V3> {
    smooth(dirs, window).into_iter().zip(dirs).map(|(m, &d)| m.unit().unwrap_or(d)).collect()
}

/// Flies `elements` in order from `start`: each maneuver's path (joined to the previous end by
/// a straight leg when it starts elsewhere), resampled at its speed, with the camera of its
/// mode, a hover where it has one, then smoothed.
pub fn compose(elements: &[Element], target: &OrientedBox, start: V3, cfg: &TrajectoryConfig) -> Trajectory {
    let mut positions: Vec<V3> = Vec::new();
    let mut forwards: Vec<V3> = Vec::new();
    let mut segments = Vec::with_capacity(elements.len());
    let mut here = start;
    let mut last_heading = heading(0.0);
    for (k, e) in elements.iter().enumerate() {
        let path = e.path(target, here);
        let mut points = Vec::new();
        if k > 0 && (path.points[0] - here).length() > 0.5 {
            points.extend(straight(here, path.points[0]));
            points.pop();
        }
        points.extend(path.points.iter().copied());
        let mut flown = resample(&points, e.speed() / cfg.fps);
        let hover = (path.hover_sec * cfg.fps).round() as usize;
        if let Some(&end) = flown.last() {
            flown.extend(std::iter::repeat_n(end, hover));
        }
        // Frames already flown end where this element starts; do not repeat that pose.
        let skip = usize::from(!positions.is_empty());
        let begin = positions.len().saturating_sub(skip);
        for i in skip..flown.len() {
            let p = flown[i];
            let travel = flown.get(i + 1).map(|&q| q - p).or_else(|| i.checked_sub(1).map(|j| p - flown[j]));
            if let Some(h) = travel.and_then(|t| V3::new(t.x, t.y, 0.0).unit()) {
                last_heading = h;
            }
            let forward = match e.camera {
                CameraMode::LandmarkTrack => (target.center - p).unit().unwrap_or(last_heading),
                CameraMode::LookForward => {
                    let (yaw, _) = yaw_pitch(last_heading);
                    forward_of(yaw, e.get("gaze_pitch_deg"))
                }
            };
            positions.push(p);
            forwards.push(forward);
        }
        segments.push(Segment { element: k, start: begin, end: positions.len() - 1 });
        here = *positions.last().unwrap_or(&here);
    }
    let frames = smooth(&positions, cfg.pose_window)
        .into_iter()
        .zip(smooth_directions(&forwards, cfg.forward_window))
        .map(|(pos, forward)| Frame { pos, forward })
        .collect();
    Trajectory { fps: cfg.fps, frames, segments }
}

/// What the obstacle screening checks against.
pub struct Obstacles<'a> {
    pub grid: &'a VoxelGrid,
    /// Every landmark's box, by id.
    pub keepouts: Vec<(&'a str, OrientedBox)>,
}

/// Why a trajectory is unsafe.
#[derive(Debug, Clone, PartialEq)]
pub enum Violation {
    Cloud { frame: usize, at: V3, distance: f64, clearance: f64 },
    KeepOut { frame: usize, at: V3, landmark: String },
    Speed { frame: usize, value: f64, limit: f64 },
    Accel { frame: usize, value: f64, limit: f64 },
    YawRate { frame: usize, value: f64, limit: f64 },
}

impl Violation {
    pub fn frame(&self) -> usize {
        match self {
            Violation::Cloud { frame, .. }
            | Violation::KeepOut { frame, .. }
            | Violation::Speed { frame, .. }
            | Violation::Accel { frame, .. }
            | Violation::YawRate { frame, .. } => *frame,
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Cloud { frame, at, distance, clearance } => write!(
                f,
                "frame {frame} at ({:.1}, {:.1}, {:.1}) passes {distance:.2} m from the point cloud (clearance {clearance} m)",
                at.x, at.y, at.z
            ),
            Violation::KeepOut { frame, at, landmark } => {
                write!(f, "frame {frame} at ({:.1}, {:.1}, {:.1}) enters the keep-out box of `{landmark}`", at.x, at.y, at.z)
            }
            Violation::Speed { frame, value, limit } => {
                write!(f, "frame {frame}: speed {value:.1} m/s over {limit} m/s")
            }
            Violation::Accel { frame, value, limit } => {
                write!(f, "frame {frame}: acceleration {value:.1} m/s² over {limit} m/s²")
            }
            Violation::YawRate { frame, value, limit } => {
                write!(f, "frame {frame}: yaw rate {value:.1}°/s over {limit}°/s")
            }
        }
    }
}

/// The first place the trajectory comes closer than the clearance to a cloud point or enters
/// a grown keep-out box, checking every frame and points at most 0.5 m apart between frames.
pub fn screen(traj: &Trajectory, obstacles: &Obstacles<'_>, cfg: &TrajectoryConfig) -> Option<Violation> {
    let (mxy, mz) = cfg.keepout_margins();
    let check = |frame: usize, at: V3| -> Option<Violation> {
        if let Some((_, distance)) = obstacles.grid.nearest_within(at, cfg.clearance_m) {
            return Some(Violation::Cloud { frame, at, distance, clearance: cfg.clearance_m });
        }
        obstacles.keepouts.iter().find(|(_, b)| b.contains_expanded(at, mxy, mz)).map(|(id, _)| Violation::KeepOut {
            frame,
            at,
            landmark: id.to_string(),
        })
    };
    for (i, f) in traj.frames.iter().enumerate() {
        if let Some(v) = check(i, f.pos) {
            return Some(v);
        }
        if let Some(next) = traj.frames.get(i + 1) {
            let n = ((next.pos - f.pos).length() / 0.5).ceil() as usize;
            for k in 1..n {
                if let Some(v) = check(i, f.pos.lerp(next.pos, k as f64 / n as f64)) {
                    return Some(v);
                }
            }
        }
    }
    None
}

/// The first frame over a speed, acceleration or yaw-rate limit.
pub fn check_kinematics(traj: &Trajectory, limits: &KinematicLimits) -> Option<Violation> {
    let fps = traj.fps;
    let velocity: Vec<V3> = traj.frames.windows(2).map(|w| (w[1].pos - w[0].pos) * fps).collect();
    for (i, v) in velocity.iter().enumerate() {
        let value = v.length();
        if value > limits.max_speed + 1e-9 {
            return Some(Violation::Speed { frame: i + 1, value, limit: limits.max_speed });
        }
        if i > 0 {
            let value = (*v - velocity[i - 1]).length() * fps;
            if value > limits.max_accel + 1e-9 {
                return Some(Violation::Accel { frame: i + 1, value, limit: limits.max_accel });
            }
        }
        let (ya, _) = traj.frames[i].yaw_pitch();
        let (yb, _) = traj.frames[i + 1].yaw_pitch();
        let value = wrap_deg(yb - ya).abs() * fps;
        if value > limits.max_yaw_rate_deg + 1e-9 {
            return Some(Violation::YawRate { frame: i + 1, value, limit: limits.max_yaw_rate_deg });
        }
    }
    None
}

/// The kinematic check's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Kinematics {
    NotChecked,
    Feasible,
    /// The first limit broken.
    Infeasible(String),
}

/// A trajectory that passed screening, the repairs it took, and its kinematic verdict.
#[derive(Debug, Clone)]
pub struct Planned {
    pub elements: Vec<Element>,
    pub trajectory: Trajectory,
    pub repairs: Vec<String>,
    pub kinematics: Kinematics,
}

/// Composes, screens and repairs: each failure widens or lifts the element flying the
/// offending frame, up to `cfg.repair_attempts` times; then the mission is rejected with the
/// last violation as its reason. A passing trajectory gets the kinematic check when it is on.
pub fn plan(
    mut elements: Vec<Element>,
    target: &OrientedBox,
    start: V3,
    obstacles: &Obstacles<'_>,
    cfg: &TrajectoryConfig,
) -> Result<Planned, String> {
    let mut repairs = Vec::new();
    let mut attempt = 0;
    loop {
        let trajectory = compose(&elements, target, start, cfg);
        let Some(violation) = screen(&trajectory, obstacles, cfg) else {
            let kinematics = match &cfg.kinematics {
                None => Kinematics::NotChecked,
                Some(limits) => match check_kinematics(&trajectory, limits) {
                    None => Kinematics::Feasible,
                    Some(v) => Kinematics::Infeasible(v.to_string()),
                },
            };
            return Ok(Planned { elements, trajectory, repairs, kinematics });
        };
        let culprit = trajectory.segments.iter().find(|s| s.start <= violation.frame() && violation.frame() <= s.end).map_or(0, |s| s.element);
        let changed = (attempt < cfg.repair_attempts).then(|| elements[culprit].repair(attempt, cfg.lift_step_m, cfg.max_lift_m)).flatten();
        match changed {
            Some(what) => repairs.push(format!("{}: {what}", elements[culprit].maneuver.key())),
            None => {
                return Err(format!("{} (in {}) after {} repairs", violation, elements[culprit].maneuver.key(), repairs.len()));
            }
        }
        attempt += 1;
    }
}
