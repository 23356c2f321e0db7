//! Reading video files: the container header ([`probe_video`]) and the frames of a plan.

use std::path::{Path, PathBuf};

use ffmpeg::{codec, frame, media};
use ffmpeg_next as ffmpeg;
use ndarray::{Array3, Array4, Axis};

use crate::frames::{FramePlan, PlanError};

use super::colour::RgbConverter;
use super::*;

/// Containers a dataset's videos come in. Playlists (HLS, DASH), concat lists and image-sequence
/// patterns are not among them: a "video" that is really one would make FFmpeg open other
/// files, or URLs.
const DEMUXERS: &str = "mov,mp4,m4a,3gp,3g2,mj2,matroska,webm,avi,mpegts,mpeg,flv,ogg,asf,h264,hevc,m4v,mjpeg,gif,ivf,yuv4mpegpipe";

/// The largest frame decoded (8K): what a frame of a bogus header would cost in memory, at
/// 32 frames a clip and a clip per loader worker, is bounded.
pub const MAX_DECODE_PIXELS: usize = 7680 * 4320;

fn open_input(path: &Path) -> Result<ffmpeg::format::context::Input, VideoError> {
    init_ffmpeg()?;
    let mut options = ffmpeg::Dictionary::new();
    // Only the local file itself: no network and no other protocol.
    options.set("protocol_whitelist", "file");
    options.set("format_whitelist", DEMUXERS);
    ffmpeg::format::input_with_dictionary(path, options).map_err(|source| VideoError::Open { path: path.to_path_buf(), source })
}

/// Refuses frames over [`MAX_DECODE_PIXELS`] before any is decoded.
fn check_frame_size(path: &Path, width: u32, height: u32) -> Result<(), VideoError> {
    let pixels = width as usize * height as usize;
    if pixels > MAX_DECODE_PIXELS {
        return Err(VideoError::TooLarge { path: path.to_path_buf(), width, height, max: MAX_DECODE_PIXELS });
    }
    Ok(())
}

fn best_video_stream<'a>(ictx: &'a ffmpeg::format::context::Input, path: &Path) -> Result<ffmpeg::Stream<'a>, VideoError> {
    ictx.streams().best(media::Type::Video).ok_or_else(|| VideoError::NoVideoStream { path: path.to_path_buf() })
}

/// The stream's frame rate (average, else nominal). Probing and decoding agree on it: a stream
/// without one is refused by both, rather than decoded at a guessed rate.
fn stream_fps(stream: &ffmpeg::Stream, path: &Path) -> Result<f64, VideoError> {
    [stream.avg_frame_rate(), stream.rate()]
        .into_iter()
        .find(|r| r.numerator() > 0 && r.denominator() > 0)
        .map(f64::from)
        .ok_or_else(|| VideoError::Timing { path: path.to_path_buf(), detail: "no frame rate in the stream".into() })
}

/// Reads the container header of a video file: size, frame count, rate and length.
pub fn probe_video(path: &Path) -> Result<VideoInfo, VideoError> {
    let ictx = open_input(path)?;
    let stream = best_video_stream(&ictx, path)?;
    let params = stream.parameters();
    let decoder = codec::context::Context::from_parameters(params)
        .and_then(|c| c.decoder().video())
        .map_err(|source| VideoError::Codec { path: path.to_path_buf(), source })?;

    check_frame_size(path, decoder.width(), decoder.height())?;
    let fps = stream_fps(&stream, path)?;
    let stream_duration = (stream.duration() > 0).then(|| stream.duration() as f64 * f64::from(stream.time_base()));
    let container_duration = (ictx.duration() > 0).then(|| ictx.duration() as f64 / f64::from(ffmpeg::ffi::AV_TIME_BASE));
    let declared_frames = usize::try_from(stream.frames()).ok().filter(|n| *n > 0);
    let duration_s = stream_duration
        .or(container_duration)
        .or(declared_frames.map(|n| n as f64 / fps))
        .ok_or_else(|| VideoError::Timing { path: path.to_path_buf(), detail: "no duration and no frame count".into() })?;
    let frame_count = declared_frames.unwrap_or_else(|| ((duration_s * fps).round() as usize).max(1));
    Ok(VideoInfo {
        width: decoder.width() as usize,
        height: decoder.height() as usize,
        frame_count,
        fps,
        duration_s,
        header_frames: declared_frames.or_else(|| frames_from_stream_duration(&stream)),
    })
}

