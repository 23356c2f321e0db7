//! Variational refinement (Kroeger et al. 2016, §2.3; the energy of OpenCV's
//! `VariationalRefinement`): brightness and gradient constancy with robust Charbonnier
//! penalties plus a robust smoothness term, minimised around the densified flow by a few
//! fixed-point (lagged-weight) iterations, each solving its linear system with red-black SOR.
//!
//! `E(dW) = Σ δ Ψ((Iz + ∇I·dW)² / |∇I|²) + γ Ψ(‖∇Iz + H dW‖²_norm) + α Ψ(‖∇(W + dW)‖²)`,
//! `Ψ(s²) = √(s² + ε²)`, derivatives taken on the mean of I0 and the warped I1.
//!
//! Everything lives in a red-black layout (`Board`): pixels with even `x + y` in one
//! half-width plane, odd in the other. A red cell's four neighbours are black, so a half-sweep
//! updates one plane in parallel while reading only the other, and every loop runs over
//! contiguous rows that the compiler vectorises.

use rayon::prelude::*;

use super::image::Plane;

/// Weights and iteration counts of the refinement (OpenCV's defaults in [`Default`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct VariationalParams {
    /// Smoothness weight α.
    pub alpha: f32,
    /// Gradient-constancy weight γ.
    pub gamma: f32,
    /// Brightness-constancy weight δ.
    pub delta: f32,
    /// Outer (fixed-point) iterations; 0 disables the refinement.
    pub iterations: usize,
    /// Red-black SOR sweeps per fixed-point iteration.
    pub sor_iterations: usize,
    /// SOR relaxation factor.
    pub omega: f32,
}

impl Default for VariationalParams {
    fn default() -> Self {
        VariationalParams { alpha: 20.0, gamma: 10.0, delta: 5.0, iterations: 5, sor_iterations: 5, omega: 1.6 }
    }
}

/// Regulariser of the normalisations and of the linear system's diagonal.
const ZETA: f32 = 0.1;
/// Charbonnier ε.
const EPSILON: f32 = 0.001;
/// Rows per parallel task: the planes are small, so tasks must not be.
const ROWS_PER_TASK: usize = 16;

/// Refines `(u, v)` in place so that `I0(x) ≈ I1(x + u(x))` better, keeping the field smooth.
pub fn refine(i0: &Plane, i1: &Plane, u: &mut Plane, v: &mut Plane, p: &VariationalParams) {
    if p.iterations == 0 {
        return;
    }
    let (w, h) = (i0.w, i0.h);
    let geom = Geometry::new(w, h);
    let terms = DataTerms::new(&geom, i0, &i1.warped(u, v));
    let (u0, v0) = (geom.split(u), geom.split(v));
    let (mut cur_u, mut cur_v) = (u0.clone(), v0.clone());
    let mut du = geom.zeros();
    let mut dv = geom.zeros();
    let mut sys = System::new(&geom);
    for _ in 0..p.iterations {
        let weights = smoothness_weights(&geom, &cur_u, &cur_v, p.alpha / 2.0);
        for c in 0..2 {
            sys.assemble(&geom, &terms, &weights, &u0, &v0, &du, &dv, c, p);
        }
        for _ in 0..p.sor_iterations {
            for c in 0..2 {
                sor_half_sweep(&geom, &sys, &mut du, &mut dv, c, p.omega);
            }
        }
        for c in 0..2 {
            add_into(&mut cur_u.planes[c], &u0.planes[c], &du.planes[c]);
            add_into(&mut cur_v.planes[c], &v0.planes[c], &dv.planes[c]);
        }
    }
    *u = geom.merge(&cur_u);
    *v = geom.merge(&cur_v);
}

fn add_into(out: &mut [f32], a: &[f32], b: &[f32]) {
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = x + y;
    }
}

/// The red-black layout of a `w×h` frame. Cell `(y, k)` of colour `c` is pixel
/// `x = 2k + (y + c) % 2`; planes have a one-cell border, so cell `(y, k)` sits at index
/// `(y + 1)·stride + k + 1`. In the other colour, the left neighbour is column `k + o − 1`, the
/// right one `k + o` and the up/down ones column `k` (with `o = (y + c) % 2`).
struct Geometry {
    w: usize,
    h: usize,
    stride: usize,
    /// 1 where the pixel has a right / a lower neighbour, per colour.
    has_right: [Vec<f32>; 2],
    has_down: [Vec<f32>; 2],
}

