//! `construct sisbench-videos`: the four SIS-Bench video types from source footage.
//!
//! Sources are the entries of one folder: sub-folders of numbered frames (VisDrone-style
//! sequences, shot at a declared rate) and video files. Every output is H.264 MP4 at 15 FPS:
//! - **single** and **long**: each source converted whole, in its original order; sources at
//!   least `long_min_s` long are the long videos, the others the short clips;
//! - **concatenated**: 2, 3 or 4 distinct short clips joined, the counts dealt from a shuffled
//!   deck holding each equally often (within one), so the three counts are balanced;
//! - **shuffled for Spatial Consistency**: a source cut into 4 consecutive parts of unequal
//!   length (4 random positive ratios, normalised to sum to 1), played in a random order
//!   other than the original;
//! - **shuffled for Spatio-temporal Consistency**: 4 equal, overlapping parts (consecutive
//!   parts share 3 s when the source is under 30 s, else 5 s), played likewise out of order.
//!
//! The index `OUT/videos.jsonl` holds one row per video in the annotation schema of
//! [`crate::sisbench_qa`] (`video`, `duration_s`, `video_type`, `clips` — each source piece and
//! where it plays — and for shuffled videos `segments`, the source seconds `[start, end]` of
//! each part in playing order, and `permutation`, each part's original index), so labels can
//! be added to it and the result fed to `construct sisbench-qa`, and every answer about order
//! is checkable.
//!
//! Everything is planned from the seed before any frame is read, so the same seed gives the
//! same videos; videos are encoded in parallel, each into a temporary file renamed when
//! complete, and an output that already probes with the planned size and frame count is kept,
//! so an interrupted run resumes where it stopped.

use std::fs;
use std::path::{Path, PathBuf};

use motionvl_data::frames::FramePlan;
use motionvl_data::video::{DecodeOptions, EncodeSettings, FRAME_EXTENSIONS, FolderListing, VideoSource, VideoWriter, probe_video};
use motionvl_util::files::write_atomic;
use motionvl_util::rng::{SynthRng, derive_seed};
use ndarray::{Array3, ArrayView3, s};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::ConstructError;
use crate::sisbench_qa::{AnnotatedType, ClipSpan, VideoAnnotation};

/// Video file extensions taken as sources.
pub const VIDEO_EXTENSIONS: [&str; 6] = ["mp4", "mkv", "avi", "mov", "webm", "m4v"];

/// Parts of a shuffled video.
pub const PARTS: usize = 4;

/// Settings of `construct sisbench-videos`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VideosConfig {
    /// Frame rate of every output.
    pub fps: u32,
    /// Declared rate of frame-folder sources.
    pub frame_folder_fps: f64,
    /// Sources at least this long are long videos; shorter ones are the short clips.
    pub long_min_s: f64,
    /// Concatenated videos to make.
    pub concatenated: usize,
    /// Shuffled videos of each kind (spatial, spatio-temporal) to make.
    pub shuffled: usize,
    pub seed: u64,
}

impl Default for VideosConfig {
    fn default() -> Self {
        VideosConfig { fps: 15, frame_folder_fps: 30.0, long_min_s: 30.0, concatenated: 0, shuffled: 0, seed: 0 }
    }
}

/// A source and what probing it said.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    /// File or folder name, as the index records it.
    pub name: String,
    pub media: VideoSource,
    pub frame_count: usize,
    pub fps: f64,
    pub width: usize,
    pub height: usize,
}

impl Source {
    pub fn duration_s(&self) -> f64 {
        self.frame_count as f64 / self.fps
    }
}

