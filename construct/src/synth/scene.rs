//! The world: terrain, named landmarks and the sun, and the analytic ray tests against them.
//!
//! Landmarks are simple solids with closed-form ray intersections (vertical cylinders,
//! yawed boxes, cones, hemispheres) plus flat pools painted on the ground. Each has a kind and
//! a colour that together are unique within its world, so "the red tower" names exactly one
//! thing and questions can use the name.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::SynthError;
use super::geometry::{Ray, Vec3};
use super::rng::{SynthRng, derive_seed};
use super::terrain::{Rgb, Terrain};

/// What a landmark is; decides its shape and size range. Every kind comes in every colour,
/// so that a colour never hints at the kind (pools are painted, not just blue).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LandmarkKind {
    Tower,
    Silo,
    Tank,
    Building,
    Warehouse,
    Cone,
    Dome,
    Pool,
}

impl LandmarkKind {
    pub const ALL: [LandmarkKind; 8] = [
        LandmarkKind::Tower,
        LandmarkKind::Silo,
        LandmarkKind::Tank,
        LandmarkKind::Building,
        LandmarkKind::Warehouse,
        LandmarkKind::Cone,
        LandmarkKind::Dome,
        LandmarkKind::Pool,
    ];

    /// The noun used in questions.
    pub fn noun(self) -> &'static str {
        match self {
            LandmarkKind::Tower => "tower",
            LandmarkKind::Silo => "silo",
            LandmarkKind::Tank => "tank",
            LandmarkKind::Building => "building",
            LandmarkKind::Warehouse => "warehouse",
            LandmarkKind::Cone => "cone",
            LandmarkKind::Dome => "dome",
            LandmarkKind::Pool => "pool",
        }
    }
}

/// The named colours of landmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Colour {
    Red,
    Orange,
    Yellow,
    Green,
    Blue,
    Purple,
    White,
    Black,
    Pink,
    Cyan,
}

impl Colour {
    pub const ALL: [Colour; 10] = [
        Colour::Red,
        Colour::Orange,
        Colour::Yellow,
        Colour::Green,
        Colour::Blue,
        Colour::Purple,
        Colour::White,
        Colour::Black,
        Colour::Pink,
        Colour::Cyan,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Colour::Red => "red",
            Colour::Orange => "orange",
            Colour::Yellow => "yellow",
            Colour::Green => "green",
            Colour::Blue => "blue",
            Colour::Purple => "purple",
            Colour::White => "white",
            Colour::Black => "black",
            Colour::Pink => "pink",
            Colour::Cyan => "cyan",
        }
    }

    /// Albedo, saturated enough to stand out from fields and roads.
    pub fn rgb(self) -> Rgb {
        match self {
            Colour::Red => [0.80, 0.10, 0.08],
            Colour::Orange => [0.92, 0.45, 0.08],
            Colour::Yellow => [0.92, 0.82, 0.12],
            Colour::Green => [0.10, 0.62, 0.22],
            Colour::Blue => [0.12, 0.28, 0.85],
            Colour::Purple => [0.50, 0.18, 0.68],
            Colour::White => [0.90, 0.90, 0.88],
            Colour::Black => [0.08, 0.08, 0.09],
            Colour::Pink => [0.95, 0.48, 0.70],
            Colour::Cyan => [0.10, 0.75, 0.82],
        }
    }
}

/// A landmark's name as questions say it: colour then noun, e.g. "red tower".
pub fn landmark_name(kind: LandmarkKind, colour: Colour) -> String {
    format!("{} {}", colour.name(), kind.noun())
}

/// Every name a landmark can have, in a fixed order: the vocabulary that absent-object
/// distractors are drawn from.
pub fn all_landmark_names() -> Vec<(LandmarkKind, Colour)> {
    LandmarkKind::ALL.iter().flat_map(|&k| Colour::ALL.iter().map(move |&c| (k, c))).collect()
}

