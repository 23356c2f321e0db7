//! Float image planes and the few filters DIS needs: grey conversion, 2×2 pyramid, gradients,
//! bilinear flow resize and warping. Planes keep intensities in 0..255 (the scale the
//! variational weights of OpenCV's DIS are tuned for) but in f32, so pyramid levels are not
//! rounded back to u8.

use ndarray::ArrayView3;
use rayon::prelude::*;

/// A row-major single-channel f32 image.
#[derive(Debug, Clone, PartialEq)]
pub struct Plane {
    pub w: usize,
    pub h: usize,
    pub data: Vec<f32>,
}

impl Plane {
    pub fn zeros(w: usize, h: usize) -> Self {
        Plane { w, h, data: vec![0.0; w * h] }
    }

    #[inline]
    pub fn at(&self, x: usize, y: usize) -> f32 {
        self.data[y * self.w + x]
    }

    pub fn row(&self, y: usize) -> &[f32] {
        &self.data[y * self.w..(y + 1) * self.w]
    }

    /// Luma of an `[H,W,3]` RGB frame with BT.601 weights (those of `cv2.COLOR_RGB2GRAY`).
    pub fn grey(frame: ArrayView3<u8>) -> Self {
        let (h, w, _) = frame.dim();
        let mut data = vec![0.0; w * h];
        data.par_chunks_mut(w).enumerate().for_each(|(y, row)| {
            for (x, out) in row.iter_mut().enumerate() {
                let p = |c: usize| frame[[y, x, c]] as f32;
                *out = 0.299 * p(0) + 0.587 * p(1) + 0.114 * p(2);
            }
        });
        Plane { w, h, data }
    }

    /// Half-size level of an image pyramid: each pixel averages a 2×2 block (OpenCV's
    /// `INTER_AREA` at scale 1/2). An odd last row/column is dropped, as `w / 2` does.
    pub fn half(&self) -> Self {
        let (w, h) = (self.w / 2, self.h / 2);
        let mut data = vec![0.0; w * h];
        data.par_chunks_mut(w.max(1)).enumerate().for_each(|(y, row)| {
            let (r0, r1) = (self.row(2 * y), self.row(2 * y + 1));
            for (x, out) in row.iter_mut().enumerate() {
                *out = 0.25 * (r0[2 * x] + r0[2 * x + 1] + r1[2 * x] + r1[2 * x + 1]);
            }
        });
        Plane { w, h, data }
    }

    /// The plane with `b` replicated pixels on every side, so patch reads near the frame edge
    /// need no bounds checks.
    pub fn with_border(&self, b: usize) -> Self {
        let (w, h) = (self.w + 2 * b, self.h + 2 * b);
        let mut data = vec![0.0; w * h];
        for (y, row) in data.chunks_mut(w).enumerate() {
            let src = self.row(y.saturating_sub(b).min(self.h - 1));
            for (x, out) in row.iter_mut().enumerate() {
                *out = src[x.saturating_sub(b).min(self.w - 1)];
            }
        }
        Plane { w, h, data }
    }

    /// Sobel gradients divided by 8, i.e. per-pixel derivatives (OpenCV's DIS keeps the raw
    /// ×8 Sobel, which shrinks every Gauss-Newton step to 1/8; we take the full step).
    /// Borders replicate.
    pub fn gradients(&self) -> (Plane, Plane) {
        let (w, h) = (self.w, self.h);
        let mut gx = Plane::zeros(w, h);
        let mut gy = Plane::zeros(w, h);
        gx.data.par_chunks_mut(w).zip(gy.data.par_chunks_mut(w)).enumerate().for_each(|(y, (rx, ry))| {
            let up = self.row(y.saturating_sub(1));
            let mid = self.row(y);
            let down = self.row((y + 1).min(h - 1));
            for x in 0..w {
                let (l, r) = (x.saturating_sub(1), (x + 1).min(w - 1));
                let col = |row: &[f32]| row[r] - row[l];
                rx[x] = (col(up) + 2.0 * col(mid) + col(down)) / 8.0;
                let v = |c: usize| down[c] - up[c];
                ry[x] = (v(l) + 2.0 * v(x) + v(r)) / 8.0;
            }
        });
        (gx, gy)
    }