/// Lists and probes the sources in `dir` (sorted by name); a source that cannot be read is an
/// error naming it, before anything is encoded.
pub fn find_sources(dir: &Path, frame_folder_fps: f64) -> Result<Vec<Source>, ConstructError> {
    let mut entries: Vec<PathBuf> = Vec::new();
    for entry in fs::read_dir(dir).map_err(ConstructError::io(dir))? {
        entries.push(entry.map_err(ConstructError::io(dir))?.path());
    }
    entries.sort();
    let has_ext = |p: &Path, list: &[&str]| p.extension().and_then(|e| e.to_str()).is_some_and(|e| list.iter().any(|x| x.eq_ignore_ascii_case(e)));
    let mut sources = Vec::new();
    for path in entries {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name.starts_with('.') {
            continue;
        }
        let media = if path.is_dir() {
            let has_frames = fs::read_dir(&path).map_err(ConstructError::io(&path))?.flatten().any(|e| has_ext(&e.path(), &FRAME_EXTENSIONS));
            if !has_frames {
                continue;
            }
            VideoSource::FrameFolder { dir: path.clone(), fps: frame_folder_fps, listing: FolderListing::Numeric }
        } else if has_ext(&path, &VIDEO_EXTENSIONS) {
            VideoSource::File(path.clone())
        } else {
            continue;
        };
        let info = media.probe()?;
        sources.push(Source { name, media, frame_count: info.frame_count, fps: info.fps, width: info.width, height: info.height });
    }
    if sources.is_empty() {
        return Err(ConstructError::input(dir, "no frame folders or video files to convert"));
    }
    Ok(sources)
}

/// A stretch of one source, in source seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Piece {
    pub source: usize,
    pub start_s: f64,
    pub end_s: f64,
}

/// One video to make: its pieces in playing order.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoJob {
    /// Path relative to the output folder.
    pub video: String,
    pub video_type: AnnotatedType,
    pub pieces: Vec<Piece>,
    /// Shuffled videos: the original index of each piece.
    pub permutation: Vec<usize>,
}

/// The 4 consecutive, unequal parts of Spatial Consistency: ratios drawn in (0.1, 1],
/// normalised to sum to 1, as `[start, end]` seconds over `duration`.
pub fn spatial_parts(duration: f64, rng: &mut SynthRng) -> Vec<[f64; 2]> {
    let ratios: Vec<f64> = (0..PARTS).map(|_| rng.range(0.1, 1.0)).collect();
    let total: f64 = ratios.iter().sum();
    let mut start = 0.0;
    ratios
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let end = if i + 1 == PARTS { duration } else { start + duration * r / total };
            let part = [start, end];
            start = end;
            part
        })
        .collect()
}

/// The overlap of Spatio-temporal Consistency's parts: 3 s under 30 s, else 5 s.
pub fn overlap_s(duration: f64) -> f64 {
    if duration < 30.0 { 3.0 } else { 5.0 }
}

/// The 4 equal parts of Spatio-temporal Consistency, consecutive ones overlapping by
/// [`overlap_s`]; `None` when the source is too short for parts longer than the overlap.
pub fn spatiotemporal_parts(duration: f64) -> Option<Vec<[f64; 2]>> {
    let overlap = overlap_s(duration);
    let length = (duration + (PARTS - 1) as f64 * overlap) / PARTS as f64;
    if length <= overlap {
        return None;
    }
    Some(
        (0..PARTS)
            .map(|i| {
                let start = i as f64 * (length - overlap);
                [start, if i + 1 == PARTS { duration } else { start + length }]
            })
            .collect(),
    )
}

/// A uniformly drawn order of `n` parts other than the original one.
pub fn shuffled_order(n: usize, rng: &mut SynthRng) -> Vec<usize> {
    let identity: Vec<usize> = (0..n).collect();
    loop {
        let mut order = identity.clone();
        rng.shuffle(&mut order);
        if order != identity || n < 2 {
            return order;
        }
    }
}

/// Clip counts of the concatenated videos: 2, 3 and 4 equally often (within one), shuffled.
pub fn concat_counts(videos: usize, rng: &mut SynthRng) -> Vec<usize> {
    let mut counts: Vec<usize> = (0..videos).map(|i| 2 + i % 3).collect();
    rng.shuffle(&mut counts);
    counts
}

fn stem(name: &str) -> String {
    Path::new(name).file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| name.to_string())
}