/// The solid a landmark is, in metres, standing on the ground at its centre.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "shape", rename_all = "snake_case")]
pub enum Shape {
    Cylinder {
        radius: f32,
        height: f32,
    },
    Block {
        half_x: f32,
        half_y: f32,
        height: f32,
        yaw: f32,
    },
    Cone {
        radius: f32,
        height: f32,
    },
    Dome {
        radius: f32,
    },
    /// Flat on the ground; seen only where ground rays land inside it.
    Pool {
        half_x: f32,
        half_y: f32,
        yaw: f32,
    },
}

impl Shape {
    /// Radius of a vertical cylinder around the centre that contains the shape.
    pub fn footprint_radius(&self) -> f32 {
        match *self {
            Shape::Cylinder { radius, .. } | Shape::Cone { radius, .. } | Shape::Dome { radius } => radius,
            Shape::Block { half_x, half_y, .. } | Shape::Pool { half_x, half_y, .. } => (half_x * half_x + half_y * half_y).sqrt(),
        }
    }

    pub fn height(&self) -> f32 {
        match *self {
            Shape::Cylinder { height, .. } | Shape::Block { height, .. } | Shape::Cone { height, .. } => height,
            Shape::Dome { radius } => radius,
            Shape::Pool { .. } => 0.0,
        }
    }
}

/// One named landmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Landmark {
    /// Index in the world's list; the renderer's object id is `index + 1`.
    pub index: usize,
    pub kind: LandmarkKind,
    pub colour: Colour,
    pub name: String,
    /// Centre of the base on the ground (z = 0).
    pub centre: Vec3,
    pub shape: Shape,
}

/// A ray's hit on a solid: parameter, outward normal and local surface coordinates for
/// patterns (`u` around or along the surface in metres, `v` height in metres).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SolidHit {
    pub t: f32,
    pub normal: Vec3,
    pub u: f32,
    pub v: f32,
}

const EPS: f32 = 1e-4;

impl Landmark {
    pub fn new(index: usize, kind: LandmarkKind, colour: Colour, centre: Vec3, shape: Shape) -> Self {
        Landmark { index, kind, colour, name: landmark_name(kind, colour), centre, shape }
    }

    /// The nearest hit with `t` in `(EPS, t_max)`, for solids (pools are never hit here).
    pub fn intersect(&self, ray: &Ray, t_max: f32) -> Option<SolidHit> {
        let o = ray.origin - self.centre;
        let d = ray.dir;
        // Most rays miss most landmarks: a box test without trigonometry rejects them first.
        let r = self.shape.footprint_radius();
        if !slab_hit([o.x, o.y, o.z], [d.x, d.y, d.z], [-r, -r, 0.0], [r, r, self.shape.height()], t_max) {
            return None;
        }
        match self.shape {
            Shape::Cylinder { radius, height } => cylinder(o, d, radius, height, t_max),
            Shape::Block { half_x, half_y, height, yaw } => block(o, d, half_x, half_y, height, yaw, t_max),
            Shape::Cone { radius, height } => cone(o, d, radius, height, t_max),
            Shape::Dome { radius } => dome(o, d, radius, t_max),
            Shape::Pool { .. } => None,
        }
    }

    /// Whether a ground point lies inside this pool, with its local coordinates (metres from
    /// the centre along the pool's axes).
    pub fn pool_coords(&self, x: f32, y: f32) -> Option<(f32, f32, f32, f32)> {
        let Shape::Pool { half_x, half_y, yaw } = self.shape else { return None };
        let (lx, ly) = rotate(x - self.centre.x, y - self.centre.y, -yaw);
        (lx.abs() <= half_x && ly.abs() <= half_y).then_some((lx, ly, half_x, half_y))
    }
}

/// Whether the ray meets the axis-aligned box `[lo, hi]` for some `t` in `(0, t_max)`.
fn slab_hit(o: [f32; 3], d: [f32; 3], lo: [f32; 3], hi: [f32; 3], t_max: f32) -> bool {
    let (mut t0, mut t1) = (0.0f32, t_max);
    for i in 0..3 {
        let inv = 1.0 / d[i];
        let (a, b) = ((lo[i] - o[i]) * inv, (hi[i] - o[i]) * inv);
        let (a, b) = if a < b { (a, b) } else { (b, a) };
        // NaN (0 · ∞ for a ray on a face) fails neither bound: keep the ray, the exact test decides.
        if a > t0 {
            t0 = a;
        }
        if b < t1 {
            t1 = b;
        }
        if t0 > t1 {
            return false;
        }
    }
    true
}

