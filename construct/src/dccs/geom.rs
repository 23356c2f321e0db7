//! Metres in the point cloud's frame (x east, y north, z up) and angles in degrees, in f64.

use std::ops::{Add, Mul, Sub};

use serde::{Deserialize, Serialize};

/// A point or direction.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct V3 {
    pub x: f64,
    pub y: f64,
    pub z: f64,
}

impl V3 {
    pub const fn new(x: f64, y: f64, z: f64) -> Self {
        V3 { x, y, z }
    }

    pub fn to_array(self) -> [f64; 3] {
        [self.x, self.y, self.z]
    }

    pub fn dot(self, o: V3) -> f64 {
        self.x * o.x + self.y * o.y + self.z * o.z
    }

    pub fn cross(self, o: V3) -> V3 {
        V3::new(self.y * o.z - self.z * o.y, self.z * o.x - self.x * o.z, self.x * o.y - self.y * o.x)
    }

    pub fn length(self) -> f64 {
        self.dot(self).sqrt()
    }

    pub fn horizontal_length(self) -> f64 {
        self.x.hypot(self.y)
    }

    /// The unit vector, or `None` for a (near) zero vector.
    pub fn unit(self) -> Option<V3> {
        let l = self.length();
        (l > 1e-9).then(|| self * (1.0 / l))
    }

    pub fn is_finite(self) -> bool {
        self.x.is_finite() && self.y.is_finite() && self.z.is_finite()
    }

    /// Rotated about the z axis by `deg` degrees, counter-clockwise seen from above.
    pub fn rotate_z(self, deg: f64) -> V3 {
        let (s, c) = deg.to_radians().sin_cos();
        V3::new(c * self.x - s * self.y, s * self.x + c * self.y, self.z)
    }

    pub fn lerp(self, o: V3, t: f64) -> V3 {
        self + (o - self) * t
    }
}

impl Add for V3 {
    type Output = V3;
    fn add(self, o: V3) -> V3 {
        V3::new(self.x + o.x, self.y + o.y, self.z + o.z)
    }
}

impl Sub for V3 {
    type Output = V3;
    fn sub(self, o: V3) -> V3 {
        V3::new(self.x - o.x, self.y - o.y, self.z - o.z)
    }
}

impl Mul<f64> for V3 {
    type Output = V3;
    fn mul(self, s: f64) -> V3 {
        V3::new(self.x * s, self.y * s, self.z * s)
    }
}

/// The unit horizontal vector at heading `deg` (counter-clockwise from +x).
pub fn heading(deg: f64) -> V3 {
    let (s, c) = deg.to_radians().sin_cos();
    V3::new(c, s, 0.0)
}

/// Yaw (counter-clockwise from +x) and pitch (elevation, negative looks down) of a direction,
/// in degrees.
pub fn yaw_pitch(forward: V3) -> (f64, f64) {
    let yaw = forward.y.atan2(forward.x).to_degrees();
    let pitch = forward.z.atan2(forward.horizontal_length()).to_degrees();
    (yaw, pitch)
}

/// The unit forward vector of a yaw and pitch in degrees.
pub fn forward_of(yaw_deg: f64, pitch_deg: f64) -> V3 {
    let (sp, cp) = pitch_deg.to_radians().sin_cos();
    heading(yaw_deg) * cp + V3::new(0.0, 0.0, sp)
}

/// Wraps an angle difference into `(-180, 180]` degrees.
pub fn wrap_deg(d: f64) -> f64 {
    let r = d.rem_euclid(360.0);
    if r > 180.0 { r - 360.0 } else { r }
}

/// `v` rounded to `digits` decimals, as files store numbers.
pub fn round(v: f64, digits: i32) -> f64 {
    let s = 10f64.powi(digits);
    (v * s).round() / s
}
