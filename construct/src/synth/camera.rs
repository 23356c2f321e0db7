//! The pinhole camera: intrinsics from image size and field of view, and a pose of position,
//! heading (yaw) and pitch. The drone camera never rolls, as on a gimballed UAV.
//!
//! Pixel coordinates put pixel `(i, j)`'s centre at `(i, j)`, x to the right and y down, so a
//! flow vector added to a pixel index lands on the matching pixel index of the next frame.

use serde::{Deserialize, Serialize};

use super::geometry::{Ray, Vec3};

/// The horizontal field of view of the drone camera (pinhole, 90°).
pub const HORIZONTAL_FOV_DEG: f32 = 90.0;

/// Focal lengths and principal point in pixels, for a `width`×`height` image.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Intrinsics {
    pub width: usize,
    pub height: usize,
    pub fx: f32,
    pub fy: f32,
    pub cx: f32,
    pub cy: f32,
}

impl Intrinsics {
    /// Square pixels, principal point at the image centre, focal length from the horizontal
    /// field of view in degrees.
    pub fn new(width: usize, height: usize, horizontal_fov_deg: f32) -> Self {
        let fx = (width as f32 / 2.0) / (horizontal_fov_deg.to_radians() / 2.0).tan();
        Intrinsics { width, height, fx, fy: fx, cx: (width as f32 - 1.0) / 2.0, cy: (height as f32 - 1.0) / 2.0 }
    }

    /// The drone camera at this size.
    pub fn drone(width: usize, height: usize) -> Self {
        Self::new(width, height, HORIZONTAL_FOV_DEG)
    }

    /// Half the vertical field of view, in radians.
    pub fn half_vertical_fov(&self) -> f32 {
        ((self.height as f32 / 2.0) / self.fy).atan()
    }

    /// `[fx, fy, cx, cy]`, the order stored beside the ground truth.
    pub fn to_array(&self) -> [f32; 4] {
        [self.fx, self.fy, self.cx, self.cy]
    }
}

/// Where the camera is and where it looks. Yaw is the heading in radians counter-clockwise
/// from east (+x) seen from above, so turning left increases it; pitch is the elevation of
/// the optical axis in radians (negative looks down).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pose {
    pub position: Vec3,
    pub yaw: f32,
    pub pitch: f32,
}

/// The camera's axes in world space.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CameraBasis {
    /// The optical axis.
    pub forward: Vec3,
    /// Image x.
    pub right: Vec3,
    /// Image y.
    pub down: Vec3,
}

impl Pose {
    pub fn new(position: Vec3, yaw: f32, pitch: f32) -> Self {
        Pose { position, yaw, pitch }
    }

    pub fn basis(&self) -> CameraBasis {
        let (sy, cy) = self.yaw.sin_cos();
        let (sp, cp) = self.pitch.sin_cos();
        let forward = Vec3::new(cp * cy, cp * sy, sp);
        let right = Vec3::new(sy, -cy, 0.0);
        CameraBasis { forward, right, down: forward.cross(right) }
    }

    /// The ray through pixel `(px, py)`, scaled so that its forward component is 1: the hit
    /// parameter along it is the z-depth.
    pub fn ray(&self, basis: &CameraBasis, k: &Intrinsics, px: f32, py: f32) -> Ray {
        let a = (px - k.cx) / k.fx;
        let b = (py - k.cy) / k.fy;
        Ray::new(self.position, basis.forward + basis.right * a + basis.down * b)
    }

    /// The f64 form of this camera, for exact ground truth.
    pub fn precise(&self, k: &Intrinsics) -> PreciseCamera {
        PreciseCamera::new(self, k)
    }

    /// Projects a world point: `(x, y, z_depth)`, or `None` when it is not in front of the
    /// camera.
    pub fn project(&self, k: &Intrinsics, point: [f64; 3]) -> Option<(f64, f64, f64)> {
        self.precise(k).project(point)
    }

    /// The world point seen at pixel `(px, py)` with z-depth `depth`.
    pub fn unproject(&self, k: &Intrinsics, px: f64, py: f64, depth: f64) -> [f64; 3] {
        self.precise(k).unproject(px, py, depth)
    }

    /// Camera-to-world as a 3×4 row-major matrix `[right | down | forward | position]` (the
    /// columns map camera x, y, z to world), the OpenCV convention.
    pub fn camera_to_world(&self) -> [f32; 12] {
        let b = self.basis();
        let p = self.position;
        [
            b.right.x,
            b.down.x,
            b.forward.x,
            p.x, //
            b.right.y,
            b.down.y,
            b.forward.y,
            p.y, //
            b.right.z,
            b.down.z,
            b.forward.z,
            p.z,
        ]
    }

