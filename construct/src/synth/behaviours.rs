//! Ego-motion behaviours and the flights that perform them.
//!
//! A behaviour is what a question names ("fly forward while ascending"); a [`Flight`] is one
//! concrete performance of it: speeds, rates and a start pose, from which the pose at any
//! time follows in closed form, so frames can be rendered at any rate without drift.
//! [`plan_flight`] picks a flight that keeps a chosen landmark in view and never passes
//! through a solid.

use serde::{Deserialize, Serialize};

use super::camera::Pose;
use super::geometry::Vec3;
use super::rng::SynthRng;
use super::scene::World;

/// The ego-motions of the SIS-Bench "self" tasks: single motions and common combinations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Behaviour {
    Forward,
    Backward,
    Ascend,
    Descend,
    YawLeft,
    YawRight,
    PitchUp,
    PitchDown,
    Left,
    Right,
    OrbitCw,
    OrbitCcw,
    Hover,
    ForwardAscend,
    ForwardDescend,
    ForwardYawLeft,
    ForwardYawRight,
}

/// The single motions a behaviour is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Motion {
    Forward,
    Backward,
    Ascend,
    Descend,
    YawLeft,
    YawRight,
    PitchUp,
    PitchDown,
    Left,
    Right,
    OrbitCw,
    OrbitCcw,
    Hover,
}

impl Behaviour {
    pub const ALL: [Behaviour; 17] = [
        Behaviour::Forward,
        Behaviour::Backward,
        Behaviour::Ascend,
        Behaviour::Descend,
        Behaviour::YawLeft,
        Behaviour::YawRight,
        Behaviour::PitchUp,
        Behaviour::PitchDown,
        Behaviour::Left,
        Behaviour::Right,
        Behaviour::OrbitCw,
        Behaviour::OrbitCcw,
        Behaviour::Hover,
        Behaviour::ForwardAscend,
        Behaviour::ForwardDescend,
        Behaviour::ForwardYawLeft,
        Behaviour::ForwardYawRight,
    ];

    /// The identifier written to `world.json`.
    pub fn id(self) -> &'static str {
        match self {
            Behaviour::Forward => "forward",
            Behaviour::Backward => "backward",
            Behaviour::Ascend => "ascend",
            Behaviour::Descend => "descend",
            Behaviour::YawLeft => "yaw_left",
            Behaviour::YawRight => "yaw_right",
            Behaviour::PitchUp => "pitch_up",
            Behaviour::PitchDown => "pitch_down",
            Behaviour::Left => "left",
            Behaviour::Right => "right",
            Behaviour::OrbitCw => "orbit_cw",
            Behaviour::OrbitCcw => "orbit_ccw",
            Behaviour::Hover => "hover",
            Behaviour::ForwardAscend => "forward_ascend",
            Behaviour::ForwardDescend => "forward_descend",
            Behaviour::ForwardYawLeft => "forward_yaw_left",
            Behaviour::ForwardYawRight => "forward_yaw_right",
        }
    }

    /// How questions and answers say it.
    pub fn phrase(self) -> &'static str {
        match self {
            Behaviour::Forward => "fly forward",
            Behaviour::Backward => "fly backward",
            Behaviour::Ascend => "ascend",
            Behaviour::Descend => "descend",
            Behaviour::YawLeft => "turn left in place",
            Behaviour::YawRight => "turn right in place",
            Behaviour::PitchUp => "tilt the camera up",
            Behaviour::PitchDown => "tilt the camera down",
            Behaviour::Left => "move left sideways",
            Behaviour::Right => "move right sideways",
            Behaviour::OrbitCw => "orbit clockwise around a point",
            Behaviour::OrbitCcw => "orbit counter-clockwise around a point",
            Behaviour::Hover => "hover in place",
            Behaviour::ForwardAscend => "fly forward while ascending",
            Behaviour::ForwardDescend => "fly forward while descending",
            Behaviour::ForwardYawLeft => "fly forward while turning left",
            Behaviour::ForwardYawRight => "fly forward while turning right",
        }
    }

    pub fn from_id(id: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|b| b.id() == id)
    }

    pub fn motions(self) -> &'static [Motion] {
        match self {
            Behaviour::Forward => &[Motion::Forward],
            Behaviour::Backward => &[Motion::Backward],
            Behaviour::Ascend => &[Motion::Ascend],
            Behaviour::Descend => &[Motion::Descend],
            Behaviour::YawLeft => &[Motion::YawLeft],
            Behaviour::YawRight => &[Motion::YawRight],
            Behaviour::PitchUp => &[Motion::PitchUp],
            Behaviour::PitchDown => &[Motion::PitchDown],
            Behaviour::Left => &[Motion::Left],
            Behaviour::Right => &[Motion::Right],
            Behaviour::OrbitCw => &[Motion::OrbitCw],
            Behaviour::OrbitCcw => &[Motion::OrbitCcw],
            Behaviour::Hover => &[Motion::Hover],
            Behaviour::ForwardAscend => &[Motion::Forward, Motion::Ascend],
            Behaviour::ForwardDescend => &[Motion::Forward, Motion::Descend],
            Behaviour::ForwardYawLeft => &[Motion::Forward, Motion::YawLeft],
            Behaviour::ForwardYawRight => &[Motion::Forward, Motion::YawRight],
        }
    }

    pub fn is_combination(self) -> bool {
        self.motions().len() > 1
    }

    /// The behaviour with every motion reversed (forward ↔ backward, left ↔ right, ...), if
    /// it is one of ours. The hardest distractor for a model that ignores motion direction.
    pub fn opposite(self) -> Option<Behaviour> {
        use Behaviour::*;
        Some(match self {
            Forward => Backward,
            Backward => Forward,
            Ascend => Descend,
            Descend => Ascend,
            YawLeft => YawRight,
            YawRight => YawLeft,
            PitchUp => PitchDown,
            PitchDown => PitchUp,
            Left => Right,
            Right => Left,
            OrbitCw => OrbitCcw,
            OrbitCcw => OrbitCw,
            ForwardYawLeft => ForwardYawRight,
            ForwardYawRight => ForwardYawLeft,
            ForwardAscend => ForwardDescend,
            ForwardDescend => ForwardAscend,
            Hover => return None,
        })
    }

    /// Whether one behaviour's motions contain the other's (forward ⊂ forward-while-ascending):
    /// such pairs differ only by degree and would make ambiguous options.
    pub fn nested_with(self, other: Behaviour) -> bool {
        let (a, b) = (self.motions(), other.motions());
        a.iter().all(|m| b.contains(m)) || b.iter().all(|m| a.contains(m))
    }
}

