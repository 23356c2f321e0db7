//! Renders render requests with the synthetic world's ray caster: Stage 3 requests as H.264
//! MP4 at the trajectory's frame rate, Stage 4 requests as JPEG (quality 80). Only media are
//! written; manifests are never touched, so re-rendering cannot change ids, options or answers.
//!
//! Render-request files (`stage3_render_requests.json`, `stage4_render_requests.json`):
//!
//! ```text
//! {"format": "motionvl.dccs.render_requests/1", "stage": 3 | 4, "scene_id": "...",
//!  "scene": {"engine": "motionvl_synth", "world_seed": 7, "landmarks": 3, "extent": 120.0},
//!  "camera": {"hfov_deg": 90, "width": 640, "height": 480, "roll_deg": 0},
//!  "requests": [
//!    {"request_id", "kind": "video", "output_path": "videos/x.mp4", "trajectory_path":
//!     "trajectories/x.json", "fps": 10, "frame_count": N, "sample_ids": [...]},          (stage 3)
//!    {"request_id", "kind": "image", "output_path": "images/x.jpg", "eye": [x, y, z],
//!     "yaw_deg", "pitch_deg", "jpeg_quality": 80, "overlay_bbox_xyxy_norm": [..] | null,
//!     "bbox_xyxy_norm": [..]}                                                              (stage 4)
//!  ]}
//! ```
//!
//! Paths are relative to the request file; positions in metres in the point cloud's frame
//! (x east, y north, z up), yaw counter-clockwise from +x and pitch up from the horizon in
//! degrees, no roll. For AirSim (NED, yaw clockwise from north): `x_ned = y`, `y_ned = x`,
//! `z_ned = −z`, `yaw_ned = 90° − yaw`, pitch unchanged.

use std::path::{Path, PathBuf};

use image::codecs::jpeg::JpegEncoder;
use motionvl_util::files::{temp_sibling, write_atomic};
use serde_json::Value;

use super::error::{DccsError, read_json};
use super::stage3::RENDER_FORMAT;
use super::trajectory::Trajectory;
use super::world::world_of;
use crate::synth::camera::{Intrinsics, Pose};
use crate::synth::geometry::Vec3;
use crate::synth::render::render_frame;
use crate::synth::scene::World;
use crate::synth::write::write_video;

/// A request file, checked and with its world rebuilt.
struct Requests {
    path: PathBuf,
    world: World,
    intrinsics: Intrinsics,
    requests: Vec<Value>,
}

fn open(path: &Path, stage: u64) -> Result<Requests, DccsError> {
    let bad = |detail: String| DccsError::Requests { path: path.to_path_buf(), detail };
    let v = read_json(path)?;
    if v.get("format").and_then(Value::as_str) != Some(RENDER_FORMAT) {
        return Err(bad(format!("not a render-request file (expected `format`: `{RENDER_FORMAT}`)")));
    }
    if v.get("stage").and_then(Value::as_u64) != Some(stage) {
        return Err(bad(format!("expected Stage {stage} requests")));
    }
    let (world, _) = world_of(v.get("scene").unwrap_or(&Value::Null)).map_err(bad)?;
    let camera = v.get("camera").ok_or_else(|| bad("missing `camera`".into()))?;
    let dim = |k: &str| camera.get(k).and_then(Value::as_u64).map(|n| n as usize).ok_or_else(|| bad(format!("camera has no integer `{k}`")));
    let (width, height) = (dim("width")?, dim("height")?);
    if !width.is_multiple_of(2) || !height.is_multiple_of(2) || width == 0 || height == 0 {
        return Err(bad(format!("camera size {width}x{height} must be positive and even")));
    }
    let hfov = camera.get("hfov_deg").and_then(Value::as_f64).ok_or_else(|| bad("camera has no `hfov_deg`".into()))?;
    let requests = v.get("requests").and_then(Value::as_array).cloned().ok_or_else(|| bad("missing `requests`".into()))?;
    Ok(Requests { path: path.to_path_buf(), world, intrinsics: Intrinsics::new(width, height, hfov as f32), requests })
}

impl Requests {
    fn resolve(&self, r: &Value, key: &str) -> Result<PathBuf, DccsError> {
        let id = r.get("request_id").and_then(Value::as_str).unwrap_or("?");
        let rel = r
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| DccsError::Requests { path: self.path.clone(), detail: format!("request `{id}` has no `{key}`") })?;
        // Requests name files relative to their own folder, and only there.
        motionvl_util::confine::confined_join(self.path.parent().unwrap_or(Path::new(".")), rel)
            .map_err(|e| DccsError::Requests { path: self.path.clone(), detail: format!("request `{id}`: `{key}` {e}") })
    }
}

