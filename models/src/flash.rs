//! Flash attention on CUDA (feature `flash-attn`, candle-flash-attn's FlashAttention-2 kernels)
//! for the attention calls that need no gradient: the vision tower's windowed and full-attention
//! blocks as variable-length segments (a frozen tower, and every evaluation), and the decoder's
//! single-token decode steps. candle-flash-attn has no backward pass, so wherever a gradient
//! flows through attention on a GPU (the LoRA-adapted decoder in training, an adapted vision
//! tower), and for other dtypes, the chunked attention ([`crate::chunked_attention`]) runs
//! instead; f32 on the CPU has its own flash-style kernel with a backward pass
//! ([`crate::fused::attention`]).
//! All give the same numbers up to the kernels' summation order.

use candle_core::{Result, Tensor};

/// Whether the fused kernel can replace the composed attention for these tensors.
#[cfg(feature = "flash-attn")]
fn applies(q: &Tensor, k: &Tensor, v: &Tensor) -> bool {
    let head_dim = q.dims().last().copied().unwrap_or(0);
    q.device().is_cuda()
        && matches!(q.dtype(), candle_core::DType::BF16 | candle_core::DType::F16)
        && head_dim % 8 == 0
        && head_dim <= 256
        && ![q, k, v].iter().any(|t| t.track_op())
}

/// Attention over the segments `cu_seqlens` (cumulative row offsets, `[0, …, N]`) of `q`, `k`,
/// `v` `[N, H, D]` → `[N, H, D]`, each row attending to its own segment only; `None` when the
/// kernel does not apply (see the module docs).
#[cfg(feature = "flash-attn")]
pub fn segments(q: &Tensor, k: &Tensor, v: &Tensor, cu_seqlens: &[usize], scale: f64) -> Result<Option<Tensor>> {
    if !applies(q, k, v) {
        return Ok(None);
    }
    let max_len = cu_seqlens.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    let offsets: Vec<u32> = cu_seqlens.iter().map(|&c| c as u32).collect();
    let offsets = Tensor::new(offsets, q.device())?;
    candle_flash_attn::flash_attn_varlen(q, k, v, &offsets, &offsets, max_len, max_len, scale as f32, false).map(Some)
}

#[cfg(not(feature = "flash-attn"))]
pub fn segments(_: &Tensor, _: &Tensor, _: &Tensor, _: &[usize], _: f64) -> Result<Option<Tensor>> {
    Ok(None)
}

/// Unmasked attention of `q` `[B, H, L, D]` over `k`, `v` `[B, Hkv, T, D]` (grouped-query heads
/// served natively) → `[B, H, L, D]`; `None` when the kernel does not apply.
#[cfg(feature = "flash-attn")]
pub fn unmasked(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64) -> Result<Option<Tensor>> {
    if !applies(q, k, v) {
        return Ok(None);
    }
    let seq_major = |t: &Tensor| t.transpose(1, 2)?.contiguous();
    let out = candle_flash_attn::flash_attn(&seq_major(q)?, &seq_major(k)?, &seq_major(v)?, scale as f32, false)?;
    Ok(Some(out.transpose(1, 2)?.contiguous()?))
}

#[cfg(not(feature = "flash-attn"))]
pub fn unmasked(_: &Tensor, _: &Tensor, _: &Tensor, _: f64) -> Result<Option<Tensor>> {
    Ok(None)
}