#[derive(Clone)]
struct Board {
    planes: [Vec<f32>; 2],
}

impl Geometry {
    fn new(w: usize, h: usize) -> Self {
        let stride = w.div_ceil(2) + 2;
        let mut g = Geometry { w, h, stride, has_right: [vec![], vec![]], has_down: [vec![], vec![]] };
        for c in 0..2 {
            let (mut right, mut down) = (g.blank(), g.blank());
            g.for_each_cell(c, |y, x, i| {
                right[i] = (x + 1 < w) as u8 as f32;
                down[i] = (y + 1 < h) as u8 as f32;
            });
            g.has_right[c] = right;
            g.has_down[c] = down;
        }
        g
    }

    fn blank(&self) -> Vec<f32> {
        vec![0.0; self.stride * (self.h + 2)]
    }

    fn zeros(&self) -> Board {
        Board { planes: [self.blank(), self.blank()] }
    }

    /// Cells of colour `c` in row `y`: the column offset `o` and the count.
    fn row(&self, y: usize, c: usize) -> (usize, usize) {
        let o = (y + c) % 2;
        (o, if self.w > o { (self.w - o).div_ceil(2) } else { 0 })
    }

    fn for_each_cell(&self, c: usize, mut f: impl FnMut(usize, usize, usize)) {
        for y in 0..self.h {
            let (o, len) = self.row(y, c);
            for k in 0..len {
                f(y, 2 * k + o, (y + 1) * self.stride + k + 1);
            }
        }
    }

    fn split(&self, p: &Plane) -> Board {
        let mut b = self.zeros();
        for c in 0..2 {
            let plane = &mut b.planes[c];
            self.for_each_cell(c, |y, x, i| plane[i] = p.data[y * self.w + x]);
        }
        b
    }

    fn merge(&self, b: &Board) -> Plane {
        let mut out = Plane::zeros(self.w, self.h);
        for c in 0..2 {
            self.for_each_cell(c, |y, x, i| out.data[y * self.w + x] = b.planes[c][i]);
        }
        out
    }
}

/// Per-pixel constants of the data term for one level: image derivatives on the average of
/// I0 and the warped I1 (`I(x+1) − I(x−1)`, OpenCV's `Sobel(ksize=1)`; the normalisations make
/// the energy indifferent to that factor 2), the temporal difference `Iz`, and the inverse
/// normalisers `q = 1/(|∇I|² + ζ²)`, `q1`, `q2` of the two gradient-constancy rows.
struct DataTerms {
    ix: Board,
    iy: Board,
    iz: Board,
    q: Board,
    ixx: Board,
    ixy: Board,
    iyy: Board,
    ixz: Board,
    iyz: Board,
    q1: Board,
    q2: Board,
}

impl DataTerms {
    fn new(g: &Geometry, i0: &Plane, warped: &Plane) -> Self {
        let map2 = |a: &Plane, b: &Plane, f: fn(f32, f32) -> f32| Plane {
            w: a.w,
            h: a.h,
            data: a.data.iter().zip(&b.data).map(|(x, y)| f(*x, *y)).collect(),
        };
        let avg = map2(i0, warped, |a, b| 0.5 * (a + b));
        let iz = map2(warped, i0, |b, a| b - a);
        let (ix, iy) = (diff_x(&avg), diff_y(&avg));
        let (ixx, ixy, iyy) = (diff_x(&ix), diff_y(&ix), diff_y(&iy));
        let (ixz, iyz) = (diff_x(&iz), diff_y(&iz));
        let q = map2(&ix, &iy, |a, b| 1.0 / (a * a + b * b + ZETA * ZETA));
        let q1 = map2(&ixx, &ixy, |a, b| 1.0 / (a * a + b * b + ZETA * ZETA));
        let q2 = map2(&iyy, &ixy, |a, b| 1.0 / (a * a + b * b + ZETA * ZETA));
        DataTerms {
            ix: g.split(&ix),
            iy: g.split(&iy),
            iz: g.split(&iz),
            q: g.split(&q),
            ixx: g.split(&ixx),
            ixy: g.split(&ixy),
            iyy: g.split(&iyy),
            ixz: g.split(&ixz),
            iyz: g.split(&iyz),
            q1: g.split(&q1),
            q2: g.split(&q2),
        }
    }
}

fn diff_x(p: &Plane) -> Plane {
    let w = p.w;
    let mut out = Plane::zeros(w, p.h);
    for (dst, src) in out.data.chunks_mut(w).zip(p.data.chunks(w)) {
        for x in 0..w {
            dst[x] = src[(x + 1).min(w - 1)] - src[x.saturating_sub(1)];
        }
    }
    out
}

