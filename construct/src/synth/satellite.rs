//! Cross-view pairs of the synthetic world (`construct synth --satellite`): a nadir
//! orthographic "satellite" image of each world (fixed metres per pixel, north up, the same
//! terrain, landmarks and sun as the UAV clips) and UAV frames over it, each with the exact
//! ground footprint as a box in the satellite image.
//!
//! The footprint box is the axis-aligned hull of the four image corners' rays where they meet
//! the ground plane, in satellite pixels normalised to [0, 1] (x to the east, y to the south).
//! Frames fly close to nadir and close to north-up: a retriever trained here from scratch
//! learns appearance, not rotation invariance, which real pairs (University-1652) teach.

use std::io::Write;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::camera::{Intrinsics, Pose};
use super::error::SynthError;
use super::generate::{CROSS_VIEW_DIRS, CROSS_VIEW_PAIRS, Split, SynthConfig};
use super::geometry::{Ray, Vec3};
use super::render::{lit_surface, render_frame};
use super::rng::{SynthRng, derive_seed};
use super::scene::{World, WorldSpec};

/// Height of the orthographic camera above the ground, above every landmark.
const ORTHO_HEIGHT: f32 = 500.0;
/// The file each split's pairs are written to.
pub const PAIRS_FILE: &str = CROSS_VIEW_PAIRS;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SatelliteConfig {
    /// Side of the satellite image in pixels.
    pub size_px: usize,
    /// Ground resolution of the satellite image.
    pub metres_per_pixel: f32,
    /// Side of the square UAV frames in pixels.
    pub frame_px: usize,
    pub train_frames_per_world: usize,
    pub test_frames_per_world: usize,
    /// UAV altitude range in metres; with the 90° camera the footprint side is twice the altitude.
    pub altitude: [f32; 2],
    /// Largest tilt of the optical axis away from nadir, degrees.
    pub max_tilt_deg: f32,
    /// Largest heading away from north-up, degrees.
    pub max_yaw_deg: f32,
}

impl Default for SatelliteConfig {
    fn default() -> Self {
        Self {
            size_px: 256,
            metres_per_pixel: 1.25,
            frame_px: 112,
            train_frames_per_world: 48,
            test_frames_per_world: 48,
            altitude: [45.0, 80.0],
            max_tilt_deg: 6.0,
            max_yaw_deg: 8.0,
        }
    }
}

impl SatelliteConfig {
    pub fn validate(&self) -> Result<(), SynthError> {
        let bad = |key: &'static str, problem: String| Err(SynthError::Setting { key, problem });
        if self.size_px < 16 || self.frame_px < 16 {
            return bad("satellite size/frame size", format!("{} px and {} px must both be at least 16", self.size_px, self.frame_px));
        }
        if !(self.metres_per_pixel > 0.0) {
            return bad("satellite metres per pixel", format!("must be positive, not {}", self.metres_per_pixel));
        }
        let [lo, hi] = self.altitude;
        if !(lo > 5.0 && hi >= lo && 2.2 * hi < self.span_m()) {
            return bad(
                "UAV altitude",
                format!(
                    "UAV altitude range {lo}–{hi} m must start above 5 m and leave a footprint (2.2 × altitude) inside the {} m satellite image",
                    self.span_m()
                ),
            );
        }
        Ok(())
    }

    /// Side of the satellite image on the ground, metres.
    pub fn span_m(&self) -> f32 {
        self.size_px as f32 * self.metres_per_pixel
    }

    fn frames_per_world(&self, split: Split) -> usize {
        match split {
            Split::Train => self.train_frames_per_world,
            Split::Test => self.test_frames_per_world,
        }
    }
}

/// One line of `cvaa_pairs.jsonl`; media paths are relative to the file's folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairRow {
    pub id: String,
    pub uav: String,
    pub satellite: String,
    /// `[x1, y1, x2, y2]` of the UAV footprint in the satellite image, normalised, 3 decimals.
    #[serde(rename = "box")]
    pub footprint: [f64; 4],
    pub altitude_m: f64,
}

