//! Is the landmark visible in a frame, and where: its support points and the obstacle cloud
//! projected through a pinhole camera, a per-pixel depth test against the nearest obstacle,
//! and UAV-DualCog's thresholds (at least 16 visible points, a visible ratio of 0.08 and a box
//! of 4 pixels a side, depth tolerance 0.2 m). Boxes are `[x1, y1, x2, y2]` in `[0, 1]`.
//!
//! The camera never rolls: image x is `forward × up`, image y points down; pixel centres sit
//! at integer coordinates, as in the synthetic renderer.

use super::geom::{V3, round};

/// Camera and thresholds of the visibility test.
#[derive(Debug, Clone, PartialEq)]
pub struct VisibilityConfig {
    /// Size of the rendered images.
    pub width: usize,
    pub height: usize,
    /// Width the test projects at (the height follows the aspect): counts and ratios then do
    /// not depend on the size media are rendered at.
    pub test_width: usize,
    pub hfov_deg: f64,
    pub depth_tolerance_m: f64,
    pub min_points: usize,
    pub min_ratio: f64,
    pub min_box_px: f64,
    /// Obstacle points cover a square of this half-size (metres, at their depth) instead of
    /// one pixel, so that a sparse cloud still hides what lies behind it; the depth tolerance
    /// grows by as much.
    pub splat_radius_m: f64,
}

impl Default for VisibilityConfig {
    fn default() -> Self {
        VisibilityConfig {
            width: 640,
            height: 480,
            test_width: 640,
            hfov_deg: 90.0,
            depth_tolerance_m: 0.2,
            min_points: 16,
            min_ratio: 0.08,
            min_box_px: 4.0,
            splat_radius_m: 0.0,
        }
    }
}

impl VisibilityConfig {
    /// The test camera at a pose: the images' field of view and aspect, `test_width` wide.
    pub fn camera(&self, eye: V3, forward: V3) -> Camera {
        let height = (self.test_width * self.height + self.width / 2) / self.width.max(1);
        Camera::new(eye, forward, self.test_width, height.max(1), self.hfov_deg)
    }
}

/// A pinhole camera at a pose.
#[derive(Debug, Clone, Copy)]
pub struct Camera {
    pub eye: V3,
    forward: V3,
    right: V3,
    down: V3,
    focal: f64,
    cx: f64,
    cy: f64,
    width: usize,
    height: usize,
}

impl Camera {
    pub fn new(eye: V3, forward: V3, width: usize, height: usize, hfov_deg: f64) -> Self {
        let forward = forward.unit().unwrap_or(V3::new(1.0, 0.0, 0.0));
        // Straight up or down has no defined heading; any right vector does.
        let right = forward.cross(V3::new(0.0, 0.0, 1.0)).unit().unwrap_or(V3::new(0.0, -1.0, 0.0));
        let down = forward.cross(right);
        let focal = (width as f64 / 2.0) / (hfov_deg.to_radians() / 2.0).tan();
        Camera { eye, forward, right, down, focal, cx: (width as f64 - 1.0) / 2.0, cy: (height as f64 - 1.0) / 2.0, width, height }
    }

    /// `(x, y, depth)` of a point in front of the camera, in pixels and metres.
    pub fn project(&self, p: V3) -> Option<(f64, f64, f64)> {
        let rel = p - self.eye;
        let z = rel.dot(self.forward);
        if z <= 1e-3 {
            return None;
        }
        Some((self.cx + self.focal * rel.dot(self.right) / z, self.cy + self.focal * rel.dot(self.down) / z, z))
    }

    fn pixel(&self, x: f64, y: f64) -> Option<(usize, usize)> {
        let (px, py) = (x.round(), y.round());
        (px >= 0.0 && py >= 0.0 && (px as usize) < self.width && (py as usize) < self.height).then_some((px as usize, py as usize))
    }

    /// The box of `points` normalised by the image size when every one of them projects
    /// inside the image, in front of the camera, and the box is at least `min_px` a side.
    pub fn full_box(&self, points: &[V3], min_px: f64) -> Option<[f64; 4]> {
        let mut b = [f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY];
        for &p in points {
            let (x, y, _) = self.project(p)?;
            self.pixel(x, y)?;
            b = [b[0].min(x), b[1].min(y), b[2].max(x), b[3].max(y)];
        }
        (b[2] - b[0] >= min_px && b[3] - b[1] >= min_px).then(|| self.normalise(b))
    }

    fn normalise(&self, b: [f64; 4]) -> [f64; 4] {
        let (w, h) = (self.width as f64, self.height as f64);
        [(b[0] / w).clamp(0.0, 1.0), (b[1] / h).clamp(0.0, 1.0), ((b[2] + 1.0) / w).clamp(0.0, 1.0), ((b[3] + 1.0) / h).clamp(0.0, 1.0)]
    }

