//! Flow pictures for people: the Middlebury colour wheel (Baker et al. 2011; the colouring of
//! RAFT's `flow_viz` and torchvision's `flow_to_image`) — hue is direction, saturation is
//! speed relative to the field's largest vector — and a strip of frames above their flows.
//! Display only: the per-image normalisation here is exactly what pseudo-images avoid.

use image::{RgbImage, imageops};
use ndarray::{ArrayView3, ArrayView4, Axis};

/// The 55 wheel colours: red → yellow → green → cyan → blue → magenta → red, with the
/// Middlebury segment lengths (15, 6, 4, 11, 13, 6).
pub fn colour_wheel() -> Vec<[f32; 3]> {
    let segments: [(usize, [f32; 3], [f32; 3]); 6] = [
        (15, [255.0, 0.0, 0.0], [255.0, 255.0, 0.0]),
        (6, [255.0, 255.0, 0.0], [0.0, 255.0, 0.0]),
        (4, [0.0, 255.0, 0.0], [0.0, 255.0, 255.0]),
        (11, [0.0, 255.0, 255.0], [0.0, 0.0, 255.0]),
        (13, [0.0, 0.0, 255.0], [255.0, 0.0, 255.0]),
        (6, [255.0, 0.0, 255.0], [255.0, 0.0, 0.0]),
    ];
    let mut wheel = Vec::with_capacity(55);
    for (n, from, to) in segments {
        for i in 0..n {
            let t = (i as f32 / n as f32 * 255.0).floor() / 255.0;
            wheel.push([0, 1, 2].map(|c| from[c] + t * (to[c] - from[c])));
        }
    }
    wheel
}

/// One `[2,H,W]` flow as an RGB image. Vectors are divided by the largest magnitude in the
/// field (or by `max_radius` when given, to compare frames on one scale).
pub fn flow_to_rgb(flow: ArrayView3<f32>, max_radius: Option<f32>) -> RgbImage {
    let (_, h, w) = flow.dim();
    let wheel = colour_wheel();
    let n = wheel.len() as f32;
    let largest =
        flow.index_axis(Axis(0), 0).iter().zip(flow.index_axis(Axis(0), 1).iter()).map(|(u, v)| (u * u + v * v).sqrt()).fold(0f32, f32::max);
    let scale = max_radius.unwrap_or(largest).max(1e-5);
    RgbImage::from_fn(w as u32, h as u32, |x, y| {
        let (u, v) = (flow[[0, y as usize, x as usize]] / scale, flow[[1, y as usize, x as usize]] / scale);
        let radius = (u * u + v * v).sqrt();
        let angle = (-v).atan2(-u) / std::f32::consts::PI; // in [-1, 1]
        let fk = (angle + 1.0) / 2.0 * (n - 1.0);
        let k0 = fk.floor() as usize % wheel.len();
        let k1 = (k0 + 1) % wheel.len();
        let f = fk - fk.floor();
        let rgb = [0, 1, 2].map(|c| {
            let col = ((1.0 - f) * wheel[k0][c] + f * wheel[k1][c]) / 255.0;
            // Saturation grows with speed; beyond the scale, colours darken.
            let col = if radius <= 1.0 { 1.0 - radius * (1.0 - col) } else { col * 0.75 };
            (255.0 * col).round().clamp(0.0, 255.0) as u8
        });
        image::Rgb(rgb)
    })
}

/// A frame `[H,W,3]` as an image.
pub fn frame_to_rgb(frame: ArrayView3<u8>) -> RgbImage {
    let (h, w, _) = frame.dim();
    RgbImage::from_fn(w as u32, h as u32, |x, y| image::Rgb([0, 1, 2].map(|c| frame[[y as usize, x as usize, c]])))
}

/// Frames `[N,H,W,3]` in the top row, their flows `[N−1,2,H,W]` below (under the first frame
/// of each pair), every tile scaled to `tile_height` pixels high. All flows share one colour
/// scale, so speeds compare across the strip.
pub fn strip(frames: ArrayView4<u8>, flows: ArrayView4<f32>, tile_height: u32) -> RgbImage {
    let (n, h, w, _) = frames.dim();
    let tile_w = ((w as f32 * tile_height as f32 / h as f32).round() as u32).max(1);
    let largest = flows
        .axis_iter(Axis(0))
        .map(|f| f.index_axis(Axis(0), 0).iter().zip(f.index_axis(Axis(0), 1).iter()).map(|(u, v)| (u * u + v * v).sqrt()).fold(0f32, f32::max))
        .fold(0f32, f32::max);
    let mut out = RgbImage::from_pixel(tile_w * n as u32, tile_height * 2, image::Rgb([255, 255, 255]));
    for t in 0..n {
        let frame = imageops::resize(&frame_to_rgb(frames.index_axis(Axis(0), t)), tile_w, tile_height, imageops::FilterType::Triangle);
        imageops::replace(&mut out, &frame, (t as u32 * tile_w) as i64, 0);
        if t < flows.dim().0 {
            let colour = flow_to_rgb(flows.index_axis(Axis(0), t), Some(largest));
            let colour = imageops::resize(&colour, tile_w, tile_height, imageops::FilterType::Triangle);
            imageops::replace(&mut out, &colour, (t as u32 * tile_w) as i64, tile_height as i64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{Array3, Array4};

    #[test]
    fn wheel_has_middlebury_segments() {
        let wheel = colour_wheel();
        assert_eq!(wheel.len(), 55);
        assert_eq!(wheel[0], [255.0, 0.0, 0.0]);
        assert_eq!(wheel[15], [255.0, 255.0, 0.0]);
        assert_eq!(wheel[21], [0.0, 255.0, 0.0]);
    }

    #[test]
    fn still_pixels_are_white_and_directions_get_their_hues() {
        let mut flow = Array3::<f32>::zeros((2, 1, 4));
        flow[[0, 0, 1]] = 1.0; // right
        flow[[0, 0, 2]] = -1.0; // left
        flow[[1, 0, 3]] = -1.0; // up
        let img = flow_to_rgb(flow.view(), None);
        assert_eq!(img.get_pixel(0, 0).0, [255, 255, 255]);
        let [r, g, b] = img.get_pixel(1, 0).0; // right: the wheel's end, red
        assert!(r > 200 && g < 60 && b < 60, "right {:?}", [r, g, b]);
        let [r, g, b] = img.get_pixel(2, 0).0; // left: opposite, cyan
        assert!(r < 60 && g > 150 && b > 150, "left {:?}", [r, g, b]);
        assert_ne!(img.get_pixel(3, 0).0, img.get_pixel(1, 0).0);
    }

    #[test]
    fn strip_has_a_tile_per_frame_and_a_row_for_flows() {
        let frames = Array4::<u8>::from_elem((3, 20, 40, 3), 90);
        let flows = Array4::<f32>::zeros((2, 2, 20, 40));
        let img = strip(frames.view(), flows.view(), 10);
        assert_eq!(img.dimensions(), (60, 20));
        assert_eq!(img.get_pixel(5, 5).0, [90, 90, 90]);
        assert_eq!(img.get_pixel(5, 15).0, [255, 255, 255]);
    }
}
