//! Synthetic frame pairs with exact ground-truth flow, for tests and benchmarks.
//!
//! A procedural texture `T` (multi-octave value noise, in colour) is a continuous function of
//! the plane, so a pair needs no interpolation: frame 1 is `T` sampled on the pixel grid, frame
//! 0 is `T(x + u(x))`. Then `I0(x) = I1(x + u(x))` holds exactly (up to u8 rounding) for any
//! field `u`, and `u` is the forward flow 0 → 1 by construction. Everything is generated in
//! Rust from a seed, so tests need no files.

use ndarray::{Array3, Array4, ArrayView3};

/// A known motion between the two frames of a pair, in pixels of a `H×W` frame.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Motion {
    Translation {
        dx: f32,
        dy: f32,
    },
    /// Rotation about the frame centre, counter-clockwise in image coordinates (y down).
    Rotation {
        degrees: f32,
    },
    /// Scaling about the frame centre (`scale > 1`: content moves outwards).
    Zoom {
        scale: f32,
    },
    /// A smooth random field: a few low-frequency sinusoids per component, peak `amplitude` px.
    Smooth {
        amplitude: f32,
        seed: u64,
    },
}

/// Two RGB frames `[2,H,W,3]` and the exact forward flow `[2,H,W]` between them.
#[derive(Debug, Clone)]
pub struct SyntheticPair {
    pub frames: Array4<u8>,
    pub flow: Array3<f32>,
}

/// The benchmark's four motions for a `h×w` frame: magnitudes scale with the frame so a 448²
/// pair moves about 5–14 px, the range of consecutive 2-FPS drone frames after resizing.
pub fn standard_motions(h: usize, w: usize) -> Vec<(&'static str, Motion)> {
    let k = h.min(w) as f32 / 448.0;
    vec![
        ("translation", Motion::Translation { dx: 6.3 * k, dy: -4.2 * k }),
        ("rotation", Motion::Rotation { degrees: 2.5 }),
        ("zoom", Motion::Zoom { scale: 1.03 }),
        ("smooth", Motion::Smooth { amplitude: 5.0 * k, seed: 7 }),
    ]
}

/// A pair of `h×w` frames related by `motion`, on the texture of `seed`.
pub fn synthetic_pair(h: usize, w: usize, motion: Motion, seed: u64) -> SyntheticPair {
    let texture = Texture::new(seed);
    let field = MotionField::new(motion, h, w);
    let mut flow = Array3::<f32>::zeros((2, h, w));
    let mut frames = Array4::<u8>::zeros((2, h, w, 3));
    for y in 0..h {
        for x in 0..w {
            let (u, v) = field.at(x as f32, y as f32);
            flow[[0, y, x]] = u;
            flow[[1, y, x]] = v;
            let c0 = texture.rgb(x as f32 + u, y as f32 + v);
            let c1 = texture.rgb(x as f32, y as f32);
            for c in 0..3 {
                frames[[0, y, x, c]] = c0[c];
                frames[[1, y, x, c]] = c1[c];
            }
        }
    }
    SyntheticPair { frames, flow }
}

/// Mean end-point error between two `[2,H,W]` flows.
pub fn average_epe(pred: ArrayView3<f32>, truth: ArrayView3<f32>) -> f32 {
    let (_, h, w) = truth.dim();
    let mut sum = 0f64;
    for y in 0..h {
        for x in 0..w {
            let du = pred[[0, y, x]] - truth[[0, y, x]];
            let dv = pred[[1, y, x]] - truth[[1, y, x]];
            sum += ((du * du + dv * dv) as f64).sqrt();
        }
    }
    (sum / (h * w) as f64) as f32
}

/// `u(x)` of a [`Motion`] on a given frame size.
struct MotionField {
    motion: Motion,
    cx: f32,
    cy: f32,
    /// Smooth fields: per component, (amplitude, ωx, ωy, phase).
    waves: [[(f32, f32, f32, f32); 4]; 2],
}

impl MotionField {
    fn new(motion: Motion, h: usize, w: usize) -> Self {
        let (cx, cy) = ((w as f32 - 1.0) / 2.0, (h as f32 - 1.0) / 2.0);
        let mut waves = [[(0.0, 0.0, 0.0, 0.0); 4]; 2];
        if let Motion::Smooth { amplitude, seed } = motion {
            let mut rng = SplitMix(seed ^ 0x5eed_f10e);
            let size = h.max(w) as f32;
            for comp in waves.iter_mut() {
                for wave in comp.iter_mut() {
                    // Periods between 0.6 and 2 frame sides: smooth, but not a global affine map.
                    let period = size * (0.6 + 1.4 * rng.unit());
                    let angle = std::f32::consts::TAU * rng.unit();
                    let omega = std::f32::consts::TAU / period;
                    *wave = (amplitude / 4.0 * (0.5 + rng.unit()), omega * angle.cos(), omega * angle.sin(), std::f32::consts::TAU * rng.unit());
                }
            }
        }
        MotionField { motion, cx, cy, waves }
    }