    /// Whether `p` lies to the camera's right (`x > 0`) and in front (`z > 0`), as signed
    /// camera-frame coordinates.
    pub fn side(&self, p: V3) -> (f64, f64) {
        let rel = p - self.eye;
        (rel.dot(self.right), rel.dot(self.forward))
    }
}

/// The verdict for one frame.
#[derive(Debug, Clone, PartialEq)]
pub struct FrameVisibility {
    pub in_frame: usize,
    pub visible_points: usize,
    /// `Some` when the landmark counts as visible.
    pub bbox: Option<[f64; 4]>,
}

impl FrameVisibility {
    pub fn visible(&self) -> bool {
        self.bbox.is_some()
    }

    pub fn ratio(&self) -> f64 {
        if self.in_frame == 0 { 0.0 } else { self.visible_points as f64 / self.in_frame as f64 }
    }
}

/// Projects `support` (the target) and `obstacles` through `camera` and applies the depth test
/// and thresholds of `cfg`.
pub fn frame_visibility(camera: &Camera, support: &[V3], obstacles: &[V3], cfg: &VisibilityConfig) -> FrameVisibility {
    let (w, h) = (camera.width, camera.height);
    let targets: Vec<(usize, usize, f64, f64, f64)> = support
        .iter()
        .filter_map(|&p| {
            let (x, y, z) = camera.project(p)?;
            let (px, py) = camera.pixel(x, y)?;
            Some((px, py, z, x, y))
        })
        .collect();
    let none = FrameVisibility { in_frame: targets.len(), visible_points: 0, bbox: None };
    if targets.is_empty() {
        return none;
    }
    let mut depth = vec![f64::INFINITY; w * h];
    for &p in obstacles {
        let Some((x, y, z)) = camera.project(p) else {
            continue;
        };
        let r = if cfg.splat_radius_m > 0.0 { (camera.focal * cfg.splat_radius_m / z).round().min(16.0) } else { 0.0 };
        let (x0, x1) = ((x - r).round().max(0.0), (x + r).round().min(w as f64 - 1.0));
        let (y0, y1) = ((y - r).round().max(0.0), (y + r).round().min(h as f64 - 1.0));
        if x0 > x1 || y0 > y1 {
            continue;
        }
        for py in y0 as usize..=y1 as usize {
            for px in x0 as usize..=x1 as usize {
                let d = &mut depth[py * w + px];
                if z < *d {
                    *d = z;
                }
            }
        }
    }
    // A splatted point stands for a patch of surface of its radius, which may be tilted by as
    // much in depth: the test allows for that.
    let tolerance = cfg.depth_tolerance_m + cfg.splat_radius_m;
    let mut b = [f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY];
    let mut visible = 0;
    for &(px, py, z, x, y) in &targets {
        if z <= depth[py * w + px] + tolerance {
            visible += 1;
            b = [b[0].min(x), b[1].min(y), b[2].max(x), b[3].max(y)];
        }
    }
    let out = FrameVisibility { visible_points: visible, ..none };
    let enough = visible >= cfg.min_points && out.ratio() >= cfg.min_ratio;
    let big = b[2] - b[0] + 1.0 >= cfg.min_box_px && b[3] - b[1] + 1.0 >= cfg.min_box_px;
    FrameVisibility { bbox: (enough && big).then(|| camera.normalise(b)), ..out }
}

/// The obstacle points that can stand between any of `eyes` and any of `targets`: those in the
/// axis-aligned box around both (an occluder lies on a segment from an eye to a target point,
/// so inside their convex hull), grown by `margin` (a splat's radius). Testing against these
/// gives the same verdicts as against the whole cloud, at a cost that does not grow with it.
pub fn possible_occluders(obstacles: &[V3], eyes: &[V3], targets: &[V3], margin: f64) -> Vec<V3> {
    let mut lo = V3::new(f64::INFINITY, f64::INFINITY, f64::INFINITY);
    let mut hi = V3::new(f64::NEG_INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY);
    for p in eyes.iter().chain(targets) {
        lo = V3::new(lo.x.min(p.x), lo.y.min(p.y), lo.z.min(p.z));
        hi = V3::new(hi.x.max(p.x), hi.y.max(p.y), hi.z.max(p.z));
    }
    let inside = |p: &V3| {
        p.x >= lo.x - margin && p.x <= hi.x + margin && p.y >= lo.y - margin && p.y <= hi.y + margin && p.z >= lo.z - margin && p.z <= hi.z + margin
    };
    obstacles.iter().copied().filter(inside).collect()
}

/// Runs of consecutive `true` frames as inclusive `(first, last)` frame ranges.
pub fn runs(flags: &[bool]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, &f) in flags.iter().enumerate() {
        match (f, start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push((s, i - 1));
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push((s, flags.len() - 1));
    }
    out
}

/// A frame range in seconds, `[first / fps, last / fps]`, as UAV-DualCog writes intervals.
pub fn seconds(range: (usize, usize), fps: f64) -> [f64; 2] {
    [round(range.0 as f64 / fps, 3), round(range.1 as f64 / fps, 3)]
}
