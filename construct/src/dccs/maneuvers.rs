//! UAV-DualCog's behaviour library: the 10 atomic maneuvers with their parameter defaults,
//! ranges and steps (`stage3_behavior_library` of its `common_stage_configs.yaml`), the 5
//! composite inspections, the two camera modes, and each maneuver's path around a landmark.
//!
//! A path is a polyline of positions; [`super::trajectory`] resamples it at the flight speed,
//! smooths it and adds the camera. Radii are measured from the landmark's footprint (the
//! vertical cylinder holding its box), heights from its top, bearings from where the drone is.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::geom::{V3, heading};
use super::instances::OrientedBox;
use crate::synth::rng::SynthRng;

/// Where the camera points while flying.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CameraMode {
    /// At the landmark's centre.
    LandmarkTrack,
    /// Along the direction of travel, at the maneuver's gaze pitch.
    LookForward,
}

impl CameraMode {
    pub fn key(self) -> &'static str {
        match self {
            CameraMode::LandmarkTrack => "landmark_track",
            CameraMode::LookForward => "look_forward",
        }
    }

    fn viewing_text(self) -> &'static str {
        match self {
            CameraMode::LandmarkTrack => "while keeping the landmark in view",
            CameraMode::LookForward => "while looking forward",
        }
    }
}

/// Sense of an orbit seen from above.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Cw,
    Ccw,
}

impl Direction {
    /// +1 counter-clockwise, −1 clockwise.
    pub fn sign(self) -> f64 {
        match self {
            Direction::Cw => -1.0,
            Direction::Ccw => 1.0,
        }
    }

    fn text(self) -> &'static str {
        match self {
            Direction::Cw => "clockwise",
            Direction::Ccw => "counterclockwise",
        }
    }
}

/// One numeric parameter: default, inclusive range, grid step, and the spread random draws use
/// around the default (UAV-DualCog's `auto_std`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParamSpec {
    pub name: &'static str,
    pub default: f64,
    pub min: f64,
    pub max: f64,
    pub step: f64,
    pub spread: f64,
}

const fn p(name: &'static str, default: f64, min: f64, max: f64, step: f64, spread: f64) -> ParamSpec {
    ParamSpec { name, default, min, max, step, spread }
}

impl ParamSpec {
    /// `v` clamped to the range and snapped to the grid from `min`.
    pub fn snap(&self, v: f64) -> f64 {
        let last = ((self.max - self.min) / self.step + 1e-9).floor();
        let k = ((v.clamp(self.min, self.max) - self.min) / self.step).round().min(last);
        self.min + k * self.step
    }

    /// A draw around the default with the spread, on the grid.
    pub fn draw(&self, rng: &mut SynthRng) -> f64 {
        self.snap(self.default + self.spread * normal(rng))
    }
}

/// A standard normal draw (Box–Muller).
pub(crate) fn normal(rng: &mut SynthRng) -> f64 {
    let u = rng.unit().max(1e-12);
    let v = rng.unit();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// The ten atomic maneuvers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Maneuver {
    GradualApproach,
    GradualDepart,
    CircularOrbit,
    #[serde(rename = "figure8_orbit")]
    Figure8Orbit,
    SpiralOrbit,
    SquareOrbit,
    TriangularOrbit,
    SurfaceMapping,
    Comet,
    SkyRise,
}

const SPEED: ParamSpec = p("speed_mps", 20.0, 15.0, 25.0, 1.0, 5.0);

impl Maneuver {
    pub const ALL: [Maneuver; 10] = [
        Maneuver::GradualApproach,
        Maneuver::GradualDepart,
        Maneuver::CircularOrbit,
        Maneuver::Figure8Orbit,
        Maneuver::SpiralOrbit,
        Maneuver::SquareOrbit,
        Maneuver::TriangularOrbit,
        Maneuver::SurfaceMapping,
        Maneuver::Comet,
        Maneuver::SkyRise,
    ];