fn diff_y(p: &Plane) -> Plane {
    let (w, h) = (p.w, p.h);
    let mut out = Plane::zeros(w, h);
    for (y, dst) in out.data.chunks_mut(w).enumerate() {
        let (up, down) = (p.row(y.saturating_sub(1)), p.row((y + 1).min(h - 1)));
        for ((d, a), b) in dst.iter_mut().zip(down).zip(up) {
            *d = a - b;
        }
    }
    out
}

/// Smoothness weight `α/2 / √(|∇u|² + |∇v|² + ε²)` of every pixel (forward differences, zero
/// past the last row/column); a pixel's weight belongs to its right and lower edges.
fn smoothness_weights(g: &Geometry, cur_u: &Board, cur_v: &Board, alpha2: f32) -> Board {
    let mut out = g.zeros();
    let eps2 = EPSILON * EPSILON;
    let s = g.stride;
    for c in 0..2 {
        let other = 1 - c;
        let (u, v, uo, vo) = (&cur_u.planes[c], &cur_v.planes[c], &cur_u.planes[other], &cur_v.planes[other]);
        let (hr, hd) = (&g.has_right[c], &g.has_down[c]);
        out.planes[c].par_chunks_mut(s).enumerate().skip(1).take(g.h).with_min_len(ROWS_PER_TASK).for_each(|(py, row)| {
            let (o, n) = g.row(py - 1, c);
            let own = py * s + 1;
            let (right, down) = (own + o, own + s);
            let (u, v, hr, hd) = (&u[own..][..n], &v[own..][..n], &hr[own..][..n], &hd[own..][..n]);
            let (ur, vr, ud, vd) = (&uo[right..][..n], &vo[right..][..n], &uo[down..][..n], &vo[down..][..n]);
            let row = &mut row[1..][..n];
            for k in 0..n {
                let ux = hr[k] * (ur[k] - u[k]);
                let vx = hr[k] * (vr[k] - v[k]);
                let uy = hd[k] * (ud[k] - u[k]);
                let vy = hd[k] * (vd[k] - v[k]);
                row[k] = alpha2 / (ux * ux + vx * vx + uy * uy + vy * vy + eps2).sqrt();
            }
        });
    }
    out
}

/// The lagged-weight linear system: per cell `[a11 a12; a12 a22]·dW = b + Σ w_n dW_n`, and the
/// left/right/up/down edge weights `w_n` (0 where the frame ends).
struct System {
    /// The diagonal is stored inverted (`1/a11`, `1/a22`): SOR multiplies instead of dividing.
    a11: Board,
    a12: Board,
    a22: Board,
    b1: Board,
    b2: Board,
    wn: [Board; 4],
}

