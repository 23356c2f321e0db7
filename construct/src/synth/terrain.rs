//! The ground: an endless textured plane at z = 0 with fields, hedges, roads and lakes.
//!
//! Optical flow needs texture at every scale the camera sees, and ground truth needs the
//! texture not to shimmer between frames (aliasing would make a rendered frame disagree with
//! the warped previous one). So every pattern here is band-limited: each takes the pixel's
//! footprint on the ground and fades out detail finer than about two pixels, and hard edges
//! (road sides, hedges) are smoothed over one footprint.

use serde::{Deserialize, Serialize};

use super::rng::{SynthRng, derive_seed, lattice, value_noise};

/// An RGB colour with channels in `[0, 1]`.
pub type Rgb = [f32; 3];

/// Crop colours of the fields.
const CROPS: [Rgb; 7] =
    [[0.36, 0.52, 0.22], [0.47, 0.60, 0.27], [0.62, 0.58, 0.30], [0.74, 0.66, 0.38], [0.50, 0.40, 0.27], [0.30, 0.44, 0.24], [0.58, 0.64, 0.36]];
const HEDGE: Rgb = [0.20, 0.30, 0.14];
const ASPHALT: Rgb = [0.30, 0.30, 0.31];
const ROAD_MARK: Rgb = [0.92, 0.92, 0.88];
const WATER: Rgb = [0.16, 0.32, 0.48];
const SAND: Rgb = [0.76, 0.70, 0.52];

/// Fraction of a pattern of `wavelength` metres that survives at `footprint` metres per pixel:
/// 1 above four pixels per period, 0 below two.
pub fn detail(wavelength: f32, footprint: f32) -> f32 {
    smoothstep(2.0 * footprint, 4.0 * footprint, wavelength)
}

pub fn smoothstep(lo: f32, hi: f32, x: f32) -> f32 {
    let t = ((x - lo) / (hi - lo)).clamp(0.0, 1.0);
    t * t * (3.0 - 2.0 * t)
}

pub fn mix(a: Rgb, b: Rgb, t: f32) -> Rgb {
    [a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t, a[2] + (b[2] - a[2]) * t]
}

pub fn scale(c: Rgb, s: f32) -> Rgb {
    [c[0] * s, c[1] * s, c[2] * s]
}

/// A straight road across the whole world.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Road {
    /// A point on the centre line.
    pub origin: [f32; 2],
    /// Unit direction of the centre line.
    pub direction: [f32; 2],
    pub width: f32,
}

impl Road {
    /// Signed distance across the road and position along it.
    fn coords(&self, x: f32, y: f32) -> (f32, f32) {
        let (dx, dy) = (x - self.origin[0], y - self.origin[1]);
        let along = dx * self.direction[0] + dy * self.direction[1];
        let across = -dx * self.direction[1] + dy * self.direction[0];
        (across, along)
    }
}

/// The ground's layout: field grid, roads and where water lies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Terrain {
    pub seed: u64,
    /// Orientation of the field grid, radians.
    pub field_angle: f32,
    /// Field size along and across the grid, metres.
    pub field_size: [f32; 2],
    pub roads: Vec<Road>,
    /// Low-frequency noise above this level is water (a few lakes per square kilometre).
    pub water_level: f32,
}

impl Terrain {
    /// Wavelength of the noise that shapes lakes, metres.
    const LAKE_SCALE: f32 = 160.0;

    pub fn new(seed: u64) -> Self {
        let mut rng = SynthRng::new(derive_seed(seed, 0x7e22a1));
        let field_angle = rng.range(0.0, std::f64::consts::PI) as f32;
        let field_size = [rng.range(28.0, 48.0) as f32, rng.range(16.0, 30.0) as f32];
        let n_roads = 2 + rng.index(3);
        let roads = (0..n_roads)
            .map(|i| {
                // Half the roads follow the field grid, as country roads do.
                let angle = if i % 2 == 0 {
                    field_angle + if rng.chance(0.5) { 0.0 } else { std::f32::consts::FRAC_PI_2 }
                } else {
                    rng.range(0.0, std::f64::consts::PI) as f32
                };
                Road {
                    origin: [rng.range(-140.0, 140.0) as f32, rng.range(-140.0, 140.0) as f32],
                    direction: [angle.cos(), angle.sin()],
                    width: rng.range(6.0, 11.0) as f32,
                }
            })
            .collect();
        Terrain { seed, field_angle, field_size, roads, water_level: rng.range(0.66, 0.72) as f32 }
    }

