//! Where the official code finds a released row's media, and which rows it leaves out.
//!
//! `SISBenchDataset._resolve_video_input` (`motion/src/eval/dataset_utils.py:64-90`) tries the
//! row's `video_name`, then its `video_path`; for each reference `ref` (relative ones under the
//! media folder `frames_dir`):
//! 1. `frames_dir/ref`;
//! 2. `ref` without a leading component equal to `frames_dir`'s own name
//!    (`video/AirScape/x.mp4` under `SIS-Bench/video`);
//! 3. `frames_dir/video/ref`, `frames_dir/TravelUAV_dataset/ref`, `frames_dir/AirScape_dataset/ref`.
//!
//! and for each candidate, in that order: the candidate itself (a file or a folder); the
//! candidate without its suffix as a frame folder (`x.mp4` → `x/`); for a candidate without a
//! suffix, the same name with `.mp4`, `.mov`, `.avi`, `.mkv`, `.webm`. The first that exists
//! wins; a row none of them finds is left out of the run.
//!
//! `_validate_frames` (:102-127) then leaves out a row whose media holds 1 to `min_frames − 1`
//! frames by the header's count (the official run passes `--min_frames 8`); a count of 0 (the
//! header states none) is kept.

use std::path::{Component, Path, PathBuf};

use crate::video::{FolderListing, FrameFolder, VideoError, VideoSource};

/// Folders the official resolver also looks in under the media folder.
pub const OFFICIAL_MEDIA_SUBDIRS: [&str; 3] = ["video", "TravelUAV_dataset", "AirScape_dataset"];

/// Suffixes the official resolver adds to a reference that has none.
pub const OFFICIAL_VIDEO_SUFFIXES: [&str; 5] = [".mp4", ".mov", ".avi", ".mkv", ".webm"];

/// The official run's `--min_frames`.
pub const OFFICIAL_MIN_FRAMES: usize = 8;

/// The media folder of a released manifest when none is given: the official data registry's
/// (`configs/data_registry.json`), `video/` beside `SIS-Bench.jsonl` and `TravelUAV_dataset/`
/// beside `TravelUAV_test.jsonl`, whichever exists; otherwise the manifest's own folder.
pub fn default_media_dir(manifest: &Path) -> PathBuf {
    let dir = manifest.parent().map(Path::to_path_buf).unwrap_or_default();
    ["video", "TravelUAV_dataset"].iter().map(|sub| dir.join(sub)).find(|d| d.is_dir()).unwrap_or(dir)
}

/// Every path the official resolver tries for `references` under `frames_dir`, in its order
/// (duplicates dropped, as its `dict.fromkeys` does). Empty references are skipped.
pub fn official_candidates(frames_dir: &Path, references: &[&str]) -> Vec<PathBuf> {
    let mut refs: Vec<&str> = Vec::new();
    for r in references.iter().copied().filter(|r| !r.is_empty()) {
        if !refs.contains(&r) {
            refs.push(r);
        }
    }
    let root_name = frames_dir.file_name();
    let mut tried = Vec::new();
    for reference in refs {
        let relative = Path::new(reference);
        let mut candidates = Vec::new();
        if relative.is_absolute() {
            candidates.push(relative.to_path_buf());
        } else {
            candidates.push(frames_dir.join(relative));
            // Python's `Path.parts` drops `.` components.
            let parts: Vec<&std::ffi::OsStr> = relative.components().filter(|c| !matches!(c, Component::CurDir)).map(Component::as_os_str).collect();
            if let (Some(first), Some(root)) = (parts.first(), root_name)
                && *first == root
            {
                candidates.push(parts[1..].iter().fold(frames_dir.to_path_buf(), |p, c| p.join(c)));
            }
            candidates.extend(OFFICIAL_MEDIA_SUBDIRS.iter().map(|sub| frames_dir.join(sub).join(relative)));
        }
        let mut unique = Vec::new();
        for c in candidates {
            if !unique.contains(&c) {
                unique.push(c);
            }
        }
        for candidate in unique {
            let suffix = python_suffix(&candidate);
            tried.push(candidate.clone());
            tried.push(without_suffix(&candidate, suffix.len()));
            if suffix.is_empty() {
                tried.extend(OFFICIAL_VIDEO_SUFFIXES.iter().map(|s| with_added_suffix(&candidate, s)));
            }
        }
    }
    tried
}

/// The media the official code evaluates for a row with `references` (`video_name` first, then
/// `video_path`), or `None` when it would leave the row out as missing.
pub fn resolve_official(frames_dir: &Path, references: &[&str]) -> Option<PathBuf> {
    let mut refs: Vec<&str> = Vec::new();
    for r in references.iter().copied().filter(|r| !r.is_empty()) {
        if !refs.contains(&r) {
            refs.push(r);
        }
    }
    for reference in refs {
        // Each candidate's own checks, in order: itself, its suffix-less folder, its suffixed
        // videos; `official_candidates` lists them flat, so walk them per candidate.
        let tried = official_candidates(frames_dir, &[reference]);
        let mut i = 0;
        while i < tried.len() {
            let candidate = &tried[i];
            let suffixless = &tried[i + 1];
            if candidate.is_file() || candidate.is_dir() {
                return Some(candidate.clone());
            }
            if suffixless.is_dir() {
                return Some(suffixless.clone());
            }
            let has_suffix = !python_suffix(candidate).is_empty();
            let videos = if has_suffix { 0 } else { OFFICIAL_VIDEO_SUFFIXES.len() };
            if let Some(video) = tried[i + 2..i + 2 + videos].iter().find(|v| v.is_file()) {
                return Some(video.clone());
            }
            i += 2 + videos;
        }
    }
    None
}