fn rotate(x: f32, y: f32, angle: f32) -> (f32, f32) {
    let (s, c) = angle.sin_cos();
    (x * c - y * s, x * s + y * c)
}

/// Smallest root of `a t² + 2 b t + c = 0` in `(EPS, t_max)` passing `accept`.
fn quadratic(a: f32, b: f32, c: f32, t_max: f32, accept: impl Fn(f32) -> bool) -> Option<f32> {
    if a.abs() < 1e-12 {
        return None;
    }
    let disc = b * b - a * c;
    if disc < 0.0 {
        return None;
    }
    let sq = disc.sqrt();
    let (t0, t1) = ((-b - sq) / a, (-b + sq) / a);
    let (lo, hi) = if t0 < t1 { (t0, t1) } else { (t1, t0) };
    [lo, hi].into_iter().find(|&t| t > EPS && t < t_max && accept(t))
}

fn nearest(a: Option<SolidHit>, b: Option<SolidHit>) -> Option<SolidHit> {
    match (a, b) {
        (Some(x), Some(y)) => Some(if x.t <= y.t { x } else { y }),
        (x, None) => x,
        (None, y) => y,
    }
}

fn cylinder(o: Vec3, d: Vec3, r: f32, h: f32, t_max: f32) -> Option<SolidHit> {
    let a = d.x * d.x + d.y * d.y;
    let b = o.x * d.x + o.y * d.y;
    let c = o.x * o.x + o.y * o.y - r * r;
    let side = quadratic(a, b, c, t_max, |t| {
        let z = o.z + t * d.z;
        (0.0..=h).contains(&z)
    })
    .map(|t| {
        let p = o + d * t;
        SolidHit { t, normal: Vec3::new(p.x / r, p.y / r, 0.0), u: p.y.atan2(p.x) * r, v: p.z }
    });
    nearest(side, cap(o, d, h, t_max, |x, y| x * x + y * y <= r * r))
}

/// The flat top at height `h`, if the ray comes from above and lands inside `inside`.
fn cap(o: Vec3, d: Vec3, h: f32, t_max: f32, inside: impl Fn(f32, f32) -> bool) -> Option<SolidHit> {
    if d.z >= 0.0 || o.z < h {
        return None;
    }
    let t = (h - o.z) / d.z;
    let p = o + d * t;
    (t > EPS && t < t_max && inside(p.x, p.y)).then_some(SolidHit { t, normal: Vec3::new(0.0, 0.0, 1.0), u: p.x, v: h + p.y })
}

fn block(o: Vec3, d: Vec3, hx: f32, hy: f32, h: f32, yaw: f32, t_max: f32) -> Option<SolidHit> {
    let (ox, oy) = rotate(o.x, o.y, -yaw);
    let (dx, dy) = rotate(d.x, d.y, -yaw);
    let lo = [-hx, -hy, 0.0];
    let hi = [hx, hy, h];
    let orig = [ox, oy, o.z];
    let dir = [dx, dy, d.z];
    let (mut t_near, mut t_far) = (f32::NEG_INFINITY, f32::INFINITY);
    let mut axis = 0;
    let mut sign = 1.0;
    for i in 0..3 {
        if dir[i].abs() < 1e-12 {
            if orig[i] < lo[i] || orig[i] > hi[i] {
                return None;
            }
            continue;
        }
        let (mut t0, mut t1) = ((lo[i] - orig[i]) / dir[i], (hi[i] - orig[i]) / dir[i]);
        let mut s = -1.0;
        if t0 > t1 {
            std::mem::swap(&mut t0, &mut t1);
            s = 1.0;
        }
        if t0 > t_near {
            t_near = t0;
            axis = i;
            sign = s;
        }
        t_far = t_far.min(t1);
    }
    if t_near > t_far || t_near <= EPS || t_near >= t_max {
        return None;
    }
    let t = t_near;
    let p = [orig[0] + t * dir[0], orig[1] + t * dir[1], orig[2] + t * dir[2]];
    let mut local_n = [0.0f32; 3];
    local_n[axis] = sign;
    let (nx, ny) = rotate(local_n[0], local_n[1], yaw);
    let (u, v) = match axis {
        0 => (p[1], p[2]),
        1 => (p[0], p[2]),
        _ => (p[0], h + p[1]),
    };
    Some(SolidHit { t, normal: Vec3::new(nx, ny, local_n[2]), u, v })
}

