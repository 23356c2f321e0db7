//! Decoding clips and images into RGB uint8 arrays, and writing clips.
//!
//! Three kinds of source behave as one ([`VideoSource`]):
//! - a video file (mp4, mkv, avi, webm, … — anything the linked FFmpeg demuxes), decoded with
//!   `ffmpeg-next`. Frames are matched to a [`FramePlan`]'s timestamps by their presentation
//!   timestamps, so variable-frame-rate files sample the right moments; the decoder seeks to
//!   near each far-away target and decodes forward, so a 32-frame plan over a long video
//!   decodes a few GOPs, not the whole file;
//! - a folder of numbered JPEG/PNG/WebP frames (VisDrone sequences) with a declared fps; only
//!   the planned files are read;
//! - single images (JPEG/PNG/WebP) through the `image` crate ([`load_image`]).
//!
//! Output layouts are those of [`crate::preprocess`]: `[T, H, W, 3]` and `[H, W, 3]` uint8 RGB.
//! [`VideoWriter`] encodes frames back into a file, for construction steps and for tests that
//! need real videos without shipping binaries.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use ffmpeg::format::Pixel;
use ffmpeg::software::scaling;
use ffmpeg::{Rational, codec, color, frame, media};
use ffmpeg_next as ffmpeg;
use ndarray::{Array3, Array4, ArrayView3, Axis};

use crate::frames::{ClipTiming, FramePlan, FramePolicy, PlanError};

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
    Seek {
        path: PathBuf,
        seconds: f64,
        source: ffmpeg::Error,
    },
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
    PlanOutOfRange {
        path: PathBuf,
        index: usize,
        frame_count: usize,
    },
    #[error("{}: cannot list frame folder: {source}", path.display())]
    ListFolder { path: PathBuf, source: std::io::Error },
    #[error("{}: frame folder holds no {FRAME_EXTENSIONS:?} files", path.display())]
    EmptyFolder { path: PathBuf },
    #[error("{}: declared fps {fps} must be positive", path.display())]
    BadFps { path: PathBuf, fps: f64 },
    #[error("{}: cannot read image: {source}", path.display())]
    Image { path: PathBuf, source: image::ImageError },
    #[error("{}: frame is {got_w}x{got_h} but the sequence is {want_w}x{want_h}", path.display())]
    FrameSize {
        path: PathBuf,
        want_w: usize,
        want_h: usize,
        got_w: usize,
        got_h: usize,
    },
    #[error("{}: cannot encode: {detail}", path.display())]
    Encode { path: PathBuf, detail: String },
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
}

impl VideoInfo {
    pub fn timing(&self) -> ClipTiming {
        ClipTiming::new(self.frame_count, self.fps)
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
}

impl Default for DecodeOptions {
    fn default() -> Self {
        Self {
            threads: 1,
            seek_min_gap_s: SEEK_MIN_GAP_S,
        }
    }
}

/// A clip: a video file, or a folder of numbered frames with a declared rate.
#[derive(Debug, Clone, PartialEq)]
pub enum VideoSource {
    File(PathBuf),
    FrameFolder { dir: PathBuf, fps: f64 },
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
            VideoSource::FrameFolder { dir, fps } => FrameFolder::open(dir, *fps)?.info(),
        }
    }

    pub fn decode(&self, plan: &FramePlan, options: &DecodeOptions) -> Result<DecodedFrames, VideoError> {
        match self {
            VideoSource::File(p) => decode_video_with(p, plan, options),
            VideoSource::FrameFolder { dir, fps } => FrameFolder::open(dir, *fps)?.decode(plan),
        }
    }

    /// Probe, plan, decode: the frames a sample feeds the model and the plan that says at
    /// which rate they are (for `second_per_grid_ts`).
    pub fn load(
        &self,
        policy: &FramePolicy,
        options: &DecodeOptions,
    ) -> Result<(FramePlan, DecodedFrames), VideoError> {
        let info = self.probe()?;
        let plan = policy.plan(info.timing()).map_err(|source| VideoError::Plan {
            path: self.path().to_path_buf(),
            source,
        })?;
        let frames = self.decode(&plan, options)?;
        Ok((plan, frames))
    }
}

