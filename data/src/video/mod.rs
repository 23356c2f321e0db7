//! Decoding clips and images into RGB uint8 arrays, and writing clips.
//!
//! Three kinds of source behave as one ([`VideoSource`]):
//! - a video file (mp4, mkv, avi, webm, … — anything the linked FFmpeg demuxes), decoded with
//!   `ffmpeg-next`. Frames are matched to a [`FramePlan`]'s timestamps by their presentation
//!   timestamps, so variable-frame-rate files sample the right moments; the decoder seeks to
//!   near each far-away target and decodes forward, so a 32-frame plan over a long video
//!   decodes a few GOPs, not the whole file. Frames become RGB with their own colour matrix and
//!   range, or as PyAV 13 converts them for the official SIS-Motion code (BT.601 whatever the
//!   tags), which the official plan picks ([`ColourConversion`]);
//! - a folder of numbered JPEG/PNG/WebP frames (VisDrone sequences) with a declared fps, listed
//!   in numeric order or the official code's name order ([`FolderListing`]); only the planned
//!   files are read;
//! - single images (JPEG/PNG/WebP) through the `image` crate ([`load_image`]).
//!
//! Output layouts are those of [`crate::preprocess`]: `[T, H, W, 3]` and `[H, W, 3]` uint8 RGB.
//! [`VideoWriter`] encodes frames back into a file, for construction steps and for tests that
//! need real videos without shipping binaries.

mod colour;
mod decode;
mod encode;
mod images;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ffmpeg_next as ffmpeg;
use ndarray::Array4;

use crate::frames::{ClipTiming, FramePlan, FramePolicy, PlanError};

pub use colour::ColourConversion;
pub use decode::{decode_all, decode_video, decode_video_with, probe_video};
pub use encode::{EncodeSettings, VideoWriter};
pub use images::{FolderListing, FrameFolder, OFFICIAL_FRAME_EXTENSIONS, load_image};

/// A gap (seconds) between the last decoded frame and the next planned one beyond which the
/// decoder seeks instead of decoding through. Typical UAV footage has keyframes every 1–2 s;
/// seeking closer than that only re-decodes the same GOP.
pub const SEEK_MIN_GAP_S: f64 = 2.0;

/// File extensions read as frames of a frame folder, compared case-insensitively.
pub const FRAME_EXTENSIONS: [&str; 4] = ["jpg", "jpeg", "png", "webp"];

/// Everything that can go wrong reading or writing media. Each variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum VideoError {
    #[error("cannot initialise FFmpeg: {0}")]
    Init(ffmpeg::Error),
    #[error("{}: cannot open as a video: {source}", path.display())]
    Open { path: PathBuf, source: ffmpeg::Error },
    #[error("{}: no video stream", path.display())]
    NoVideoStream { path: PathBuf },
    #[error("{}: cannot set up the video decoder: {source}", path.display())]
    Codec { path: PathBuf, source: ffmpeg::Error },
    #[error("{}: reading packets failed: {source}", path.display())]
    Read { path: PathBuf, source: ffmpeg::Error },
    #[error("{}: decoding failed: {source}", path.display())]
    Decode { path: PathBuf, source: ffmpeg::Error },
    #[error("{}: seeking to {seconds:.3} s failed: {source}", path.display())]
    Seek { path: PathBuf, seconds: f64, source: ffmpeg::Error },
    #[error("{}: converting a frame to RGB failed: {source}", path.display())]
    Convert { path: PathBuf, source: ffmpeg::Error },
    #[error(
        "{}: damaged or truncated — the container's length asks for frame {wanted_frame} ({wanted_s:.2} s) but the stream ends at frame {decoded_frames} ({last_s:.2} s)",
        path.display()
    )]
    Truncated { path: PathBuf, decoded_frames: usize, wanted_frame: usize, last_s: f64, wanted_s: f64 },
    #[error("{}: the video decoded to no frames", path.display())]
    NoFrames { path: PathBuf },
    #[error("{}: cannot tell the frame rate or length ({detail})", path.display())]
    Timing { path: PathBuf, detail: String },
    #[error("{}: {source}", path.display())]
    Plan { path: PathBuf, source: PlanError },
    #[error("{}: plan asks for frame {index} but the source has {frame_count}", path.display())]
    PlanOutOfRange { path: PathBuf, index: usize, frame_count: usize },
    #[error("{}: cannot list frame folder: {source}", path.display())]
    ListFolder { path: PathBuf, source: std::io::Error },
    #[error("{}: frame folder holds no {FRAME_EXTENSIONS:?} files", path.display())]
    EmptyFolder { path: PathBuf },
    #[error("{}: declared fps {fps} must be positive", path.display())]
    BadFps { path: PathBuf, fps: f64 },
    #[error("{}: cannot read image: {source}", path.display())]
    Image { path: PathBuf, source: image::ImageError },
    #[error("{}: frame is {got_w}x{got_h} but the sequence is {want_w}x{want_h}", path.display())]
    FrameSize { path: PathBuf, want_w: usize, want_h: usize, got_w: usize, got_h: usize },
    #[error("{}: cannot encode: {detail}", path.display())]
    Encode { path: PathBuf, detail: String },
    #[error("{}: frames of {width}x{height} exceed the {max} pixels decoded at most", path.display())]
    TooLarge { path: PathBuf, width: u32, height: u32, max: usize },
}

