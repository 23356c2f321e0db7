//! Flash-style softmax attention on the CPU (f32), forward and backward, as one custom op.
//!
//! The composed attention ([`crate::ops::attention`]) materialises `[.., L, Lk]` scores, an
//! additive mask and every softmax intermediate, and keeps them all for the backward pass. Here
//! queries are processed in tiles of `QUERY_TILE` rows against key tiles of `KEY_TILE`
//! columns (64 each) with an online softmax (running row maximum and sum, FlashAttention's rescaling), so
//! at most one `QUERY_TILE × KEY_TILE` score tile per thread exists at a time. The forward pass
//! keeps the output and each row's log-sum-exp; the backward pass is FlashAttention-2's: it
//! recomputes each probability tile from q, k and the log-sum-exp, with `D = rowsum(dO ∘ O)`.
//!
//! Masks are described, not materialised ([`Mask`]): causal with a `past` offset and optional
//! per-row key padding (the decoder, prefill and KV-cache decode alike), or segments (the vision
//! tower's windows and frames). Grouped-query heads read their shared key/value head directly.
//! A query row that sees no key at all (a left-padding position) gets zeros.
//!
//! Tile products run on the `gemm` crate (runtime-dispatched AVX-512/AVX2 kernels); the
//! elementwise softmax work is compiled for AVX-512 and AVX2 and chosen at run time too, so a
//! portable build gets the fast path.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Storage, Tensor};
use rayon::prelude::*;

/// Query rows per tile.
const QUERY_TILE: usize = 64;
/// Key columns per tile.
const KEY_TILE: usize = 64;

/// Which keys each query row may see.
#[derive(Debug, Clone, PartialEq)]
pub enum Mask {
    /// Every key.
    Full,
    /// Query `i` sees key `j` when `j ≤ past + i` and, if `key_padding` is given, when
    /// `key_padding[b][j]` is true (a real token of batch row `b`).
    Causal { past: usize, key_padding: Option<Arc<[Vec<bool>]>> },
    /// Cumulative offsets `[0, …, L]` splitting the rows (queries and keys alike) into segments;
    /// a row sees the keys of its own segment only.
    Segments(Vec<usize>),
}

/// Whether the fused kernel serves these tensors: f32 on the CPU.
pub fn applies(q: &Tensor, k: &Tensor, v: &Tensor) -> bool {
    [q, k, v].iter().all(|t| t.device().is_cpu() && t.dtype() == DType::F32)
}

/// Softmax attention of `q` `[B, H, L, D]` over `k`, `v` `[B, Hkv, T, D]` (`H` a multiple of
/// `Hkv`: grouped-query heads) → `[B, H, L, D]`, differentiable in all three.
///
/// Any strides are accepted; the result is laid out `[B, L, H, D]` in memory (returned as a
/// transposed view), so merging the heads afterwards is a free reshape.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: &Mask) -> Result<Tensor> {
    let geometry = Geometry::new(q, k, v, mask, "flash attention")?;
    // The kernels read rows in place and need only the last dimension to be dense.
    let dense_rows = |t: &Tensor| if t.stride()[3] == 1 { Ok(t.clone()) } else { t.contiguous() };
    let op = FlashAttention { scale: scale as f32, mask: mask.clone(), geometry, lse: Mutex::new(None) };
    dense_rows(q)?.apply_op3_arc(&dense_rows(k)?, &dense_rows(v)?, Arc::new(Box::new(op)))?.transpose(1, 2)
}

/// Shapes shared by the forward and backward passes, checked against each other and the mask:
/// what every attention kernel takes (the chunked one too).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Geometry {
    pub(crate) batch: usize,
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) len: usize,
    pub(crate) keys: usize,
    pub(crate) dim: usize,
}

impl Geometry {
    /// `op` names the kernel in the errors.
    pub(crate) fn new(q: &Tensor, k: &Tensor, v: &Tensor, mask: &Mask, op: &str) -> Result<Self> {
        let (batch, heads, len, dim) = q.dims4()?;
        let (kb, kv_heads, keys, kd) = k.dims4()?;
        if v.dims() != k.dims() || kb != batch || kd != dim || kv_heads == 0 || heads % kv_heads != 0 {
            candle_core::bail!(
                "{op}: q {:?}, k {:?}, v {:?} must be [B, H, L, D], [B, Hkv, T, D] twice, with H a multiple of Hkv",
                q.dims(),
                k.dims(),
                v.dims()
            );
        }
        match mask {
            Mask::Full => {}
            Mask::Causal { past, key_padding } => {
                if past + len > keys {
                    candle_core::bail!("{op}: {past} past + {len} new positions exceed the {keys} keys");
                }
                if let Some(rows) = key_padding
                    && (rows.len() != batch || rows.iter().any(|r| r.len() != keys))
                {
                    let lens: Vec<usize> = rows.iter().map(Vec::len).collect();
                    candle_core::bail!("{op}: key padding of lengths {lens:?}, expected {batch} rows of {keys}");
                }
            }
            Mask::Segments(cu) => {
                let sorted = cu.windows(2).all(|w| w[0] <= w[1]);
                if keys != len || cu.first() != Some(&0) || cu.last() != Some(&len) || !sorted {
                    candle_core::bail!("{op}: segments {cu:?} must rise from 0 to the {len} rows, with as many keys ({keys})");
                }
            }
        }
        Ok(Self { batch, heads, kv_heads, len, keys, dim })
    }