/// Reads the container header of a video file: size, frame count, rate and length.
pub fn probe_video(path: &Path) -> Result<VideoInfo, VideoError> {
    init_ffmpeg()?;
    let ictx = ffmpeg::format::input(path).map_err(|source| VideoError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    let stream = ictx
        .streams()
        .best(media::Type::Video)
        .ok_or_else(|| VideoError::NoVideoStream {
            path: path.to_path_buf(),
        })?;
    let params = stream.parameters();
    let decoder = codec::context::Context::from_parameters(params)
        .and_then(|c| c.decoder().video())
        .map_err(|source| VideoError::Codec {
            path: path.to_path_buf(),
            source,
        })?;

    let fps = [stream.avg_frame_rate(), stream.rate()]
        .into_iter()
        .find(|r| r.numerator() > 0 && r.denominator() > 0)
        .map(f64::from)
        .ok_or_else(|| VideoError::Timing {
            path: path.to_path_buf(),
            detail: "no frame rate in the stream".into(),
        })?;
    let stream_duration = (stream.duration() > 0).then(|| stream.duration() as f64 * f64::from(stream.time_base()));
    let container_duration =
        (ictx.duration() > 0).then(|| ictx.duration() as f64 / f64::from(ffmpeg::ffi::AV_TIME_BASE));
    let declared_frames = usize::try_from(stream.frames()).ok().filter(|n| *n > 0);
    let duration_s = stream_duration
        .or(container_duration)
        .or(declared_frames.map(|n| n as f64 / fps))
        .ok_or_else(|| VideoError::Timing {
            path: path.to_path_buf(),
            detail: "no duration and no frame count".into(),
        })?;
    let frame_count = declared_frames.unwrap_or_else(|| ((duration_s * fps).round() as usize).max(1));
    Ok(VideoInfo {
        width: decoder.width() as usize,
        height: decoder.height() as usize,
        frame_count,
        fps,
        duration_s,
    })
}

/// Decodes the frames of `plan` from a video file with default options.
pub fn decode_video(path: &Path, plan: &FramePlan) -> Result<DecodedFrames, VideoError> {
    decode_video_with(path, plan, &DecodeOptions::default())
}

/// Decodes the frames of `plan`: for each planned timestamp, the decoded frame whose
/// presentation time is nearest (ties go to the earlier frame). Targets past the last frame
/// get the last frame.
pub fn decode_video_with(path: &Path, plan: &FramePlan, options: &DecodeOptions) -> Result<DecodedFrames, VideoError> {
    if plan.timestamps.is_empty() || plan.timestamps.iter().any(|t| !t.is_finite()) {
        return Err(VideoError::Plan {
            path: path.to_path_buf(),
            source: PlanError::BadPlan(format!(
                "plan timestamps {:?} must be finite and non-empty",
                plan.timestamps
            )),
        });
    }
    let mut order: Vec<usize> = (0..plan.timestamps.len()).collect();
    order.sort_by(|a, b| plan.timestamps[*a].total_cmp(&plan.timestamps[*b]));
    let targets: Vec<f64> = order.iter().map(|i| plan.timestamps[*i]).collect();
    let mut session = DecodeSession::open(path, options)?;
    let mut sink = NearestSink::new(targets);
    session.run(&mut sink, options)?;
    // A stream that stops well short of the container's declared length (and of the targets
    // within it) is damaged or truncated: repeating its last frame would fake a still camera.
    if let (Some(last), Some(&wanted)) = (session.latest_frame_s, targets_max(&plan.timestamps)) {
        let declared = probe_video(path)?;
        let declared_last = declared.frame_count.saturating_sub(1) as f64 / declared.fps;
        let period = session.frame_period.max(1e-6);
        let wanted = wanted.min(declared_last);
        if wanted - last > 2.0 * period + 1e-6 {
            return Err(VideoError::Truncated {
                path: path.to_path_buf(),
                decoded_frames: (last / period).round() as usize + 1,
                wanted_frame: (wanted / period).round() as usize + 1,
                last_s: last,
                wanted_s: wanted,
            });
        }
    }
    let (frames, timestamps) = sink.finish(path, &order)?;
    Ok(DecodedFrames {
        frames,
        timestamps,
        frames_decoded: session.frames_decoded,
    })
}

fn targets_max(times: &[f64]) -> Option<&f64> {
    times.iter().max_by(|a, b| a.total_cmp(b))
}

/// Decodes every frame of a video file, in presentation order.
pub fn decode_all(path: &Path) -> Result<DecodedFrames, VideoError> {
    let options = DecodeOptions::default();
    let mut session = DecodeSession::open(path, &options)?;
    let mut sink = AllSink::default();
    session.run(&mut sink, &options)?;
    if sink.frames.is_empty() {
        return Err(VideoError::NoFrames {
            path: path.to_path_buf(),
        });
    }
    let frames = stack_frames(path, &sink.frames)?;
    Ok(DecodedFrames {
        frames,
        timestamps: sink.timestamps,
        frames_decoded: session.frames_decoded,
    })
}

/// Where decoded frames go. `accept` sees every frame in presentation order and says whether
/// more are needed; `next_target` lets the session decide to seek.
trait FrameSink {
    /// The earliest time still wanted, if any (None: everything is served).
    fn next_target(&self) -> Option<f64>;
    /// A decoded frame at time `t`; `convert` turns it into RGB on demand.
    fn accept(&mut self, t: f64, frame: frame::Video, convert: &mut RgbConverter) -> Result<(), ffmpeg::Error>;
    /// The stream ended.
    fn end(&mut self, convert: &mut RgbConverter) -> Result<(), ffmpeg::Error>;
    /// Frames before a seek point can no longer be the "previous" frame.
    fn forget_previous(&mut self);
    /// Whether the sink wants every frame (no seeking).
    fn wants_all(&self) -> bool {
        false
    }
}

#[derive(Default)]
struct AllSink {
    frames: Vec<Array3<u8>>,
    timestamps: Vec<f64>,
}

impl FrameSink for AllSink {
    fn next_target(&self) -> Option<f64> {
        Some(f64::INFINITY)
    }
    fn accept(&mut self, t: f64, frame: frame::Video, convert: &mut RgbConverter) -> Result<(), ffmpeg::Error> {
        self.frames.push(convert.convert(&frame)?);
        self.timestamps.push(t);
        Ok(())
    }
    fn end(&mut self, _convert: &mut RgbConverter) -> Result<(), ffmpeg::Error> {
        Ok(())
    }
    fn forget_previous(&mut self) {}
    fn wants_all(&self) -> bool {
        true
    }
}

/// Picks, for sorted target times, the nearest decoded frame. Keeps only the previous raw
/// frame (cheap: FFmpeg frames are reference-counted) and converts a frame to RGB only when
/// it is chosen, once even if several targets choose it.
struct NearestSink {
    targets: Vec<f64>,
    next: usize,
    chosen: Vec<Option<(f64, usize)>>, // (time, index into `images`)
    images: Vec<Array3<u8>>,
    previous: Option<(f64, u64, frame::Video)>,
    /// (frame serial, image index) of the last conversion, to reuse it for repeated targets.
    last_converted: Option<(u64, usize)>,
    serial: u64,
}

impl NearestSink {
    fn new(targets: Vec<f64>) -> Self {
        let n = targets.len();
        Self {
            targets,
            next: 0,
            chosen: vec![None; n],
            images: Vec::new(),
            previous: None,
            last_converted: None,
            serial: 0,
        }
    }

    fn take(
        &mut self,
        serial: u64,
        t: f64,
        frame: &frame::Video,
        convert: &mut RgbConverter,
    ) -> Result<(), ffmpeg::Error> {
        let image_index = match self.last_converted {
            Some((s, idx)) if s == serial => idx,
            _ => {
                self.images.push(convert.convert(frame)?);
                let idx = self.images.len() - 1;
                self.last_converted = Some((serial, idx));
                idx
            }
        };
        self.chosen[self.next] = Some((t, image_index));
        self.next += 1;
        Ok(())
    }

    fn finish(self, path: &Path, order: &[usize]) -> Result<(Array4<u8>, Vec<f64>), VideoError> {
        if self.images.is_empty() {
            return Err(VideoError::NoFrames {
                path: path.to_path_buf(),
            });
        }
        let first = &self.images[0];
        let (h, w, _) = first.dim();
        let mut frames = Array4::<u8>::zeros((order.len(), h, w, 3));
        let mut timestamps = vec![0.0; order.len()];
        for (sorted_pos, slot) in order.iter().enumerate() {
            let (t, idx) = self.chosen[sorted_pos].ok_or_else(|| VideoError::NoFrames {
                path: path.to_path_buf(),
            })?;
            frames.index_axis_mut(Axis(0), *slot).assign(&self.images[idx]);
            timestamps[*slot] = t;
        }
        Ok((frames, timestamps))
    }
}

impl FrameSink for NearestSink {
    fn next_target(&self) -> Option<f64> {
        self.targets.get(self.next).copied()
    }

    fn accept(&mut self, t: f64, frame: frame::Video, convert: &mut RgbConverter) -> Result<(), ffmpeg::Error> {
        self.serial += 1;
        let serial = self.serial;
        while let Some(target) = self.targets.get(self.next).copied() {
            if t < target {
                break;
            }
            // The target lies between the previous frame and this one: take the nearer.
            let use_previous = matches!(&self.previous, Some((pt, _, _)) if target - pt <= t - target);
            match self.previous.take() {
                Some((pt, ps, pf)) if use_previous => {
                    self.take(ps, pt, &pf, convert)?;
                    self.previous = Some((pt, ps, pf));
                }
                other => {
                    self.previous = other;
                    self.take(serial, t, &frame, convert)?;
                }
            }
        }
        self.previous = Some((t, serial, frame));
        Ok(())
    }

    fn end(&mut self, convert: &mut RgbConverter) -> Result<(), ffmpeg::Error> {
        if let Some((pt, ps, pf)) = self.previous.take() {
            while self.next < self.targets.len() {
                self.take(ps, pt, &pf, convert)?;
            }
        }
        Ok(())
    }

    fn forget_previous(&mut self) {
        self.previous = None;
    }
}

/// Turns decoded frames of any pixel format into packed RGB24 at the first frame's size,
/// honouring the frame's colour matrix (BT.709 HD footage would otherwise be converted with
/// BT.601 coefficients) and range.
struct RgbConverter {
    scaler: Option<(scaling::Context, Pixel, u32, u32)>,
    out_size: Option<(u32, u32)>,
}

impl RgbConverter {
    fn new() -> Self {
        Self {
            scaler: None,
            out_size: None,
        }
    }

    fn convert(&mut self, frame: &frame::Video) -> Result<Array3<u8>, ffmpeg::Error> {
        let (fw, fh, fmt) = (frame.width(), frame.height(), frame.format());
        let (ow, oh) = *self.out_size.get_or_insert((fw, fh));
        let stale = !matches!(&self.scaler, Some((_, f, w, h)) if *f == fmt && *w == fw && *h == fh);
        if stale {
            let mut ctx = scaling::Context::get(fmt, fw, fh, Pixel::RGB24, ow, oh, scaling::Flags::BICUBIC)?;
            set_colorspace(&mut ctx, frame);
            self.scaler = Some((ctx, fmt, fw, fh));
        }
        let Some((scaler, ..)) = self.scaler.as_mut() else {
            return Err(ffmpeg::Error::Bug);
        };
        let mut rgb = frame::Video::empty();
        scaler.run(frame, &mut rgb)?;
        let (w, h) = (ow as usize, oh as usize);
        let stride = rgb.stride(0);
        let data = rgb.data(0);
        let mut out = Array3::<u8>::zeros((h, w, 3));
        let dst = out.as_slice_mut().ok_or(ffmpeg::Error::Bug)?;
        for y in 0..h {
            dst[y * w * 3..(y + 1) * w * 3].copy_from_slice(&data[y * stride..y * stride + w * 3]);
        }
        Ok(out)
    }
}

/// Selects the YUV→RGB matrix and input range of `frame` for `ctx`.
fn set_colorspace(ctx: &mut scaling::Context, frame: &frame::Video) {
    use ffmpeg::ffi::{
        SWS_CS_BT2020, SWS_CS_DEFAULT, SWS_CS_FCC, SWS_CS_ITU709, SWS_CS_SMPTE240M, sws_getCoefficients,
        sws_setColorspaceDetails,
    };
    let matrix = match frame.color_space() {
        color::Space::BT709 => SWS_CS_ITU709,
        color::Space::FCC => SWS_CS_FCC,
        color::Space::SMPTE240M => SWS_CS_SMPTE240M,
        color::Space::BT2020NCL | color::Space::BT2020CL => SWS_CS_BT2020,
        _ => SWS_CS_DEFAULT,
    };
    let full_range = frame.color_range() == color::Range::JPEG
        || matches!(
            frame.format(),
            Pixel::YUVJ420P | Pixel::YUVJ422P | Pixel::YUVJ444P | Pixel::YUVJ440P
        );
    // SAFETY: `ctx` owns a live SwsContext; sws_getCoefficients returns pointers to static
    // tables. For formats where the call does not apply (RGB input) FFmpeg returns -1 and
    // leaves the context unchanged, which is the behaviour we want, so the result is ignored.
    unsafe {
        sws_setColorspaceDetails(
            ctx.as_mut_ptr(),
            sws_getCoefficients(matrix),
            i32::from(full_range),
            sws_getCoefficients(SWS_CS_DEFAULT),
            1,
            0,
            1 << 16,
            1 << 16,
        );
    }
}

/// An opened file plus its video decoder, and the seek bookkeeping.
struct DecodeSession {
    path: PathBuf,
    ictx: ffmpeg::format::context::Input,
    decoder: ffmpeg::decoder::Video,
    stream_index: usize,
    time_base: f64,
    /// Stream start in the stream's time base (0 when unknown).
    start_pts: i64,
    /// Nominal frame period, for the seek overshoot check.
    frame_period: f64,
    frames_decoded: usize,
    /// Presentation time of the latest frame decoded (seconds), to tell a truncated stream.
    latest_frame_s: Option<f64>,
}

impl DecodeSession {
    fn open(path: &Path, options: &DecodeOptions) -> Result<Self, VideoError> {
        init_ffmpeg()?;
        let ictx = ffmpeg::format::input(path).map_err(|source| VideoError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let stream = ictx
            .streams()
            .best(media::Type::Video)
            .ok_or_else(|| VideoError::NoVideoStream {
                path: path.to_path_buf(),
            })?;
        let stream_index = stream.index();
        let time_base = f64::from(stream.time_base());
        if !(time_base.is_finite() && time_base > 0.0) {
            return Err(VideoError::Timing {
                path: path.to_path_buf(),
                detail: "stream has no time base".into(),
            });
        }
        let start_pts = if stream.start_time() == ffmpeg::ffi::AV_NOPTS_VALUE {
            0
        } else {
            stream.start_time()
        };
        let rate = [stream.avg_frame_rate(), stream.rate()]
            .into_iter()
            .find(|r| r.numerator() > 0 && r.denominator() > 0)
            .map(f64::from)
            .unwrap_or(25.0);
        let mut ctx =
            codec::context::Context::from_parameters(stream.parameters()).map_err(|source| VideoError::Codec {
                path: path.to_path_buf(),
                source,
            })?;
        if options.threads != 1 {
            ctx.set_threading(codec::threading::Config {
                kind: codec::threading::Type::Frame,
                count: options.threads,
                ..Default::default()
            });
        }
        let decoder = ctx.decoder().video().map_err(|source| VideoError::Codec {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            ictx,
            decoder,
            stream_index,
            time_base,
            start_pts,
            frame_period: 1.0 / rate,
            frames_decoded: 0,
            latest_frame_s: None,
        })
    }

    /// Seconds from the stream start of a decoded frame (best-effort timestamp, else pts,
    /// else one frame after the previous one).
    fn frame_time(&self, frame: &frame::Video, previous: Option<f64>) -> f64 {
        match frame.timestamp().or(frame.pts()) {
            Some(ts) => (ts - self.start_pts) as f64 * self.time_base,
            None => previous.map_or(0.0, |p| p + self.frame_period),
        }
    }

    /// Seeks so that the next decoded frames start at the last keyframe at or before
    /// `seconds` (from the stream start).
    fn seek_to(&mut self, seconds: f64) -> Result<(), VideoError> {
        let start_s = self.start_pts as f64 * self.time_base;
        let ts = ((start_s + seconds.max(0.0)) * f64::from(ffmpeg::ffi::AV_TIME_BASE)) as i64;
        self.ictx.seek(ts, ..ts).map_err(|source| VideoError::Seek {
            path: self.path.clone(),
            seconds,
            source,
        })?;
        self.decoder.flush();
        Ok(())
    }

    /// Feeds the sink until it has what it wants or the stream ends.
    ///
    /// Seeking: when the next target is more than `seek_min_gap_s` past the last decoded
    /// frame, seek to it. If the first frame after a seek is not later than where we were,
    /// keyframes are too sparse for seeking to help and it is switched off; if it is later
    /// than the target by more than half a frame (an imprecise index), decoding restarts from
    /// the stream start without seeking, so the nearest frame is never skipped. A target is
    /// sought at most once.
    fn run(&mut self, sink: &mut dyn FrameSink, options: &DecodeOptions) -> Result<(), VideoError> {
        let mut convert = RgbConverter::new();
        let mut seeking_enabled = !sink.wants_all();
        let mut last_t: Option<f64> = None;
        // After a seek: (time before the seek, target sought).
        let mut pending_check: Option<(Option<f64>, f64)> = None;
        // The last target sought: never seek twice to the same target (a keyframe between
        // the old position and the target would otherwise be sought again and again).
        let mut last_sought = f64::NEG_INFINITY;
        let mut packet = ffmpeg::Packet::empty();
        let path = self.path.clone();
        let conv_err = |source| VideoError::Convert {
            path: path.clone(),
            source,
        };

        if seeking_enabled
            && let Some(first) = sink.next_target()
            && first > options.seek_min_gap_s
        {
            self.seek_to(first)?;
            pending_check = Some((None, first));
            last_sought = first;
        }

        let mut eof = false;
        while sink.next_target().is_some() {
            if !eof {
                match packet.read(&mut self.ictx) {
                    Ok(()) => {
                        if packet.stream() != self.stream_index {
                            continue;
                        }
                        // Output is drained after every packet, so the decoder always
                        // accepts input here (no EAGAIN on send).
                        match self.decoder.send_packet(&packet) {
                            Ok(()) => {}
                            // A damaged packet loses its frame(s), not the clip.
                            Err(ffmpeg::Error::InvalidData) => continue,
                            Err(source) => {
                                return Err(VideoError::Decode {
                                    path: self.path.clone(),
                                    source,
                                });
                            }
                        }
                    }
                    Err(ffmpeg::Error::Eof) => {
                        eof = true;
                        self.decoder.send_eof().map_err(|source| VideoError::Decode {
                            path: self.path.clone(),
                            source,
                        })?;
                    }
                    Err(source) => {
                        return Err(VideoError::Read {
                            path: self.path.clone(),
                            source,
                        });
                    }
                }
            }

            let mut drained_any = false;
            loop {
                let mut frame = frame::Video::empty();
                match self.decoder.receive_frame(&mut frame) {
                    Ok(()) => {}
                    Err(ffmpeg::Error::Eof) => break,
                    Err(ffmpeg::Error::Other { errno }) if errno == ffmpeg::error::EAGAIN => break,
                    // A damaged frame is dropped; the next packet carries on.
                    Err(ffmpeg::Error::InvalidData) => break,
                    Err(source) => {
                        return Err(VideoError::Decode {
                            path: self.path.clone(),
                            source,
                        });
                    }
                }
                drained_any = true;
                self.frames_decoded += 1;
                let t = self.frame_time(&frame, last_t);
                self.latest_frame_s = Some(self.latest_frame_s.map_or(t, |l| l.max(t)));

                if let Some((before, target)) = pending_check.take() {
                    if t > target + 0.5 * self.frame_period {
                        // Overshot the target: restart from the beginning, no more seeking.
                        seeking_enabled = false;
                        self.seek_to(0.0)?;
                        sink.forget_previous();
                        last_t = None;
                        break;
                    }
                    if before.is_some_and(|b| t <= b) {
                        seeking_enabled = false;
                    }
                }

                sink.accept(t, frame, &mut convert).map_err(conv_err)?;
                last_t = Some(t);

                if let Some(next) = sink.next_target() {
                    if seeking_enabled && !eof && next > last_sought && next - t > options.seek_min_gap_s {
                        self.seek_to(next)?;
                        sink.forget_previous();
                        pending_check = Some((Some(t), next));
                        last_sought = next;
                        break;
                    }
                } else {
                    break;
                }
            }
            if eof && !drained_any {
                break;
            }
        }
        sink.end(&mut convert).map_err(conv_err)?;
        Ok(())
    }
}

fn stack_frames(path: &Path, frames: &[Array3<u8>]) -> Result<Array4<u8>, VideoError> {
    let (h, w, c) = frames.first().map(|f| f.dim()).ok_or_else(|| VideoError::NoFrames {
        path: path.to_path_buf(),
    })?;
    let mut out = Array4::<u8>::zeros((frames.len(), h, w, c));
    for (i, f) in frames.iter().enumerate() {
        out.index_axis_mut(Axis(0), i).assign(f);
    }
    Ok(out)
}

/// Reads a JPEG/PNG/WebP (or any format `image` knows, guessed from the content) as
/// `[H, W, 3]` RGB uint8; alpha is dropped, greyscale expanded.
pub fn load_image(path: &Path) -> Result<Array3<u8>, VideoError> {
    let err = |source| VideoError::Image {
        path: path.to_path_buf(),
        source,
    };
    let img = image::ImageReader::open(path)
        .map_err(|e| err(image::ImageError::IoError(e)))?
        .with_guessed_format()
        .map_err(|e| err(image::ImageError::IoError(e)))?
        .decode()
        .map_err(err)?
        .into_rgb8();
    let (w, h) = (img.width() as usize, img.height() as usize);
    Array3::from_shape_vec((h, w, 3), img.into_raw()).map_err(|e| {
        err(image::ImageError::Parameter(image::error::ParameterError::from_kind(
            image::error::ParameterErrorKind::Generic(e.to_string()),
        )))
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
        if !(fps.is_finite() && fps > 0.0) {
            return Err(VideoError::BadFps {
                path: dir.to_path_buf(),
                fps,
            });
        }
        let list_err = |source| VideoError::ListFolder {
            path: dir.to_path_buf(),
            source,
        };
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(list_err)? {
            let path = entry.map_err(list_err)?.path();
            let is_frame = path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| FRAME_EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)));
            if is_frame && path.is_file() {
                files.push(path);
            }
        }
        if files.is_empty() {
            return Err(VideoError::EmptyFolder {
                path: dir.to_path_buf(),
            });
        }
        files.sort_by_cached_key(|p| frame_sort_key(p));
        Ok(Self {
            dir: dir.to_path_buf(),
            files,
            fps,
        })
    }

    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// Size from the first frame's header; count and rate from the listing and declaration.
    pub fn info(&self) -> Result<VideoInfo, VideoError> {
        let first = &self.files[0];
        let (w, h) = image::image_dimensions(first).map_err(|source| VideoError::Image {
            path: first.clone(),
            source,
        })?;
        Ok(VideoInfo {
            width: w as usize,
            height: h as usize,
            frame_count: self.files.len(),
            fps: self.fps,
            duration_s: self.files.len() as f64 / self.fps,
        })
    }

    /// Reads the planned frames (each file once, however often the plan repeats it). Every
    /// frame must have the size of the first one read.
    pub fn decode(&self, plan: &FramePlan) -> Result<DecodedFrames, VideoError> {
        let mut frames: Option<Array4<u8>> = None;
        let mut last: Option<(usize, Array3<u8>)> = None;
        let mut read = 0;
        for (slot, &index) in plan.indices.iter().enumerate() {
            let path = self.files.get(index).ok_or_else(|| VideoError::PlanOutOfRange {
                path: self.dir.clone(),
                index,
                frame_count: self.files.len(),
            })?;
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
                return Err(VideoError::FrameSize {
                    path: path.clone(),
                    want_w,
                    want_h,
                    got_w: w,
                    got_h: h,
                });
            }
            out.index_axis_mut(Axis(0), slot).assign(&image);
            last = Some((index, image));
        }
        let frames = frames.ok_or_else(|| VideoError::NoFrames { path: self.dir.clone() })?;
        let timestamps = plan.indices.iter().map(|i| *i as f64 / self.fps).collect();
        Ok(DecodedFrames {
            frames,
            timestamps,
            frames_decoded: read,
        })
    }
}

