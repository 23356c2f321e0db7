//! Cross-view (UAV ↔ satellite) pairs for CVAA: the pairs manifest, University-1652's folder
//! layout, and the pixels both views are fed with.
//!
//! A pairs manifest is JSONL, one pair a line:
//! `{"id": "…", "uav": "frames/a.png", "satellite": "sat/a.png", "box": [x1, y1, x2, y2]}`,
//! where `uav` is an image, or a video with `"timestamp": seconds`, and `box` (optional) is the
//! UAV footprint in the satellite image, normalised to [0, 1]. Media paths are relative to the
//! manifest's folder unless absolute.

use std::path::{Path, PathBuf};

use ndarray::{Array3, ArrayView3};
use serde::Deserialize;

use crate::frames::FramePlan;
use crate::preprocess::resize_bicubic_aa;
use crate::video::{VideoError, decode_video, load_image, probe_video};

/// ImageNet statistics, which DINOv2 was trained with.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

#[derive(Debug, thiserror::Error)]
pub enum PairsError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}:{line}: {reason}", path.display())]
    Row { path: PathBuf, line: usize, reason: String },
    #[error("{}: {reason}", path.display())]
    Layout { path: PathBuf, reason: String },
    #[error(transparent)]
    Video(#[from] VideoError),
    /// A UAV view typed as `VIDEO@SECONDS` whose time is not a non-negative number of seconds.
    #[error("`{arg}`: the time after @ must be a non-negative number of seconds, e.g. clip.mp4@2.5")]
    BadTime { arg: String },
    #[error("{}: {seconds} s is past the end of the video ({duration_s:.2} s)", path.display())]
    PastTheEnd { path: PathBuf, seconds: f64, duration_s: f64 },
    #[error("University-1652 split `{0}`: use train or test")]
    UnknownSplit(String),
    #[error("window sizes {0:?} must be fractions in (0, 1]")]
    WindowSides(Vec<f64>),
    #[error("window stride {0} must be a fraction in (0, 1]")]
    WindowStride(f64),
}

/// The UAV side of a pair: a still image or one moment of a video.
#[derive(Debug, Clone, PartialEq)]
pub enum UavView {
    Image(PathBuf),
    VideoAt { path: PathBuf, seconds: f64 },
}

impl UavView {
    /// `FRAME` or `VIDEO@SECONDS`, as typed on a command line.
    pub fn parse(arg: &str) -> Result<Self, PairsError> {
        if let Some((path, t)) = arg.rsplit_once('@') {
            let bad = || PairsError::BadTime { arg: arg.to_owned() };
            let seconds: f64 = t.parse().map_err(|_| bad())?;
            if !(seconds >= 0.0 && seconds.is_finite()) {
                return Err(bad());
            }
            return Ok(Self::VideoAt { path: PathBuf::from(path), seconds });
        }
        Ok(Self::Image(PathBuf::from(arg)))
    }

    pub fn path(&self) -> &Path {
        match self {
            Self::Image(p) | Self::VideoAt { path: p, .. } => p,
        }
    }

    /// The frame as `[H, W, 3]` RGB.
    pub fn load(&self) -> Result<Array3<u8>, PairsError> {
        match self {
            Self::Image(path) => Ok(load_image(path)?),
            Self::VideoAt { path, seconds } => {
                let info = probe_video(path)?;
                let last = info.frame_count.saturating_sub(1);
                let index = ((seconds * info.fps).round() as usize).min(last);
                if *seconds > info.duration_s + 1.0 / info.fps.max(1e-9) {
                    return Err(PairsError::PastTheEnd { path: path.clone(), seconds: *seconds, duration_s: info.duration_s });
                }
                let plan = FramePlan { indices: vec![index], timestamps: vec![index as f64 / info.fps], fps: info.fps };
                let decoded = decode_video(path, &plan)?;
                Ok(decoded.frames.index_axis(ndarray::Axis(0), 0).to_owned())
            }
        }
    }
}