fn cone(o: Vec3, d: Vec3, r: f32, h: f32, t_max: f32) -> Option<SolidHit> {
    // x² + y² = k² (h − z)², 0 ≤ z ≤ h.
    let k = r / h;
    let k2 = k * k;
    let w = h - o.z;
    let a = d.x * d.x + d.y * d.y - k2 * d.z * d.z;
    let b = o.x * d.x + o.y * d.y + k2 * w * d.z;
    let c = o.x * o.x + o.y * o.y - k2 * w * w;
    let t = quadratic(a, b, c, t_max, |t| {
        let z = o.z + t * d.z;
        (0.0..=h).contains(&z)
    })?;
    let p = o + d * t;
    let rho = p.x.hypot(p.y);
    let normal = Vec3::new(p.x, p.y, k * rho).normalized();
    Some(SolidHit { t, normal, u: p.y.atan2(p.x) * rho, v: p.z })
}

fn dome(o: Vec3, d: Vec3, r: f32, t_max: f32) -> Option<SolidHit> {
    let a = d.dot(d);
    let b = o.dot(d);
    let c = o.dot(o) - r * r;
    let t = quadratic(a, b, c, t_max, |t| o.z + t * d.z >= 0.0)?;
    let p = o + d * t;
    Some(SolidHit { t, normal: p * (1.0 / r), u: p.y.atan2(p.x) * r, v: p.z })
}

/// What a ray hits first.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Surface {
    Sky,
    Ground,
    /// A solid landmark, by index.
    Solid(usize, SolidHit),
    /// A pool, by index, at local coordinates `(x, y)` with half sizes `(hx, hy)`.
    Pool {
        index: usize,
        x: f32,
        y: f32,
        half_x: f32,
        half_y: f32,
    },
}

/// A ray's first hit: ray parameter (the z-depth for camera rays; infinite for sky) and what.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    pub t: f32,
    pub surface: Surface,
}

impl Hit {
    /// The renderer's object id: 0 for sky and bare ground, `index + 1` for a landmark.
    pub fn object_id(&self) -> u16 {
        match self.surface {
            Surface::Sky | Surface::Ground => 0,
            Surface::Solid(i, _) | Surface::Pool { index: i, .. } => i as u16 + 1,
        }
    }
}

/// How big a world is and how much is in it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorldSpec {
    pub landmarks: usize,
    /// Landmarks stand within `[-extent, extent]²` metres.
    pub extent: f32,
}

impl Default for WorldSpec {
    fn default() -> Self {
        WorldSpec { landmarks: 10, extent: 120.0 }
    }
}

/// A generated world.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct World {
    pub seed: u64,
    pub terrain: Terrain,
    pub landmarks: Vec<Landmark>,
    /// Unit vector towards the sun.
    pub sun: Vec3,
}