/// Numeric-aware key: the last run of digits in the file stem, then the whole name.
fn frame_sort_key(path: &Path) -> (u8, u128, String) {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let name = path
        .file_name()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let digits: String = {
        let rev: String = stem
            .chars()
            .rev()
            .skip_while(|c| !c.is_ascii_digit())
            .take_while(|c| c.is_ascii_digit())
            .collect();
        rev.chars().rev().collect()
    };
    match digits.parse::<u128>() {
        Ok(n) => (0, n, name),
        Err(_) => (1, 0, name),
    }
}

/// How to encode a clip.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodeSettings {
    /// Nominal frame rate as a fraction (`(30000, 1001)` for 29.97).
    pub frame_rate: (i32, i32),
    /// Timestamp unit as a fraction of a second; `None` = one tick per frame (`1 / rate`).
    /// Use e.g. `(1, 1000)` to write variable-frame-rate clips with [`VideoWriter::push_at`].
    pub time_base: Option<(i32, i32)>,
    /// FFmpeg encoder name; `None` picks by container: `libvpx-vp9`/`libvpx` for WebM,
    /// else `libx264`, falling back to `mpeg4`.
    pub codec: Option<String>,
    pub bit_rate: usize,
    /// Keyframe interval in frames.
    pub gop_size: u32,
    /// Private encoder options (`("crf", "18")`, `("preset", "veryfast")`, …).
    pub options: Vec<(String, String)>,
    /// Container (muxer) options, e.g. `("movflags", "+faststart")` to put an MP4's index first.
    pub muxer_options: Vec<(String, String)>,
}

