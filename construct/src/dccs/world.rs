//! The synthetic world as Stage 2 would hand it over: its landmarks as reviewed instances
//! (category, subcategory, description, oriented box, surface points) and its geometry as an
//! obstacle point cloud (the ground on a grid, every solid's surface by ray casting).

use std::collections::HashSet;

use serde_json::{Value, json};

use super::geom::V3;
use super::instances::{Category, Landmark, OrientedBox};
use crate::synth::geometry::{Ray, Vec3};
use crate::synth::scene::{Landmark as SynthLandmark, LandmarkKind, Shape, World, WorldSpec};

/// How densely the world is sampled into points.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// Spacing of surface points on the solids, metres.
    pub surface_m: f64,
    /// Spacing of the ground grid, metres.
    pub ground_m: f64,
    /// The ground grid reaches this far beyond the landmarks' extent, metres.
    pub ground_margin_m: f64,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { surface_m: 0.5, ground_m: 2.0, ground_margin_m: 160.0 }
    }
}

/// Pools are painted on the ground; their box is this thick so that it is not degenerate.
const POOL_THICKNESS_M: f64 = 0.5;

fn category(kind: LandmarkKind) -> (Category, &'static str) {
    match kind {
        LandmarkKind::Tower => (Category::IndustrialInfrastructure, "lattice tower"),
        LandmarkKind::Silo => (Category::IndustrialInfrastructure, "silo"),
        LandmarkKind::Tank => (Category::IndustrialInfrastructure, "storage tank"),
        LandmarkKind::Building => (Category::Building, "office building"),
        LandmarkKind::Warehouse => (Category::Building, "warehouse"),
        LandmarkKind::Cone => (Category::Other, "cone-shaped structure"),
        LandmarkKind::Dome => (Category::PublicFacility, "dome"),
        LandmarkKind::Pool => (Category::UrbanLandscape, "pool"),
    }
}

fn oriented_box(l: &SynthLandmark) -> OrientedBox {
    let (cx, cy) = (f64::from(l.centre.x), f64::from(l.centre.y));
    let boxed = |sx: f32, sy: f32, h: f64, yaw: f32| OrientedBox {
        center: V3::new(cx, cy, h / 2.0),
        size: V3::new(f64::from(sx), f64::from(sy), h),
        yaw_deg: f64::from(yaw).to_degrees(),
    };
    match l.shape {
        Shape::Cylinder { radius, height } | Shape::Cone { radius, height } => boxed(2.0 * radius, 2.0 * radius, f64::from(height), 0.0),
        Shape::Dome { radius } => boxed(2.0 * radius, 2.0 * radius, f64::from(radius), 0.0),
        Shape::Block { half_x, half_y, height, yaw } => boxed(2.0 * half_x, 2.0 * half_y, f64::from(height), yaw),
        Shape::Pool { half_x, half_y, yaw } => boxed(2.0 * half_x, 2.0 * half_y, POOL_THICKNESS_M, yaw),
    }
}