    /// UAV-DualCog's `element_class`.
    pub fn key(self) -> &'static str {
        match self {
            Maneuver::GradualApproach => "gradual_approach",
            Maneuver::GradualDepart => "gradual_depart",
            Maneuver::CircularOrbit => "circular_orbit",
            Maneuver::Figure8Orbit => "figure8_orbit",
            Maneuver::SpiralOrbit => "spiral_orbit",
            Maneuver::SquareOrbit => "square_orbit",
            Maneuver::TriangularOrbit => "triangular_orbit",
            Maneuver::SurfaceMapping => "surface_mapping",
            Maneuver::Comet => "comet",
            Maneuver::SkyRise => "sky_rise",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Maneuver::GradualApproach => "gradual approach",
            Maneuver::GradualDepart => "gradual depart",
            Maneuver::CircularOrbit => "circular orbit",
            Maneuver::Figure8Orbit => "figure-eight orbit",
            Maneuver::SpiralOrbit => "spiral orbit",
            Maneuver::SquareOrbit => "square orbit",
            Maneuver::TriangularOrbit => "triangular orbit",
            Maneuver::SurfaceMapping => "surface mapping",
            Maneuver::Comet => "comet trajectory",
            Maneuver::SkyRise => "sky rise",
        }
    }

    /// The numeric parameters (besides direction and camera mode), as in the source library.
    pub fn params(self) -> &'static [ParamSpec] {
        match self {
            Maneuver::GradualApproach => {
                const {
                    &[
                        p("travel_distance_m", 40.0, 30.0, 120.0, 10.0, 10.0),
                        p("descent_m", 15.0, 5.0, 40.0, 5.0, 5.0),
                        p("yaw_offset_deg", 0.0, -35.0, 35.0, 5.0, 10.0),
                        SPEED,
                        p("gaze_pitch_deg", -12.0, -45.0, 0.0, 3.0, 6.0),
                    ]
                }
            }
            Maneuver::GradualDepart => {
                const {
                    &[
                        p("travel_distance_m", 40.0, 30.0, 120.0, 10.0, 10.0),
                        p("rise_m", 15.0, 5.0, 40.0, 5.0, 5.0),
                        p("yaw_offset_deg", 0.0, -35.0, 35.0, 5.0, 10.0),
                        SPEED,
                        p("gaze_pitch_deg", -10.0, -45.0, 0.0, 3.0, 6.0),
                    ]
                }
            }
            Maneuver::CircularOrbit => {
                const {
                    &[
                        p("extension_m", 12.0, 4.0, 36.0, 2.0, 4.0),
                        p("arc_deg", 180.0, 45.0, 720.0, 90.0, 45.0),
                        p("altitude_offset_m", 8.0, -20.0, 40.0, 2.0, 4.0),
                        SPEED,
                        p("gaze_pitch_deg", 0.0, 0.0, 0.0, 1.0, 0.0),
                    ]
                }
            }
            Maneuver::SpiralOrbit => {
                const {
                    &[
                        p("start_extension_m", 10.0, 4.0, 28.0, 2.0, 4.0),
                        p("end_extension_m", 24.0, 10.0, 52.0, 2.0, 6.0),
                        p("arc_deg", 180.0, 90.0, 720.0, 90.0, 45.0),
                        p("rise_m", 24.0, 8.0, 80.0, 4.0, 8.0),
                        SPEED,
                        p("gaze_pitch_deg", -22.0, -75.0, 0.0, 3.0, 6.0),
                    ]
                }
            }
            Maneuver::SquareOrbit => {
                const {
                    &[
                        p("extension_m", 14.0, 6.0, 40.0, 2.0, 4.0),
                        p("edge_count", 4.0, 2.0, 8.0, 1.0, 1.0),
                        p("altitude_offset_m", 8.0, -20.0, 40.0, 2.0, 4.0),
                        SPEED,
                        p("gaze_pitch_deg", 0.0, 0.0, 0.0, 1.0, 0.0),
                    ]
                }
            }
            Maneuver::TriangularOrbit => {
                const {
                    &[
                        p("extension_m", 14.0, 6.0, 44.0, 2.0, 4.0),
                        p("edge_count", 3.0, 2.0, 6.0, 1.0, 1.0),
                        p("rotation_deg", 0.0, 0.0, 330.0, 30.0, 0.0),
                        p("altitude_offset_m", 8.0, -20.0, 40.0, 2.0, 4.0),
                        SPEED,
                        p("gaze_pitch_deg", 0.0, 0.0, 0.0, 1.0, 0.0),
                    ]
                }
            }
            Maneuver::Figure8Orbit => {
                const {
                    &[
                        p("extension_m", 12.0, 6.0, 36.0, 2.0, 4.0),
                        p("cycles", 1.0, 1.0, 2.0, 1.0, 0.0),
                        p("altitude_offset_m", 8.0, -20.0, 40.0, 2.0, 4.0),
                        SPEED,
                        p("gaze_pitch_deg", 0.0, 0.0, 0.0, 1.0, 0.0),
                    ]
                }
            }
            Maneuver::SkyRise => {
                const {
                    &[
                        p("rise_m", 30.0, 30.0, 80.0, 5.0, 0.0),
                        p("top_extension_m", 2.0, 0.0, 8.0, 1.0, 0.0),
                        p("hover_sec", 4.0, 1.0, 12.0, 1.0, 0.0),
                        SPEED,
                        p("gaze_pitch_deg", -75.0, -90.0, -45.0, 5.0, 0.0),
                    ]
                }
            }
            Maneuver::Comet => {
                const {
                    &[
                        p("extension_m", 18.0, 10.0, 50.0, 2.0, 0.0),
                        p("semi_major_m", 60.0, 20.0, 140.0, 5.0, 0.0),
                        p("eccentricity", 0.55, 0.2, 0.9, 0.05, 0.0),
                        SPEED,
                        p("gaze_pitch_deg", -15.0, -60.0, 0.0, 3.0, 0.0),
                        p("arc_deg", 360.0, 180.0, 720.0, 15.0, 0.0),
                    ]
                }
            }
            Maneuver::SurfaceMapping => {
                const {
                    &[
                        p("extension_x_m", 10.0, 4.0, 28.0, 2.0, 0.0),
                        p("extension_y_m", 10.0, 4.0, 28.0, 2.0, 0.0),
                        p("lane_count", 6.0, 3.0, 12.0, 1.0, 0.0),
                        p("altitude_offset_m", 18.0, 10.0, 40.0, 2.0, 0.0),
                        SPEED,
                        p("gaze_pitch_deg", -85.0, -90.0, -60.0, 5.0, 0.0),
                    ]
                }
            }
        }
    }

    pub fn spec(self, name: &str) -> Option<&'static ParamSpec> {
        self.params().iter().find(|s| s.name == name)
    }

    /// The camera mode of the maneuver flown alone (UAV-DualCog's `atomic_*` sets).
    pub fn atomic_camera(self) -> CameraMode {
        match self {
            Maneuver::Figure8Orbit | Maneuver::SurfaceMapping => CameraMode::LookForward,
            _ => CameraMode::LandmarkTrack,
        }
    }

    fn has_direction(self) -> bool {
        matches!(self, Maneuver::CircularOrbit | Maneuver::SpiralOrbit | Maneuver::SquareOrbit | Maneuver::TriangularOrbit)
    }

    /// The parameters a failed clearance check widens, in the order tried: orbit radius or
    /// scan width. Maneuvers without one are repaired by height only.
    fn widen_params(self) -> &'static [&'static str] {
        match self {
            Maneuver::CircularOrbit | Maneuver::SquareOrbit | Maneuver::TriangularOrbit | Maneuver::Figure8Orbit | Maneuver::Comet => {
                &["extension_m"]
            }
            Maneuver::SpiralOrbit => &["start_extension_m", "end_extension_m"],
            Maneuver::SurfaceMapping => &["extension_x_m", "extension_y_m"],
            Maneuver::GradualApproach | Maneuver::GradualDepart | Maneuver::SkyRise => &[],
        }
    }
}