/// One UAV–satellite pair.
#[derive(Debug, Clone, PartialEq)]
pub struct Pair {
    pub id: String,
    pub uav: UavView,
    pub satellite: PathBuf,
    /// The UAV footprint in the satellite image, `[x1, y1, x2, y2]` normalised; `None` when
    /// the satellite image as a whole is the match (University-1652).
    pub footprint: Option<[f64; 4]>,
}

#[derive(Deserialize)]
struct RawPair {
    id: Option<String>,
    uav: String,
    timestamp: Option<f64>,
    satellite: String,
    #[serde(rename = "box")]
    footprint: Option<[f64; 4]>,
}

/// Reads a pairs manifest; every row is checked (box inside [0, 1] and ordered, media present)
/// before any is returned, and an error names the file and line.
pub fn read_pairs(path: &Path) -> Result<Vec<Pair>, PairsError> {
    let text = std::fs::read_to_string(path).map_err(|source| PairsError::Io { path: path.to_path_buf(), source })?;
    let root = path.parent().unwrap_or(Path::new("."));
    let mut pairs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: String| PairsError::Row { path: path.to_path_buf(), line: i + 1, reason };
        let raw: RawPair = serde_json::from_str(line).map_err(|e| bad(e.to_string()))?;
        let media = |rel: &str| root.join(rel);
        let uav_path = media(&raw.uav);
        let satellite = media(&raw.satellite);
        for (key, p) in [("uav", &uav_path), ("satellite", &satellite)] {
            if !p.is_file() {
                return Err(bad(format!("`{key}` file {} does not exist", p.display())));
            }
        }
        if let Some(b) = raw.footprint
            && !(b.iter().all(|v| (0.0..=1.0).contains(v)) && b[0] < b[2] && b[1] < b[3])
        {
            return Err(bad(format!("`box` {b:?} must be [x1, y1, x2, y2] inside [0, 1] with x1 < x2 and y1 < y2")));
        }
        let uav = match raw.timestamp {
            Some(t) if t >= 0.0 && t.is_finite() => UavView::VideoAt { path: uav_path, seconds: t },
            Some(t) => return Err(bad(format!("`timestamp` {t} must be a non-negative number of seconds"))),
            None => UavView::Image(uav_path),
        };
        pairs.push(Pair { id: raw.id.unwrap_or_else(|| format!("line-{}", i + 1)), uav, satellite, footprint: raw.footprint });
    }
    if pairs.is_empty() {
        return Err(PairsError::Layout { path: path.to_path_buf(), reason: "holds no pair".into() });
    }
    Ok(pairs)
}

/// University-1652's layout: `<split>/drone/<id>/*.jpeg` ↔ `<split>/satellite/<id>/<id>.jpg`
/// (`split` = `train`, or `test` with its `query_drone`/`gallery_satellite` folders).
pub fn read_university1652(root: &Path, split: &str) -> Result<Vec<Pair>, PairsError> {
    let (drone, satellite) = match split {
        "train" => ("train/drone", "train/satellite"),
        "test" => ("test/query_drone", "test/gallery_satellite"),
        other => return Err(PairsError::UnknownSplit(other.to_owned())),
    };
    let (drone_dir, satellite_dir) = (root.join(drone), root.join(satellite));
    let list = |dir: &Path| -> Result<Vec<PathBuf>, PairsError> {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| PairsError::Io { path: dir.to_path_buf(), source })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        Ok(entries)
    };
    let mut pairs = Vec::new();
    for location in list(&drone_dir)?.into_iter().filter(|p| p.is_dir()) {
        let id = location.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let sat_folder = satellite_dir.join(&id);
        let satellite = list(&sat_folder)?
            .into_iter()
            .find(|p| is_image(p))
            .ok_or_else(|| PairsError::Layout { path: sat_folder.clone(), reason: format!("no satellite image for location {id}") })?;
        for (k, frame) in list(&location)?.into_iter().filter(|p| is_image(p)).enumerate() {
            pairs.push(Pair { id: format!("{id}-{k:03}"), uav: UavView::Image(frame), satellite: satellite.clone(), footprint: None });
        }
    }
    if pairs.is_empty() {
        return Err(PairsError::Layout { path: drone_dir, reason: "no drone images in <id>/ folders".into() });
    }
    Ok(pairs)
}

