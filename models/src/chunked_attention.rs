//! Softmax attention in chunks of query rows, composed of Candle ops, forward and backward: the
//! attention of every device and dtype the CPU flash kernel ([`crate::fused::attention`], f32 on
//! the CPU) does not serve — CUDA and bf16 above all.
//!
//! The composed attention ([`crate::ops::attention`]) keeps f32 scores, probabilities and their
//! casts over all `L × T` pairs alive for the backward pass, and its mask is one `[B, 1, L, T]`
//! f32 tensor made on the host (at batch 8, 8k tokens and 16 heads, 34 GB per score tensor and a
//! 2 GB mask). Here the forward pass runs chunk by chunk without a graph and keeps only its
//! output; the backward pass recomputes each chunk's probabilities and forms the chunk's
//! gradients from them (FlashAttention's recomputation, at the granularity of a chunk), so at
//! most one chunk's `[B, H, rows, keys]` tensors exist at a time. Each chunk's mask is made on the
//! device from the mask's description, and a causal chunk reads only the keys its last row sees.
//!
//! A chunk computes what the composed path computes for its rows, in the same dtypes (`q·kᵀ` and
//! its scaling in the input dtype, mask and softmax in f32, probabilities cast back), so the two
//! agree up to the kernels' summation order. A row that sees no key at all (left padding) gets
//! the mean of the values its chunk reads, where the composed path takes all of them: nothing
//! reads those rows.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp3, D, DType, Device, Layout, Result, Shape, Tensor};

use crate::fused::attention::{Geometry, Mask};

/// Bytes of one f32 `[B, H, rows, keys]` score chunk, at most (a chunk has one row at least).
const CHUNK_SCORE_BYTES: usize = 256 << 20;

/// Softmax attention of `q` `[B, H, L, D]` over `k`, `v` `[B, Hkv, T, D]` (`H` a multiple of
/// `Hkv`: grouped-query heads) → `[B, H, L, D]` (contiguous), differentiable in all three.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: &Mask) -> Result<Tensor> {
    let (batch, heads, _, _) = q.dims4()?;
    let keys = k.dim(2)?;
    let rows = CHUNK_SCORE_BYTES / (batch * heads * keys * DType::F32.size_in_bytes()).max(1);
    in_chunks(q, k, v, scale, mask, rows.max(1))
}

/// [`attention`] with `rows` query rows per chunk.
fn in_chunks(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, mask: &Mask, rows: usize) -> Result<Tensor> {
    let Geometry { batch, heads, kv_heads, len, keys, dim } = Geometry::new(q, k, v, mask, "chunked attention")?;
    let repeat = |x: &Tensor| -> Result<Tensor> {
        let group = heads / kv_heads;
        if group == 1 {
            return Ok(x.clone());
        }
        x.unsqueeze(2)?.broadcast_as((batch, kv_heads, group, keys, dim))?.reshape((batch, heads, keys, dim))
    };
    let (k, v) = (repeat(k)?, repeat(v)?);
    let plan = Chunks { scale, rows, len, keys, mask: ChunkMask::new(mask, batch, len, keys, q.device())? };
    let output = plan.forward(&q.detach(), &k.detach(), &v.detach())?;
    if ![q, &k, &v].iter().any(|t| t.track_op()) {
        return Ok(output);
    }
    q.apply_op3_arc(&k, &v, Arc::new(Box::new(ChunkedAttention { plan, output })))
}

/// The chunking of one attention call: which rows, which keys, which mask.
struct Chunks {
    scale: f64,
    rows: usize,
    len: usize,
    keys: usize,
    mask: ChunkMask,
}

