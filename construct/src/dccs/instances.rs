//! Stage 2's handoff: `valid_instances.json`, the reviewed landmarks of one scene.
//!
//! Accepted shapes (UAV-DualCog's own and ours): `{"valid_instances": [...]}` or a bare list of
//! objects with
//!
//! | key | meaning |
//! |---|---|
//! | `instance_id` | unique id |
//! | `landmark_category` (or `class_name`) | one of [`Category::ALL`] |
//! | `landmark_subcategory` | generic subcategory (`water tower`) |
//! | `landmark_description` (or `description`) | at most 20 words |
//! | `center_3d` | box centre `[x, y, z]`, metres, z up |
//! | `bbox_3d` | `{"size": [sx, sy, sz], "yaw_deg": a}`, `{"min": [..], "max": [..]}` or `[cx, cy, cz, sx, sy, sz, yaw_deg]` |
//! | `support_points` | optional `[[x, y, z], ...]` on the landmark's surface, the points visibility tests |
//! | `review_action`, `annotation_status` | optional; rows whose action is not `keep` or whose status is not `labeled` are left out, as UAV-DualCog does |
//!
//! Without `support_points` the surface of the box stands in for them (a 1 m grid on its faces).
//! Bad input — a category outside the list, a degenerate box, a long description, a duplicate
//! id — is an error naming the file and the landmark.

use std::path::Path;

use motionvl_util::files::write_json_atomic;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::error::{DccsError, read_json};
use super::geom::V3;

/// The closed landmark taxonomy of UAV-DualCog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Building,
    Vehicle,
    PublicFacility,
    UrbanLandscape,
    TransportInfrastructure,
    IndustrialInfrastructure,
    Vegetation,
    Other,
}

impl Category {
    pub const ALL: [Category; 8] = [
        Category::Building,
        Category::Vehicle,
        Category::PublicFacility,
        Category::UrbanLandscape,
        Category::TransportInfrastructure,
        Category::IndustrialInfrastructure,
        Category::Vegetation,
        Category::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Category::Building => "building",
            Category::Vehicle => "vehicle",
            Category::PublicFacility => "public_facility",
            Category::UrbanLandscape => "urban_landscape",
            Category::TransportInfrastructure => "transport_infrastructure",
            Category::IndustrialInfrastructure => "industrial_infrastructure",
            Category::Vegetation => "vegetation",
            Category::Other => "other",
        }
    }

    pub fn from_name(s: &str) -> Option<Category> {
        let key = s.trim().to_ascii_lowercase().replace([' ', '-'], "_");
        Category::ALL.into_iter().find(|c| c.name() == key)
    }
}

/// Longest description UAV-DualCog's review accepts.
pub const MAX_DESCRIPTION_WORDS: usize = 20;

/// An oriented bounding box: centre, full size along its own axes, yaw about z.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OrientedBox {
    pub center: V3,
    pub size: V3,
    pub yaw_deg: f64,
}

impl OrientedBox {
    /// `p` in the box's own axes, relative to its centre.
    pub fn local(&self, p: V3) -> V3 {
        (p - self.center).rotate_z(-self.yaw_deg)
    }

    pub fn world(&self, local: V3) -> V3 {
        local.rotate_z(self.yaw_deg) + self.center
    }

    /// Whether `p` lies inside the box grown by `margin_xy` sideways and `margin_z` up and down.
    pub fn contains_expanded(&self, p: V3, margin_xy: f64, margin_z: f64) -> bool {
        let l = self.local(p);
        l.x.abs() <= self.size.x / 2.0 + margin_xy && l.y.abs() <= self.size.y / 2.0 + margin_xy && l.z.abs() <= self.size.z / 2.0 + margin_z
    }

    pub fn corners(&self) -> [V3; 8] {
        let h = self.size * 0.5;
        let mut out = [V3::default(); 8];
        for (i, c) in out.iter_mut().enumerate() {
            let sx = if i & 1 == 0 { -h.x } else { h.x };
            let sy = if i & 2 == 0 { -h.y } else { h.y };
            let sz = if i & 4 == 0 { -h.z } else { h.z };
            *c = self.world(V3::new(sx, sy, sz));
        }
        out
    }

    /// Half the horizontal diagonal: the radius of a vertical cylinder holding the box.
    pub fn footprint_radius(&self) -> f64 {
        0.5 * self.size.x.hypot(self.size.y)
    }