    /// Bilinear resize to `w×h` with pixel-centre alignment (OpenCV's `INTER_LINEAR`), values
    /// multiplied by `scale` (flow vectors grow with the image).
    pub fn resized(&self, w: usize, h: usize, scale: f32) -> Plane {
        // Source column, neighbour and weight of every output column, computed once. Clamped
        // coordinates are non-negative, so truncation is floor (and needs no libm call).
        let taps = |n_out: usize, n_in: usize| -> Vec<(usize, usize, f32)> {
            let ratio = n_in as f32 / n_out as f32;
            (0..n_out)
                .map(|i| {
                    let f = ((i as f32 + 0.5) * ratio - 0.5).clamp(0.0, (n_in - 1) as f32);
                    let i0 = f as usize;
                    (i0, (i0 + 1).min(n_in - 1), f - i0 as f32)
                })
                .collect()
        };
        let (xs, ys) = (taps(w, self.w), taps(h, self.h));
        let mut out = Plane::zeros(w, h);
        out.data.par_chunks_mut(w).zip(ys.par_iter()).for_each(|(row, &(y0, y1, ty))| {
            let (r0, r1) = (self.row(y0), self.row(y1));
            for (out, &(x0, x1, tx)) in row.iter_mut().zip(&xs) {
                let top = r0[x0] + tx * (r0[x1] - r0[x0]);
                let bottom = r1[x0] + tx * (r1[x1] - r1[x0]);
                *out = scale * (top + ty * (bottom - top));
            }
        });
        out
    }

    /// Bilinear sample at `(x, y)`, coordinates clamped into the plane (replicate border).
    #[inline]
    pub fn sample(&self, x: f32, y: f32) -> f32 {
        let fx = x.clamp(0.0, (self.w - 1) as f32);
        let fy = y.clamp(0.0, (self.h - 1) as f32);
        let (x0, y0) = (fx as usize, fy as usize); // non-negative: truncation is floor
        let (x1, y1) = ((x0 + 1).min(self.w - 1), (y0 + 1).min(self.h - 1));
        let (tx, ty) = (fx - x0 as f32, fy - y0 as f32);
        let top = self.at(x0, y0) + tx * (self.at(x1, y0) - self.at(x0, y0));
        let bottom = self.at(x0, y1) + tx * (self.at(x1, y1) - self.at(x0, y1));
        top + ty * (bottom - top)
    }

    /// This image pulled back along a flow: `out(x) = self(x + u(x))`.
    pub fn warped(&self, u: &Plane, v: &Plane) -> Plane {
        let w = self.w;
        let mut out = Plane::zeros(w, self.h);
        out.data.par_chunks_mut(w).enumerate().for_each(|(y, row)| {
            let (ru, rv) = (u.row(y), v.row(y));
            for (x, out) in row.iter_mut().enumerate() {
                *out = self.sample(x as f32 + ru[x], y as f32 + rv[x]);
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(w: usize, h: usize) -> Plane {
        Plane { w, h, data: (0..w * h).map(|i| (3 * (i % w) + 2 * (i / w)) as f32).collect() }
    }

    #[test]
    fn gradients_of_a_ramp_are_its_slopes() {
        let (gx, gy) = ramp(10, 8).gradients();
        assert_eq!((gx.at(4, 4), gy.at(4, 4)), (3.0, 2.0));
        assert_eq!(gx.at(0, 4), 1.5); // one-sided at the replicated border
    }

    #[test]
    fn half_averages_blocks_and_resize_keeps_ramps() {
        let p = ramp(8, 6);
        let q = p.half();
        assert_eq!((q.w, q.h), (4, 3));
        assert_eq!(q.at(1, 1), (p.at(2, 2) + p.at(3, 2) + p.at(2, 3) + p.at(3, 3)) / 4.0);
        let r = q.resized(8, 6, 1.0);
        // Interior pixels of a linear ramp survive the half-pixel-aligned round trip.
        assert!((r.at(3, 3) - p.at(3, 3)).abs() < 1e-4, "{} vs {}", r.at(3, 3), p.at(3, 3));
        let s = p.sample(2.5, 3.25);
        assert!((s - (3.0 * 2.5 + 2.0 * 3.25)).abs() < 1e-5);
    }
}
