//! Conversion of decoded frames to packed RGB with the frame's own colour matrix and range.


use ffmpeg::format::Pixel;
use ffmpeg::software::scaling;
use ffmpeg::{color, frame};
use ffmpeg_next as ffmpeg;
use ndarray::Array3;


/// Turns decoded frames of any pixel format into packed RGB24 at the first frame's size,
/// honouring the frame's colour matrix (BT.709 HD footage would otherwise be converted with
/// BT.601 coefficients) and range.
pub(super) struct RgbConverter {
    scaler: Option<(scaling::Context, Pixel, u32, u32)>,
    out_size: Option<(u32, u32)>,
}

impl RgbConverter {
    pub(super) fn new() -> Self {
        Self {
            scaler: None,
            out_size: None,
        }
    }

    pub(super) fn convert(&mut self, frame: &frame::Video) -> Result<Array3<u8>, ffmpeg::Error> {
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