/// PyAV's fallback count when the header has none (`int(float(stream.duration ×
/// stream.time_base × stream.average_rate))`, `motion/src/eval/dataset_utils.py:92-100`): the
/// exact product of three rationals, floored. `None` without a stream duration or an average
/// rate (the official code then decodes every frame to count them).
fn frames_from_stream_duration(stream: &ffmpeg::Stream) -> Option<usize> {
    let (duration, base, rate) = (stream.duration(), stream.time_base(), stream.avg_frame_rate());
    if duration <= 0 || base.denominator() <= 0 || rate.numerator() <= 0 || rate.denominator() <= 0 {
        return None;
    }
    let numerator = i128::from(duration) * i128::from(base.numerator()) * i128::from(rate.numerator());
    let denominator = i128::from(base.denominator()) * i128::from(rate.denominator());
    usize::try_from(numerator / denominator).ok().filter(|n| *n > 0)
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
        return Err(VideoError::Plan { path: path.to_path_buf(), source: PlanError::BadTimestamps(plan.timestamps.clone()) });
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
    Ok(DecodedFrames { frames, timestamps, frames_decoded: session.frames_decoded })
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
        return Err(VideoError::NoFrames { path: path.to_path_buf() });
    }
    let frames = stack_frames(path, &sink.frames)?;
    Ok(DecodedFrames { frames, timestamps: sink.timestamps, frames_decoded: session.frames_decoded })
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
        Self { targets, next: 0, chosen: vec![None; n], images: Vec::new(), previous: None, last_converted: None, serial: 0 }
    }

    fn take(&mut self, serial: u64, t: f64, frame: &frame::Video, convert: &mut RgbConverter) -> Result<(), ffmpeg::Error> {
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
            return Err(VideoError::NoFrames { path: path.to_path_buf() });
        }
        let first = &self.images[0];
        let (h, w, _) = first.dim();
        let mut frames = Array4::<u8>::zeros((order.len(), h, w, 3));
        let mut timestamps = vec![0.0; order.len()];
        for (sorted_pos, slot) in order.iter().enumerate() {
            let (t, idx) = self.chosen[sorted_pos].ok_or_else(|| VideoError::NoFrames { path: path.to_path_buf() })?;
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
        let ictx = open_input(path)?;
        let stream = best_video_stream(&ictx, path)?;
        let stream_index = stream.index();
        let time_base = f64::from(stream.time_base());
        if !(time_base.is_finite() && time_base > 0.0) {
            return Err(VideoError::Timing { path: path.to_path_buf(), detail: "stream has no time base".into() });
        }
        let start_pts = if stream.start_time() == ffmpeg::ffi::AV_NOPTS_VALUE { 0 } else { stream.start_time() };
        let rate = stream_fps(&stream, path)?;
        let mut ctx =
            codec::context::Context::from_parameters(stream.parameters()).map_err(|source| VideoError::Codec { path: path.to_path_buf(), source })?;
        if options.threads != 1 {
            ctx.set_threading(codec::threading::Config { kind: codec::threading::Type::Frame, count: options.threads, ..Default::default() });
        }
        let decoder = ctx.decoder().video().map_err(|source| VideoError::Codec { path: path.to_path_buf(), source })?;
        check_frame_size(path, decoder.width(), decoder.height())?;
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
        self.ictx.seek(ts, ..ts).map_err(|source| VideoError::Seek { path: self.path.clone(), seconds, source })?;
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
        let mut convert = RgbConverter::new(options.colour.unwrap_or_default());
        let mut seeking_enabled = !sink.wants_all();
        let mut last_t: Option<f64> = None;
        // After a seek: (time before the seek, target sought).
        let mut pending_check: Option<(Option<f64>, f64)> = None;
        // The last target sought: never seek twice to the same target (a keyframe between
        // the old position and the target would otherwise be sought again and again).
        let mut last_sought = f64::NEG_INFINITY;
        let path = self.path.clone();
        let conv_err = |source| VideoError::Convert { path: path.clone(), source };

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
                // A fresh packet per read, freed when it goes out of scope: `av_read_frame`
                // overwrites its packet without unreferencing what it held, so one packet reused
                // leaked every packet's buffer but the last (valgrind, FFmpeg 5.1).
                let mut packet = ffmpeg::Packet::empty();
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
                                return Err(VideoError::Decode { path: self.path.clone(), source });
                            }
                        }
                    }
                    Err(ffmpeg::Error::Eof) => {
                        eof = true;
                        self.decoder.send_eof().map_err(|source| VideoError::Decode { path: self.path.clone(), source })?;
                    }
                    Err(source) => {
                        return Err(VideoError::Read { path: self.path.clone(), source });
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
                        return Err(VideoError::Decode { path: self.path.clone(), source });
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
    let (h, w, c) = frames.first().map(|f| f.dim()).ok_or_else(|| VideoError::NoFrames { path: path.to_path_buf() })?;
    let mut out = Array4::<u8>::zeros((frames.len(), h, w, c));
    for (i, f) in frames.iter().enumerate() {
        out.index_axis_mut(Axis(0), i).assign(f);
    }
    Ok(out)
}