/// Where the pairs of each split went.
#[derive(Debug, Clone)]
pub struct SatelliteSummary {
    pub train_pairs: PathBuf,
    pub test_pairs: PathBuf,
    pub pairs: [usize; 2],
}

/// Renders the satellite image of a world: `[size, size, 3]` RGB, row 0 to the north, centred
/// on the world origin.
pub fn render_satellite(world: &World, cfg: &SatelliteConfig) -> Vec<u8> {
    let n = cfg.size_px;
    let half = cfg.span_m() / 2.0;
    let mut rgb = vec![0u8; n * n * 3];
    rgb.par_chunks_mut(n * 3).enumerate().for_each(|(row, line)| {
        for col in 0..n {
            let (x, y) = (-half + (col as f32 + 0.5) * cfg.metres_per_pixel, half - (row as f32 + 0.5) * cfg.metres_per_pixel);
            let ray = Ray::new(Vec3::new(x, y, ORTHO_HEIGHT), Vec3::new(0.0, 0.0, -1.0));
            let hit = world.trace(&ray);
            let colour = lit_surface(world, &ray, &hit, |cos| cfg.metres_per_pixel / cos.max(0.15));
            for c in 0..3 {
                line[col * 3 + c] = (colour[c] * 255.0 + 0.5).clamp(0.0, 255.0) as u8;
            }
        }
    });
    rgb
}

/// The footprint of a camera on the ground plane as a normalised box in the satellite image,
/// or `None` when a corner ray misses the ground.
pub fn footprint_box(pose: &Pose, k: &Intrinsics, cfg: &SatelliteConfig) -> Option<[f64; 4]> {
    let basis = pose.basis();
    let half = f64::from(cfg.span_m()) / 2.0;
    let span = f64::from(cfg.span_m());
    let (w, h) = (k.width as f32, k.height as f32);
    let mut bounds = [f64::INFINITY, f64::INFINITY, f64::NEG_INFINITY, f64::NEG_INFINITY];
    for (px, py) in [(-0.5, -0.5), (w - 0.5, -0.5), (-0.5, h - 0.5), (w - 0.5, h - 0.5)] {
        let ray = pose.ray(&basis, k, px, py);
        if ray.dir.z >= -1e-6 {
            return None;
        }
        let ground = ray.at(-ray.origin.z / ray.dir.z);
        let (u, v) = ((f64::from(ground.x) + half) / span, (half - f64::from(ground.y)) / span);
        bounds = [bounds[0].min(u), bounds[1].min(v), bounds[2].max(u), bounds[3].max(v)];
    }
    Some(bounds)
}