impl System {
    fn new(g: &Geometry) -> Self {
        System { a11: g.zeros(), a12: g.zeros(), a22: g.zeros(), b1: g.zeros(), b2: g.zeros(), wn: [g.zeros(), g.zeros(), g.zeros(), g.zeros()] }
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        &mut self,
        g: &Geometry,
        t: &DataTerms,
        weights: &Board,
        u0: &Board,
        v0: &Board,
        du: &Board,
        dv: &Board,
        c: usize,
        p: &VariationalParams,
    ) {
        let (z2, eps2) = (ZETA * ZETA, EPSILON * EPSILON);
        let (delta2, gamma2) = (p.delta / 2.0, p.gamma / 2.0);
        // Data terms: the whole plane at once (border cells compute harmless finite values).
        let n = g.stride * (g.h + 2);
        // Re-sliced to one length so the loop has no bounds checks and vectorises.
        let [ix, iy, iz, q, ixx, ixy, iyy, ixz, iyz, q1, q2, du, dv] =
            [&t.ix, &t.iy, &t.iz, &t.q, &t.ixx, &t.ixy, &t.iyy, &t.ixz, &t.iyz, &t.q1, &t.q2, du, dv].map(|b| &b.planes[c][..n]);
        let [a11, a12, a22, b1, b2] = [&mut self.a11, &mut self.a12, &mut self.a22, &mut self.b1, &mut self.b2].map(|b| &mut b.planes[c][..n]);
        for i in 0..n {
            // Brightness constancy, normalised by the gradient magnitude.
            let r = iz[i] + ix[i] * du[i] + iy[i] * dv[i];
            let wb = delta2 * q[i] / (r * r * q[i] + eps2).sqrt();
            // Gradient constancy, each row normalised by its own Hessian row.
            let rx = ixz[i] + ixx[i] * du[i] + ixy[i] * dv[i];
            let ry = iyz[i] + ixy[i] * du[i] + iyy[i] * dv[i];
            let wg = gamma2 / (rx * rx * q1[i] + ry * ry * q2[i] + eps2).sqrt();
            let (gx, gy) = (ixx[i] * q1[i], iyy[i] * q2[i]);
            let (hx, hy) = (ixy[i] * q1[i], ixy[i] * q2[i]);
            a11[i] = wb * ix[i] * ix[i] + z2 + wg * (ixx[i] * gx + ixy[i] * hy);
            a12[i] = wb * ix[i] * iy[i] + wg * (ixy[i] * gx + iyy[i] * hy);
            a22[i] = wb * iy[i] * iy[i] + z2 + wg * (ixy[i] * hx + iyy[i] * gy);
            b1[i] = -wb * iz[i] * ix[i] - wg * (ixz[i] * gx + iyz[i] * hy);
            b2[i] = -wb * iz[i] * iy[i] - wg * (ixz[i] * hx + iyz[i] * gy);
        }
        // Smoothness: edges to the 4-neighbours pull dW towards the neighbours' initial flow.
        let other = 1 - c;
        let s = g.stride;
        let (wo, wc) = (&weights.planes[other], &weights.planes[c]);
        let (hr, hd) = (&g.has_right[c], &g.has_down[c]);
        let [u0c, u0o, v0c, v0o] = [&u0.planes[c], &u0.planes[other], &v0.planes[c], &v0.planes[other]];
        for y in 0..g.h {
            let (o, n) = g.row(y, c);
            let own = (y + 1) * s + 1;
            let nb = [own + o - 1, own + o, own - s, own + s]; // left, right, up, down
            let (wc, hr, hd, u, v) = (&wc[own..][..n], &hr[own..][..n], &hd[own..][..n], &u0c[own..][..n], &v0c[own..][..n]);
            let (wl, wu) = (&wo[nb[0]..][..n], &wo[nb[2]..][..n]);
            let [ul, ur, uu, ud] = nb.map(|j| &u0o[j..][..n]);
            let [vl, vr, vu, vd] = nb.map(|j| &v0o[j..][..n]);
            let [a11, a22, b1, b2] = [&mut self.a11, &mut self.a22, &mut self.b1, &mut self.b2].map(|b| &mut b.planes[c][own..][..n]);
            let [nl, nr, nu, nd] = self.wn.each_mut().map(|b| &mut b.planes[c][own..][..n]);
            for k in 0..n {
                let (l, r, up, d) = (wl[k], wc[k] * hr[k], wu[k], wc[k] * hd[k]);
                let sum = l + r + up + d;
                a11[k] = 1.0 / (a11[k] + sum);
                a22[k] = 1.0 / (a22[k] + sum);
                b1[k] += l * (ul[k] - u[k]) + r * (ur[k] - u[k]) + up * (uu[k] - u[k]) + d * (ud[k] - u[k]);
                b2[k] += l * (vl[k] - v[k]) + r * (vr[k] - v[k]) + up * (vu[k] - v[k]) + d * (vd[k] - v[k]);
                (nl[k], nr[k], nu[k], nd[k]) = (l, r, up, d);
            }
        }
    }
}