/// One maneuver of a mission with its drawn parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Element {
    pub maneuver: Maneuver,
    pub params: BTreeMap<String, f64>,
    pub direction: Direction,
    pub camera: CameraMode,
    /// Metres added to every height of the path by repairs.
    pub lift_m: f64,
}

/// A change to a parameter range for one step of a composite (UAV-DualCog's `auto_rules`).
#[derive(Debug, Clone, Copy)]
struct Rule {
    name: &'static str,
    min: f64,
    max: f64,
    step: f64,
    mean: f64,
    spread: f64,
}

impl Element {
    /// Every parameter at its default, the maneuver's own camera mode, clockwise.
    pub fn with_defaults(maneuver: Maneuver) -> Self {
        Element {
            maneuver,
            params: maneuver.params().iter().map(|s| (s.name.to_string(), s.default)).collect(),
            direction: Direction::Cw,
            camera: maneuver.atomic_camera(),
            lift_m: 0.0,
        }
    }

    /// Parameters drawn around their defaults on their grids, and a drawn direction.
    pub fn drawn(maneuver: Maneuver, camera: CameraMode, rng: &mut SynthRng) -> Self {
        let mut e = Element::with_defaults(maneuver);
        for s in maneuver.params() {
            e.params.insert(s.name.to_string(), s.draw(rng));
        }
        e.direction = if rng.chance(0.5) { Direction::Cw } else { Direction::Ccw };
        e.camera = camera;
        e
    }