impl Chunks {
    /// `(first row, rows, keys read)` of every chunk.
    fn each(&self) -> impl Iterator<Item = (usize, usize, usize)> + '_ {
        (0..self.len).step_by(self.rows).map(|start| {
            let rows = self.rows.min(self.len - start);
            (start, rows, self.mask.keys_seen(start + rows, self.keys))
        })
    }

    /// f32 `[B, H, rows, keys]` probabilities of the queries `q` (the chunk's rows, from `start`)
    /// over `k`, exactly as [`crate::ops::attention`] makes them.
    fn probabilities(&self, q: &Tensor, k: &Tensor, start: usize) -> Result<Tensor> {
        let scores = (q.matmul(&k.t()?)? * self.scale)?.to_dtype(DType::F32)?;
        let scores = match self.mask.rows(start, q.dim(2)?, k.dim(2)?, q.device())? {
            Some(mask) => scores.broadcast_add(&mask)?,
            None => scores,
        };
        candle_nn::ops::softmax_last_dim(&scores)
    }

    /// The output `[B, H, L, D]`, chunk by chunk, with no graph kept.
    fn forward(&self, q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        let mut outputs = Vec::new();
        for (start, rows, seen) in self.each() {
            let probs = self.probabilities(&q.narrow(2, start, rows)?, &k.narrow(2, 0, seen)?, start)?;
            outputs.push(probs.to_dtype(q.dtype())?.matmul(&v.narrow(2, 0, seen)?)?);
        }
        Tensor::cat(&outputs, 2)
    }

    /// Gradients of `q`, `k`, `v` for the output's gradient `grad`: each chunk's probabilities
    /// recomputed, then the backward pass of the composed path for those rows. Key and value
    /// gradients sum over the chunks in f32.
    fn backward(&self, q: &Tensor, k: &Tensor, v: &Tensor, grad: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        let dtype = q.dtype();
        let mut dq = Vec::new();
        let mut dk = Tensor::zeros(k.shape(), DType::F32, k.device())?;
        let mut dv = Tensor::zeros(v.shape(), DType::F32, v.device())?;
        for (start, rows, seen) in self.each() {
            let (q, k, v) = (q.narrow(2, start, rows)?, k.narrow(2, 0, seen)?, v.narrow(2, 0, seen)?);
            let grad = grad.narrow(2, start, rows)?;
            let probs = self.probabilities(&q, &k, start)?;
            // out = P·V
            let dv_chunk = probs.to_dtype(dtype)?.t()?.matmul(&grad)?;
            let dprobs = grad.matmul(&v.t()?)?.to_dtype(DType::F32)?;
            // Softmax: dS = P ∘ (dP − Σⱼ dP ∘ P), then the scaling of q·kᵀ in the input dtype.
            let centred = dprobs.broadcast_sub(&(&dprobs * &probs)?.sum_keepdim(D::Minus1)?)?;
            let dscores = ((centred * &probs)?.to_dtype(dtype)? * self.scale)?;
            dq.push(dscores.matmul(&k)?);
            let unseen = self.keys - seen;
            dk = (dk + dscores.t()?.matmul(&q)?.to_dtype(DType::F32)?.pad_with_zeros(2, 0, unseen)?)?;
            dv = (dv + dv_chunk.to_dtype(DType::F32)?.pad_with_zeros(2, 0, unseen)?)?;
        }
        Ok((Tensor::cat(&dq, 2)?, dk.to_dtype(dtype)?, dv.to_dtype(dtype)?))
    }
}

/// A [`Mask`] as the chunks need it: pieces on the device from which each chunk's additive mask
/// (`0` where a key is seen, `f32::MIN` elsewhere, as the composed path's) is made.
enum ChunkMask {
    Full,
    /// `padding`: `[B, 1, 1, T]`, 1 for a real key, 0 for padding.
    Causal {
        past: usize,
        padding: Option<Tensor>,
    },
    /// `segment`: `[L]` u32, each row's segment.
    Segments {
        segment: Tensor,
    },
}

impl ChunkMask {
    /// `mask` as checked by [`Geometry::new`].
    fn new(mask: &Mask, batch: usize, len: usize, keys: usize, device: &Device) -> Result<Self> {
        Ok(match mask {
            Mask::Full => Self::Full,
            Mask::Causal { past, key_padding } => {
                let padding = match key_padding {
                    Some(rows) => {
                        let real: Vec<f32> = rows.iter().flatten().map(|&real| if real { 1.0 } else { 0.0 }).collect();
                        Some(Tensor::from_vec(real, (batch, 1, 1, keys), device)?)
                    }
                    None => None,
                };
                Self::Causal { past: *past, padding }
            }
            Mask::Segments(cu) => {
                let segment: Vec<u32> = cu.windows(2).enumerate().flat_map(|(s, w)| std::iter::repeat_n(s as u32, w[1] - w[0])).collect();
                Self::Segments { segment: Tensor::from_vec(segment, len, device)? }
            }
        })
    }

    /// How many leading keys a chunk ending before row `end` reads: a causal chunk's last row
    /// sees none past `past + end`.
    fn keys_seen(&self, end: usize, keys: usize) -> usize {
        match self {
            Self::Causal { past, .. } => (past + end).min(keys),
            Self::Full | Self::Segments { .. } => keys,
        }
    }