    pub fn top(&self) -> f64 {
        self.center.z + self.size.z / 2.0
    }

    /// Points on the box's faces at most `spacing` apart.
    pub fn surface_points(&self, spacing: f64) -> Vec<V3> {
        let h = self.size * 0.5;
        let steps = |len: f64| ((len / spacing).ceil() as usize).max(1);
        let grid = |a: f64, b: f64| {
            let (na, nb) = (steps(2.0 * a), steps(2.0 * b));
            (0..=na).flat_map(move |i| (0..=nb).map(move |j| (-a + 2.0 * a * i as f64 / na as f64, -b + 2.0 * b * j as f64 / nb as f64)))
        };
        let mut out = Vec::new();
        for s in [-1.0, 1.0] {
            out.extend(grid(h.y, h.z).map(|(y, z)| self.world(V3::new(s * h.x, y, z))));
            out.extend(grid(h.x, h.z).map(|(x, z)| self.world(V3::new(x, s * h.y, z))));
            out.extend(grid(h.x, h.y).map(|(x, y)| self.world(V3::new(x, y, s * h.z))));
        }
        out
    }
}

/// One reviewed landmark.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Landmark {
    pub id: String,
    pub category: Category,
    pub subcategory: String,
    pub description: String,
    pub bbox: OrientedBox,
    /// Points on the landmark's surface; visibility is decided on these.
    pub support_points: Vec<V3>,
}

impl Landmark {
    /// The object in UAV-DualCog's `valid_instances.json` form.
    pub fn to_json(&self) -> Value {
        json!({
            "instance_id": self.id,
            "landmark_category": self.category.name(),
            "landmark_subcategory": self.subcategory,
            "landmark_description": self.description,
            "annotation_status": "labeled",
            "review_action": "keep",
            "center_3d": self.bbox.center.to_array(),
            "bbox_3d": {"size": self.bbox.size.to_array(), "yaw_deg": self.bbox.yaw_deg},
            "support_points": self.support_points.iter().map(|p| p.to_array()).collect::<Vec<_>>(),
        })
    }
}

/// Reads and checks `valid_instances.json`; at least one landmark must remain.
pub fn read_instances(path: &Path) -> Result<Vec<Landmark>, DccsError> {
    let value = read_json(path)?;
    let items = match &value {
        Value::Array(items) => items,
        Value::Object(o) => match o.get("valid_instances") {
            Some(Value::Array(items)) => items,
            _ => {
                return Err(DccsError::Instances {
                    path: path.to_path_buf(),
                    detail: "expected a list of landmarks or an object with `valid_instances`".into(),
                });
            }
        },
        _ => {
            return Err(DccsError::Instances { path: path.to_path_buf(), detail: "expected a JSON list or object".into() });
        }
    };
    let mut out: Vec<Landmark> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let id = item
            .get("instance_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| DccsError::Instances { path: path.to_path_buf(), detail: format!("entry {i} has no string `instance_id`") })?;
        let bad = |detail: String| DccsError::Landmark { path: path.to_path_buf(), landmark: id.clone(), detail };
        let field = |k: &str| item.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
        let dropped = field("review_action").is_some_and(|a| !a.eq_ignore_ascii_case("keep"));
        let unlabeled = field("annotation_status").is_some_and(|a| !a.eq_ignore_ascii_case("labeled"));
        if dropped || unlabeled {
            continue;
        }
        // The id names the landmark's trajectory, images and video under the output folder.
        motionvl_util::confine::safe_name(&id)
            .map_err(|e| DccsError::Instances { path: path.to_path_buf(), detail: format!("entry {i}: instance_id {e}") })?;
        if out.iter().any(|l| l.id == id) {
            return Err(bad("appears twice".into()));
        }
        out.push(parse_landmark(item, id.clone()).map_err(bad)?);
    }
    if out.is_empty() {
        return Err(DccsError::Instances { path: path.to_path_buf(), detail: "no landmark to build from".into() });
    }
    Ok(out)
}