/// Initialises FFmpeg once per process and quiets its per-frame warnings (decoder chatter
/// about damaged frames would otherwise flood loader logs; real failures come back as errors).
fn init_ffmpeg() -> Result<(), VideoError> {
    static INIT: OnceLock<Result<(), ffmpeg::Error>> = OnceLock::new();
    (*INIT.get_or_init(|| {
        ffmpeg::init()?;
        ffmpeg::log::set_level(ffmpeg::log::Level::Error);
        Ok(())
    }))
    .map_err(VideoError::Init)
}

/// What a source is, as far as planning needs.
#[derive(Debug, Clone, PartialEq)]
pub struct VideoInfo {
    pub width: usize,
    pub height: usize,
    /// Frames in the clip: the container's count when it has one, else `duration * fps`
    /// rounded (Matroska/WebM rarely store counts).
    pub frame_count: usize,
    /// Average frame rate (FFmpeg's `avg_frame_rate`, else `r_frame_rate`; a frame folder's
    /// declared rate).
    pub fps: f64,
    /// Length in seconds as the container states it (frame folders: `frame_count / fps`).
    pub duration_s: f64,
    /// The count the official code plans with: the stream's frame count, else its duration ×
    /// average rate floored (PyAV's `stream.frames`, `stream.duration`, `stream.average_rate`);
    /// a frame folder's file count. `None` when the stream states neither.
    pub header_frames: Option<usize>,
}

impl VideoInfo {
    pub fn timing(&self) -> ClipTiming {
        ClipTiming::new(self.frame_count, self.fps)
    }

    /// The timing `policy` plans with: the official plan counts frames as the official code
    /// does ([`VideoInfo::header_frames`]), falling back to motionvl's estimate where the stream
    /// states no count or duration (the official code would decode the whole file to count).
    pub fn timing_for(&self, policy: &FramePolicy) -> ClipTiming {
        match self.header_frames {
            Some(frames) if policy.counts_frames_officially() => ClipTiming::new(frames, self.fps),
            _ => self.timing(),
        }
    }
}

/// Decoded frames and when they really were.
#[derive(Debug, Clone)]
pub struct DecodedFrames {
    /// `[T, H, W, 3]` RGB, one frame per plan entry, in plan order.
    pub frames: Array4<u8>,
    /// Presentation time (seconds from the stream start) of each returned frame.
    pub timestamps: Vec<f64>,
    /// Frames the decoder produced to serve the plan (all of them for a full decode); lets
    /// benchmarks and tests see that seeking skipped work.
    pub frames_decoded: usize,
}

/// Decoder settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeOptions {
    /// FFmpeg decoder threads; 1 by default because the data loader already runs one decode
    /// per worker thread, 0 lets FFmpeg pick.
    pub threads: usize,
    /// Seek when the next planned frame is more than this many seconds ahead.
    pub seek_min_gap_s: f64,
    /// How frames become RGB; `None`: as the frame policy says ([`ColourConversion::for_policy`])
    /// in [`VideoSource::load`], with the frame's tags in plain decodes.
    pub colour: Option<ColourConversion>,
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self { threads: 1, seek_min_gap_s: SEEK_MIN_GAP_S, colour: None }
    }
}

impl DecodeOptions {
    /// These options with the colour conversion settled for `policy` (an explicit one stays).
    pub fn for_policy(&self, policy: &FramePolicy) -> DecodeOptions {
        DecodeOptions { colour: Some(self.colour.unwrap_or_else(|| ColourConversion::for_policy(policy))), ..*self }
    }
}

/// A clip: a video file, or a folder of numbered frames with a declared rate and listing.
#[derive(Debug, Clone, PartialEq)]
pub enum VideoSource {
    File(PathBuf),
    FrameFolder { dir: PathBuf, fps: f64, listing: FolderListing },
}

impl VideoSource {
    pub fn path(&self) -> &Path {
        match self {
            VideoSource::File(p) => p,
            VideoSource::FrameFolder { dir, .. } => dir,
        }
    }

    pub fn probe(&self) -> Result<VideoInfo, VideoError> {
        match self {
            VideoSource::File(p) => probe_video(p),
            VideoSource::FrameFolder { dir, fps, listing } => FrameFolder::open_listed(dir, *fps, *listing)?.info(),
        }
    }

    pub fn decode(&self, plan: &FramePlan, options: &DecodeOptions) -> Result<DecodedFrames, VideoError> {
        match self {
            VideoSource::File(p) => decode_video_with(p, plan, options),
            VideoSource::FrameFolder { dir, fps, listing } => FrameFolder::open_listed(dir, *fps, *listing)?.decode(plan),
        }
    }

    /// Probe, plan, decode: the frames a sample feeds the model and the plan that says at
    /// which rate they are (for `second_per_grid_ts`), converted to RGB as `policy` says unless
    /// `options` name a conversion.
    pub fn load(&self, policy: &FramePolicy, options: &DecodeOptions) -> Result<(FramePlan, DecodedFrames), VideoError> {
        let info = self.probe()?;
        let plan = policy.plan(info.timing_for(policy)).map_err(|source| VideoError::Plan { path: self.path().to_path_buf(), source })?;
        let frames = self.decode(&plan, &options.for_policy(policy))?;
        Ok((plan, frames))
    }
}