/// Python's `PurePath.suffix`: from the last `.` of the name, unless that dot starts the name
/// or ends it.
fn python_suffix(path: &Path) -> &str {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    match name.rfind('.') {
        Some(i) if i > 0 && i + 1 < name.len() => &name[i..],
        _ => "",
    }
}

/// `with_suffix("")`: the name without its last `suffix_len` bytes.
fn without_suffix(path: &Path, suffix_len: usize) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    path.with_file_name(&name[..name.len() - suffix_len])
}

/// `with_suffix(s)` on a name without a suffix: the name with `s` appended.
fn with_added_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(suffix);
    path.with_file_name(name)
}

/// Why the official code leaves a resolved row out of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftOut {
    /// The media's header states `frames` frames, fewer than `min_frames` but at least one.
    TooFewFrames { frames: usize, min_frames: usize },
}

impl std::fmt::Display for LeftOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeftOut::TooFewFrames { frames, min_frames } => {
                write!(f, "{frames} frames by the header, fewer than the official min_frames {min_frames}")
            }
        }
    }
}

/// The frame count the official filter reads: a folder's `.jpg/.jpeg/.png` files (0 for a
/// folder of none), a video's header count, else its stream duration × average rate, else 0.
pub fn official_frame_count(media: &Path) -> Result<usize, VideoError> {
    if media.is_dir() {
        return match FrameFolder::open_listed(media, 1.0, FolderListing::Official) {
            Ok(folder) => Ok(folder.files().len()),
            Err(VideoError::EmptyFolder { .. }) => Ok(0),
            Err(e) => Err(e),
        };
    }
    Ok(VideoSource::File(media.to_path_buf()).probe()?.header_frames.unwrap_or(0))
}

/// Whether the official run leaves out the row whose media is `media` under `--min_frames
/// min_frames`: `Some` when its header count is 1 to `min_frames − 1`.
pub fn official_left_out(media: &Path, min_frames: usize) -> Result<Option<LeftOut>, VideoError> {
    let frames = official_frame_count(media)?;
    Ok((frames > 0 && frames < min_frames).then_some(LeftOut::TooFewFrames { frames, min_frames }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_suffix_rules() {
        for (name, suffix) in [("x.mp4", ".mp4"), ("a.tar.gz", ".gz"), (".hidden", ""), ("x.", ""), ("plain", ""), ("a..b", ".b")] {
            assert_eq!(python_suffix(Path::new(name)), suffix, "{name}");
        }
    }

    #[test]
    fn candidates_follow_the_official_order() {
        let root = Path::new("/data/SIS-Bench/video");
        let got = official_candidates(root, &["video/AirScape/a.mp4", "", "video/AirScape/a.mp4"]);
        let want: Vec<PathBuf> = [
            "/data/SIS-Bench/video/video/AirScape/a.mp4",
            "/data/SIS-Bench/video/video/AirScape/a",
            "/data/SIS-Bench/video/AirScape/a.mp4",
            "/data/SIS-Bench/video/AirScape/a",
            "/data/SIS-Bench/video/video/video/AirScape/a.mp4",
            "/data/SIS-Bench/video/video/video/AirScape/a",
            "/data/SIS-Bench/video/TravelUAV_dataset/video/AirScape/a.mp4",
            "/data/SIS-Bench/video/TravelUAV_dataset/video/AirScape/a",
            "/data/SIS-Bench/video/AirScape_dataset/video/AirScape/a.mp4",
            "/data/SIS-Bench/video/AirScape_dataset/video/AirScape/a",
        ]
        .iter()
        .map(PathBuf::from)
        .collect();
        assert_eq!(got, want);
        // No suffix: each candidate also tries the five video suffixes.
        let got = official_candidates(root, &["seq_7"]);
        assert_eq!(got.len(), 4 * 7);
        assert_eq!(
            got[..7].iter().map(|p| p.to_string_lossy().into_owned()).collect::<Vec<_>>(),
            [
                "/data/SIS-Bench/video/seq_7",
                "/data/SIS-Bench/video/seq_7",
                "/data/SIS-Bench/video/seq_7.mp4",
                "/data/SIS-Bench/video/seq_7.mov",
                "/data/SIS-Bench/video/seq_7.avi",
                "/data/SIS-Bench/video/seq_7.mkv",
                "/data/SIS-Bench/video/seq_7.webm",
            ]
        );
    }
}