fn pose(x: f64, y: f64, z: f64, yaw_deg: f64, pitch_deg: f64) -> Pose {
    Pose::new(Vec3::new(x as f32, y as f32, z as f32), yaw_deg.to_radians() as f32, pitch_deg.to_radians() as f32)
}

/// Renders every Stage 3 request as an MP4; `progress` is called once per video. Returns the
/// number of videos.
pub fn render_stage3(path: &Path, progress: &dyn Fn()) -> Result<usize, DccsError> {
    let req = open(path, 3)?;
    for r in &req.requests {
        let traj_path = req.resolve(r, "trajectory_path")?;
        let out = req.resolve(r, "output_path")?;
        let traj = Trajectory::from_json(&read_json(&traj_path)?).map_err(|detail| DccsError::Requests { path: traj_path.clone(), detail })?;
        let k = &req.intrinsics;
        let frames: Vec<Vec<u8>> = traj
            .frames
            .iter()
            .map(|f| {
                let (yaw, pitch) = f.yaw_pitch();
                render_frame(&req.world, k, &pose(f.pos.x, f.pos.y, f.pos.z, yaw, pitch)).rgb
            })
            .collect();
        if let Some(dir) = out.parent() {
            std::fs::create_dir_all(dir).map_err(DccsError::io(dir))?;
        }
        // The encoder picks the container by extension, so the temporary file keeps `.mp4`.
        let tmp = temp_sibling(&out).with_extension("tmp.mp4");
        write_video(&tmp, frames.iter().map(Vec::as_slice), k.width, k.height, traj.fps.round() as u32)?;
        std::fs::rename(&tmp, &out).map_err(DccsError::io(&out))?;
        progress();
    }
    Ok(req.requests.len())
}

/// Renders every Stage 4 request as a JPEG, drawing the overlay box where one is asked for;
/// `progress` is called once per image. Returns the number of images.
pub fn render_stage4(path: &Path, progress: &dyn Fn()) -> Result<usize, DccsError> {
    let req = open(path, 4)?;
    for r in &req.requests {
        let out = req.resolve(r, "output_path")?;
        let bad = |detail: String| DccsError::Requests { path: req.path.clone(), detail };
        let id = r.get("request_id").and_then(Value::as_str).unwrap_or("?");
        let eye: Vec<f64> = r
            .get("eye")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect())
            .filter(|a: &Vec<f64>| a.len() == 3)
            .ok_or_else(|| bad(format!("request `{id}` has no `eye` [x, y, z]")))?;
        let angle = |k: &str| r.get(k).and_then(Value::as_f64).ok_or_else(|| bad(format!("request `{id}` has no `{k}`")));
        let k = &req.intrinsics;
        let mut rgb = render_frame(&req.world, k, &pose(eye[0], eye[1], eye[2], angle("yaw_deg")?, angle("pitch_deg")?)).rgb;
        if let Some(b) = r.get("overlay_bbox_xyxy_norm").and_then(Value::as_array) {
            let b: Vec<f64> = b.iter().filter_map(Value::as_f64).collect();
            if b.len() == 4 {
                draw_box(&mut rgb, k.width, k.height, [b[0], b[1], b[2], b[3]]);
            }
        }
        let quality = r.get("jpeg_quality").and_then(Value::as_u64).unwrap_or(80).clamp(1, 100) as u8;
        let mut bytes = Vec::new();
        JpegEncoder::new_with_quality(&mut bytes, quality)
            .encode(&rgb, k.width as u32, k.height as u32, image::ExtendedColorType::Rgb8)
            .map_err(|source| DccsError::Image { path: out.clone(), source })?;
        write_atomic(&out, &bytes)?;
        progress();
    }
    Ok(req.requests.len())
}

/// A red rectangle two pixels wide along a normalised box, as UAV-DualCog's reference overlays.
fn draw_box(rgb: &mut [u8], w: usize, h: usize, b: [f64; 4]) {
    let px = |v: f64, n: usize| ((v * n as f64).round() as isize).clamp(0, n as isize - 1) as usize;
    let (x0, y0, x1, y1) = (px(b[0], w), px(b[1], h), px(b[2], w), px(b[3], h));
    let mut put = |x: usize, y: usize| {
        let i = (y * w + x) * 3;
        rgb[i..i + 3].copy_from_slice(&[255, 0, 0]);
    };
    for t in 0..2 {
        for x in x0..=x1 {
            put(x, (y0 + t).min(h - 1));
            put(x, y1.saturating_sub(t));
        }
        for y in y0..=y1 {
            put((x0 + t).min(w - 1), y);
            put(x1.saturating_sub(t), y);
        }
    }
}
