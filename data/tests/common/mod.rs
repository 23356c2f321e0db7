//! Clips and frame folders the tests write themselves: every synthetic frame carries its own
//! index as an 8-bit code (eight 16×16 black/white blocks along the top) and four colour bars
//! (red, green, blue, white) below, so a test can tell exactly which frame came back.

use std::path::Path;

use motionvl_data::video::{EncodeSettings, VideoWriter};
use ndarray::{Array3, ArrayView3, s};

pub const W: usize = 128;
pub const H: usize = 64;
pub const BARS: [[u8; 3]; 4] = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [255, 255, 255]];

/// Frame `index`: code blocks in rows 0..16, grey in 16..32, colour bars in 32..64.
pub fn synthetic_frame(index: usize) -> Array3<u8> {
    Array3::from_shape_fn((H, W, 3), |(y, x, c)| {
        if y < 16 {
            if (index >> (x / 16)) & 1 == 1 { 255 } else { 0 }
        } else if y < 32 {
            128
        } else {
            BARS[x / 32][c]
        }
    })
}

/// Reads the code back: mean of each block's interior thresholded at mid-grey.
pub fn frame_code(frame: ArrayView3<u8>) -> usize {
    (0..8)
        .map(|bit| {
            let block = frame.slice(s![4..12, bit * 16 + 4..bit * 16 + 12, ..]);
            let mean = block.iter().map(|v| f64::from(*v)).sum::<f64>() / block.len() as f64;
            usize::from(mean > 128.0) << bit
        })
        .sum()
}

pub fn write_clip(path: &Path, frames: usize, settings: &EncodeSettings) {
    let mut writer = VideoWriter::create(path, W, H, settings).expect("create writer");
    for i in 0..frames {
        writer.push(synthetic_frame(i).view()).expect("push");
    }
    writer.finish().expect("finish");
}

pub fn mpeg4(frame_rate: (i32, i32), gop: u32) -> EncodeSettings {
    EncodeSettings { frame_rate, codec: Some("mpeg4".into()), gop_size: gop, bit_rate: 2_000_000, ..EncodeSettings::default() }
}

pub fn codes(frames: &ndarray::Array4<u8>) -> Vec<usize> {
    frames.outer_iter().map(frame_code).collect()
}

pub fn write_png_sequence(dir: &Path, names: &[String]) {
    for (i, name) in names.iter().enumerate() {
        let frame = synthetic_frame(i);
        let img = image::RgbImage::from_raw(W as u32, H as u32, frame.into_raw_vec_and_offset().0).expect("image");
        img.save(dir.join(name)).expect("save frame");
    }
}