    fn apply(&mut self, rule: &Rule, rng: &mut SynthRng) {
        let spec = ParamSpec { name: rule.name, default: rule.mean, min: rule.min, max: rule.max, step: rule.step, spread: rule.spread };
        self.params.insert(rule.name.to_string(), spec.draw(rng));
    }

    /// A parameter's value; every maneuver's parameters are filled at construction.
    pub fn get(&self, name: &str) -> f64 {
        self.params.get(name).copied().or_else(|| self.maneuver.spec(name).map(|s| s.default)).unwrap_or(0.0)
    }

    pub fn speed(&self) -> f64 {
        self.get("speed_mps")
    }

    /// One repair step after a clearance failure: widen the radius or scan width by its step
    /// while it can grow and `attempt` is even, else lift the path by `lift_step` metres.
    /// Returns what changed, or `None` when nothing is left to change.
    pub fn repair(&mut self, attempt: usize, lift_step: f64, max_lift: f64) -> Option<String> {
        if attempt.is_multiple_of(2) {
            let mut changed = Vec::new();
            for name in self.maneuver.widen_params() {
                let Some(spec) = self.maneuver.spec(name) else {
                    continue;
                };
                let old = self.get(name);
                let new = (old + spec.step).min(spec.max);
                if new > old {
                    self.params.insert(name.to_string(), new);
                    changed.push(format!("{name} {old} → {new}"));
                }
            }
            if !changed.is_empty() {
                return Some(changed.join(", "));
            }
        }
        if self.lift_m + lift_step <= max_lift + 1e-9 {
            self.lift_m += lift_step;
            return Some(format!("height +{lift_step} m (lift {} m)", self.lift_m));
        }
        None
    }

    /// The option text naming this maneuver, as UAV-DualCog's element labels do.
    pub fn label(&self) -> String {
        let m = self.maneuver;
        let mut parts = vec![m.name().to_string()];
        match m {
            Maneuver::GradualApproach | Maneuver::GradualDepart => parts.push(format!("of {} meters", self.get("travel_distance_m").round())),
            Maneuver::Figure8Orbit => {
                let c = self.get("cycles").round() as u32;
                parts.push(format!("over {c} full loop{}", if c > 1 { "s" } else { "" }))
            }
            Maneuver::SkyRise => parts.push(format!("rising {} meters", self.get("rise_m").round())),
            Maneuver::SurfaceMapping => parts.push(format!("using {} back-and-forth passes", self.get("lane_count").round())),
            _ => {}
        }
        if m.has_direction() {
            parts.push(self.direction.text().to_string());
        }
        match m {
            Maneuver::CircularOrbit | Maneuver::SpiralOrbit => parts.push(format!("{}°", self.get("arc_deg").round())),
            Maneuver::SquareOrbit | Maneuver::TriangularOrbit => parts.push(format!("with {} corners", self.get("edge_count").round())),
            _ => {}
        }
        parts.push(self.camera.viewing_text().to_string());
        parts.join(" ")
    }