    fn group(&self) -> usize {
        self.heads / self.kv_heads
    }

    /// `(query rows, visible key range)` of every independent block of rows.
    fn blocks(&self, mask: &Mask) -> Vec<(Range<usize>, Range<usize>)> {
        match mask {
            Mask::Full => vec![(0..self.len, 0..self.keys)],
            Mask::Causal { past, .. } => vec![(0..self.len, 0..(past + self.len).min(self.keys))],
            Mask::Segments(cu) => cu.windows(2).filter(|w| w[1] > w[0]).map(|w| (w[0]..w[1], w[0]..w[1])).collect(),
        }
    }
}

/// Element offsets of a `[B, H, rows, D]` tensor whose rows are dense.
#[derive(Debug, Clone, Copy)]
struct Rows {
    offset: usize,
    batch: usize,
    head: usize,
    row: usize,
}

impl Rows {
    fn of(layout: &Layout) -> Result<Self> {
        match layout.stride() {
            &[batch, head, row, 1] => Ok(Self { offset: layout.start_offset(), batch, head, row }),
            other => candle_core::bail!("flash attention: rows must be dense, strides are {other:?}"),
        }
    }

    /// Dense `[B, H, L, D]`.
    fn head_major(g: &Geometry, heads: usize, len: usize) -> Self {
        Self { offset: 0, batch: heads * len * g.dim, head: len * g.dim, row: g.dim }
    }

    /// Dense `[B, L, H, D]` read as `[B, H, L, D]`.
    fn seq_major(g: &Geometry) -> Self {
        Self { offset: 0, batch: g.len * g.heads * g.dim, head: g.dim, row: g.heads * g.dim }
    }

    fn at(&self, b: usize, h: usize, i: usize) -> usize {
        self.offset + b * self.batch + h * self.head + i * self.row
    }
}

/// A pointer the parallel tasks write through; every task writes rows no other task touches.
#[derive(Clone, Copy)]
struct Shared(*mut f32);

// SAFETY: the tasks of one pass write disjoint rows (see each pass), and the buffer outlives them.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// The custom op; the forward pass leaves each row's log-sum-exp here for the backward pass.
struct FlashAttention {
    scale: f32,
    mask: Mask,
    geometry: Geometry,
    /// `[B, H, L]`; `+∞` for rows that see no key, so their recomputed probabilities are zero.
    lse: Mutex<Option<Arc<Vec<f32>>>>,
}

/// What a pass needs besides the tensors.
struct Plan<'a> {
    g: Geometry,
    scale: f32,
    past: usize,
    causal: bool,
    padding: Option<&'a [Vec<bool>]>,
}

impl<'a> Plan<'a> {
    fn new(op: &'a FlashAttention) -> Self {
        let (causal, past, padding) = match &op.mask {
            Mask::Causal { past, key_padding } => (true, *past, key_padding.as_deref()),
            _ => (false, 0, None),
        };
        Self { g: op.geometry, scale: op.scale, past, causal, padding }
    }

    /// Whether any key of `keys` is a real token of batch row `b`.
    fn any_real(&self, b: usize, keys: &Range<usize>) -> bool {
        self.padding.is_none_or(|p| p[b][keys.clone()].iter().any(|&r| r))
    }