    /// The additive f32 mask of rows `start..start + rows` over the first `keys` keys, broadcast
    /// against `[B, H, rows, keys]`; `None` when every key is seen.
    fn rows(&self, start: usize, rows: usize, keys: usize, device: &Device) -> Result<Option<Tensor>> {
        let seen = match self {
            Self::Full => return Ok(None),
            Self::Causal { past, padding } => {
                let query = Tensor::arange((past + start) as u32, (past + start + rows) as u32, device)?.reshape((rows, 1))?;
                let key = Tensor::arange(0u32, keys as u32, device)?.reshape((1, keys))?;
                let causal = key.broadcast_le(&query)?.to_dtype(DType::F32)?.reshape((1, 1, rows, keys))?;
                match padding {
                    Some(real) => causal.broadcast_mul(&real.narrow(3, 0, keys)?)?,
                    None => causal,
                }
            }
            Self::Segments { segment } => {
                let query = segment.narrow(0, start, rows)?.reshape((rows, 1))?;
                query.broadcast_eq(&segment.narrow(0, 0, keys)?.reshape((1, keys))?)?.to_dtype(DType::F32)?.reshape((1, 1, rows, keys))?
            }
        };
        // 1 → 0 and 0 → f32::MIN, both exact.
        seen.affine(f32::MAX as f64, f32::MIN as f64).map(Some)
    }
}

/// The chunked attention in Candle's graph: its forward result computed ahead, its backward pass
/// [`Chunks::backward`].
struct ChunkedAttention {
    plan: Chunks,
    output: Tensor,
}