    /// The path around `target`, starting from `from` (whose bearing and height seed the
    /// maneuver); at least two points, roughly a metre apart along curves.
    pub fn path(&self, target: &OrientedBox, from: V3) -> Path {
        let c = target.center;
        let r0 = target.footprint_radius();
        let top = target.top();
        let bearing = (from - c).y.atan2((from - c).x).to_degrees();
        let lift = V3::new(0.0, 0.0, self.lift_m);
        let sign = self.direction.sign();
        let ring = |radius: f64, deg: f64, z: f64| {
            let h = heading(deg) * radius;
            V3::new(c.x + h.x, c.y + h.y, z)
        };
        let mut hover_sec = 0.0;
        let points: Vec<V3> = match self.maneuver {
            Maneuver::GradualApproach | Maneuver::GradualDepart => {
                let toward = (c - from).horizontal_length() > 1e-6;
                let base = if toward { (c.y - from.y).atan2(c.x - from.x).to_degrees() } else { bearing + 180.0 };
                let approach = self.maneuver == Maneuver::GradualApproach;
                let dir = heading(if approach { base } else { base + 180.0 } + self.get("yaw_offset_deg"));
                let dz = if approach { -self.get("descent_m") } else { self.get("rise_m") };
                let end = from + dir * self.get("travel_distance_m") + V3::new(0.0, 0.0, dz);
                straight(from + lift, end + lift)
            }
            Maneuver::CircularOrbit => {
                let (r, z) = (r0 + self.get("extension_m"), top + self.get("altitude_offset_m") + self.lift_m);
                arc(|deg| ring(r, deg, z), bearing, sign * self.get("arc_deg"))
            }
            Maneuver::SpiralOrbit => {
                let (ra, rb) = (r0 + self.get("start_extension_m"), r0 + self.get("end_extension_m"));
                let z0 = from.z.max(top) + self.lift_m;
                let (sweep, rise) = (sign * self.get("arc_deg"), self.get("rise_m"));
                let n = (sweep.abs().ceil() as usize).max(2);
                (0..=n)
                    .map(|i| {
                        let t = i as f64 / n as f64;
                        ring(ra + (rb - ra) * t, bearing + sweep * t, z0 + rise * t)
                    })
                    .collect()
            }
            Maneuver::SquareOrbit | Maneuver::TriangularOrbit => {
                let square = self.maneuver == Maneuver::SquareOrbit;
                let inradius = r0 + self.get("extension_m");
                // Vertices of a square or triangle whose edges keep `inradius` from the centre.
                let (turn, circum) = if square { (90.0, inradius * 2f64.sqrt()) } else { (120.0, inradius * 2.0) };
                let start = bearing + if square { 0.0 } else { self.get("rotation_deg") };
                let z = top + self.get("altitude_offset_m") + self.lift_m;
                let edges = self.get("edge_count").round().max(1.0) as usize;
                let corners: Vec<V3> = (0..=edges).map(|k| ring(circum, start + sign * turn * k as f64, z)).collect();
                polyline(&corners)
            }
            Maneuver::Figure8Orbit => {
                // A lemniscate of Bernoulli whose lobe of half-width 0.35·a holds the landmark;
                // it starts at the crossing point, on the drone's side of the landmark.
                let clearance = r0 + self.get("extension_m");
                let a = clearance / 0.35;
                let axis = heading(bearing + 180.0);
                let side = axis.rotate_z(90.0);
                let cross = c - axis * (0.6 * a);
                let z = top + self.get("altitude_offset_m") + self.lift_m;
                let cycles = self.get("cycles").round().max(1.0);
                let n = (720.0 * cycles) as usize;
                (0..=n)
                    .map(|i| {
                        let t = std::f64::consts::FRAC_PI_2 + std::f64::consts::TAU * cycles * i as f64 / n as f64;
                        let d = 1.0 + t.sin().powi(2);
                        let (lx, ly) = (a * t.cos() / d, a * t.sin() * t.cos() / d);
                        let q = cross + axis * lx + side * ly;
                        V3::new(q.x, q.y, z)
                    })
                    .collect()
            }
            Maneuver::Comet => {
                // An ellipse with the landmark at a focus, periapsis on the drone's side and at
                // least the extension beyond the footprint.
                let e = self.get("eccentricity");
                let periapsis = r0 + self.get("extension_m");
                let a = self.get("semi_major_m").max(periapsis / (1.0 - e));
                let z = top + 8.0 + self.lift_m;
                let sweep = self.get("arc_deg");
                let n = (sweep.ceil() as usize).max(2);
                (0..=n)
                    .map(|i| {
                        let nu = -sweep / 2.0 + sweep * i as f64 / n as f64;
                        let r = a * (1.0 - e * e) / (1.0 + e * nu.to_radians().cos());
                        ring(r, bearing + nu, z)
                    })
                    .collect()
            }
            Maneuver::SkyRise => {
                // A vertical climb beside the footprint, then a hover.
                let dist = r0 + 4.0 + self.get("top_extension_m");
                let base = ring(dist, bearing, from.z.max(top * 0.5) + self.lift_m);
                hover_sec = self.get("hover_sec");
                straight(base, base + V3::new(0.0, 0.0, self.get("rise_m")))
            }
            Maneuver::SurfaceMapping => {
                // Back-and-forth lanes along the box's x axis over its grown footprint.
                let (hx, hy) = (target.size.x / 2.0 + self.get("extension_x_m"), target.size.y / 2.0 + self.get("extension_y_m"));
                let lanes = self.get("lane_count").round().max(2.0) as usize;
                let z = top + self.get("altitude_offset_m") + self.lift_m - c.z;
                let mut corners = Vec::with_capacity(2 * lanes);
                for k in 0..lanes {
                    let y = -hy + 2.0 * hy * k as f64 / (lanes - 1) as f64;
                    let (a, b) = if k.is_multiple_of(2) { (-hx, hx) } else { (hx, -hx) };
                    corners.push(target.world(V3::new(a, y, z)));
                    corners.push(target.world(V3::new(b, y, z)));
                }
                polyline(&corners)
            }
        };
        Path { points, hover_sec }
    }
}