    fn at(&self, x: f32, y: f32) -> (f32, f32) {
        let (rx, ry) = (x - self.cx, y - self.cy);
        match self.motion {
            Motion::Translation { dx, dy } => (dx, dy),
            Motion::Rotation { degrees } => {
                let (s, c) = degrees.to_radians().sin_cos();
                (c * rx + s * ry - rx, -s * rx + c * ry - ry)
            }
            Motion::Zoom { scale } => ((scale - 1.0) * rx, (scale - 1.0) * ry),
            Motion::Smooth { .. } => {
                let comp = |waves: &[(f32, f32, f32, f32); 4]| waves.iter().map(|&(a, wx, wy, p)| a * (wx * x + wy * y + p).sin()).sum();
                (comp(&self.waves[0]), comp(&self.waves[1]))
            }
        }
    }
}

/// Colour value noise: six octaves (periods 96 px down to 3 px, amplitudes falling as 0.6^k),
/// so patches at every pyramid level have structure, with quintic fades so the texture has
/// continuous first and second derivatives.
struct Texture {
    seed: u64,
}

impl Texture {
    fn new(seed: u64) -> Self {
        Texture { seed }
    }

    fn rgb(&self, x: f32, y: f32) -> [u8; 3] {
        let grey = self.fbm(x, y, 0);
        let tint_a = self.fbm(x * 0.5, y * 0.5, 1);
        let tint_b = self.fbm(x * 0.5, y * 0.5, 2);
        let to_u8 = |v: f32| (128.0 + 150.0 * v).round().clamp(0.0, 255.0) as u8;
        [to_u8(grey + 0.25 * tint_a), to_u8(grey), to_u8(grey + 0.25 * tint_b)]
    }

    /// Fractal sum in about [-1, 1].
    fn fbm(&self, x: f32, y: f32, channel: u64) -> f32 {
        let (mut period, mut amp, mut sum, mut norm) = (96.0f32, 1.0f32, 0.0f32, 0.0f32);
        for octave in 0..6u64 {
            sum += amp * self.noise(x / period, y / period, channel * 16 + octave);
            norm += amp;
            period /= 2.0;
            amp *= 0.6;
        }
        sum / norm * 1.6
    }

    /// Value noise in [-1, 1] on the unit lattice.
    fn noise(&self, x: f32, y: f32, salt: u64) -> f32 {
        let (xf, yf) = (x.floor(), y.floor());
        let (xi, yi) = (xf as i64, yf as i64);
        let fade = |t: f32| t * t * t * (t * (t * 6.0 - 15.0) + 10.0);
        let (tx, ty) = (fade(x - xf), fade(y - yf));
        let v = |dx: i64, dy: i64| self.lattice(xi + dx, yi + dy, salt);
        let top = v(0, 0) + tx * (v(1, 0) - v(0, 0));
        let bottom = v(0, 1) + tx * (v(1, 1) - v(0, 1));
        top + ty * (bottom - top)
    }

    fn lattice(&self, x: i64, y: i64, salt: u64) -> f32 {
        let h = mix(self.seed ^ mix(x as u64 ^ mix(y as u64 ^ mix(salt))));
        (h >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// SplitMix64 finaliser: a fast, well-mixed integer hash.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A tiny deterministic generator, so fixtures do not depend on `rand`'s stream.
struct SplitMix(u64);

impl SplitMix {
    fn unit(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        (mix(self.0) >> 40) as f32 / (1u64 << 24) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame0_is_frame1_moved_by_the_flow() {
        // Sample frame 1 at x+u with bilinear interpolation: it must reproduce frame 0 up to
        // u8 rounding and interpolation error, which a wrong sign or axis would blow up.
        for (name, motion) in standard_motions(96, 128) {
            let pair = synthetic_pair(96, 128, motion, 3);
            let (mut err, mut n) = (0f32, 0);
            for y in 16..80 {
                for x in 16..112 {
                    let (sx, sy) = (x as f32 + pair.flow[[0, y, x]], y as f32 + pair.flow[[1, y, x]]);
                    let (x0, y0) = (sx.floor() as usize, sy.floor() as usize);
                    let (fx, fy) = (sx - x0 as f32, sy - y0 as f32);
                    let p = |yy: usize, xx: usize| pair.frames[[1, yy, xx, 1]] as f32;
                    let s = (1.0 - fy) * ((1.0 - fx) * p(y0, x0) + fx * p(y0, x0 + 1)) + fy * ((1.0 - fx) * p(y0 + 1, x0) + fx * p(y0 + 1, x0 + 1));
                    err += (s - pair.frames[[0, y, x, 1]] as f32).abs();
                    n += 1;
                }
            }
            let mean = err / n as f32;
            assert!(mean < 2.5, "{name}: mean |I1(x+u) - I0(x)| = {mean}");
            let moved = average_epe(pair.flow.view(), Array3::zeros((2, 96, 128)).view());
            assert!(moved > 0.2, "{name}: the motion should be visible, mean |u| = {moved}");
        }
    }

    #[test]
    fn texture_has_contrast() {
        let pair = synthetic_pair(64, 64, Motion::Translation { dx: 0.0, dy: 0.0 }, 1);
        let g: Vec<f32> = pair.frames.iter().map(|&v| v as f32).collect();
        let mean = g.iter().sum::<f32>() / g.len() as f32;
        let std = (g.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / g.len() as f32).sqrt();
        assert!(std > 25.0, "texture std {std}");
        assert_eq!(pair.frames.slice(ndarray::s![0, .., .., ..]), pair.frames.slice(ndarray::s![1, .., .., ..]));
    }
}