    /// Sets scores of keys `keys` that query rows `rows` may not see to `-∞`; `s` is
    /// `rows.len() × keys.len()`.
    fn mask_tile(&self, b: usize, rows: &Range<usize>, keys: &Range<usize>, s: &mut [f32]) {
        let width = keys.len();
        if self.causal && keys.end > self.past + rows.start + 1 {
            for (r, i) in rows.clone().enumerate() {
                let first_hidden = (self.past + i + 1).saturating_sub(keys.start).min(width);
                s[r * width + first_hidden..(r + 1) * width].fill(f32::NEG_INFINITY);
            }
        }
        if let Some(padding) = self.padding {
            let real = &padding[b][keys.clone()];
            if real.iter().any(|&r| !r) {
                for row in s.chunks_exact_mut(width) {
                    for (x, &r) in row.iter_mut().zip(real) {
                        if !r {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
    }

    /// The key tiles of `keys` that some row of `rows` may see.
    fn key_tiles(&self, rows: &Range<usize>, keys: &Range<usize>) -> impl Iterator<Item = Range<usize>> + use<> {
        let end = if self.causal { keys.end.min(self.past + rows.end) } else { keys.end };
        tiles(keys.start..end, KEY_TILE)
    }
}

fn tiles(range: Range<usize>, size: usize) -> impl Iterator<Item = Range<usize>> {
    range.clone().step_by(size).map(move |s| s..(s + size).min(range.end))
}

impl CustomOp3 for FlashAttention {
    fn name(&self) -> &'static str {
        "flash-attention"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout, s3: &CpuStorage, l3: &Layout) -> Result<(CpuStorage, Shape)> {
        let plan = Plan::new(self);
        let g = plan.g;
        let (q, k, v) = (s1.as_slice::<f32>()?, s2.as_slice::<f32>()?, s3.as_slice::<f32>()?);
        let (qr, kr, vr) = (Rows::of(l1)?, Rows::of(l2)?, Rows::of(l3)?);
        let mut out = vec![0f32; g.batch * g.len * g.heads * g.dim];
        let mut lse = vec![0f32; g.batch * g.heads * g.len];
        let tasks: Vec<(usize, usize, Range<usize>, Range<usize>)> = (0..g.batch)
            .flat_map(|b| (0..g.heads).map(move |h| (b, h)))
            .flat_map(|(b, h)| {
                self.geometry
                    .blocks(&self.mask)
                    .into_iter()
                    .flat_map(move |(rows, keys)| tiles(rows, QUERY_TILE).map(move |t| (b, h, t, keys.clone())))
            })
            .collect();
        let (out_ptr, lse_ptr) = (Shared(out.as_mut_ptr()), Shared(lse.as_mut_ptr()));
        let or = Rows::seq_major(&g);
        tasks.par_iter().for_each(|(b, h, rows, keys)| {
            let io = ForwardTile { plan: &plan, q, k, v, qr, kr, vr, or, out: out_ptr, lse: lse_ptr };
            simd::dispatch(|| io.run(*b, *h, rows.clone(), keys.clone()));
        });
        *self.lse.lock().map_err(|_| candle_core::Error::Msg("flash attention: lse poisoned".into()))? = Some(Arc::new(lse));
        Ok((CpuStorage::F32(out), Shape::from((g.batch, g.len, g.heads, g.dim))))
    }

    fn bwd(&self, q: &Tensor, k: &Tensor, v: &Tensor, res: &Tensor, grad_res: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let lse = self
            .lse
            .lock()
            .map_err(|_| candle_core::Error::Msg("flash attention: lse poisoned".into()))?
            .clone()
            .ok_or_else(|| candle_core::Error::Msg("flash attention: backward before forward".into()))?;
        let plan = Plan::new(self);
        let g = plan.g;
        let grad_res = grad_res.contiguous()?;
        let res = res.contiguous()?;
        let (qs, ql) = q.storage_and_layout();
        let (ks, kl) = k.storage_and_layout();
        let (vs, vl) = v.storage_and_layout();
        let (os, _) = res.storage_and_layout();
        let (dos, _) = grad_res.storage_and_layout();
        let (q_s, k_s, v_s, o_s, do_s) = match (&*qs, &*ks, &*vs, &*os, &*dos) {
            (Storage::Cpu(a), Storage::Cpu(b), Storage::Cpu(c), Storage::Cpu(d), Storage::Cpu(e)) => {
                (a.as_slice::<f32>()?, b.as_slice::<f32>()?, c.as_slice::<f32>()?, d.as_slice::<f32>()?, e.as_slice::<f32>()?)
            }
            _ => candle_core::bail!("flash attention: backward on a non-CPU tensor"),
        };
        let (qr, kr, vr) = (Rows::of(ql)?, Rows::of(kl)?, Rows::of(vl)?);
        let or = Rows::seq_major(&g);
        // D = rowsum(dO ∘ O), [B, H, L].
        let mut delta = vec![0f32; g.batch * g.heads * g.len];
        delta.par_chunks_mut(g.len).enumerate().for_each(|(bh, delta)| {
            let (b, h) = (bh / g.heads, bh % g.heads);
            for (i, dl) in delta.iter_mut().enumerate() {
                let o = or.at(b, h, i);
                *dl = simd::dot(&o_s[o..o + g.dim], &do_s[o..o + g.dim]);
            }
        });
        let blocks = self.geometry.blocks(&self.mask);
        // Each task owns dK/dV of its keys; with few (batch, kv head, block) triples the keys are
        // split further so that every thread has work, each split adding into dQ through its own
        // partial buffer.
        let owners = g.batch * g.kv_heads * blocks.len();
        let splits = (16 * rayon::current_num_threads()).div_ceil(owners.max(1));
        let tasks: Vec<(usize, usize, Range<usize>, Range<usize>)> = (0..g.batch)
            .flat_map(|b| (0..g.kv_heads).map(move |h| (b, h)))
            .flat_map(|(b, h)| {
                blocks.iter().flat_map(move |(rows, keys)| {
                    let step = keys.len().div_ceil(KEY_TILE).div_ceil(splits).max(1) * KEY_TILE;
                    tiles(keys.clone(), step).map(move |chunk| (b, h, rows.clone(), chunk))
                })
            })
            .collect();
        let mut dk = vec![0f32; g.batch * g.kv_heads * g.keys * g.dim];
        let mut dv = vec![0f32; g.batch * g.kv_heads * g.keys * g.dim];
        let (dk_p, dv_p) = (Shared(dk.as_mut_ptr()), Shared(dv.as_mut_ptr()));
        let io = BackwardBlock { plan: &plan, q: q_s, k: k_s, v: v_s, d_o: do_s, lse: &lse, delta: &delta, qr, kr, vr, or, dk: dk_p, dv: dv_p };
        let partials: Vec<(usize, usize, Range<usize>, Vec<f32>)> = tasks
            .par_iter()
            .map(|(b, hk, rows, chunk)| {
                let (seen, dq) = simd::dispatch(|| io.run(*b, *hk, rows.clone(), chunk.clone()));
                (*b, *hk, seen, dq)
            })
            .collect();
        // dQ: each query head sums the partials of its kv head's tasks.
        let mut dq = vec![0f32; g.batch * g.heads * g.len * g.dim];
        dq.par_chunks_mut(g.len * g.dim).enumerate().for_each(|(bh, dq)| {
            let (b, h) = (bh / g.heads, bh % g.heads);
            let gi = h % g.group();
            for (_, _, seen, part) in partials.iter().filter(|(pb, phk, _, _)| *pb == b && *phk == h / g.group()) {
                let part = &part[gi * seen.len() * g.dim..][..seen.len() * g.dim];
                for (x, &p) in dq[seen.start * g.dim..seen.end * g.dim].iter_mut().zip(part) {
                    *x += p;
                }
            }
        });
        let dev = q.device();
        Ok((
            Some(Tensor::from_vec(dq, (g.batch, g.heads, g.len, g.dim), dev)?),
            Some(Tensor::from_vec(dk, (g.batch, g.kv_heads, g.keys, g.dim), dev)?),
            Some(Tensor::from_vec(dv, (g.batch, g.kv_heads, g.keys, g.dim), dev)?),
        ))
    }
}

/// One query tile of one head against its visible keys: the forward pass.
struct ForwardTile<'a> {
    plan: &'a Plan<'a>,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    qr: Rows,
    kr: Rows,
    vr: Rows,
    or: Rows,
    out: Shared,
    lse: Shared,
}

impl ForwardTile<'_> {
    #[inline(always)]
    fn run(&self, b: usize, h: usize, rows: Range<usize>, keys: Range<usize>) {
        let g = self.plan.g;
        let (d, bq, hk) = (g.dim, rows.len(), h / g.group());
        let mut scores = vec![0f32; bq * KEY_TILE];
        let mut acc = vec![0f32; bq * d];
        let mut max = vec![f32::NEG_INFINITY; bq];
        let mut sum = vec![0f32; bq];
        let q = Mat::rows(self.q, self.qr.at(b, h, rows.start), self.qr.row);
        for tile in self.plan.key_tiles(&rows, &keys) {
            if !self.plan.any_real(b, &tile) {
                continue;
            }
            let w = tile.len();
            let s = &mut scores[..bq * w];
            let kt = Mat::transposed(self.k, self.kr.at(b, hk, tile.start), self.kr.row);
            // SAFETY: q and kᵀ address `bq` and `w` rows of `d` inside their storages, s is bq × w.
            unsafe { matmul(bq, w, d, s.as_mut_ptr(), w, false, q, kt, self.plan.scale) };
            self.plan.mask_tile(b, &rows, &tile, s);
            for (r, row) in s.chunks_exact_mut(w).enumerate() {
                let m_new = max[r].max(simd::max(row));
                if m_new == f32::NEG_INFINITY {
                    // Nothing visible to this row yet: the tile adds nothing.
                    row.fill(0.0);
                    continue;
                }
                let rescale = (max[r] - m_new).exp();
                sum[r] = sum[r] * rescale + simd::exp_shifted_sum(row, m_new);
                if rescale != 1.0 {
                    simd::scale(&mut acc[r * d..(r + 1) * d], rescale);
                }
                max[r] = m_new;
            }
            let v = Mat::rows(self.v, self.vr.at(b, hk, tile.start), self.vr.row);
            // SAFETY: s is bq × w, v addresses w rows of d, acc is bq × d.
            unsafe { matmul(bq, d, w, acc.as_mut_ptr(), d, true, Mat::rows(s, 0, w), v, 1.0) };
        }
        for (r, i) in rows.enumerate() {
            let (inv, lse) = if sum[r] > 0.0 { (1.0 / sum[r], max[r] + sum[r].ln()) } else { (0.0, f32::INFINITY) };
            // SAFETY: row (b, i, h) of the output and entry (b, h, i) of the lse belong to this
            // task alone (tasks are distinct (b, h, query tile)), and lie inside both buffers.
            let out = unsafe { std::slice::from_raw_parts_mut(self.out.get().add(self.or.at(b, h, i)), d) };
            for (o, &a) in out.iter_mut().zip(&acc[r * d..(r + 1) * d]) {
                *o = a * inv;
            }
            unsafe { *self.lse.get().add((b * g.heads + h) * g.len + i) = lse };
        }
    }
}

/// One key/value head of one batch row, a run of keys of one block of rows: the backward pass.
/// The task owns dK and dV of its keys; its share of dQ goes to a buffer of its own.
struct BackwardBlock<'a> {
    plan: &'a Plan<'a>,
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    d_o: &'a [f32],
    lse: &'a [f32],
    delta: &'a [f32],
    qr: Rows,
    kr: Rows,
    vr: Rows,
    or: Rows,
    dk: Shared,
    dv: Shared,
}

impl BackwardBlock<'_> {
    /// Returns the rows whose dQ the keys `keys` reach, and that dQ, `[group, rows, D]`.
    #[inline(always)]
    fn run(&self, b: usize, hk: usize, rows: Range<usize>, keys: Range<usize>) -> (Range<usize>, Vec<f32>) {
        let g = self.plan.g;
        let (d, group) = (g.dim, g.group());
        let heads = hk * group..(hk + 1) * group;
        let dkv_rows = Rows::head_major(&g, g.kv_heads, g.keys);
        // Causal: query i sees key j only when i ≥ j − past.
        let first = if self.plan.causal { keys.start.saturating_sub(self.plan.past).clamp(rows.start, rows.end) } else { rows.start };
        let seen = first..rows.end;
        let n = seen.len();
        let mut dq = vec![0f32; group * n * d];
        let mut p = vec![0f32; QUERY_TILE * KEY_TILE];
        let mut ds = vec![0f32; QUERY_TILE * KEY_TILE];
        for tile in self.plan.key_tiles(&rows, &keys) {
            if !self.plan.any_real(b, &tile) {
                continue;
            }
            let w = tile.len();
            let kt = Mat::transposed(self.k, self.kr.at(b, hk, tile.start), self.kr.row);
            let k = Mat::rows(self.k, self.kr.at(b, hk, tile.start), self.kr.row);
            let vt = Mat::transposed(self.v, self.vr.at(b, hk, tile.start), self.vr.row);
            // SAFETY: dK/dV rows of this key tile belong to this task alone (tasks split the keys).
            let dk = unsafe { self.dk.get().add(dkv_rows.at(b, hk, tile.start)) };
            let dv = unsafe { self.dv.get().add(dkv_rows.at(b, hk, tile.start)) };
            for (gi, h) in heads.clone().enumerate() {
                for rt in tiles(seen.clone(), QUERY_TILE) {
                    if self.plan.causal && self.plan.past + rt.end <= tile.start {
                        continue; // no row of this query tile sees this key tile
                    }
                    let bq = rt.len();
                    let (p, ds) = (&mut p[..bq * w], &mut ds[..bq * w]);
                    let q = Mat::rows(self.q, self.qr.at(b, h, rt.start), self.qr.row);
                    let d_o = Mat::rows(self.d_o, self.or.at(b, h, rt.start), self.or.row);
                    // SAFETY: every operand addresses bq or w rows of d inside its buffer; p and
                    // ds are bq × w; dq is this task's buffer, dk and dv rows its own keys'.
                    unsafe {
                        matmul(bq, w, d, p.as_mut_ptr(), w, false, q, kt, self.plan.scale);
                        self.plan.mask_tile(b, &rt, &tile, p);
                        let lse = &self.lse[(b * g.heads + h) * g.len + rt.start..][..bq];
                        for (row, &l) in p.chunks_exact_mut(w).zip(lse) {
                            simd::exp_shifted(row, l);
                        }
                        matmul(w, d, bq, dv, d, true, Mat::transposed(p, 0, w), d_o, 1.0);
                        matmul(bq, w, d, ds.as_mut_ptr(), w, false, d_o, vt, 1.0);
                        let delta = &self.delta[(b * g.heads + h) * g.len + rt.start..][..bq];
                        for ((ds, p), &dl) in ds.chunks_exact_mut(w).zip(p.chunks_exact(w)).zip(delta) {
                            simd::softmax_grad(ds, p, dl);
                        }
                        let dq = dq[(gi * n + rt.start - seen.start) * d..].as_mut_ptr();
                        matmul(bq, d, w, dq, d, true, Mat::rows(ds, 0, w), k, self.plan.scale);
                        matmul(w, d, bq, dk, d, true, Mat::transposed(ds, 0, w), q, self.plan.scale);
                    }
                }
            }
        }
        (seen, dq)
    }
}