fn parse_landmark(item: &Value, id: String) -> Result<Landmark, String> {
    let text = |keys: &[&str]| keys.iter().find_map(|k| item.get(*k).and_then(Value::as_str)).map(str::trim);
    let category_text = text(&["landmark_category", "class_name"]).ok_or("missing `landmark_category`")?;
    let category = Category::from_name(category_text)
        .ok_or_else(|| format!("category `{category_text}` is not one of {}", Category::ALL.map(Category::name).join(", ")))?;
    let subcategory = text(&["landmark_subcategory", "subcategory"]).unwrap_or_default().to_string();
    let description = text(&["landmark_description", "description"]).ok_or("missing `landmark_description`")?;
    if description.is_empty() {
        return Err("empty `landmark_description`".into());
    }
    let words = description.split_whitespace().count();
    if words > MAX_DESCRIPTION_WORDS {
        return Err(format!("description has {words} words (at most {MAX_DESCRIPTION_WORDS})"));
    }
    let bbox = parse_box(item)?;
    let support_points = match item.get("support_points") {
        None | Some(Value::Null) => bbox.surface_points(1.0),
        Some(v) => {
            let points = parse_points(v).ok_or("`support_points` should be a list of [x, y, z]")?;
            if points.is_empty() {
                return Err("`support_points` is empty".into());
            }
            points
        }
    };
    Ok(Landmark { id, category, subcategory, description: description.to_string(), bbox, support_points })
}

fn vec3(v: Option<&Value>) -> Option<V3> {
    let a = v?.as_array()?;
    if a.len() != 3 {
        return None;
    }
    let p = V3::new(a[0].as_f64()?, a[1].as_f64()?, a[2].as_f64()?);
    p.is_finite().then_some(p)
}

fn parse_points(v: &Value) -> Option<Vec<V3>> {
    v.as_array()?.iter().map(|p| vec3(Some(p))).collect()
}

fn parse_box(item: &Value) -> Result<OrientedBox, String> {
    let center = vec3(item.get("center_3d"));
    let bbox = item.get("bbox_3d").ok_or("missing `bbox_3d`")?;
    let b = match bbox {
        Value::Array(a) if a.len() >= 7 => {
            let n: Option<Vec<f64>> = a.iter().take(7).map(Value::as_f64).collect();
            let n = n.ok_or("`bbox_3d` list should hold 7 numbers")?;
            OrientedBox { center: V3::new(n[0], n[1], n[2]), size: V3::new(n[3], n[4], n[5]), yaw_deg: n[6] }
        }
        Value::Object(o) => {
            let yaw_deg = o.get("yaw_deg").and_then(Value::as_f64).unwrap_or(0.0);
            if let Some(size) = vec3(o.get("size")) {
                let center = vec3(o.get("center")).or(center).ok_or("missing `center_3d`")?;
                OrientedBox { center, size, yaw_deg }
            } else {
                let (lo, hi) = vec3(o.get("min")).zip(vec3(o.get("max"))).ok_or("`bbox_3d` needs `size` or `min` and `max`")?;
                OrientedBox { center: (lo + hi) * 0.5, size: hi - lo, yaw_deg }
            }
        }
        _ => return Err("`bbox_3d` should be an object or a list of 7 numbers".into()),
    };
    if !(b.center.is_finite() && b.size.is_finite() && b.yaw_deg.is_finite()) {
        return Err("`bbox_3d` holds a non-finite number".into());
    }
    if b.size.x <= 0.0 || b.size.y <= 0.0 || b.size.z <= 0.0 {
        return Err(format!("degenerate box: size {:.3} × {:.3} × {:.3} m (every side must be positive)", b.size.x, b.size.y, b.size.z));
    }
    // Its faces are sampled at fixed spacing: a side of 1e6 m would be ~1e12 points.
    if b.size.x > MAX_BOX_SIDE_M || b.size.y > MAX_BOX_SIDE_M || b.size.z > MAX_BOX_SIDE_M {
        return Err(format!("box of {:.0} × {:.0} × {:.0} m: no landmark side may exceed {MAX_BOX_SIDE_M} m", b.size.x, b.size.y, b.size.z));
    }
    Ok(b)
}

/// The largest landmark side accepted (the tallest buildings are under 1 km).
pub const MAX_BOX_SIDE_M: f64 = 1000.0;

/// Writes landmarks as `{"valid_instances": [...]}`.
pub fn write_instances(path: &Path, landmarks: &[Landmark]) -> Result<(), DccsError> {
    let items: Vec<Value> = landmarks.iter().map(Landmark::to_json).collect();
    Ok(write_json_atomic(path, &json!({ "valid_instances": items }))?)
}