/// Points on one solid's surface about `spacing` apart: rays cast at it from 42 directions
/// over the upper hemisphere, on a grid across its bounding sphere. Pools give their painted
/// rectangle.
fn surface_points(l: &SynthLandmark, bbox: &OrientedBox, spacing: f64) -> Vec<V3> {
    if let Shape::Pool { .. } = l.shape {
        let mut top = bbox.surface_points(spacing);
        top.retain(|p| (p.z - bbox.top()).abs() < 1e-9);
        return top.into_iter().map(|p| V3::new(p.x, p.y, 0.0)).collect();
    }
    let radius = 0.5 * bbox.size.length();
    let n = (2.0 * radius / spacing).ceil() as i64;
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    let golden = std::f64::consts::PI * (3.0 - 5f64.sqrt());
    for k in 0..42 {
        // Fibonacci directions over the upper hemisphere (z from 0 to 1), pointing inwards.
        let z = (k as f64 + 0.5) / 42.0;
        let (s, c) = (golden * k as f64).sin_cos();
        let outward = V3::new((1.0 - z * z).sqrt() * c, (1.0 - z * z).sqrt() * s, z);
        let u = outward.cross(V3::new(0.0, 0.0, 1.0)).unit().unwrap_or(V3::new(1.0, 0.0, 0.0));
        let v = outward.cross(u);
        for i in -n..=n {
            for j in -n..=n {
                let o = bbox.center + outward * (2.0 * radius) + u * (i as f64 * spacing) + v * (j as f64 * spacing);
                let dir = outward * -1.0;
                let ray = Ray::new(Vec3::new(o.x as f32, o.y as f32, o.z as f32), Vec3::new(dir.x as f32, dir.y as f32, dir.z as f32));
                let Some(hit) = l.intersect(&ray, f32::INFINITY) else { continue };
                let p = o + dir * f64::from(hit.t);
                let key = ((p.x / spacing).round() as i64, (p.y / spacing).round() as i64, (p.z / spacing).round() as i64);
                if seen.insert(key) {
                    out.push(p);
                }
            }
        }
    }
    out
}

/// The world's landmarks as reviewed instances and its geometry as points (ground first).
pub fn export(world: &World, spec: &WorldSpec, sampling: &Sampling) -> (Vec<Landmark>, Vec<V3>) {
    let mut landmarks = Vec::with_capacity(world.landmarks.len());
    let boxes: Vec<OrientedBox> = world.landmarks.iter().map(oriented_box).collect();
    let reach = f64::from(spec.extent) + sampling.ground_margin_m;
    let steps = (reach / sampling.ground_m).ceil() as i64;
    // The ground, except where a landmark stands on it.
    let mut cloud: Vec<V3> = (-steps..=steps)
        .flat_map(|i| (-steps..=steps).map(move |j| V3::new(i as f64 * sampling.ground_m, j as f64 * sampling.ground_m, 0.0)))
        .filter(|p| !boxes.iter().any(|b| b.contains_expanded(*p, 0.0, 0.0)))
        .collect();
    for (l, &bbox) in world.landmarks.iter().zip(&boxes) {
        let (category, subcategory) = category(l.kind);
        let points = surface_points(l, &bbox, sampling.surface_m);
        cloud.extend(points.iter().copied());
        landmarks.push(Landmark {
            id: format!("lm_{:02}", l.index),
            category,
            subcategory: subcategory.to_string(),
            description: format!("the {} {}, about {:.0} m tall", l.colour.name(), subcategory, bbox.size.z),
            bbox,
            support_points: points,
        });
    }
    (landmarks, cloud)
}

/// The `scene` block of render requests for a synthetic world.
pub fn scene_block(seed: u64, spec: &WorldSpec) -> Value {
    json!({"engine": SYNTH_ENGINE, "world_seed": seed, "landmarks": spec.landmarks, "extent": spec.extent})
}

/// The `engine` of render requests the synthetic world renders.
pub const SYNTH_ENGINE: &str = "motionvl_synth";

/// The world a `scene` block names, or why it cannot be rebuilt here.
pub fn world_of(scene: &Value) -> Result<(World, WorldSpec), String> {
    let engine = scene.get("engine").and_then(Value::as_str).unwrap_or("(none)");
    if engine != SYNTH_ENGINE {
        return Err(format!("scene engine `{engine}` is not the synthetic world (`{SYNTH_ENGINE}`); render these requests with that simulator"));
    }
    let seed = scene.get("world_seed").and_then(Value::as_u64).ok_or("scene has no integer `world_seed`")?;
    let landmarks = scene.get("landmarks").and_then(Value::as_u64).ok_or("scene has no integer `landmarks`")? as usize;
    let extent = scene.get("extent").and_then(Value::as_f64).ok_or("scene has no number `extent`")? as f32;
    let spec = WorldSpec { landmarks, extent };
    let world = World::generate(seed, &spec).map_err(|e| e.to_string())?;
    Ok((world, spec))
}