impl Default for EncodeSettings {
    fn default() -> Self {
        Self {
            frame_rate: (15, 1),
            time_base: None,
            codec: None,
            bit_rate: 4_000_000,
            gop_size: 30,
            options: Vec::new(),
            muxer_options: Vec::new(),
        }
    }
}

/// Writes RGB frames into a video file (container from the extension).
pub struct VideoWriter {
    path: PathBuf,
    octx: ffmpeg::format::context::Output,
    encoder: ffmpeg::encoder::Video,
    scaler: scaling::Context,
    enc_time_base: Rational,
    stream_time_base: Rational,
    width: usize,
    height: usize,
    next_pts: i64,
    last_pts: Option<i64>,
}

impl VideoWriter {
    /// Opens `path` for a `width`×`height` clip. Sizes must be even (4:2:0 chroma).
    pub fn create(path: &Path, width: usize, height: usize, settings: &EncodeSettings) -> Result<Self, VideoError> {
        init_ffmpeg()?;
        let fail = |detail: String| VideoError::Encode {
            path: path.to_path_buf(),
            detail,
        };
        if width == 0 || height == 0 || !width.is_multiple_of(2) || !height.is_multiple_of(2) {
            return Err(fail(format!(
                "{width}x{height}: sizes must be positive and even for 4:2:0 video"
            )));
        }
        let (rn, rd) = settings.frame_rate;
        if rn <= 0 || rd <= 0 {
            return Err(fail(format!("frame rate {rn}/{rd} must be positive")));
        }
        let mut octx = ffmpeg::format::output(path).map_err(|e| fail(format!("cannot create output: {e}")))?;
        let is_webm = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("webm"));
        let candidates: Vec<String> = match &settings.codec {
            Some(name) => vec![name.clone()],
            None if is_webm => vec!["libvpx-vp9".into(), "libvpx".into()],
            None => vec!["libx264".into(), "mpeg4".into()],
        };
        let codec = candidates
            .iter()
            .find_map(|name| ffmpeg::encoder::find_by_name(name))
            .ok_or_else(|| fail(format!("none of the encoders {candidates:?} is in this FFmpeg build")))?;
        let pixel = codec
            .video()
            .ok()
            .and_then(|v| v.formats())
            .and_then(|mut formats| {
                let all: Vec<Pixel> = formats.by_ref().collect();
                if all.contains(&Pixel::YUV420P) {
                    Some(Pixel::YUV420P)
                } else {
                    all.first().copied()
                }
            })
            .unwrap_or(Pixel::YUV420P);
        let time_base = settings
            .time_base
            .map_or(Rational::new(rd, rn), |(n, d)| Rational::new(n, d));
        let global_header = octx.format().flags().contains(ffmpeg::format::Flags::GLOBAL_HEADER);