/// Plans every output video (see the module docs); fails when the sources cannot supply the
/// requested concatenations or shuffles.
pub fn plan_videos(sources: &[Source], config: &VideosConfig) -> Result<Vec<VideoJob>, ConstructError> {
    let whole = |i: usize| Piece { source: i, start_s: 0.0, end_s: sources[i].duration_s() };
    let (long, short): (Vec<usize>, Vec<usize>) = (0..sources.len()).partition(|&i| sources[i].duration_s() >= config.long_min_s);
    let mut jobs = Vec::new();
    for &i in &short {
        jobs.push(VideoJob {
            video: format!("videos/single/{}.mp4", stem(&sources[i].name)),
            video_type: AnnotatedType::Single,
            pieces: vec![whole(i)],
            permutation: Vec::new(),
        });
    }
    for &i in &long {
        jobs.push(VideoJob {
            video: format!("videos/long/{}.mp4", stem(&sources[i].name)),
            video_type: AnnotatedType::Long,
            pieces: vec![whole(i)],
            permutation: Vec::new(),
        });
    }
    if config.concatenated > 0 && short.len() < 4 {
        return Err(ConstructError::Setting {
            key: "concatenated",
            problem: format!("concatenations of up to 4 clips need at least 4 short sources (under {} s); found {}", config.long_min_s, short.len()),
        });
    }
    let mut rng = SynthRng::new(derive_seed(config.seed, 0xc0ca));
    for (c, n) in concat_counts(config.concatenated, &mut rng).into_iter().enumerate() {
        let mut pool = short.clone();
        rng.shuffle(&mut pool);
        pool.truncate(n);
        jobs.push(VideoJob {
            video: format!("videos/concatenated/concat{c:04}_{n}clips.mp4"),
            video_type: AnnotatedType::Concatenated,
            pieces: pool.into_iter().map(whole).collect(),
            permutation: Vec::new(),
        });
    }
    let eligible: Vec<usize> = (0..sources.len()).filter(|&i| spatiotemporal_parts(sources[i].duration_s()).is_some()).collect();
    if config.shuffled > 0 && eligible.is_empty() {
        return Err(ConstructError::Setting {
            key: "shuffled",
            problem: "shuffled videos need a source longer than 3 s (the spatio-temporal parts' overlap)".into(),
        });
    }
    let mut rng = SynthRng::new(derive_seed(config.seed, 0x5f1e));
    let mut deck: Vec<usize> = Vec::new();
    for k in 0..config.shuffled {
        for (kind, name) in [(AnnotatedType::ShuffledSpatial, "spatial"), (AnnotatedType::ShuffledSpatiotemporal, "spatiotemporal")] {
            if deck.is_empty() {
                deck = eligible.clone();
                rng.shuffle(&mut deck);
            }
            let i = deck.pop().unwrap_or_default();
            let d = sources[i].duration_s();
            let parts = match kind {
                AnnotatedType::ShuffledSpatial => spatial_parts(d, &mut rng),
                _ => spatiotemporal_parts(d).unwrap_or_default(),
            };
            let order = shuffled_order(PARTS, &mut rng);
            jobs.push(VideoJob {
                video: format!("videos/shuffled_{name}/{}_{k:04}.mp4", stem(&sources[i].name)),
                video_type: kind,
                pieces: order.iter().map(|&o| Piece { source: i, start_s: parts[o][0], end_s: parts[o][1] }).collect(),
                permutation: order,
            });
        }
    }
    let mut names: Vec<&str> = jobs.iter().map(|j| j.video.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(ConstructError::DuplicateVideo { video: w[0].to_owned() });
    }
    Ok(jobs)
}

/// Output frames of a piece at `fps`.
fn piece_frames(piece: &Piece, fps: u32) -> usize {
    (((piece.end_s - piece.start_s) * fps as f64).round() as usize).max(1)
}

impl VideoJob {
    /// Output size: the first piece's source, rounded down to even sides.
    pub fn size(&self, sources: &[Source]) -> (usize, usize) {
        let s = &sources[self.pieces[0].source];
        (s.width / 2 * 2, s.height / 2 * 2)
    }