/// A strided matrix operand for [`matmul`].
#[derive(Clone, Copy)]
struct Mat {
    ptr: *const f32,
    rs: isize,
    cs: isize,
}

impl Mat {
    /// Row `r` of the matrix is `data[offset + r·stride..]`.
    fn rows(data: &[f32], offset: usize, stride: usize) -> Self {
        Self { ptr: data[offset..].as_ptr(), rs: stride as isize, cs: 1 }
    }

    /// The transpose of [`Mat::rows`]: column `c` is `data[offset + c·stride..]`.
    fn transposed(data: &[f32], offset: usize, stride: usize) -> Self {
        Self { ptr: data[offset..].as_ptr(), rs: 1, cs: stride as isize }
    }
}

/// `dst` (`m × n`, rows `dst_stride` apart) `= [dst +] beta · lhs (m × k) · rhs (k × n)`, single
/// threaded: the tasks are already spread over the threads.
///
/// # Safety
/// `dst`, `lhs` and `rhs` must address valid elements for every index their shape and strides
/// reach, and `dst` must not alias the operands.
// A GEMM kernel's signature (gemm's own `gemm` takes 20): shapes, destination, operands, scale.
#[allow(clippy::too_many_arguments)]
unsafe fn matmul(m: usize, n: usize, k: usize, dst: *mut f32, dst_stride: usize, accumulate: bool, lhs: Mat, rhs: Mat, beta: f32) {
    // SAFETY: forwarded from the caller.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            dst_stride as isize,
            accumulate,
            lhs.ptr,
            lhs.cs,
            lhs.rs,
            rhs.ptr,
            rhs.cs,
            rhs.rs,
            1.0,
            beta,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// The elementwise row work, written so that it vectorises, and compiled per instruction set.
mod simd {
    /// Lanes of the manual reductions (one AVX-512 register); float sums only vectorise when
    /// the code itself keeps independent partial sums.
    const LANES: usize = 16;

    /// Runs `f` inlined into a function compiled for the best instruction set of this CPU.
    #[inline(always)]
    pub fn dispatch<R, F: FnOnce() -> R>(f: F) -> R {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has the features the function is compiled for.
                return unsafe { avx512(f) };
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                // SAFETY: as above.
                return unsafe { avx2(f) };
            }
        }
        f()
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx512dq,avx2,fma")]
    fn avx512<R, F: FnOnce() -> R>(f: F) -> R {
        f()
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    fn avx2<R, F: FnOnce() -> R>(f: F) -> R {
        f()
    }

    #[inline(always)]
    pub fn max(xs: &[f32]) -> f32 {
        let mut lanes = [f32::NEG_INFINITY; LANES];
        let mut chunks = xs.chunks_exact(LANES);
        for c in &mut chunks {
            for (m, &x) in lanes.iter_mut().zip(c) {
                *m = if x > *m { x } else { *m };
            }
        }
        let tail = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m });
        lanes.iter().fold(tail, |m, &x| if x > m { x } else { m })
    }

    #[inline(always)]
    pub fn sum(xs: &[f32]) -> f32 {
        let mut lanes = [0f32; LANES];
        let mut chunks = xs.chunks_exact(LANES);
        for c in &mut chunks {
            for (s, &x) in lanes.iter_mut().zip(c) {
                *s += x;
            }
        }
        chunks.remainder().iter().sum::<f32>() + lanes.iter().sum::<f32>()
    }

    #[inline(always)]
    pub fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut lanes = [0f32; LANES];
        let (mut ca, mut cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
        for (x, y) in (&mut ca).zip(&mut cb) {
            for ((s, &x), &y) in lanes.iter_mut().zip(x).zip(y) {
                *s += x * y;
            }
        }
        ca.remainder().iter().zip(cb.remainder()).map(|(x, y)| x * y).sum::<f32>() + lanes.iter().sum::<f32>()
    }

    #[inline(always)]
    pub fn scale(xs: &mut [f32], a: f32) {
        xs.iter_mut().for_each(|x| *x *= a);
    }

    /// `xs ← exp(xs − shift)`.
    #[inline(always)]
    pub fn exp_shifted(xs: &mut [f32], shift: f32) {
        xs.iter_mut().for_each(|x| *x = exp(*x - shift));
    }

    /// `xs ← exp(xs − shift)`, returning the new sum.
    #[inline(always)]
    pub fn exp_shifted_sum(xs: &mut [f32], shift: f32) -> f32 {
        exp_shifted(xs, shift);
        sum(xs)
    }

    /// `dp ← p ∘ (dp − delta)`: the softmax backward of one row.
    #[inline(always)]
    pub fn softmax_grad(dp: &mut [f32], p: &[f32], delta: f32) {
        for (g, &p) in dp.iter_mut().zip(p) {
            *g = p * (*g - delta);
        }
    }

    /// `eˣ` to about one ulp (Cephes' `expf`: `2ⁿ · e^r`, `|r| ≤ ln2/2`, a degree-7 polynomial),
    /// branch-free so that it vectorises; 0 below −87 (also for −∞, the masked scores).
    #[inline(always)]
    pub fn exp(x: f32) -> f32 {
        const LOG2E: f32 = std::f32::consts::LOG2_E;
        // ln 2 split in two so that n·C1 is exact.
        const C1: f32 = 0.693_359_4;
        const C2: f32 = -2.121_944_4e-4;
        // Adding 1.5·2²³ rounds to an integer held in the low mantissa bits.
        const ROUND: f32 = 12_582_912.0;
        let xc = x.clamp(-87.0, 88.0);
        let t = xc * LOG2E + ROUND;
        let n = t - ROUND;
        let n_int = t.to_bits() as i32 - ROUND.to_bits() as i32;
        let r = xc - n * C1 - n * C2;
        let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r + 1.666_666_5e-1) * r + 5e-1;
        let y = p * (r * r) + r + 1.0;
        let two_n = f32::from_bits(((n_int + 127) << 23) as u32);
        if x < -87.0 { 0.0 } else { y * two_n }
    }
}