    /// The lake field in `[0, 1)`; water where it exceeds [`Terrain::water_level`].
    pub fn lake_value(&self, x: f32, y: f32) -> f32 {
        let s = derive_seed(self.seed, 0x1a4e);
        let a = value_noise(s, x / Self::LAKE_SCALE, y / Self::LAKE_SCALE);
        let b = value_noise(s ^ 1, x / (Self::LAKE_SCALE * 0.4), y / (Self::LAKE_SCALE * 0.4));
        0.75 * a + 0.25 * b
    }

    pub fn is_water(&self, x: f32, y: f32) -> bool {
        self.lake_value(x, y) > self.water_level
    }

    /// Distance from `(x, y)` to the nearest road edge, negative on a road.
    pub fn road_clearance(&self, x: f32, y: f32) -> f32 {
        self.roads.iter().map(|r| r.coords(x, y).0.abs() - r.width / 2.0).fold(f32::INFINITY, f32::min)
    }

    /// The ground colour at `(x, y)` seen with `footprint` metres per pixel.
    pub fn albedo(&self, x: f32, y: f32, footprint: f32) -> Rgb {
        let mut colour = self.fields(x, y, footprint);

        let lake = self.lake_value(x, y);
        let edge = (0.004f32).max(footprint / Self::LAKE_SCALE);
        let shore = smoothstep(self.water_level - 0.025 - edge, self.water_level - 0.025 + edge, lake);
        colour = mix(colour, SAND, shore);
        let wet = smoothstep(self.water_level - edge, self.water_level + edge, lake);
        if wet > 0.0 {
            let s = derive_seed(self.seed, 0x3a7e);
            let ripple = detail(3.0, footprint) * (value_noise(s, x / 3.0, y / 1.5) - 0.5) * 0.25;
            let deep = smoothstep(self.water_level, self.water_level + 0.08, lake) * 0.25;
            colour = mix(colour, scale(WATER, 1.0 + ripple - deep), wet);
        }

        for road in &self.roads {
            colour = road_colour(road, x, y, footprint, colour, self.seed);
        }

        // Brightness noise at several scales gives flow something to track everywhere.
        let s = derive_seed(self.seed, 0xb0b);
        let mut n = 0.0;
        for (i, (wavelength, amp)) in [(23.0f32, 0.16f32), (7.0, 0.12), (2.6, 0.10), (1.1, 0.08)].iter().enumerate() {
            let w = detail(*wavelength, footprint);
            if w > 0.0 {
                n += w * amp * (value_noise(s ^ i as u64, x / wavelength, y / wavelength) - 0.5) * 2.0;
            }
        }
        scale(colour, 1.0 + n)
    }

