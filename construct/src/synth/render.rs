//! The ray caster and the exact ground truth.
//!
//! Every pixel's ray is intersected analytically with the ground plane and the landmarks, so
//! depth is exact (up to f32) and, because the world is static, optical flow follows from
//! geometry alone: back-project each pixel of frame t with its depth, project the 3-D point
//! with the pose of frame t+1, and subtract. No estimator is involved, which is what makes
//! these videos a yardstick for flow estimators.
//!
//! Conventions: depth is z-depth (along the optical axis) in metres, and 0 where the ray
//! meets nothing (sky); flow is forward flow from frame t to t+1 in pixels, channel 0 = x (u),
//! channel 1 = y (v); a pixel's centre is at its integer index.

use rayon::prelude::*;

use super::camera::{Intrinsics, Pose};
use super::geometry::{Ray, Vec3};
use super::scene::{Hit, LandmarkKind, Surface, World};
use super::terrain::{Rgb, detail, mix, scale, smoothstep};

const SKY_HORIZON: Rgb = [0.80, 0.85, 0.90];
const SKY_ZENITH: Rgb = [0.42, 0.60, 0.86];
const HAZE: Rgb = [0.74, 0.78, 0.82];
/// Distance (m) over which haze covers about 63% of a surface; hides the far ground, whose
/// texture is below the pixel size anyway.
const HAZE_DISTANCE: f32 = 700.0;
const AMBIENT: f32 = 0.45;
const DIRECT: f32 = 0.62;
/// Depth-test tolerance, as a fraction of depth, when deciding whether a point seen in frame t
/// is still the visible surface in frame t+1.
const OCCLUSION_TOLERANCE: f32 = 0.02;

/// One rendered frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub width: usize,
    pub height: usize,
    /// `[H, W, 3]` RGB, row-major.
    pub rgb: Vec<u8>,
    /// `[H, W]` z-depth in metres; 0 for sky.
    pub depth: Vec<f32>,
    /// `[H, W]` object id: 0 for ground and sky, landmark index + 1 otherwise.
    pub ids: Vec<u16>,
}

impl Frame {
    /// Pixels showing each landmark, indexed by landmark index.
    pub fn pixel_counts(&self, landmarks: usize) -> Vec<u32> {
        let mut counts = vec![0u32; landmarks];
        for &id in &self.ids {
            if id > 0 && usize::from(id) <= landmarks {
                counts[usize::from(id) - 1] += 1;
            }
        }
        counts
    }
}

/// Renders `world` from `pose`, rows in parallel.
pub fn render_frame(world: &World, k: &Intrinsics, pose: &Pose) -> Frame {
    let (w, h) = (k.width, k.height);
    let basis = pose.basis();
    let mut rgb = vec![0u8; w * h * 3];
    let mut depth = vec![0f32; w * h];
    let mut ids = vec![0u16; w * h];
    rgb.par_chunks_mut(w * 3).zip(depth.par_chunks_mut(w)).zip(ids.par_chunks_mut(w)).enumerate().for_each(|(y, ((rgb_row, depth_row), id_row))| {
        for x in 0..w {
            let ray = pose.ray(&basis, k, x as f32, y as f32);
            let (colour, t, id) = shade(world, k, &ray);
            for c in 0..3 {
                rgb_row[x * 3 + c] = (colour[c] * 255.0 + 0.5).clamp(0.0, 255.0) as u8;
            }
            depth_row[x] = t;
            id_row[x] = id;
        }
    });
    Frame { width: w, height: h, rgb, depth, ids }
}

/// Colour, z-depth (0 for sky) and object id seen along a camera ray.
fn shade(world: &World, k: &Intrinsics, ray: &Ray) -> (Rgb, f32, u16) {
    let hit = world.trace(ray);
    let dir_len = ray.dir.length();
    let unit = ray.dir * (1.0 / dir_len);
    let range = hit.t * dir_len;
    if let Surface::Sky = hit.surface {
        return (mix(SKY_HORIZON, SKY_ZENITH, smoothstep(0.0, 0.5, unit.z)), 0.0, 0);
    }
    // Metres of surface one pixel spans, for band-limiting textures.
    let lit = lit_surface(world, ray, &hit, |cos_incidence| range / k.fx / cos_incidence.max(0.15));
    let haze = 1.0 - (-range / HAZE_DISTANCE).exp();
    (mix(lit, HAZE, haze), hit.t, hit.object_id())
}