/// Speeds and rates of one flight. Linear speeds in m/s, angular rates in rad/s; signs are
/// part of the behaviour (forward positive, left turns positive, climbing positive).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Rates {
    pub forward: f32,
    pub right: f32,
    pub up: f32,
    pub yaw: f32,
    pub pitch: f32,
    /// Orbit angular rate around `orbit_centre` (counter-clockwise positive), 0 when not
    /// orbiting.
    pub orbit: f32,
    /// Amplitude (m) of the slow drift of a hovering drone.
    pub sway: f32,
}

/// One performance of a behaviour: pose at `t = 0` and constant rates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Flight {
    pub behaviour: Behaviour,
    pub start: Pose,
    pub rates: Rates,
    /// Ground point an orbit circles (and the camera keeps centred).
    pub orbit_centre: Vec3,
}

impl Flight {
    pub fn new(behaviour: Behaviour, start: Pose, rates: Rates, orbit_centre: Vec3) -> Self {
        Flight { behaviour, start, rates, orbit_centre }
    }

    /// The pose `t` seconds after the start.
    pub fn pose_at(&self, t: f32) -> Pose {
        let r = &self.rates;
        let s = &self.start;
        if r.orbit != 0.0 {
            let c = self.orbit_centre;
            let rel = s.position - c;
            let radius = rel.x.hypot(rel.y);
            let angle = rel.y.atan2(rel.x) + r.orbit * t;
            let position = Vec3::new(c.x + radius * angle.cos(), c.y + radius * angle.sin(), s.position.z);
            let yaw = angle + std::f32::consts::PI;
            return Pose::new(position, yaw, s.pitch);
        }
        let yaw = s.yaw + r.yaw * t;
        // ∫ (cos ψ, sin ψ) dt and ∫ (sin ψ, −cos ψ) dt in closed form for a constant turn rate.
        let (ix_c, ix_s) = if r.yaw.abs() > 1e-6 {
            ((yaw.sin() - s.yaw.sin()) / r.yaw, (s.yaw.cos() - yaw.cos()) / r.yaw)
        } else {
            (s.yaw.cos() * t, s.yaw.sin() * t)
        };
        let dx = r.forward * ix_c + r.right * ix_s;
        let dy = r.forward * ix_s - r.right * ix_c;
        let sway = if r.sway != 0.0 {
            let w = std::f32::consts::TAU / 4.0;
            Vec3::new(r.sway * (w * t).sin(), r.sway * 0.6 * (0.7 * w * t).sin(), r.sway * 0.3 * (1.3 * w * t).sin())
        } else {
            Vec3::default()
        };
        let position = s.position + Vec3::new(dx, dy, r.up * t) + sway;
        Pose::new(position, yaw, s.pitch + r.pitch * t)
    }