/// A UAV pose over the satellite image whose whole footprint lies inside it.
fn draw_pose(rng: &mut SynthRng, k: &Intrinsics, cfg: &SatelliteConfig) -> Option<(Pose, [f64; 4])> {
    let half = cfg.span_m() / 2.0;
    for _ in 0..64 {
        let altitude = rng.range(f64::from(cfg.altitude[0]), f64::from(cfg.altitude[1])) as f32;
        let margin = 1.1 * altitude;
        let x = rng.range(f64::from(-half + margin), f64::from(half - margin)) as f32;
        let y = rng.range(f64::from(-half + margin), f64::from(half - margin)) as f32;
        let yaw = std::f32::consts::FRAC_PI_2 + (rng.range(-1.0, 1.0) as f32) * cfg.max_yaw_deg.to_radians();
        let pitch = -std::f32::consts::FRAC_PI_2 + (rng.range(0.0, 1.0) as f32) * cfg.max_tilt_deg.to_radians();
        let pose = Pose::new(Vec3::new(x, y, altitude), yaw, pitch);
        if let Some(b) = footprint_box(&pose, k, cfg)
            && b[0] >= 0.0
            && b[1] >= 0.0
            && b[2] <= 1.0
            && b[3] <= 1.0
        {
            return Some((pose, b));
        }
    }
    None
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn write_png(path: &Path, rgb: Vec<u8>, w: usize, h: usize) -> Result<(), SynthError> {
    let image = image::RgbImage::from_raw(w as u32, h as u32, rgb).ok_or_else(|| SynthError::ImageBuffer {
        path: path.to_path_buf(),
        width: w,
        height: h,
    })?;
    let tmp = path.with_extension("png.tmp");
    image.save_with_format(&tmp, image::ImageFormat::Png).map_err(|e| SynthError::Io { path: tmp.clone(), source: std::io::Error::other(e) })?;
    std::fs::rename(&tmp, path).map_err(SynthError::io(path))
}

/// Renders one split's satellite images and UAV frames under `out/<split>/` and writes
/// `out/<split>/cvaa_pairs.jsonl` (atomically); returns the manifest path and its row count.
fn write_split(
    config: &SynthConfig,
    cfg: &SatelliteConfig,
    split: Split,
    out: &Path,
    on_frame: &(dyn Fn() + Sync),
) -> Result<(PathBuf, usize), SynthError> {
    let dir = out.join(split.name());
    for sub in CROSS_VIEW_DIRS {
        std::fs::create_dir_all(dir.join(sub)).map_err(SynthError::io(&dir))?;
    }
    let k = Intrinsics::drone(cfg.frame_px, cfg.frame_px);
    let mut rows = Vec::new();
    for (w, seed) in config.world_seeds(split).into_iter().enumerate() {
        let world = World::generate(seed, &WorldSpec { landmarks: config.landmarks_per_world, ..WorldSpec::default() })?;
        let satellite = format!("satellite/world-{w:02}.png");
        write_png(&dir.join(&satellite), render_satellite(&world, cfg), cfg.size_px, cfg.size_px)?;
        let mut rng = SynthRng::new(derive_seed(seed, 0x5a7e));
        let poses: Vec<(Pose, [f64; 4])> = (0..cfg.frames_per_world(split))
            .map(|i| {
                draw_pose(&mut rng, &k, cfg)
                    .ok_or_else(|| SynthError::Planning { seed, detail: format!("no UAV pose {i} fits inside the satellite image") })
            })
            .collect::<Result<_, _>>()?;
        let world_rows: Vec<PairRow> = poses
            .into_par_iter()
            .enumerate()
            .map(|(i, (pose, footprint))| {
                let uav = format!("cvaa_uav/world-{w:02}-{i:03}.png");
                let frame = render_frame(&world, &k, &pose);
                write_png(&dir.join(&uav), frame.rgb, cfg.frame_px, cfg.frame_px)?;
                on_frame();
                Ok(PairRow {
                    id: format!("{}-world-{w:02}-{i:03}", split.name()),
                    uav,
                    satellite: satellite.clone(),
                    footprint: footprint.map(round3),
                    altitude_m: round3(f64::from(pose.position.z)),
                })
            })
            .collect::<Result<_, SynthError>>()?;
        rows.extend(world_rows);
    }
    let path = dir.join(PAIRS_FILE);
    let tmp = dir.join(format!(".{PAIRS_FILE}.tmp"));
    let mut file = std::fs::File::create(&tmp).map_err(SynthError::io(&tmp))?;
    for row in &rows {
        let line = serde_json::to_string(row).map_err(|source| SynthError::Json { path: path.clone(), source })?;
        writeln!(file, "{line}").map_err(SynthError::io(&tmp))?;
    }
    file.sync_all().map_err(SynthError::io(&tmp))?;
    std::fs::rename(&tmp, &path).map_err(SynthError::io(&path))?;
    Ok((path, rows.len()))
}

/// Frames `write_pairs` renders in all, for a progress bar.
pub fn total_frames(config: &SynthConfig, cfg: &SatelliteConfig) -> usize {
    [Split::Train, Split::Test].iter().map(|&s| config.world_seeds(s).len() * cfg.frames_per_world(s)).sum()
}

/// Satellite images, UAV frames and `cvaa_pairs.jsonl` for the training and held-out worlds
/// of `config` (the same worlds `construct synth` flies its clips over).
pub fn write_pairs(config: &SynthConfig, cfg: &SatelliteConfig, out: &Path, on_frame: &(dyn Fn() + Sync)) -> Result<SatelliteSummary, SynthError> {
    cfg.validate()?;
    let (train_pairs, train) = write_split(config, cfg, Split::Train, out, on_frame)?;
    let (test_pairs, test) = write_split(config, cfg, Split::Test, out, on_frame)?;
    Ok(SatelliteSummary { train_pairs, test_pairs, pairs: [train, test] })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nadir_north_up_camera_sees_a_centred_square_of_twice_its_altitude() {
        let cfg = SatelliteConfig::default();
        let k = Intrinsics::drone(64, 64);
        let pose = Pose::new(Vec3::new(0.0, 0.0, 50.0), std::f32::consts::FRAC_PI_2, -std::f32::consts::FRAC_PI_2);
        let b = footprint_box(&pose, &k, &cfg).expect("looks down");
        let side = 100.0 / f64::from(cfg.span_m());
        let want = [0.5 - side / 2.0, 0.5 - side / 2.0, 0.5 + side / 2.0, 0.5 + side / 2.0];
        for (got, want) in b.iter().zip(want) {
            assert!((got - want).abs() < 1e-4, "{b:?} vs {want:?}");
        }
    }

    #[test]
    fn a_camera_east_of_centre_lands_right_of_centre() {
        let cfg = SatelliteConfig::default();
        let k = Intrinsics::drone(32, 32);
        let pose = Pose::new(Vec3::new(40.0, -20.0, 50.0), std::f32::consts::FRAC_PI_2, -std::f32::consts::FRAC_PI_2);
        let b = footprint_box(&pose, &k, &cfg).expect("looks down");
        let centre = ((b[0] + b[2]) / 2.0, (b[1] + b[3]) / 2.0);
        let span = f64::from(cfg.span_m());
        assert!((centre.0 - (0.5 + 40.0 / span)).abs() < 1e-4 && (centre.1 - (0.5 + 20.0 / span)).abs() < 1e-4, "{centre:?}");
    }

    #[test]
    fn the_satellite_image_matches_the_uav_view_below_it() {
        // A nadir frame and the satellite crop at its footprint show the same ground.
        let cfg = SatelliteConfig { size_px: 96, metres_per_pixel: 2.0, ..SatelliteConfig::default() };
        let world = World::generate(3, &WorldSpec::default()).expect("world");
        let satellite = render_satellite(&world, &cfg);
        let k = Intrinsics::drone(24, 24);
        let pose = Pose::new(Vec3::new(10.0, 10.0, 24.0), std::f32::consts::FRAC_PI_2, -std::f32::consts::FRAC_PI_2);
        let frame = render_frame(&world, &k, &pose);
        let b = footprint_box(&pose, &k, &cfg).expect("looks down");
        let n = cfg.size_px as f64;
        let mut diffs = Vec::new();
        for y in 0..24 {
            for x in 0..24 {
                let col = ((b[0] + (b[2] - b[0]) * (x as f64 + 0.5) / 24.0) * n) as usize;
                let row = ((b[1] + (b[3] - b[1]) * (y as f64 + 0.5) / 24.0) * n) as usize;
                for c in 0..3 {
                    let s = f64::from(satellite[(row * cfg.size_px + col) * 3 + c]);
                    let f = f64::from(frame.rgb[(y * 24 + x) * 3 + c]);
                    diffs.push((s - f).abs());
                }
            }
        }
        let mean = diffs.iter().sum::<f64>() / diffs.len() as f64;
        assert!(mean < 12.0, "mean |satellite − frame| = {mean:.1} grey levels");
    }
}