    /// Fields on a rotated grid, every other row shifted, each with its crop colour and
    /// furrows, separated by hedges.
    fn fields(&self, x: f32, y: f32, footprint: f32) -> Rgb {
        let (sa, ca) = self.field_angle.sin_cos();
        let u = x * ca + y * sa;
        let v = -x * sa + y * ca;
        let [su, sv] = self.field_size;
        let row = (v / sv).floor();
        let shift = lattice(self.seed ^ 0xf1e1d, row as i64, 0) * su;
        let col = ((u + shift) / su).floor();
        let cell = (col as i64, row as i64);
        let h = lattice(self.seed ^ 0xce11, cell.0, cell.1);
        let crop = CROPS[((h * CROPS.len() as f32) as usize).min(CROPS.len() - 1)];
        let h2 = lattice(self.seed ^ 0xf0, cell.0, cell.1);
        let period = 1.6 + 2.8 * h2;
        let along_u = h2 > 0.5;
        let furrow_coord = if along_u { v } else { u + shift };
        let furrow = (furrow_coord * std::f32::consts::TAU / period).sin() * detail(period, footprint);
        let mut colour = scale(crop, 1.0 + 0.14 * furrow);

        // Hedges: a dark band at field borders, antialiased over the pixel footprint.
        let fu = ((u + shift) / su).rem_euclid(1.0);
        let fv = (v / sv).rem_euclid(1.0);
        let du = fu.min(1.0 - fu) * su;
        let dv = fv.min(1.0 - fv) * sv;
        let border = du.min(dv);
        let half = 0.9;
        let hedge = 1.0 - smoothstep(half - footprint * 0.5, half + footprint * 0.5, border);
        colour = mix(colour, HEDGE, hedge);
        colour
    }
}

/// The road at `(x, y)` over `under`: asphalt with a dashed centre line and pale edges.
fn road_colour(road: &Road, x: f32, y: f32, footprint: f32, under: Rgb, seed: u64) -> Rgb {
    let (across, along) = road.coords(x, y);
    let half = road.width / 2.0;
    let aa = footprint * 0.5;
    let cover = 1.0 - smoothstep(half - aa, half + aa, across.abs());
    if cover <= 0.0 {
        return under;
    }
    let grain = detail(1.5, footprint) * (value_noise(seed ^ 0xa5f, along / 1.5, across / 1.5) - 0.5) * 0.2;
    let mut c = scale(ASPHALT, 1.0 + grain);
    // Dashed centre line: 3 m dashes every 8 m, 0.3 m wide; fades to its mean when too fine.
    let line_w = 0.3;
    let phase = ((along - 1.5) / 8.0).rem_euclid(1.0) * 8.0;
    let from_dash_centre = phase.min(8.0 - phase);
    let dash = 1.0 - smoothstep(1.5 - aa, 1.5 + aa, from_dash_centre);
    let line = (1.0 - smoothstep(line_w / 2.0 - aa, line_w / 2.0 + aa, across.abs())) * dash;
    let visible = detail(line_w * 2.0, footprint);
    let mean = line_w / road.width * 3.0 / 8.0;
    c = mix(c, ROAD_MARK, line * visible + mean * (1.0 - visible));
    // Edge lines.
    let edge = 1.0 - smoothstep(0.15 - aa, 0.15 + aa, (across.abs() - (half - 0.5)).abs());
    c = mix(c, ROAD_MARK, edge * 0.6 * visible);
    mix(under, c, cover)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_ground() {
        let (a, b) = (Terrain::new(5), Terrain::new(5));
        assert_eq!(a, b);
        assert_eq!(a.albedo(12.5, -40.0, 0.2), b.albedo(12.5, -40.0, 0.2));
        assert_ne!(Terrain::new(6), a);
    }

    #[test]
    fn coarse_footprints_lose_detail_but_keep_the_mean() {
        assert_eq!(detail(1.0, 1.0), 0.0);
        assert_eq!(detail(10.0, 1.0), 1.0);
        let t = Terrain::new(9);
        let c = t.albedo(3.0, 4.0, 50.0);
        assert!(c.iter().all(|v| (0.05..1.0).contains(v)), "{c:?}");
    }

    #[test]
    fn roads_are_grey() {
        let t = Terrain::new(11);
        let r = t.roads[0];
        // A point on the road, a bit off the centre line.
        let x = r.origin[0] - r.direction[1] * (r.width * 0.3);
        let y = r.origin[1] + r.direction[0] * (r.width * 0.3);
        assert!(t.road_clearance(x, y) < 0.0);
        if !t.is_water(x, y) {
            let c = t.albedo(x, y, 2.0);
            assert!((c[0] - c[2]).abs() < 0.08 && c[1] < 0.5, "{c:?}");
        }
    }
}
