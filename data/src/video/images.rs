//! Single images and folders of numbered frames.

use std::path::{Path, PathBuf};

use ndarray::{Array3, Array4, Axis};

use serde::{Deserialize, Serialize};

use crate::frames::{FramePlan, FramePolicy};

use super::*;

/// Extensions the official code reads as frames (`f.suffix.lower() in ('.jpg', '.jpeg',
/// '.png')`, `motion/src/eval/dataset_utils.py:182-185`).
pub const OFFICIAL_FRAME_EXTENSIONS: [&str; 3] = ["jpg", "jpeg", "png"];

/// Which files of a frame folder are its frames, and in which order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FolderListing {
    /// motionvl's: JPEG/PNG/WebP files in numeric-aware order (the last run of digits in the
    /// stem, so `2.jpg` comes before `10.jpg`; names without digits after, by name).
    #[default]
    Numeric,
    /// The official code's: `.jpg/.jpeg/.png` files (any case) in `sorted()` order of their
    /// names, Python's string order (code points, i.e. UTF-8 bytes), so `10.jpg` comes before
    /// `2.jpg` (`motion/src/eval/dataset_utils.py:182-189`,
    /// `motion/src/uav/data/data_processor.py:205-213`).
    Official,
}

impl FolderListing {
    /// The listing a frame policy goes with: the official plan reads folders as the official
    /// code does, every other plan numerically.
    pub fn for_policy(policy: &FramePolicy) -> Self {
        if policy.counts_frames_officially() { FolderListing::Official } else { FolderListing::Numeric }
    }

    fn extensions(self) -> &'static [&'static str] {
        match self {
            FolderListing::Numeric => &FRAME_EXTENSIONS,
            FolderListing::Official => &OFFICIAL_FRAME_EXTENSIONS,
        }
    }

    fn sort(self, files: &mut [PathBuf]) {
        match self {
            FolderListing::Numeric => files.sort_by_cached_key(|p| frame_sort_key(p)),
            FolderListing::Official => files.sort_by(|a, b| file_name_bytes(a).cmp(file_name_bytes(b))),
        }
    }
}

fn file_name_bytes(path: &Path) -> &[u8] {
    path.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default()
}

/// Reads a JPEG/PNG/WebP (or any format `image` knows, guessed from the content) as
/// `[H, W, 3]` RGB uint8; alpha is dropped, greyscale expanded.
pub fn load_image(path: &Path) -> Result<Array3<u8>, VideoError> {
    let err = |source| VideoError::Image { path: path.to_path_buf(), source };
    let img = image::ImageReader::open(path)
        .map_err(|e| err(image::ImageError::IoError(e)))?
        .with_guessed_format()
        .map_err(|e| err(image::ImageError::IoError(e)))?
        .decode()
        .map_err(err)?
        .into_rgb8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    Array3::from_shape_vec((h, w, 3), img.into_raw()).map_err(|e| {
        err(image::ImageError::Parameter(image::error::ParameterError::from_kind(image::error::ParameterErrorKind::Generic(e.to_string()))))
    })
}

/// A VisDrone-style sequence: a folder of numbered frames and the rate they were shot at.
#[derive(Debug, Clone)]
pub struct FrameFolder {
    dir: PathBuf,
    files: Vec<PathBuf>,
    fps: f64,
}

impl FrameFolder {
    /// Lists the folder's frames in numeric order (`2.jpg` before `10.jpg`; names without
    /// digits sort after, by name).
    pub fn open(dir: &Path, fps: f64) -> Result<Self, VideoError> {
        Self::open_listed(dir, fps, FolderListing::Numeric)
    }

    /// Lists the folder's frames as `listing` says.
    pub fn open_listed(dir: &Path, fps: f64, listing: FolderListing) -> Result<Self, VideoError> {
        if !(fps.is_finite() && fps > 0.0) {
            return Err(VideoError::BadFps { path: dir.to_path_buf(), fps });
        }
        let list_err = |source| VideoError::ListFolder { path: dir.to_path_buf(), source };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(list_err)? {
            let path = entry.map_err(list_err)?.path();
            let is_frame = path.extension().and_then(|e| e.to_str()).is_some_and(|e| listing.extensions().iter().any(|x| x.eq_ignore_ascii_case(e)));
            if is_frame && path.is_file() {
                files.push(path);
            }
        }
        if files.is_empty() {
            return Err(VideoError::EmptyFolder { path: dir.to_path_buf() });
        }
        listing.sort(&mut files);
        Ok(Self { dir: dir.to_path_buf(), files, fps })
    }

    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Size from the first frame's header; count and rate from the listing and declaration.
    pub fn info(&self) -> Result<VideoInfo, VideoError> {
        let first = &self.files[0];
        let (w, h) = image::image_dimensions(first).map_err(|source| VideoError::Image { path: first.clone(), source })?;
        Ok(VideoInfo {
            width: w as usize,
            height: h as usize,
            frame_count: self.files.len(),
            fps: self.fps,
            duration_s: self.files.len() as f64 / self.fps,
            header_frames: Some(self.files.len()),
        })
    }

    /// Reads the planned frames (each file once, however often the plan repeats it). Every
    /// frame must have the size of the first one read.
    pub fn decode(&self, plan: &FramePlan) -> Result<DecodedFrames, VideoError> {
        let mut frames: Option<Array4<u8>> = None;
        let mut last: Option<(usize, Array3<u8>)> = None;
        let mut read = 0;
        for (slot, &index) in plan.indices.iter().enumerate() {
            let path =
                self.files.get(index).ok_or_else(|| VideoError::PlanOutOfRange { path: self.dir.clone(), index, frame_count: self.files.len() })?;
            let image = match last.take() {
                Some((i, img)) if i == index => img,
                _ => {
                    read += 1;
                    load_image(path)?
                }
            };
            let (h, w, _) = image.dim();
            let out = frames.get_or_insert_with(|| Array4::zeros((plan.indices.len(), h, w, 3)));
            let (_, want_h, want_w, _) = out.dim();
            if (h, w) != (want_h, want_w) {
                return Err(VideoError::FrameSize { path: path.clone(), want_w, want_h, got_w: w, got_h: h });
            }
            out.index_axis_mut(Axis(0), slot).assign(&image);
            last = Some((index, image));
        }
        let frames = frames.ok_or_else(|| VideoError::NoFrames { path: self.dir.clone() })?;
        let timestamps = plan.indices.iter().map(|i| *i as f64 / self.fps).collect();
        Ok(DecodedFrames { frames, timestamps, frames_decoded: read })
    }
}

/// Numeric-aware key: the last run of digits in the file stem, then the whole name.
fn frame_sort_key(path: &Path) -> (u8, u128, String) {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let name = path.file_name().and_then(|s| s.to_str()).unwrap_or_default().to_string();
    let digits: String = {
        let rev: String = stem.chars().rev().skip_while(|c| !c.is_ascii_digit()).take_while(|c| c.is_ascii_digit()).collect();
        rev.chars().rev().collect()
    };
    match digits.parse::<u128>() {
        Ok(n) => (0, n, name),
        Err(_) => (1, 0, name),
    }
}