    pub fn frame_count(&self, fps: u32) -> usize {
        self.pieces.iter().map(|p| piece_frames(p, fps)).sum()
    }

    /// The index row (see the module docs).
    pub fn annotation(&self, sources: &[Source], fps: u32) -> VideoAnnotation {
        let mut clips = Vec::with_capacity(self.pieces.len());
        let mut at = 0.0;
        for p in &self.pieces {
            let length = piece_frames(p, fps) as f64 / fps as f64;
            clips.push(ClipSpan { source: sources[p.source].name.clone(), start_s: at, end_s: at + length });
            at += length;
        }
        let shuffled = matches!(self.video_type, AnnotatedType::ShuffledSpatial | AnnotatedType::ShuffledSpatiotemporal);
        VideoAnnotation {
            video: self.video.clone(),
            duration_s: self.frame_count(fps) as f64 / fps as f64,
            video_type: self.video_type,
            clips,
            segments: if shuffled { self.pieces.iter().map(|p| [p.start_s, p.end_s]).collect() } else { Vec::new() },
            permutation: self.permutation.clone(),
            ..VideoAnnotation::default()
        }
    }

    /// Whether `path` already holds this video (size and frame count as planned).
    fn is_done(&self, path: &Path, sources: &[Source], fps: u32) -> bool {
        let (w, h) = self.size(sources);
        probe_video(path).is_ok_and(|info| info.width == w && info.height == h && info.frame_count.abs_diff(self.frame_count(fps)) <= 1)
    }

    /// Decodes the pieces in chunks and encodes them into `path` (through a temporary file).
    fn encode(&self, path: &Path, sources: &[Source], fps: u32) -> Result<(), ConstructError> {
        const CHUNK: usize = 64;
        let (w, h) = self.size(sources);
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(ConstructError::io(dir))?;
        let tmp = path.with_file_name(format!(".{}.partial.mp4", stem(&path.to_string_lossy())));
        let settings = EncodeSettings {
            // The benchmark's videos are H.264: no silent fallback to another encoder.
            codec: Some("libx264".to_string()),
            frame_rate: (fps as i32, 1),
            bit_rate: (w * h * fps as usize / 4).max(400_000),
            gop_size: fps,
            options: vec![("preset".to_string(), "veryfast".to_string())],
            ..EncodeSettings::default()
        };
        let mut writer = VideoWriter::create(&tmp, w, h, &settings)?;
        let options = DecodeOptions::default();
        for piece in &self.pieces {
            let source = &sources[piece.source];
            let n = piece_frames(piece, fps);
            let index = |j: usize| {
                let t = piece.start_s + j as f64 / fps as f64;
                ((t * source.fps + 1e-6).floor() as usize).min(source.frame_count - 1)
            };
            for chunk in (0..n).collect::<Vec<_>>().chunks(CHUNK) {
                let indices: Vec<usize> = chunk.iter().map(|&j| index(j)).collect();
                let timestamps = indices.iter().map(|&i| i as f64 / source.fps).collect();
                let plan = FramePlan { indices, timestamps, fps: fps as f64 };
                let decoded = source.media.decode(&plan, &options)?;
                for frame in decoded.frames.outer_iter() {
                    writer.push(fitted(frame, w, h).view())?;
                }
            }
        }
        writer.finish()?;
        fs::rename(&tmp, path).map_err(ConstructError::io(path))
    }
}

/// `frame` cropped to `w`×`h` when it is at most one pixel larger (odd sides), else resized.
fn fitted(frame: ArrayView3<u8>, w: usize, h: usize) -> Array3<u8> {
    let (fh, fw, _) = frame.dim();
    if fh >= h && fw >= w && fh - h <= 1 && fw - w <= 1 {
        return frame.slice(s![..h, ..w, ..]).to_owned();
    }
    let packed: Vec<u8> = frame.iter().copied().collect();
    let image = image::RgbImage::from_raw(fw as u32, fh as u32, packed).unwrap_or_default();
    let resized = image::imageops::resize(&image, w as u32, h as u32, image::imageops::FilterType::Triangle);
    Array3::from_shape_vec((h, w, 3), resized.into_raw()).unwrap_or_else(|_| Array3::zeros((h, w, 3)))
}