/// A maneuver's positions, and how long the drone holds still at the end.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    pub points: Vec<V3>,
    pub hover_sec: f64,
}

pub(crate) fn straight(a: V3, b: V3) -> Vec<V3> {
    let n = ((b - a).length().ceil() as usize).max(1);
    (0..=n).map(|i| a.lerp(b, i as f64 / n as f64)).collect()
}

/// Straight legs through `corners`, a point about every metre.
fn polyline(corners: &[V3]) -> Vec<V3> {
    let mut out = vec![corners[0]];
    for w in corners.windows(2) {
        out.extend(straight(w[0], w[1]).into_iter().skip(1));
    }
    out
}

fn arc(at: impl Fn(f64) -> V3, start_deg: f64, sweep_deg: f64) -> Vec<V3> {
    let n = (sweep_deg.abs().ceil() as usize).max(2);
    (0..=n).map(|i| at(start_deg + sweep_deg * i as f64 / n as f64)).collect()
}

/// The five composite inspections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Composite {
    CircularInspection,
    SpiralInspection,
    SquareInspection,
    TriangularInspection,
    SurfaceMappingInspection,
}

impl Composite {
    pub const ALL: [Composite; 5] = [
        Composite::CircularInspection,
        Composite::SpiralInspection,
        Composite::SquareInspection,
        Composite::TriangularInspection,
        Composite::SurfaceMappingInspection,
    ];

    /// UAV-DualCog's set key.
    pub fn key(self) -> &'static str {
        match self {
            Composite::CircularInspection => "circular_inspection",
            Composite::SpiralInspection => "spiral_inspection",
            Composite::SquareInspection => "square_inspection",
            Composite::TriangularInspection => "triangular_inspection",
            Composite::SurfaceMappingInspection => "surface_mapping_inspection",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Composite::CircularInspection => "a circular inspection flight",
            Composite::SpiralInspection => "a spiral inspection flight",
            Composite::SquareInspection => "a square-orbit inspection flight",
            Composite::TriangularInspection => "a triangular-orbit inspection flight",
            Composite::SurfaceMappingInspection => "a surface-mapping inspection flight",
        }
    }

    fn orbit(self) -> Option<Maneuver> {
        match self {
            Composite::CircularInspection => Some(Maneuver::CircularOrbit),
            Composite::SpiralInspection => Some(Maneuver::SpiralOrbit),
            Composite::SquareInspection => Some(Maneuver::SquareOrbit),
            Composite::TriangularInspection => Some(Maneuver::TriangularOrbit),
            Composite::SurfaceMappingInspection => None,
        }
    }

    /// The steps with drawn parameters: approach (tracking), the orbit twice (looking forward,
    /// then tracking) or one surface mapping, depart (looking forward).
    pub fn elements(self, rng: &mut SynthRng) -> Vec<Element> {
        let mut out = vec![Element::drawn(Maneuver::GradualApproach, CameraMode::LandmarkTrack, rng)];
        match self.orbit() {
            Some(orbit) => {
                let size_rule = match orbit {
                    Maneuver::SquareOrbit => Rule { name: "edge_count", min: 4.0, max: 8.0, step: 1.0, mean: 4.0, spread: 1.0 },
                    Maneuver::TriangularOrbit => Rule { name: "edge_count", min: 3.0, max: 6.0, step: 1.0, mean: 3.0, spread: 1.0 },
                    _ => Rule { name: "arc_deg", min: 180.0, max: 540.0, step: 90.0, mean: 360.0, spread: 90.0 },
                };
                let pitch = Rule { name: "gaze_pitch_deg", min: -30.0, max: 0.0, step: 5.0, mean: -15.0, spread: 8.0 };
                let mut first = Element::drawn(orbit, CameraMode::LookForward, rng);
                first.apply(&pitch, rng);
                first.apply(&size_rule, rng);
                let mut second = Element::drawn(orbit, CameraMode::LandmarkTrack, rng);
                second.apply(&size_rule, rng);
                second.direction = first.direction;
                out.push(first);
                out.push(second);
            }
            None => out.push(Element::drawn(Maneuver::SurfaceMapping, CameraMode::LookForward, rng)),
        }
        out.push(Element::drawn(Maneuver::GradualDepart, CameraMode::LookForward, rng));
        out
    }
}