impl World {
    /// Lays out a world from its seed: terrain, sun, and `spec.landmarks` landmarks with
    /// distinct names, off roads and water and apart from each other.
    pub fn generate(seed: u64, spec: &WorldSpec) -> Result<Self, SynthError> {
        let max = all_landmark_names().len();
        if spec.landmarks > max {
            return Err(SynthError::Setting {
                key: "landmarks",
                problem: format!("{} landmarks per world asked, but only {max} distinct names exist", spec.landmarks),
            });
        }
        let terrain = Terrain::new(seed);
        let mut rng = SynthRng::new(derive_seed(seed, 0x1a4d));
        let elevation = rng.range(35f64.to_radians(), 65f64.to_radians()) as f32;
        let azimuth = rng.range(0.0, std::f64::consts::TAU) as f32;
        let sun = Vec3::new(elevation.cos() * azimuth.cos(), elevation.cos() * azimuth.sin(), elevation.sin());

        // Kinds dealt from shuffled decks so every world mixes shapes.
        let mut kinds = Vec::new();
        while kinds.len() < spec.landmarks {
            let mut deck = LandmarkKind::ALL.to_vec();
            rng.shuffle(&mut deck);
            kinds.extend(deck);
        }
        let mut landmarks: Vec<Landmark> = Vec::with_capacity(spec.landmarks);
        for (index, &kind) in kinds.iter().take(spec.landmarks).enumerate() {
            let free: Vec<Colour> = Colour::ALL.iter().copied().filter(|&c| !landmarks.iter().any(|l| l.kind == kind && l.colour == c)).collect();
            let colour =
                *rng.pick(&free).ok_or_else(|| SynthError::Planning { seed, detail: format!("no colour left for another {}", kind.noun()) })?;
            let shape = random_shape(kind, &mut rng);
            let centre = place(&terrain, &landmarks, &shape, spec.extent, &mut rng).ok_or_else(|| SynthError::Planning {
                seed,
                detail: format!("no free spot for landmark {} of {} within ±{} m; use fewer landmarks", index + 1, spec.landmarks, spec.extent),
            })?;
            landmarks.push(Landmark::new(index, kind, colour, centre, shape));
        }
        Ok(World { seed, terrain, landmarks, sun })
    }

    /// The first thing `ray` meets.
    pub fn trace(&self, ray: &Ray) -> Hit {
        let ground_t = if ray.dir.z < -1e-9 { -ray.origin.z / ray.dir.z } else { f32::INFINITY };
        let mut best: Option<(usize, SolidHit)> = None;
        let mut t_max = ground_t;
        for l in &self.landmarks {
            if let Some(h) = l.intersect(ray, t_max) {
                t_max = h.t;
                best = Some((l.index, h));
            }
        }
        if let Some((i, h)) = best {
            return Hit { t: h.t, surface: Surface::Solid(i, h) };
        }
        if !ground_t.is_finite() {
            return Hit { t: f32::INFINITY, surface: Surface::Sky };
        }
        let p = ray.at(ground_t);
        for l in &self.landmarks {
            if let Some((x, y, half_x, half_y)) = l.pool_coords(p.x, p.y) {
                return Hit { t: ground_t, surface: Surface::Pool { index: l.index, x, y, half_x, half_y } };
            }
        }
        Hit { t: ground_t, surface: Surface::Ground }
    }

    /// Whether anything solid lies between `point` and the sun.
    pub fn in_shadow(&self, point: Vec3) -> bool {
        let ray = Ray::new(point, self.sun);
        self.landmarks.iter().any(|l| l.intersect(&ray, f32::INFINITY).is_some())
    }

    pub fn landmark_by_name(&self, name: &str) -> Option<&Landmark> {
        self.landmarks.iter().find(|l| l.name == name)
    }
}

fn random_shape(kind: LandmarkKind, rng: &mut SynthRng) -> Shape {
    let mut r = |lo: f64, hi: f64| rng.range(lo, hi) as f32;
    match kind {
        LandmarkKind::Tower => Shape::Cylinder { radius: r(2.0, 3.5), height: r(22.0, 40.0) },
        LandmarkKind::Silo => Shape::Cylinder { radius: r(4.0, 6.0), height: r(12.0, 18.0) },
        LandmarkKind::Tank => Shape::Cylinder { radius: r(7.0, 10.0), height: r(4.0, 7.0) },
        LandmarkKind::Building => Shape::Block { half_x: r(5.0, 8.0), half_y: r(5.0, 8.0), height: r(12.0, 26.0), yaw: r(0.0, std::f64::consts::PI) },
        LandmarkKind::Warehouse => {
            Shape::Block { half_x: r(14.0, 22.0), half_y: r(7.0, 11.0), height: r(6.0, 9.0), yaw: r(0.0, std::f64::consts::PI) }
        }
        LandmarkKind::Cone => Shape::Cone { radius: r(4.0, 6.0), height: r(9.0, 15.0) },
        LandmarkKind::Dome => Shape::Dome { radius: r(7.0, 11.0) },
        LandmarkKind::Pool => Shape::Pool { half_x: r(7.0, 12.0), half_y: r(4.0, 7.0), yaw: r(0.0, std::f64::consts::PI) },
    }
}