    /// Poses of `frames` frames at `fps`.
    pub fn poses(&self, fps: f32, frames: usize) -> Vec<Pose> {
        (0..frames).map(|i| self.pose_at(i as f32 / fps)).collect()
    }

    /// The same flight moved by `offset`.
    fn shifted(mut self, offset: Vec3) -> Self {
        self.start.position = self.start.position + offset;
        self.orbit_centre = self.orbit_centre + offset;
        self
    }
}

/// Lowest altitude a flight may reach, metres.
pub const MIN_ALTITUDE: f32 = 8.0;
/// Clearance kept from every solid, metres.
pub const CLEARANCE: f32 = 4.0;
/// The camera's pitch stays within these bounds (radians below the horizon), so the ground
/// fills most of the view as in UAV footage.
const PITCH_RANGE_DEG: (f64, f64) = (-75.0, -35.0);

/// Draws a flight of `behaviour` lasting `duration` seconds whose middle frame looks at the
/// ground point `target` (an orbit circles it), retrying until the flight keeps clear of
/// every solid. `None` when no try succeeds.
pub fn plan_flight(world: &World, behaviour: Behaviour, target: Vec3, duration: f32, rng: &mut SynthRng) -> Option<Flight> {
    for attempt in 0..40 {
        let flight = draw_flight(behaviour, target, duration, attempt, rng);
        if keeps_clear(world, &flight, duration) {
            return Some(flight);
        }
    }
    None
}

fn draw_flight(behaviour: Behaviour, target: Vec3, duration: f32, attempt: usize, rng: &mut SynthRng) -> Flight {
    let mut rates = Rates::default();
    // Later attempts fly higher, to clear tall landmarks.
    let lift = attempt as f64 * 2.0;
    let mut altitude = rng.range(15.0 + lift, 50.0 + lift) as f32;
    let mut pitch = rng.range(PITCH_RANGE_DEG.0, PITCH_RANGE_DEG.1).to_radians() as f32;
    let yaw = rng.range(0.0, std::f64::consts::TAU) as f32;
    let speed = rng.range(3.0, 8.0) as f32;
    let climb = rng.range(2.5, 5.0) as f32;
    let turn = rng.range(12.0, 28.0).to_radians() as f32;
    // A tilt may sweep at most the allowed pitch range over the flight.
    let max_tilt = (PITCH_RANGE_DEG.1 - PITCH_RANGE_DEG.0).to_radians() / f64::from(duration.max(0.1));
    let tilt = rng.range(6.0, 12.0).to_radians().min(max_tilt) as f32;
    for m in behaviour.motions() {
        match m {
            Motion::Forward => rates.forward = speed,
            Motion::Backward => rates.forward = -speed,
            Motion::Left => rates.right = -speed,
            Motion::Right => rates.right = speed,
            Motion::Ascend => rates.up = climb,
            Motion::Descend => rates.up = -climb,
            Motion::YawLeft => rates.yaw = turn,
            Motion::YawRight => rates.yaw = -turn,
            Motion::PitchUp => rates.pitch = tilt,
            Motion::PitchDown => rates.pitch = -tilt,
            Motion::OrbitCw | Motion::OrbitCcw | Motion::Hover => {}
        }
    }
    // Keep the pitch inside its range over the whole flight, and descents above the floor.
    if rates.pitch != 0.0 {
        let sweep = rates.pitch * duration;
        let (lo, hi) = (PITCH_RANGE_DEG.0.to_radians() as f32, PITCH_RANGE_DEG.1.to_radians() as f32);
        pitch = if sweep > 0.0 { lo.max(hi - sweep).min(pitch) } else { hi.min(lo - sweep).max(pitch) };
    }
    if rates.up < 0.0 {
        altitude = altitude.max(MIN_ALTITUDE - rates.up * duration + 2.0);
    }
    let orbiting = behaviour.motions().iter().any(|m| matches!(m, Motion::OrbitCw | Motion::OrbitCcw));
    if orbiting {
        // Radius from a pitch that keeps the centre in the middle of the view.
        let look_down = rng.range(30.0, 60.0).to_radians() as f32;
        let radius = altitude / look_down.tan();
        let angle = rng.range(0.0, std::f64::consts::TAU) as f32;
        let sign = if behaviour.motions().contains(&Motion::OrbitCcw) { 1.0 } else { -1.0 };
        rates.orbit = sign * (speed / radius).max(rng.range(8.0, 16.0).to_radians() as f32);
        let c = target;
        let start = Pose::new(
            Vec3::new(c.x + radius * angle.cos(), c.y + radius * angle.sin(), altitude),
            angle + std::f32::consts::PI,
            -(altitude / radius).atan(),
        );
        return Flight::new(behaviour, start, rates, Vec3::new(c.x, c.y, 0.0));
    }
    if behaviour == Behaviour::Hover {
        rates.sway = rng.range(0.05, 0.2) as f32;
    }
    // Fly from the origin, then move the whole flight so that the middle frame's optical axis
    // meets the ground near the target.
    let flight = Flight::new(behaviour, Pose::new(Vec3::new(0.0, 0.0, altitude), yaw, pitch), rates, Vec3::default());
    let mid = flight.pose_at(duration / 2.0);
    let aim = mid.ground_target().unwrap_or(Vec3::new(mid.position.x, mid.position.y, 0.0));
    let jitter = Vec3::new(rng.range(-6.0, 6.0) as f32, rng.range(-6.0, 6.0) as f32, 0.0);
    let goal = target + jitter;
    flight.shifted(Vec3::new(goal.x - aim.x, goal.y - aim.y, 0.0))
}

