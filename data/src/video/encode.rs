//! Writing clips ([`VideoWriter`]).

use std::path::{Path, PathBuf};

use ffmpeg::format::Pixel;
use ffmpeg::software::scaling;
use ffmpeg::{Rational, codec, frame};
use ffmpeg_next as ffmpeg;
use ndarray::ArrayView3;

use super::*;

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
        Self { frame_rate: (15, 1), time_base: None, codec: None, bit_rate: 4_000_000, gop_size: 30, options: Vec::new(), muxer_options: Vec::new() }
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
        let fail = |detail: String| VideoError::Encode { path: path.to_path_buf(), detail };
        if width == 0 || height == 0 || !width.is_multiple_of(2) || !height.is_multiple_of(2) {
            return Err(fail(format!("{width}x{height}: sizes must be positive and even for 4:2:0 video")));
        }
        let (rn, rd) = settings.frame_rate;
        if rn <= 0 || rd <= 0 {
            return Err(fail(format!("frame rate {rn}/{rd} must be positive")));
        }
        let mut octx = ffmpeg::format::output(path).map_err(|e| fail(format!("cannot create output: {e}")))?;
        let is_webm = path.extension().and_then(|e| e.to_str()).is_some_and(|e| e.eq_ignore_ascii_case("webm"));
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
                if all.contains(&Pixel::YUV420P) { Some(Pixel::YUV420P) } else { all.first().copied() }
            })
            .unwrap_or(Pixel::YUV420P);
        let time_base = settings.time_base.map_or(Rational::new(rd, rn), |(n, d)| Rational::new(n, d));
        let global_header = octx.format().flags().contains(ffmpeg::format::Flags::GLOBAL_HEADER);

        let mut ctx = codec::context::Context::new_with_codec(codec).encoder().video().map_err(|e| fail(e.to_string()))?;
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
        let encoder = ctx.open_as_with(codec, dict).map_err(|e| fail(format!("cannot open encoder {}: {e}", codec.name())))?;
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
        octx.write_header_with(muxer).map_err(|e| fail(format!("cannot write header: {e}")))?;
        let stream_time_base = octx.stream(0).map(|s| s.time_base()).unwrap_or(time_base);
        let scaler = scaling::Context::get(Pixel::RGB24, width as u32, height as u32, pixel, width as u32, height as u32, scaling::Flags::BICUBIC)
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
        let fail = |detail: String| VideoError::Encode { path: self.path.clone(), detail };
        if image.dim() != (self.height, self.width, 3) {
            return Err(fail(format!("frame is {:?}, writer expects [{}, {}, 3]", image.dim(), self.height, self.width)));
        }
        if self.last_pts.is_some_and(|last| pts <= last) {
            return Err(fail(format!("timestamp {pts} does not increase (last {:?})", self.last_pts)));
        }
        let mut rgb = frame::Video::new(Pixel::RGB24, self.width as u32, self.height as u32);
        let stride = rgb.stride(0);
        let row = self.width * 3;
        let packed = image.as_standard_layout();
        let src = packed.as_slice().ok_or_else(|| fail("frame is not contiguous".into()))?;
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
            packet.write_interleaved(&mut self.octx).map_err(|e| VideoError::Encode { path: self.path.clone(), detail: e.to_string() })?;
        }
        Ok(())
    }

    /// Flushes the encoder and writes the trailer; the file is incomplete without it.
    pub fn finish(mut self) -> Result<(), VideoError> {
        self.encoder.send_eof().map_err(|e| VideoError::Encode { path: self.path.clone(), detail: e.to_string() })?;
        self.write_packets()?;
        self.octx.write_trailer().map_err(|e| VideoError::Encode { path: self.path.clone(), detail: e.to_string() })
    }
}
