//! Conversion of decoded frames to packed RGB: with the frame's own colour matrix and range, or
//! as PyAV 13 does it for the official SIS-Motion code ([`ColourConversion`]).

use ffmpeg::format::Pixel;
use ffmpeg::software::scaling;
use ffmpeg::{color, frame};
use ffmpeg_next as ffmpeg;
use ndarray::Array3;
use serde::{Deserialize, Serialize};

use crate::frames::FramePolicy;

/// How decoded YUV frames become RGB (`frame_tagged` | `pyav13`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColourConversion {
    /// The frame's own matrix (BT.709 for HD footage) and range, bicubic scaler.
    #[default]
    FrameTagged,
    /// The official SIS-Motion code's `frame.to_image()` under PyAV 13.1.0
    /// (`motion/src/uav/data/data_processor.py:232`, `motion/src/eval/dataset_utils.py:160`;
    /// transformers' torchvision path calls the same `reformat(format="rgb24")`): PyAV passes no
    /// colour details, so swscale converts with its defaults — the BT.601 matrix whatever the
    /// tags, full range only for the `yuvj*` formats (a full-range tag on `yuv420p` is read as
    /// limited) — and `SWS_BILINEAR`. Pinned by `tests/fixtures/pyav_colour`.
    Pyav13,
}

impl ColourConversion {
    /// The conversion a frame policy goes with: the official plan converts as the official code
    /// does, every other plan with the frame's tags.
    pub fn for_policy(policy: &FramePolicy) -> Self {
        if matches!(policy, FramePolicy::Official { .. }) { ColourConversion::Pyav13 } else { ColourConversion::FrameTagged }
    }

    fn scaler_flags(self) -> scaling::Flags {
        match self {
            ColourConversion::FrameTagged => scaling::Flags::BICUBIC,
            ColourConversion::Pyav13 => scaling::Flags::BILINEAR,
        }
    }
}

/// Turns decoded frames of any pixel format into packed RGB24 at the first frame's size, with
/// the matrix and range its [`ColourConversion`] picks.
pub(super) struct RgbConverter {
    conversion: ColourConversion,
    scaler: Option<(scaling::Context, Pixel, u32, u32)>,
    out_size: Option<(u32, u32)>,
}

impl RgbConverter {
    pub(super) fn new(conversion: ColourConversion) -> Self {
        Self { conversion, scaler: None, out_size: None }
    }

    pub(super) fn convert(&mut self, frame: &frame::Video) -> Result<Array3<u8>, ffmpeg::Error> {
        let (fw, fh, fmt) = (frame.width(), frame.height(), frame.format());
        let (ow, oh) = *self.out_size.get_or_insert((fw, fh));
        let stale = !matches!(&self.scaler, Some((_, f, w, h)) if *f == fmt && *w == fw && *h == fh);
        if stale {
            let mut ctx = scaling::Context::get(fmt, fw, fh, Pixel::RGB24, ow, oh, self.conversion.scaler_flags())?;
            match self.conversion {
                ColourConversion::FrameTagged => set_colorspace(&mut ctx, frame),
                // PyAV 13's `reformat` leaves a fresh context's details alone.
                ColourConversion::Pyav13 => {}
            }
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
    use ffmpeg::ffi::{SWS_CS_BT2020, SWS_CS_DEFAULT, SWS_CS_FCC, SWS_CS_ITU709, SWS_CS_SMPTE240M, sws_getCoefficients, sws_setColorspaceDetails};
    let matrix = match frame.color_space() {
        color::Space::BT709 => SWS_CS_ITU709,
        color::Space::FCC => SWS_CS_FCC,
        color::Space::SMPTE240M => SWS_CS_SMPTE240M,
        color::Space::BT2020NCL | color::Space::BT2020CL => SWS_CS_BT2020,
        _ => SWS_CS_DEFAULT,
    };
    let full_range =
        frame.color_range() == color::Range::JPEG || matches!(frame.format(), Pixel::YUVJ420P | Pixel::YUVJ422P | Pixel::YUVJ444P | Pixel::YUVJ440P);
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