fn is_image(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e.to_ascii_lowercase().as_str(), "jpg" | "jpeg" | "png" | "webp"))
}

/// A normalised `[x1, y1, x2, y2]` box of an `[H, W, 3]` image, at least one pixel a side.
pub fn crop(image: ArrayView3<u8>, b: [f64; 4]) -> Array3<u8> {
    let (h, w) = (image.shape()[0], image.shape()[1]);
    let to_px = |v: f64, n: usize| ((v * n as f64).round().max(0.0) as usize).min(n);
    let (x1, x2) = (to_px(b[0], w).min(w - 1), to_px(b[2], w));
    let (y1, y2) = (to_px(b[1], h).min(h - 1), to_px(b[3], h));
    image.slice(ndarray::s![y1..y2.max(y1 + 1), x1..x2.max(x1 + 1), ..]).to_owned()
}

/// `[H, W, 3]` RGB → `[3, out_h, out_w]` f32 in DINOv2's normalisation, resized with
/// antialiased bicubic as torchvision does.
pub fn normalized_chw(image: ArrayView3<u8>, out_h: usize, out_w: usize) -> Vec<f32> {
    let resized = if image.shape()[0] == out_h && image.shape()[1] == out_w { image.to_owned() } else { resize_bicubic_aa(image, out_h, out_w) };
    let mut out = vec![0f32; 3 * out_h * out_w];
    for ((y, x, c), &v) in resized.indexed_iter() {
        out[(c * out_h + y) * out_w + x] = (f32::from(v) / 255.0 - IMAGENET_MEAN[c]) / IMAGENET_STD[c];
    }
    out
}

/// Square windows over an image, as normalised boxes: for each side (a fraction of the image's
/// shorter side) every position at `stride` (a fraction of that side) from the top-left corner,
/// plus one flush with the right and bottom edges.
pub fn sliding_windows(width: usize, height: usize, sides: &[f64], stride: f64) -> Result<Vec<[f64; 4]>, PairsError> {
    if sides.is_empty() || !sides.iter().all(|s| *s > 0.0 && *s <= 1.0) {
        return Err(PairsError::WindowSides(sides.to_vec()));
    }
    if !(stride > 0.0 && stride <= 1.0) {
        return Err(PairsError::WindowStride(stride));
    }
    let shorter = width.min(height) as f64;
    let mut boxes = Vec::new();
    for &side in sides {
        let (bw, bh) = (side * shorter / width as f64, side * shorter / height as f64);
        let starts = |extent: f64, step: f64| -> Vec<f64> {
            let mut v: Vec<f64> = (0..).map(|i| i as f64 * step).take_while(|s| s + extent <= 1.0 + 1e-9).collect();
            if v.last().is_none_or(|l| (l + extent - 1.0).abs() > 1e-9) {
                v.push((1.0 - extent).max(0.0));
            }
            v
        };
        for y in starts(bh, stride * bh) {
            for x in starts(bw, stride * bw) {
                boxes.push([x, y, (x + bw).min(1.0), (y + bh).min(1.0)]);
            }
        }
    }
    Ok(boxes)
}