/// One red-black SOR half-sweep: the cells of colour `c` from the current other colour.
fn sor_half_sweep(g: &Geometry, sys: &System, du: &mut Board, dv: &mut Board, c: usize, omega: f32) {
    let s = g.stride;
    let [du_0, du_1] = &mut du.planes;
    let [dv_0, dv_1] = &mut dv.planes;
    let (du_own, du_other) = if c == 0 { (du_0, &*du_1) } else { (du_1, &*du_0) };
    let (dv_own, dv_other) = if c == 0 { (dv_0, &*dv_1) } else { (dv_1, &*dv_0) };
    let (inv11, a12, inv22, b1, b2) =
        (&sys.a11.planes[c][..], &sys.a12.planes[c][..], &sys.a22.planes[c][..], &sys.b1.planes[c][..], &sys.b2.planes[c][..]);
    let [wl, wr, wu, wd] = [&sys.wn[0].planes[c][..], &sys.wn[1].planes[c][..], &sys.wn[2].planes[c][..], &sys.wn[3].planes[c][..]];
    du_own.par_chunks_mut(s).zip(dv_own.par_chunks_mut(s)).enumerate().skip(1).take(g.h).with_min_len(ROWS_PER_TASK).for_each(
        |(py, (u_row, v_row))| {
            let (o, n) = g.row(py - 1, c);
            let own = py * s + 1;
            let nb = [own + o - 1, own + o, own - s, own + s]; // left, right, up, down
            let [ul, ur, uu, ud] = nb.map(|j| &du_other[j..][..n]);
            let [vl, vr, vu, vd] = nb.map(|j| &dv_other[j..][..n]);
            let [inv11, a12, inv22, b1, b2] = [inv11, a12, inv22, b1, b2].map(|p| &p[own..][..n]);
            let [wl, wr, wu, wd] = [wl, wr, wu, wd].map(|p| &p[own..][..n]);
            let (u_row, v_row) = (&mut u_row[1..][..n], &mut v_row[1..][..n]);
            for k in 0..n {
                let su = wl[k] * ul[k] + wr[k] * ur[k] + wu[k] * uu[k] + wd[k] * ud[k];
                let sv = wl[k] * vl[k] + wr[k] * vr[k] + wu[k] * vu[k] + wd[k] * vd[k];
                let u = u_row[k] + omega * ((su + b1[k] - a12[k] * v_row[k]) * inv11[k] - u_row[k]);
                u_row[k] = u;
                v_row[k] += omega * ((sv + b2[k] - a12[k] * u) * inv22[k] - v_row[k]);
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_merge_round_trip_on_odd_and_even_sizes() {
        for (w, h) in [(7, 5), (8, 6), (1, 3), (2, 1)] {
            let g = Geometry::new(w, h);
            let p = Plane { w, h, data: (0..w * h).map(|i| i as f32).collect() };
            assert_eq!(g.merge(&g.split(&p)), p, "{w}x{h}");
            // Neighbour rule: the right neighbour of pixel (y, x) sits at column k + o of the
            // other colour, i.e. at pixel x + 1.
            let b = g.split(&p);
            for c in 0..2 {
                g.for_each_cell(c, |y, x, i| {
                    let (o, _) = g.row(y, c);
                    let k = i - (y + 1) * g.stride - 1;
                    if x + 1 < w {
                        assert_eq!(b.planes[1 - c][(y + 1) * g.stride + k + o + 1], p.data[y * w + x + 1]);
                    }
                    if x > 0 {
                        assert_eq!(b.planes[1 - c][(y + 1) * g.stride + k + o], p.data[y * w + x - 1]);
                    }
                    if y + 1 < h {
                        assert_eq!(b.planes[1 - c][(y + 2) * g.stride + k + 1], p.data[(y + 1) * w + x]);
                    }
                });
            }
        }
    }

    #[test]
    fn refinement_keeps_an_exact_flow_and_improves_a_perturbed_one() {
        use crate::synthetic::{Motion, synthetic_pair};
        let pair = synthetic_pair(48, 56, Motion::Translation { dx: 0.7, dy: -0.4 }, 4);
        let grey = |t: usize| Plane::grey(pair.frames.index_axis(ndarray::Axis(0), t));
        let (i0, i1) = (grey(0), grey(1));
        let err = |u: &Plane, v: &Plane| {
            u.data.iter().zip(&v.data).map(|(a, b)| ((a - 0.7).powi(2) + (b + 0.4).powi(2)).sqrt()).sum::<f32>() / u.data.len() as f32
        };
        let mut u = Plane { w: 56, h: 48, data: vec![0.7; 56 * 48] };
        let mut v = Plane { w: 56, h: 48, data: vec![-0.4; 56 * 48] };
        refine(&i0, &i1, &mut u, &mut v, &VariationalParams::default());
        assert!(err(&u, &v) < 0.05, "exact start drifted to EPE {}", err(&u, &v));
        let mut u = Plane { w: 56, h: 48, data: vec![0.4; 56 * 48] };
        let mut v = Plane { w: 56, h: 48, data: vec![-0.1; 56 * 48] };
        let before = err(&u, &v);
        refine(&i0, &i1, &mut u, &mut v, &VariationalParams { iterations: 10, ..Default::default() });
        // A global offset is the slowest mode for SOR under strong smoothness, so a few outer
        // iterations only start to remove it; they must not make it worse.
        assert!(err(&u, &v) < 0.9 * before, "EPE {before} → {}", err(&u, &v));
    }
}
