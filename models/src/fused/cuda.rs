//! The fused ops on CUDA: launches of the kernels in `kernels/fused.cu`, which `build.rs`
//! compiles to PTX with the crate. Each op's `cuda_fwd` calls one function here; the kernels
//! compute what the ops' CPU kernels compute (contiguous f32 in, f32 out).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::WrapErr;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, LaunchConfig, PushKernelArg};
use candle_core::{CudaDevice, CudaStorage, Layout, Result};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
const MODULE: &str = "motionvl_fused";
/// Threads of a row kernel's block and of an elementwise kernel's.
const THREADS: u32 = 256;

/// The contiguous f32 data of an operand.
pub(crate) fn view<'a>(storage: &'a CudaStorage, layout: &Layout, op: &'static str) -> Result<CudaView<'a, f32>> {
    let (start, end) = layout.contiguous_offsets().ok_or(candle_core::Error::RequiresContiguous { op })?;
    Ok(storage.as_cuda_slice::<f32>()?.slice(start..end))
}

/// One block per row.
fn per_row(rows: usize) -> LaunchConfig {
    LaunchConfig { grid_dim: (rows as u32, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// Enough blocks for `n` elements, each thread striding over the rest (at most 65,535 blocks).
fn elementwise(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(THREADS as usize).clamp(1, 65_535) as u32;
    LaunchConfig { grid_dim: (blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 }
}

fn alloc(dev: &CudaDevice, n: usize) -> Result<CudaSlice<f32>> {
    // SAFETY: every element is written by the kernel that fills it before it is read.
    unsafe { dev.alloc::<f32>(n.max(1)) }
}

fn storage(slice: CudaSlice<f32>, dev: &CudaDevice) -> CudaStorage {
    CudaStorage::wrap_cuda_slice(slice, dev.clone())
}

/// LoRA dropout's keep mask of `n` elements (see `lora_adapter::dropout_keep_mask`).
pub(crate) fn dropout_keep_mask(dev: &CudaDevice, n: usize, seed: u64, threshold: u64, keep: f32) -> Result<CudaStorage> {
    let mut out = alloc(dev, n)?;
    if n > 0 {
        let func = dev.get_or_load_custom_func("motionvl_dropout_keep_mask", MODULE, PTX)?;
        let mut launch = func.builder();
        launch.arg(&mut out);
        candle_core::builder_arg!(launch, n as u64, seed, threshold, keep);
        // SAFETY: `out` holds `n` f32; the kernel writes indices below `n` only.
        unsafe { launch.launch(elementwise(n)) }.w()?;
    }
    Ok(storage(out, dev))
}

/// RMSNorm's forward over rows of `weight`'s width.
pub(crate) fn rms_norm(xs: (&CudaStorage, &Layout), weight: (&CudaStorage, &Layout), eps: f32, op: &'static str) -> Result<CudaStorage> {
    let dev = xs.0.device().clone();
    let (x, w) = (view(xs.0, xs.1, op)?, view(weight.0, weight.1, op)?);
    let width = w.len();
    let rows = x.len() / width.max(1);
    let mut out = alloc(&dev, rows * width)?;
    if rows > 0 {
        let func = dev.get_or_load_custom_func("motionvl_rms_norm_f32", MODULE, PTX)?;
        let mut launch = func.builder();
        launch.arg(&x);
        launch.arg(&w);
        launch.arg(&mut out);
        candle_core::builder_arg!(launch, width as i32, eps);
        // SAFETY: `x` and `out` hold `rows × width` f32, `w` holds `width`.
        unsafe { launch.launch(per_row(rows)) }.w()?;
    }
    Ok(storage(out, &dev))
}

/// RMSNorm's backward: `[rows + 1, width]`, the rows' dx then dweight.
pub(crate) fn rms_norm_backward(
    xs: (&CudaStorage, &Layout),
    weight: (&CudaStorage, &Layout),
    grad: (&CudaStorage, &Layout),
    eps: f32,
    op: &'static str,
) -> Result<CudaStorage> {
    let dev = xs.0.device().clone();
    let (x, w, dy) = (view(xs.0, xs.1, op)?, view(weight.0, weight.1, op)?, view(grad.0, grad.1, op)?);
    let width = w.len();
    let rows = x.len() / width.max(1);
    let mut out = alloc(&dev, (rows + 1) * width)?;
    if rows == 0 {
        dev.cuda_stream().memset_zeros(&mut out).w()?;
        return Ok(storage(out, &dev));
    }
    let mut r_rows = alloc(&dev, rows)?;
    {
        let func = dev.get_or_load_custom_func("motionvl_rms_norm_backward_rows_f32", MODULE, PTX)?;
        let mut dx = out.slice_mut(..rows * width);
        let mut launch = func.builder();
        launch.arg(&x);
        launch.arg(&w);
        launch.arg(&dy);
        launch.arg(&mut dx);
        launch.arg(&mut r_rows);
        candle_core::builder_arg!(launch, width as i32, eps);
        // SAFETY: `x`, `dy` and `dx` hold `rows × width` f32, `w` `width`, `r_rows` `rows`.
        unsafe { launch.launch(per_row(rows)) }.w()?;
    }
    // Column sums over chunks of rows, then the chunks' partials added in order.
    let chunks = rows.clamp(1, 64);
    let column_blocks = width.div_ceil(THREADS as usize) as u32;
    let mut partial = alloc(&dev, chunks * width)?;
    {
        let func = dev.get_or_load_custom_func("motionvl_rms_norm_backward_weight_f32", MODULE, PTX)?;
        let mut launch = func.builder();
        launch.arg(&x);
        launch.arg(&dy);
        launch.arg(&r_rows);
        launch.arg(&mut partial);
        candle_core::builder_arg!(launch, rows as i32, width as i32);
        let cfg = LaunchConfig { grid_dim: (column_blocks, chunks as u32, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: `partial` holds `chunks × width` f32; rows and columns are bounded in the kernel.
        unsafe { launch.launch(cfg) }.w()?;
    }
    {
        let func = dev.get_or_load_custom_func("motionvl_sum_columns_f32", MODULE, PTX)?;
        let mut dweight = out.slice_mut(rows * width..);
        let mut launch = func.builder();
        launch.arg(&partial);
        launch.arg(&mut dweight);
        candle_core::builder_arg!(launch, chunks as i32, width as i32);
        let cfg = LaunchConfig { grid_dim: (column_blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: `dweight` is the last `width` f32 of `out`.
        unsafe { launch.launch(cfg) }.w()?;
    }
    Ok(storage(out, &dev))
}

/// SwiGLU's forward, `gate·σ(gate)·up`.
pub(crate) fn swiglu(gate: (&CudaStorage, &Layout), up: (&CudaStorage, &Layout), op: &'static str) -> Result<CudaStorage> {
    let dev = gate.0.device().clone();
    let (g, u) = (view(gate.0, gate.1, op)?, view(up.0, up.1, op)?);
    if g.len() != u.len() {
        candle_core::bail!("{op}: gate has {} elements, up {}", g.len(), u.len())
    }
    let n = g.len();
    let mut out = alloc(&dev, n)?;
    if n > 0 {
        let func = dev.get_or_load_custom_func("motionvl_swiglu_f32", MODULE, PTX)?;
        let mut launch = func.builder();
        launch.arg(&g);
        launch.arg(&u);
        launch.arg(&mut out);
        candle_core::builder_arg!(launch, n as u64);
        // SAFETY: all three hold `n` f32.
        unsafe { launch.launch(elementwise(n)) }.w()?;
    }
    Ok(storage(out, &dev))
}

/// SwiGLU's backward: `[2, n]`, dgate then dup.
pub(crate) fn swiglu_backward(
    gate: (&CudaStorage, &Layout),
    up: (&CudaStorage, &Layout),
    grad: (&CudaStorage, &Layout),
    op: &'static str,
) -> Result<CudaStorage> {
    let dev = gate.0.device().clone();
    let (g, u, dy) = (view(gate.0, gate.1, op)?, view(up.0, up.1, op)?, view(grad.0, grad.1, op)?);
    let n = g.len();
    if u.len() != n || dy.len() != n {
        candle_core::bail!("{op}: gate, up and gradient have {n}, {} and {} elements", u.len(), dy.len())
    }
    let mut out = alloc(&dev, 2 * n)?;
    if n > 0 {
        let func = dev.get_or_load_custom_func("motionvl_swiglu_backward_f32", MODULE, PTX)?;
        let mut launch = func.builder();
        launch.arg(&g);
        launch.arg(&u);
        launch.arg(&dy);
        launch.arg(&mut out);
        candle_core::builder_arg!(launch, n as u64);
        // SAFETY: `g`, `u`, `dy` hold `n` f32 and `out` `2n`.
        unsafe { launch.launch(elementwise(n)) }.w()?;
    }
    Ok(storage(out, &dev))
}