/// Whether every pose of the flight (sampled every 0.1 s) stays above the floor and outside
/// each solid's bounding cylinder grown by [`CLEARANCE`].
fn keeps_clear(world: &World, flight: &Flight, duration: f32) -> bool {
    let steps = (duration / 0.1).ceil() as usize;
    (0..=steps).all(|i| {
        let p = flight.pose_at(duration * i as f32 / steps as f32).position;
        p.z >= MIN_ALTITUDE
            && world.landmarks.iter().all(|l| {
                let near = l.centre.horizontal_distance(p) < l.shape.footprint_radius() + CLEARANCE;
                !(near && p.z < l.shape.height() + CLEARANCE)
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opposites_pair_up_and_ids_round_trip() {
        for b in Behaviour::ALL {
            assert_eq!(Behaviour::from_id(b.id()), Some(b));
            if let Some(o) = b.opposite() {
                assert_eq!(o.opposite(), Some(b));
                assert!(!o.nested_with(b));
            }
        }
        assert!(Behaviour::Forward.nested_with(Behaviour::ForwardAscend));
        assert!(!Behaviour::ForwardYawLeft.nested_with(Behaviour::ForwardAscend));
    }

    #[test]
    fn turning_flight_follows_an_arc() {
        let rates = Rates { forward: 5.0, yaw: 0.5, ..Rates::default() };
        let f = Flight::new(Behaviour::ForwardYawLeft, Pose::new(Vec3::new(0.0, 0.0, 20.0), 0.0, -0.8), rates, Vec3::default());
        // Radius v/ω = 10 m; after a quarter turn (π s) the drone is at (10, 10) heading north.
        let p = f.pose_at(std::f32::consts::PI);
        assert!((p.position.x - 10.0).abs() < 1e-3 && (p.position.y - 10.0).abs() < 1e-3, "{:?}", p.position);
        assert!((p.yaw - std::f32::consts::FRAC_PI_2).abs() < 1e-5);
    }

    #[test]
    fn orbit_keeps_radius_and_faces_the_centre() {
        let rates = Rates { orbit: -0.3, ..Rates::default() };
        let start = Pose::new(Vec3::new(30.0, 0.0, 25.0), std::f32::consts::PI, -0.7);
        let f = Flight::new(Behaviour::OrbitCw, start, rates, Vec3::default());
        let p = f.pose_at(2.0);
        assert!((p.position.x.hypot(p.position.y) - 30.0).abs() < 1e-3);
        let to_centre = Vec3::new(-p.position.x, -p.position.y, 0.0).normalized();
        let fwd = p.basis().forward;
        assert!((Vec3::new(fwd.x, fwd.y, 0.0).normalized() - to_centre).length() < 1e-4);
        // Clockwise seen from above: the angle decreases.
        assert!(p.position.y < 0.0);
    }
}