/// What a run made and kept.
#[derive(Debug, Clone, PartialEq)]
pub struct VideosSummary {
    pub index: PathBuf,
    pub rows: Vec<VideoAnnotation>,
    pub encoded: usize,
    /// Outputs already present and verified, left as they were.
    pub kept: usize,
}

/// Encodes every planned video into `out_dir` (in parallel, `on_video` called as each one is
/// done or kept) and writes the index `videos.jsonl`.
pub fn build_videos(
    sources: &[Source],
    jobs: &[VideoJob],
    config: &VideosConfig,
    out_dir: &Path,
    on_video: &(dyn Fn() + Sync),
) -> Result<VideosSummary, ConstructError> {
    let done: Vec<bool> = jobs
        .par_iter()
        .map(|job| {
            let path = out_dir.join(&job.video);
            let kept = job.is_done(&path, sources, config.fps);
            if !kept {
                job.encode(&path, sources, config.fps)?;
            }
            on_video();
            Ok(kept)
        })
        .collect::<Result<_, ConstructError>>()?;
    let rows: Vec<VideoAnnotation> = jobs.iter().map(|j| j.annotation(sources, config.fps)).collect();
    let mut text = String::new();
    for r in &rows {
        let line = serde_json::to_string(r).map_err(|e| ConstructError::input(out_dir, e.to_string()))?;
        text.push_str(&line);
        text.push('\n');
    }
    let index = out_dir.join("videos.jsonl");
    write_atomic(&index, text.as_bytes())?;
    let kept = done.iter().filter(|k| **k).count();
    Ok(VideosSummary { index, rows, encoded: done.len() - kept, kept })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spatial_parts_are_consecutive_unequal_and_cover_the_source() {
        let mut rng = SynthRng::new(1);
        for _ in 0..50 {
            let parts = spatial_parts(17.0, &mut rng);
            assert_eq!(parts.len(), PARTS);
            assert_eq!((parts[0][0], parts[3][1]), (0.0, 17.0));
            let ratios: Vec<f64> = parts.iter().map(|p| (p[1] - p[0]) / 17.0).collect();
            assert!((ratios.iter().sum::<f64>() - 1.0).abs() < 1e-12);
            assert!(ratios.iter().all(|r| *r > 0.0));
            assert!(parts.windows(2).all(|w| w[0][1] == w[1][0]));
            assert!(ratios.windows(2).all(|w| w[0] != w[1]));
        }
    }

    #[test]
    fn spatiotemporal_parts_overlap_3_s_under_30_s_and_5_s_from_30_s() {
        for (d, overlap) in [(12.0, 3.0), (29.9, 3.0), (30.0, 5.0), (95.0, 5.0)] {
            let parts = spatiotemporal_parts(d).unwrap_or_else(|| panic!("{d} s"));
            assert_eq!((parts[0][0], parts[3][1]), (0.0, d));
            for w in parts.windows(2) {
                assert!((w[0][1] - w[1][0] - overlap).abs() < 1e-9, "{d} s: {parts:?}");
            }
            let lengths: Vec<f64> = parts.iter().map(|p| p[1] - p[0]).collect();
            assert!(lengths.iter().all(|l| (l - lengths[0]).abs() < 1e-9));
        }
        assert!(spatiotemporal_parts(3.0).is_none(), "parts no longer than their overlap");
    }

    #[test]
    fn concat_counts_are_balanced_and_orders_are_never_the_original() {
        let mut rng = SynthRng::new(2);
        let counts = concat_counts(31, &mut rng);
        let n = |k: usize| counts.iter().filter(|&&c| c == k).count();
        assert_eq!((n(2), n(3), n(4)), (11, 10, 10));
        for _ in 0..100 {
            assert_ne!(shuffled_order(4, &mut rng), [0, 1, 2, 3]);
        }
    }
}