/// Intersection over union of two `[x1, y1, x2, y2]` boxes.
pub fn box_iou(a: [f64; 4], b: [f64; 4]) -> f64 {
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let area = |r: [f64; 4]| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    let union = area(a) + area(b) - inter;
    if union > 0.0 { inter / union } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_cover_the_image_to_its_edges() {
        let boxes = sliding_windows(100, 100, &[0.4], 0.5).unwrap();
        // Starts 0, 0.2, 0.4, 0.6 per axis: the last is flush with the edge.
        assert_eq!(boxes.len(), 16);
        assert!(boxes.iter().any(|b| (b[2] - 1.0).abs() < 1e-9 && (b[3] - 1.0).abs() < 1e-9));
        let odd = sliding_windows(100, 100, &[0.3], 0.5).unwrap();
        // 0, .15, .3, .45, .6, then .7 flush.
        assert_eq!(odd.len(), 36);
        assert!(sliding_windows(10, 10, &[1.5], 0.5).is_err());
    }

    #[test]
    fn iou_of_known_boxes() {
        assert!((box_iou([0.0, 0.0, 0.5, 0.5], [0.25, 0.0, 0.75, 0.5]) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(box_iou([0.0, 0.0, 0.1, 0.1], [0.5, 0.5, 0.6, 0.6]), 0.0);
        assert!((box_iou([0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4]) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn crop_and_normalise() {
        let image = Array3::from_shape_fn((4, 6, 3), |(y, x, c)| (y * 40 + x * 5 + c) as u8);
        let part = crop(image.view(), [0.5, 0.5, 1.0, 1.0]);
        assert_eq!(part.shape(), &[2, 3, 3]);
        assert_eq!(part[[0, 0, 0]], image[[2, 3, 0]]);
        let chw = normalized_chw(part.view(), 2, 3);
        let want = (f32::from(image[[2, 3, 1]]) / 255.0 - IMAGENET_MEAN[1]) / IMAGENET_STD[1];
        assert!((chw[2 * 3] - want).abs() < 1e-6);
    }

    #[test]
    fn a_bad_row_is_named_by_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.png"), b"").unwrap();
        let manifest = dir.path().join("pairs.jsonl");
        std::fs::write(&manifest, "{\"uav\": \"a.png\", \"satellite\": \"a.png\", \"box\": [0.1, 0.1, 0.5, 0.5]}\n{\"uav\": \"a.png\", \"satellite\": \"a.png\", \"box\": [0.6, 0.1, 0.5, 0.5]}\n").unwrap();
        let err = read_pairs(&manifest).unwrap_err().to_string();
        assert!(err.contains("pairs.jsonl:2") && err.contains("box"), "{err}");
        std::fs::write(&manifest, "{\"uav\": \"missing.png\", \"satellite\": \"a.png\"}\n").unwrap();
        let err = read_pairs(&manifest).unwrap_err().to_string();
        assert!(err.contains(":1") && err.contains("missing.png"), "{err}");
    }

    #[test]
    fn a_video_moment_is_parsed_from_the_command_line() {
        assert_eq!(UavView::parse("clip.mp4@2.5").unwrap(), UavView::VideoAt { path: "clip.mp4".into(), seconds: 2.5 });
        assert_eq!(UavView::parse("frame.png").unwrap(), UavView::Image("frame.png".into()));
        assert!(UavView::parse("clip.mp4@soon").is_err());
    }

    #[test]
    fn university1652_pairs_every_drone_view_with_its_location_tile() {
        let dir = tempfile::tempdir().unwrap();
        for id in ["0001", "0002"] {
            std::fs::create_dir_all(dir.path().join(format!("train/drone/{id}"))).unwrap();
            std::fs::create_dir_all(dir.path().join(format!("train/satellite/{id}"))).unwrap();
            std::fs::write(dir.path().join(format!("train/satellite/{id}/{id}.jpg")), b"").unwrap();
            for k in 0..3 {
                std::fs::write(dir.path().join(format!("train/drone/{id}/image-{k:02}.jpeg")), b"").unwrap();
            }
        }
        let pairs = read_university1652(dir.path(), "train").unwrap();
        assert_eq!(pairs.len(), 6);
        assert!(pairs[4].satellite.ends_with("train/satellite/0002/0002.jpg") && pairs[4].uav.path().ends_with("0002/image-01.jpeg"));
        std::fs::remove_file(dir.path().join("train/satellite/0002/0002.jpg")).unwrap();
        let err = read_university1652(dir.path(), "train").unwrap_err().to_string();
        assert!(err.contains("0002"), "{err}");
    }
}