/// The composed path as the attention kernels' tests compare with.
#[cfg(test)]
pub(crate) mod reference {
    use candle_core::{D, DType, Device, Tensor};

    use super::Mask;

    /// The additive mask the composed path takes for `mask`, `[B, 1, L, T]`.
    pub(crate) fn dense_mask(mask: &Mask, b: usize, l: usize, t: usize) -> Option<Tensor> {
        let visible = |bi: usize, i: usize, j: usize| match mask {
            Mask::Full => true,
            Mask::Causal { past, key_padding } => j <= past + i && key_padding.as_ref().is_none_or(|p| p[bi][j]),
            Mask::Segments(cu) => cu.windows(2).any(|w| (w[0]..w[1]).contains(&i) && (w[0]..w[1]).contains(&j)),
        };
        let values: Vec<f32> = (0..b * l * t).map(|x| if visible(x / (l * t), x / t % l, x % t) { 0.0 } else { f32::MIN }).collect();
        Some(Tensor::from_vec(values, (b, 1, l, t), &Device::Cpu).unwrap())
    }

    /// `[B, H, L, 1]`: 1 where the query row sees at least one key.
    pub(crate) fn alive(mask: &Mask, b: usize, h: usize, l: usize, t: usize) -> Tensor {
        let dense = dense_mask(mask, b, l, t).unwrap().max_keepdim(D::Minus1).unwrap();
        dense.ge(0f64).unwrap().to_dtype(DType::F32).unwrap().broadcast_as((b, h, l, 1)).unwrap().contiguous().unwrap()
    }