/// The sunlit colour of the surface `ray` hit (not the sky), before haze. `footprint` gives the
/// metres of surface one pixel spans at a cosine of incidence, for band-limiting textures.
pub(super) fn lit_surface(world: &World, ray: &Ray, hit: &Hit, footprint: impl Fn(f32) -> f32) -> Rgb {
    let unit = ray.dir * (1.0 / ray.dir.length());
    let point = ray.at(hit.t);
    let up = Vec3::new(0.0, 0.0, 1.0);
    let (normal, albedo) = match hit.surface {
        Surface::Sky => return SKY_ZENITH,
        Surface::Solid(i, s) => (s.normal, solid_albedo(world, i, s.u, s.v, s.normal, footprint(-unit.dot(s.normal)))),
        Surface::Pool { x, y, half_x, half_y, index } => {
            let colour = world.landmarks[index].colour.rgb();
            (up, pool_albedo(colour, x, y, half_x, half_y, footprint(-unit.z)))
        }
        Surface::Ground => (up, world.terrain.albedo(point.x, point.y, footprint(-unit.z))),
    };
    let lit = normal.dot(world.sun).max(0.0);
    let shadowed = lit > 0.0 && world.in_shadow(point + normal * 0.02);
    let light = AMBIENT + if shadowed { 0.0 } else { DIRECT * lit };
    scale(albedo, light)
}

/// A landmark's colour with its kind's surface pattern, faded by footprint.
fn solid_albedo(world: &World, index: usize, u: f32, v: f32, normal: Vec3, footprint: f32) -> Rgb {
    let l = &world.landmarks[index];
    let base = l.colour.rgb();
    let wall = normal.z.abs() < 0.5;
    let wave = |coord: f32, period: f32| (coord * std::f32::consts::TAU / period).sin() * detail(period, footprint);
    let brightness = match l.kind {
        LandmarkKind::Tower => {
            // Alternating bands, like a painted mast.
            let band = wave(v, 6.0);
            return mix(base, [0.92, 0.92, 0.9], 0.3 * (band * 0.5 + 0.5) * detail(6.0, footprint));
        }
        LandmarkKind::Silo => 1.0 + 0.10 * wave(u, 1.4),
        LandmarkKind::Tank => 1.0 + 0.10 * wave(u, 2.2) + 0.08 * wave(v, 3.0),
        LandmarkKind::Building if wall => {
            // Window grid: dark where both the column and the floor waves are high.
            let cols = wave(u, 3.0) * 0.5 + 0.5;
            let floors = wave(v, 3.5) * 0.5 + 0.5;
            1.0 - 0.45 * cols * floors
        }
        LandmarkKind::Building => 1.0 + 0.08 * wave(u, 4.0) * wave(v, 4.0),
        LandmarkKind::Warehouse if wall => 1.0 + 0.12 * wave(u, 1.0),
        LandmarkKind::Warehouse => 1.0 + 0.12 * wave(u, 2.5),
        LandmarkKind::Cone => 1.0 + 0.15 * wave(v, 2.0),
        LandmarkKind::Dome => 1.0 + 0.08 * wave(v, 1.8) + 0.08 * wave(u, 3.0),
        LandmarkKind::Pool => 1.0,
    };
    scale(base, brightness)
}

/// A pool: a pale rim, then water of the pool's colour with dark lane lines.
fn pool_albedo(colour: Rgb, x: f32, y: f32, half_x: f32, half_y: f32, footprint: f32) -> Rgb {
    let rim_width = 1.0;
    let inset = (half_x - x.abs()).min(half_y - y.abs());
    let aa = footprint * 0.5;
    let rim = 1.0 - smoothstep(rim_width - aa, rim_width + aa, inset);
    let lanes = (y * std::f32::consts::TAU / 2.5).sin() * detail(2.5, footprint);
    let water = scale(colour, 0.9 + 0.12 * lanes);
    mix(water, [0.88, 0.87, 0.82], rim)
}

/// Forward flow from frame a to frame b, with a mask of pixels whose flow is observable.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowField {
    pub width: usize,
    pub height: usize,
    /// `[2, H, W]`: channel 0 = x displacement, channel 1 = y displacement, pixels.
    pub uv: Vec<f32>,
    /// `[H, W]`: 1 where the point seen in frame a is in front of camera b, inside its image
    /// and not hidden there by something nearer; 0 elsewhere (flow is still given where the
    /// point is merely out of view or hidden; it is 0 where the point is behind camera b).
    pub valid: Vec<u8>,
}

impl FlowField {
    pub fn u(&self, x: usize, y: usize) -> f32 {
        self.uv[y * self.width + x]
    }

    pub fn v(&self, x: usize, y: usize) -> f32 {
        self.uv[self.width * self.height + y * self.width + x]
    }
}