        let mut ctx = codec::context::Context::new_with_codec(codec)
            .encoder()
            .video()
            .map_err(|e| fail(e.to_string()))?;
        ctx.set_width(width as u32);
        ctx.set_height(height as u32);
        ctx.set_format(pixel);
        ctx.set_time_base(time_base);
        ctx.set_frame_rate(Some(Rational::new(rn, rd)));
        ctx.set_bit_rate(settings.bit_rate);
        ctx.set_gop(settings.gop_size);
        ctx.set_max_b_frames(0);
        if global_header {
            ctx.set_flags(codec::Flags::GLOBAL_HEADER);
        }
        let mut dict = ffmpeg::Dictionary::new();
        for (k, v) in &settings.options {
            dict.set(k, v);
        }
        let encoder = ctx
            .open_as_with(codec, dict)
            .map_err(|e| fail(format!("cannot open encoder {}: {e}", codec.name())))?;
        {
            let mut ost = octx.add_stream(codec).map_err(|e| fail(e.to_string()))?;
            ost.set_parameters(&encoder);
            ost.set_time_base(time_base);
            ost.set_avg_frame_rate(Rational::new(rn, rd));
        }
        let mut muxer = ffmpeg::Dictionary::new();
        for (k, v) in &settings.muxer_options {
            muxer.set(k, v);
        }
        octx.write_header_with(muxer)
            .map_err(|e| fail(format!("cannot write header: {e}")))?;
        let stream_time_base = octx.stream(0).map(|s| s.time_base()).unwrap_or(time_base);
        let scaler = scaling::Context::get(
            Pixel::RGB24,
            width as u32,
            height as u32,
            pixel,
            width as u32,
            height as u32,
            scaling::Flags::BICUBIC,
        )
        .map_err(|e| fail(e.to_string()))?;
        Ok(Self {
            path: path.to_path_buf(),
            octx,
            encoder,
            scaler,
            enc_time_base: time_base,
            stream_time_base,
            width,
            height,
            next_pts: 0,
            last_pts: None,
        })
    }

    /// Appends a frame one tick after the previous one.
    pub fn push(&mut self, frame: ArrayView3<u8>) -> Result<(), VideoError> {
        let pts = self.next_pts;
        self.push_pts(frame, pts)
    }

    /// Appends a frame at `seconds` (rounded to the time base); times must increase.
    pub fn push_at(&mut self, frame: ArrayView3<u8>, seconds: f64) -> Result<(), VideoError> {
        let tb = f64::from(self.enc_time_base);
        let pts = (seconds / tb).round() as i64;
        self.push_pts(frame, pts)
    }

    fn push_pts(&mut self, image: ArrayView3<u8>, pts: i64) -> Result<(), VideoError> {
        let fail = |detail: String| VideoError::Encode {
            path: self.path.clone(),
            detail,
        };
        if image.dim() != (self.height, self.width, 3) {
            return Err(fail(format!(
                "frame is {:?}, writer expects [{}, {}, 3]",
                image.dim(),
                self.height,
                self.width
            )));
        }
        if self.last_pts.is_some_and(|last| pts <= last) {
            return Err(fail(format!(
                "timestamp {pts} does not increase (last {:?})",
                self.last_pts
            )));
        }
        let mut rgb = frame::Video::new(Pixel::RGB24, self.width as u32, self.height as u32);
        let stride = rgb.stride(0);
        let row = self.width * 3;
        let packed = image.as_standard_layout();
        let src = packed
            .as_slice()
            .ok_or_else(|| fail("frame is not contiguous".into()))?;
        let data = rgb.data_mut(0);
        for y in 0..self.height {
            data[y * stride..y * stride + row].copy_from_slice(&src[y * row..(y + 1) * row]);
        }
        let mut yuv = frame::Video::empty();
        self.scaler.run(&rgb, &mut yuv).map_err(|e| fail(e.to_string()))?;
        yuv.set_pts(Some(pts));
        self.encoder.send_frame(&yuv).map_err(|e| fail(e.to_string()))?;
        self.last_pts = Some(pts);
        self.next_pts = pts + 1;
        self.write_packets()
    }

    fn write_packets(&mut self) -> Result<(), VideoError> {
        let mut packet = ffmpeg::Packet::empty();
        while self.encoder.receive_packet(&mut packet).is_ok() {
            packet.set_stream(0);
            packet.rescale_ts(self.enc_time_base, self.stream_time_base);
            packet
                .write_interleaved(&mut self.octx)
                .map_err(|e| VideoError::Encode {
                    path: self.path.clone(),
                    detail: e.to_string(),
                })?;
        }
        Ok(())
    }

    /// Flushes the encoder and writes the trailer; the file is incomplete without it.
    pub fn finish(mut self) -> Result<(), VideoError> {
        self.encoder.send_eof().map_err(|e| VideoError::Encode {
            path: self.path.clone(),
            detail: e.to_string(),
        })?;
        self.write_packets()?;
        self.octx.write_trailer().map_err(|e| VideoError::Encode {
            path: self.path.clone(),
            detail: e.to_string(),
        })
    }
}