    /// The composed path: grouped-query heads repeated, additive mask, `ops::attention`.
    pub(crate) fn composed(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: &Mask) -> Tensor {
        let (b, h, l, _) = q.dims4().unwrap();
        let (_, hk, t, d) = k.dims4().unwrap();
        let repeat = |x: &Tensor| x.unsqueeze(2).unwrap().broadcast_as((b, hk, h / hk, t, d)).unwrap().reshape((b, h, t, d)).unwrap();
        crate::ops::attention(q, &repeat(k), &repeat(v), scale, dense_mask(mask, b, l, t).as_ref()).unwrap()
    }

    pub(crate) fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar().unwrap()
    }

    pub(crate) fn max_abs(a: &Tensor) -> f32 {
        a.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use candle_core::{Device, Var};
    use motionvl_util::rng::SynthRng;

    use super::reference::{alive, composed, max_abs, max_abs_diff};
    use super::*;
    use crate::fused::seeded_randn;

    /// Outputs and q/k/v gradients of the fused op against the composed path, on the rows that
    /// see some key (the composed path averages all keys on the others, the fused op gives 0).
    fn check(what: &str, shape: [usize; 6], mask: Mask) {
        let [b, h, hk, l, t, d] = shape;
        let mut rng = SynthRng::new(7);
        let mut var = |shape: (usize, usize, usize, usize)| Var::from_tensor(&seeded_randn(&mut rng, shape).unwrap()).unwrap();
        let (q, k, v) = (var((b, h, l, d)), var((b, hk, t, d)), var((b, hk, t, d)));
        let live = alive(&mask, b, h, l, t);
        let weights = seeded_randn(&mut rng, (b, h, l, d)).unwrap().broadcast_mul(&live).unwrap();
        let scale = (d as f64).powf(-0.5);
        let fused = attention(&q, &k, &v, scale, &mask).unwrap();
        let reference = composed(&q, &k, &v, scale, &mask);
        let out_err = max_abs_diff(&fused.broadcast_mul(&live).unwrap(), &reference.broadcast_mul(&live).unwrap());
        assert!(out_err <= 1e-5, "{what} {shape:?}: output differs by {out_err}");
        let dead = fused.broadcast_mul(&(1.0 - &live).unwrap()).unwrap();
        assert_eq!(max_abs(&dead), 0.0, "{what} {shape:?}: rows that see no key must be zero");
        let grads_f = (fused * &weights).unwrap().sum_all().unwrap().backward().unwrap();
        let grads_r = (reference * &weights).unwrap().sum_all().unwrap().backward().unwrap();
        for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
            let (gf, gr) = (grads_f.get(x).unwrap(), grads_r.get(x).unwrap());
            assert!(gf.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().all(|g| g.is_finite()), "{what}: non-finite d{name}");
            let err = max_abs_diff(gf, gr);
            // The composed sums run in another order; relative to the gradient's size.
            let tol = 1e-5 * max_abs(gr).max(1.0);
            assert!(err <= tol, "{what} {shape:?}: d{name} differs by {err} (max |d{name}| {})", max_abs(gr));
        }
    }

    fn left_padded(lengths: &[usize], total: usize) -> Option<Arc<[Vec<bool>]>> {
        Some(lengths.iter().map(|&n| (0..total).map(|j| j >= total - n).collect()).collect())
    }

    #[test]
    fn causal_with_past_and_grouped_heads_matches_composed() {
        check("causal, past 70", [2, 8, 2, 37, 107, 64], Mask::Causal { past: 70, key_padding: None });
        check("causal prefill", [1, 8, 2, 150, 150, 64], Mask::Causal { past: 0, key_padding: None });
    }

    #[test]
    fn left_padding_matches_composed_and_padding_rows_are_zero() {
        check("left padding", [3, 4, 2, 75, 75, 32], Mask::Causal { past: 0, key_padding: left_padded(&[75, 62, 5], 75) });
    }

    #[test]
    fn decode_step_with_padding_matches_composed() {
        check("decode step", [3, 8, 2, 1, 100, 64], Mask::Causal { past: 99, key_padding: left_padded(&[100, 31, 2], 100) });
    }

    #[test]
    fn unequal_segments_match_composed() {
        check("segments", [1, 3, 3, 203, 203, 32], Mask::Segments(vec![0, 5, 69, 70, 70, 200, 203]));
    }

    #[test]
    fn unmasked_odd_lengths_match_composed() {
        check("3 queries", [2, 6, 3, 3, 130, 16], Mask::Full);
        check("65 queries", [1, 2, 1, 65, 129, 64], Mask::Full);
    }

    #[test]
    fn fully_masked_rows_give_zeros_and_no_gradient() {
        let mask = Mask::Causal { past: 0, key_padding: left_padded(&[9, 0], 9) };
        check("a fully padded row", [2, 2, 1, 9, 9, 8], mask.clone());
        let mut rng = SynthRng::new(8);
        let q = Var::from_tensor(&seeded_randn(&mut rng, (2, 2, 9, 8)).unwrap()).unwrap();
        let kv = Var::from_tensor(&seeded_randn(&mut rng, (2, 1, 9, 8)).unwrap()).unwrap();
        let out = attention(&q, &kv, &kv, 0.3, &mask).unwrap();
        assert_eq!(max_abs(&out.narrow(0, 1, 1).unwrap()), 0.0);
        let grads = out.sum_all().unwrap().backward().unwrap();
        assert_eq!(max_abs(&grads.get(&q).unwrap().narrow(0, 1, 1).unwrap()), 0.0);
        assert_eq!(max_abs(&grads.get(&kv).unwrap().narrow(0, 1, 1).unwrap()), 0.0);
    }

    /// Central differences of `Σ w ∘ attention(q, k, v)` on a tiny case, element by element.
    #[test]
    fn gradients_match_finite_differences() {
        let dev = Device::Cpu;
        let mask = Mask::Causal { past: 2, key_padding: left_padded(&[6, 7], 7) };
        let mut rng = SynthRng::new(9);
        let mut randn = |shape: (usize, usize, usize, usize)| seeded_randn(&mut rng, shape).unwrap();
        let (q, k, v) = (randn((2, 2, 5, 4)), randn((2, 1, 7, 4)), randn((2, 1, 7, 4)));
        let w = randn((2, 2, 5, 4));
        let loss = |q: &Tensor, k: &Tensor, v: &Tensor| -> f64 {
            let out = attention(q, k, v, 0.5, &mask).unwrap();
            (out * &w).unwrap().sum_all().unwrap().to_dtype(DType::F64).unwrap().to_scalar::<f64>().unwrap()
        };
        let vars = [Var::from_tensor(&q).unwrap(), Var::from_tensor(&k).unwrap(), Var::from_tensor(&v).unwrap()];
        let out = attention(&vars[0], &vars[1], &vars[2], 0.5, &mask).unwrap();
        let grads = (out * &w).unwrap().sum_all().unwrap().backward().unwrap();
        let eps = 1e-2f32;
        for which in 0..3 {
            let analytic: Vec<f32> = grads.get(&vars[which]).unwrap().flatten_all().unwrap().to_vec1().unwrap();
            let base: Vec<f32> = vars[which].flatten_all().unwrap().to_vec1().unwrap();
            let shape = vars[which].shape().clone();
            for (i, &a) in analytic.iter().enumerate() {
                let nudged = |delta: f32| {
                    let mut x = base.clone();
                    x[i] += delta;
                    let x = Tensor::from_vec(x, shape.clone(), &dev).unwrap();
                    let mut args = [q.clone(), k.clone(), v.clone()];
                    args[which] = x;
                    loss(&args[0], &args[1], &args[2])
                };
                let numeric = (nudged(eps) - nudged(-eps)) / (2.0 * eps as f64);
                assert!((numeric - a as f64).abs() <= 2e-3 * (1.0 + numeric.abs()), "input {which}, element {i}: analytic {a}, numeric {numeric}");
            }
        }
    }

    #[test]
    fn vectorised_exp_is_within_two_ulp() {
        for i in 0..=200_000 {
            let x = -87.0 + 88.0 * i as f32 / 200_000.0;
            let (fast, exact) = (simd::exp(x), (x as f64).exp());
            assert!(((fast as f64 - exact) / exact).abs() <= 2.5e-7, "exp({x}) = {fast}, expected {exact}");
        }
        assert_eq!(simd::exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(simd::exp(-100.0), 0.0);
    }

    #[test]
    fn mismatched_shapes_and_masks_are_errors() {
        let dev = Device::Cpu;
        let q = Tensor::zeros((1, 3, 4, 8), DType::F32, &dev).unwrap();
        let kv = Tensor::zeros((1, 2, 4, 8), DType::F32, &dev).unwrap();
        assert!(attention(&q, &kv, &kv, 1.0, &Mask::Full).is_err(), "3 heads over 2 kv heads");
        let kv = Tensor::zeros((1, 1, 4, 8), DType::F32, &dev).unwrap();
        assert!(attention(&q, &kv, &kv, 1.0, &Mask::Causal { past: 1, key_padding: None }).is_err());
        assert!(attention(&q, &kv, &kv, 1.0, &Mask::Segments(vec![0, 3])).is_err());
        assert!(attention(&q, &kv, &kv, 1.0, &Mask::Causal { past: 0, key_padding: left_padded(&[4, 4], 4) }).is_err());
    }
}