/// A centre for `shape` that keeps clear of water, roads and other landmarks.
fn place(terrain: &Terrain, others: &[Landmark], shape: &Shape, extent: f32, rng: &mut SynthRng) -> Option<Vec3> {
    let radius = shape.footprint_radius();
    for _ in 0..400 {
        let e = f64::from(extent);
        let c = Vec3::new(rng.range(-e, e) as f32, rng.range(-e, e) as f32, 0.0);
        let dry = (0..8).all(|k| {
            let a = k as f32 * std::f32::consts::FRAC_PI_4;
            !terrain.is_water(c.x + radius * a.cos(), c.y + radius * a.sin())
        }) && !terrain.is_water(c.x, c.y);
        let off_road = terrain.road_clearance(c.x, c.y) > radius + 2.0;
        let apart = others.iter().all(|o| o.centre.horizontal_distance(c) > o.shape.footprint_radius() + radius + 10.0);
        if dry && off_road && apart {
            return Some(c);
        }
    }
    None
}

impl fmt::Display for Landmark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_hit(shape: Shape, ray: Ray) -> Option<SolidHit> {
        Landmark::new(0, LandmarkKind::Tower, Colour::Red, Vec3::default(), shape).intersect(&ray, f32::INFINITY)
    }

    #[test]
    fn solids_are_hit_where_geometry_says() {
        let side = Ray::new(Vec3::new(-10.0, 0.0, 1.0), Vec3::new(1.0, 0.0, 0.0));
        let cyl = shape_hit(Shape::Cylinder { radius: 2.0, height: 5.0 }, side).expect("cylinder");
        assert!((cyl.t - 8.0).abs() < 1e-4 && (cyl.normal.x + 1.0).abs() < 1e-5);
        let top = Ray::new(Vec3::new(0.5, 0.5, 20.0), Vec3::new(0.0, 0.0, -1.0));
        assert!((shape_hit(Shape::Cylinder { radius: 2.0, height: 5.0 }, top).expect("cap").t - 15.0).abs() < 1e-4);
        let boxed = shape_hit(Shape::Block { half_x: 3.0, half_y: 1.0, height: 4.0, yaw: 0.0 }, side).expect("block");
        assert!((boxed.t - 7.0).abs() < 1e-4);
        let cone = shape_hit(Shape::Cone { radius: 4.0, height: 8.0 }, side).expect("cone");
        // At z = 1 the cone's radius is 4 · 7/8 = 3.5.
        assert!((cone.t - 6.5).abs() < 1e-4, "{}", cone.t);
        let dome = shape_hit(Shape::Dome { radius: 3.0 }, top).expect("dome");
        assert!((dome.t - (20.0 - (9.0f32 - 0.5).sqrt())).abs() < 1e-4);
        let above = Ray::new(Vec3::new(-10.0, 0.0, 9.0), Vec3::new(1.0, 0.0, 0.0));
        assert!(shape_hit(Shape::Cone { radius: 4.0, height: 8.0 }, above).is_none());
    }

    #[test]
    fn rotated_block_turns_with_its_yaw() {
        let ray = Ray::new(Vec3::new(-10.0, 0.0, 1.0), Vec3::new(1.0, 0.0, 0.0));
        let yawed = Shape::Block { half_x: 3.0, half_y: 1.0, height: 4.0, yaw: std::f32::consts::FRAC_PI_2 };
        assert!((shape_hit(yawed, ray).expect("block").t - 9.0).abs() < 1e-4);
    }

    #[test]
    fn worlds_have_unique_names_and_are_seeded() {
        let spec = WorldSpec::default();
        let a = World::generate(3, &spec).expect("world");
        assert_eq!(a, World::generate(3, &spec).expect("world"));
        let mut names: Vec<&str> = a.landmarks.iter().map(|l| l.name.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), spec.landmarks);
        assert_ne!(a.landmarks, World::generate(4, &spec).expect("world").landmarks);
    }
}