    /// Where the optical axis meets the ground plane, if it points down.
    pub fn ground_target(&self) -> Option<Vec3> {
        let f = self.basis().forward;
        if f.z >= -1e-4 {
            return None;
        }
        let t = -self.position.z / f.z;
        Some(self.position + f * t)
    }
}

/// A camera in f64 with its axes computed once: ground-truth flow goes through it for every
/// pixel, so that the only rounding left is f32 depth's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreciseCamera {
    position: [f64; 3],
    forward: [f64; 3],
    right: [f64; 3],
    down: [f64; 3],
    fx: f64,
    fy: f64,
    cx: f64,
    cy: f64,
}

impl PreciseCamera {
    pub fn new(pose: &Pose, k: &Intrinsics) -> Self {
        let (sy, cy) = f64::from(pose.yaw).sin_cos();
        let (sp, cp) = f64::from(pose.pitch).sin_cos();
        let f = [cp * cy, cp * sy, sp];
        let r = [sy, -cy, 0.0];
        let d = [f[1] * r[2] - f[2] * r[1], f[2] * r[0] - f[0] * r[2], f[0] * r[1] - f[1] * r[0]];
        let p = pose.position;
        PreciseCamera {
            position: [f64::from(p.x), f64::from(p.y), f64::from(p.z)],
            forward: f,
            right: r,
            down: d,
            fx: f64::from(k.fx),
            fy: f64::from(k.fy),
            cx: f64::from(k.cx),
            cy: f64::from(k.cy),
        }
    }

    /// `(x, y, z_depth)` of a world point, or `None` when it is not in front of the camera.
    pub fn project(&self, point: [f64; 3]) -> Option<(f64, f64, f64)> {
        let p = self.position;
        self.project_direction([point[0] - p[0], point[1] - p[1], point[2] - p[2]])
    }

    /// Projects a direction from the camera centre: a point at infinity, such as a sky ray.
    pub fn project_direction(&self, rel: [f64; 3]) -> Option<(f64, f64, f64)> {
        let z = dot(rel, self.forward);
        if z <= 1e-6 {
            return None;
        }
        Some((self.cx + self.fx * dot(rel, self.right) / z, self.cy + self.fy * dot(rel, self.down) / z, z))
    }

    /// The ray direction of pixel `(px, py)` with unit forward component.
    pub fn direction(&self, px: f64, py: f64) -> [f64; 3] {
        let (f, r, d) = (self.forward, self.right, self.down);
        let a = (px - self.cx) / self.fx;
        let b = (py - self.cy) / self.fy;
        [f[0] + a * r[0] + b * d[0], f[1] + a * r[1] + b * d[1], f[2] + a * r[2] + b * d[2]]
    }

    /// The world point at pixel `(px, py)` and z-depth `depth`.
    pub fn unproject(&self, px: f64, py: f64, depth: f64) -> [f64; 3] {
        let dir = self.direction(px, py);
        let p = self.position;
        [p[0] + depth * dir[0], p[1] + depth * dir[1], p[2] + depth * dir[2]]
    }
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ninety_degree_fov_puts_the_edge_at_forty_five() {
        let k = Intrinsics::drone(224, 168);
        assert!((k.fx - 112.0).abs() < 1e-4);
        assert!((k.cx - 111.5).abs() < 1e-6 && (k.cy - 83.5).abs() < 1e-6);
    }

    #[test]
    fn project_inverts_unproject() {
        let k = Intrinsics::drone(64, 48);
        let pose = Pose::new(Vec3::new(3.0, -2.0, 30.0), 0.7, -0.9);
        let p = pose.unproject(&k, 10.25, 40.5, 37.0);
        let (x, y, z) = pose.project(&k, p).expect("in front");
        assert!((x - 10.25).abs() < 1e-9 && (y - 40.5).abs() < 1e-9 && (z - 37.0).abs() < 1e-9);
    }

    #[test]
    fn image_up_points_along_the_heading_when_looking_straight_down() {
        let pose = Pose::new(Vec3::new(0.0, 0.0, 10.0), std::f32::consts::FRAC_PI_2, -std::f32::consts::FRAC_PI_2);
        let b = pose.basis();
        // Heading north: image up (−down) is north, image right is east.
        assert!((-b.down - Vec3::new(0.0, 1.0, 0.0)).length() < 1e-6);
        assert!((b.right - Vec3::new(1.0, 0.0, 0.0)).length() < 1e-6);
    }
}