impl CustomOp3 for ChunkedAttention {
    fn name(&self) -> &'static str {
        "chunked-attention"
    }

    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        crate::recompute::cpu_copy(&self.output, self.name())
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
        _: &candle_core::CudaStorage,
        _: &Layout,
    ) -> Result<(candle_core::CudaStorage, Shape)> {
        crate::recompute::cuda_copy(&self.output, self.name())
    }

    fn bwd(&self, q: &Tensor, k: &Tensor, v: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let (dq, dk, dv) = self.plan.backward(&q.detach(), &k.detach(), &v.detach(), &grad.detach())?;
        Ok((Some(dq), Some(dk), Some(dv)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use candle_core::{DType, Tensor, Var};
    use motionvl_util::rng::SynthRng;

    use super::*;
    use crate::fused::attention::reference::{alive, composed, max_abs, max_abs_diff};
    use crate::fused::seeded_randn;

    /// Outputs and q/k/v gradients in `dtype`, chunks of `rows` query rows, against the composed
    /// path on the same inputs, over the rows that see some key; `tol` relative to the largest
    /// value compared.
    fn check(what: &str, shape: [usize; 6], mask: Mask, dtype: DType, rows: usize, tol: f32) {
        let [b, h, hk, l, t, d] = shape;
        let mut rng = SynthRng::new(11);
        let mut var = |shape: (usize, usize, usize, usize)| Var::from_tensor(&seeded_randn(&mut rng, shape).unwrap()).unwrap();
        let (q, k, v) = (var((b, h, l, d)), var((b, hk, t, d)), var((b, hk, t, d)));
        let live = alive(&mask, b, h, l, t);
        let weights = seeded_randn(&mut rng, (b, h, l, d)).unwrap().broadcast_mul(&live).unwrap();
        let cast = |x: &Var| x.to_dtype(dtype).unwrap();
        let (qd, kd, vd) = (cast(&q), cast(&k), cast(&v));
        let scale = (d as f64).powf(-0.5);
        let chunked = in_chunks(&qd, &kd, &vd, scale, &mask, rows).unwrap().to_dtype(DType::F32).unwrap();
        let reference = composed(&qd, &kd, &vd, scale, &mask).to_dtype(DType::F32).unwrap();
        let (chunked_live, reference_live) = (chunked.broadcast_mul(&live).unwrap(), reference.broadcast_mul(&live).unwrap());
        let out_err = max_abs_diff(&chunked_live, &reference_live);
        assert!(out_err <= tol * max_abs(&reference_live), "{what} {shape:?} {dtype:?} rows {rows}: output differs by {out_err}");
        let grads_c = (chunked * &weights).unwrap().sum_all().unwrap().backward().unwrap();
        let grads_r = (reference * &weights).unwrap().sum_all().unwrap().backward().unwrap();
        for (name, x) in [("q", &q), ("k", &k), ("v", &v)] {
            let (gc, gr) = (grads_c.get(x).unwrap(), grads_r.get(x).unwrap());
            assert!(gc.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().all(|g| g.is_finite()), "{what}: non-finite d{name}");
            let err = max_abs_diff(gc, gr);
            assert!(max_abs(gr) > 0.0, "{what}: the reference d{name} is zero");
            assert!(err <= tol * max_abs(gr), "{what} {shape:?} {dtype:?} rows {rows}: d{name} differs by {err} (max |d{name}| {})", max_abs(gr));
        }
    }

    fn left_padded(lengths: &[usize], total: usize) -> Option<Arc<[Vec<bool>]>> {
        Some(lengths.iter().map(|&n| (0..total).map(|j| j >= total - n).collect()).collect())
    }

    /// One row per chunk, a chunk size that leaves a short last chunk, and one chunk of all rows.
    const ROWS: [usize; 3] = [1, 7, usize::MAX];

    #[test]
    fn causal_prefill_and_cached_steps_match_composed() {
        for rows in ROWS {
            check("causal, past 40", [2, 4, 2, 23, 63, 16], Mask::Causal { past: 40, key_padding: None }, DType::F32, rows, 1e-5);
            check("causal prefill", [1, 6, 3, 30, 30, 8], Mask::Causal { past: 0, key_padding: None }, DType::F32, rows, 1e-5);
        }
    }

    #[test]
    fn left_padding_and_padded_decode_steps_match_composed() {
        for rows in ROWS {
            let padding = left_padded(&[29, 20, 3], 29);
            check("left padding", [3, 4, 2, 29, 29, 16], Mask::Causal { past: 0, key_padding: padding }, DType::F32, rows, 1e-5);
            let padding = left_padded(&[40, 11, 2], 40);
            check("decode step", [3, 4, 1, 1, 40, 16], Mask::Causal { past: 39, key_padding: padding }, DType::F32, rows, 1e-5);
        }
    }

    #[test]
    fn segments_and_full_attention_match_composed() {
        for rows in ROWS {
            check("segments", [1, 3, 3, 41, 41, 8], Mask::Segments(vec![0, 5, 19, 19, 40, 41]), DType::F32, rows, 1e-5);
            check("full", [2, 2, 1, 13, 27, 8], Mask::Full, DType::F32, rows, 1e-5);
        }
    }

    /// bf16 as training on a GPU runs it: the same casts as the composed path, so the two differ
    /// by the rounding of a few bf16 products only.
    #[test]
    fn bf16_matches_composed_bf16() {
        for rows in [1, 5] {
            let padding = left_padded(&[33, 17], 33);
            check("bf16 padded causal", [2, 4, 2, 33, 33, 16], Mask::Causal { past: 0, key_padding: padding }, DType::BF16, rows, 2e-2);
            check("bf16 full", [1, 2, 2, 9, 21, 16], Mask::Full, DType::BF16, rows, 2e-2);
        }
    }

    #[test]
    fn the_budget_splits_long_prompts_into_chunks() {
        // Batch 8 × 16 heads × 8,192 keys of f32 scores: 4 MiB a row, 64 rows a chunk.
        let rows = CHUNK_SCORE_BYTES / (8 * 16 * 8192 * 4);
        assert_eq!(rows, 64);
        let plan = Chunks { scale: 1.0, rows, len: 130, keys: 8192, mask: ChunkMask::Causal { past: 8192 - 130, padding: None } };
        let chunks: Vec<_> = plan.each().collect();
        assert_eq!(chunks, [(0, 64, 8126), (64, 64, 8190), (128, 2, 8192)]);
    }

    #[test]
    fn mismatched_shapes_and_masks_are_errors() {
        let dev = candle_core::Device::Cpu;
        let q = Tensor::zeros((1, 3, 4, 8), DType::F32, &dev).unwrap();
        let kv = Tensor::zeros((1, 2, 4, 8), DType::F32, &dev).unwrap();
        assert!(attention(&q, &kv, &kv, 1.0, &Mask::Full).is_err(), "3 heads over 2 kv heads");
        let kv = Tensor::zeros((1, 1, 4, 8), DType::F32, &dev).unwrap();
        assert!(attention(&q, &kv, &kv, 1.0, &Mask::Causal { past: 1, key_padding: None }).is_err());
        assert!(attention(&q, &kv, &kv, 1.0, &Mask::Segments(vec![0, 3])).is_err());
        assert!(attention(&q, &kv, &kv, 1.0, &Mask::Causal { past: 0, key_padding: left_padded(&[4, 4], 4) }).is_err());
    }
}