/// Exact forward flow between two frames of a static world, from frame a's depth and both
/// poses. Frame b's depth is used only for the occlusion mask.
pub fn exact_flow(k: &Intrinsics, pose_a: &Pose, a: &Frame, pose_b: &Pose, b: &Frame) -> FlowField {
    let (w, h) = (k.width, k.height);
    let mut uv = vec![0f32; 2 * w * h];
    let mut valid = vec![0u8; w * h];
    let (cam_a, cam_b) = (pose_a.precise(k), pose_b.precise(k));
    let (us, vs) = uv.split_at_mut(w * h);
    us.par_chunks_mut(w).zip(vs.par_chunks_mut(w)).zip(valid.par_chunks_mut(w)).enumerate().for_each(|(y, ((u_row, v_row), valid_row))| {
        for x in 0..w {
            let d = a.depth[y * w + x];
            let (px, py) = (x as f64, y as f64);
            let projected =
                if d > 0.0 { cam_b.project(cam_a.unproject(px, py, f64::from(d))) } else { cam_b.project_direction(cam_a.direction(px, py)) };
            let Some((qx, qy, qz)) = projected else { continue };
            u_row[x] = (qx - px) as f32;
            v_row[x] = (qy - py) as f32;
            valid_row[x] = u8::from(visible_in(b, qx, qy, if d > 0.0 { Some(qz as f32) } else { None }));
        }
    });
    FlowField { width: w, height: h, uv, valid }
}

/// Whether a point projecting to `(x, y)` at z-depth `z` (None: at infinity) is the surface
/// frame `b` shows there: some pixel of the 2×2 neighbourhood has that depth.
fn visible_in(b: &Frame, x: f64, y: f64, z: Option<f32>) -> bool {
    let (w, h) = (b.width, b.height);
    // A pixel covers ±0.5 around its centre.
    if !(x >= -0.5 && y >= -0.5 && x < w as f64 - 0.5 && y < h as f64 - 0.5) {
        return false;
    }
    let (x0, y0) = (x.max(0.0).floor() as usize, y.max(0.0).floor() as usize);
    let (x0, y0) = (x0.min(w - 1), y0.min(h - 1));
    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
    [(x0, y0), (x1, y0), (x0, y1), (x1, y1)].iter().any(|&(xi, yi)| {
        let db = b.depth[yi * w + xi];
        match z {
            Some(z) => db > 0.0 && (db - z).abs() <= OCCLUSION_TOLERANCE * z,
            None => db == 0.0,
        }
    })
}

/// The frames of one flight and the flow between each consecutive pair.
#[derive(Debug, Clone)]
pub struct RenderedClip {
    pub poses: Vec<Pose>,
    pub frames: Vec<Frame>,
    pub flows: Vec<FlowField>,
}

impl RenderedClip {
    /// Renders every pose and the exact flow between neighbours.
    pub fn render(world: &World, k: &Intrinsics, poses: Vec<Pose>) -> Self {
        let frames: Vec<Frame> = poses.iter().map(|p| render_frame(world, k, p)).collect();
        let flows = (1..frames.len()).map(|i| exact_flow(k, &poses[i - 1], &frames[i - 1], &poses[i], &frames[i])).collect();
        RenderedClip { poses, frames, flows }
    }

    /// For each landmark, the pixels it covers in each frame: `[landmark][frame]`.
    pub fn visibility(&self, landmarks: usize) -> Vec<Vec<u32>> {
        let per_frame: Vec<Vec<u32>> = self.frames.iter().map(|f| f.pixel_counts(landmarks)).collect();
        (0..landmarks).map(|l| per_frame.iter().map(|c| c[l]).collect()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::scene::WorldSpec;

    #[test]
    fn looking_straight_down_over_bare_ground_sees_the_altitude() {
        let world = World::generate(1, &WorldSpec { landmarks: 0, extent: 100.0 }).expect("world");
        let k = Intrinsics::drone(32, 24);
        let pose = Pose::new(Vec3::new(500.0, 500.0, 40.0), 0.3, -std::f32::consts::FRAC_PI_2);
        let f = render_frame(&world, &k, &pose);
        assert!(f.depth.iter().all(|&d| (d - 40.0).abs() < 1e-3), "depth of a level plane is the altitude");
        assert!(f.ids.iter().all(|&i| i == 0));
    }

    #[test]
    fn flow_between_identical_poses_is_zero_and_valid() {
        let world = World::generate(2, &WorldSpec::default()).expect("world");
        let k = Intrinsics::drone(24, 18);
        let pose = Pose::new(Vec3::new(0.0, -60.0, 35.0), 1.2, -0.7);
        let f = render_frame(&world, &k, &pose);
        let flow = exact_flow(&k, &pose, &f, &pose, &f);
        assert!(flow.uv.iter().all(|v| v.abs() < 1e-3));
        assert!(flow.valid.iter().all(|&v| v == 1));
    }
}
