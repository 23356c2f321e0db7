//! The fused ops on CUDA: launches of the kernels in `kernels/fused.cu`, which `build.rs`
//! compiles to PTX with the crate. Each op's `cuda_fwd` calls one function here; the kernels
//! compute what the ops' CPU kernels compute (contiguous f32 in, f32 out; rotary tables may be
//! broadcast).

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::WrapErr;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg};
use candle_core::{CudaDevice, CudaStorage, Layout, Result};

const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/fused.ptx"));
const MODULE: &str = "motionvl_fused";
/// Threads of a row kernel's block and of an elementwise kernel's.
const THREADS: u32 = 256;

/// Loads kernel `$name` of the module and launches it with `$cfg`: the buffers in brackets
/// (references; `&mut` for those it writes), then the scalars in parentheses, in the kernel's
/// parameter order. The caller's `SAFETY` comment says why each buffer holds what the kernel
/// reads and writes under `$cfg`.
macro_rules! launch {
    ($dev:expr, $name:literal, $cfg:expr, [$($buffer:expr),* $(,)?], ($($scalar:expr),* $(,)?)) => {{
        let func = $dev.get_or_load_custom_func($name, MODULE, PTX)?;
        let mut launch = func.builder();
        $(launch.arg($buffer);)*
        candle_core::builder_arg!(launch, $($scalar),*);
        // SAFETY: as the caller's comment says.
        unsafe { launch.launch($cfg) }.w()
    }};
}

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
        // SAFETY: `out` holds `n` f32; the kernel writes indices below `n` only.
        launch!(dev, "motionvl_dropout_keep_mask", elementwise(n), [&mut out], (n as u64, seed, threshold, keep))?;
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
        // SAFETY: `x` and `out` hold `rows × width` f32, `w` holds `width`.
        launch!(dev, "motionvl_rms_norm_f32", per_row(rows), [&x, &w, &mut out], (width as i32, eps))?;
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
        let mut dx = out.slice_mut(..rows * width);
        // SAFETY: `x`, `dy` and `dx` hold `rows × width` f32, `w` `width`, `r_rows` `rows`.
        launch!(dev, "motionvl_rms_norm_backward_rows_f32", per_row(rows), [&x, &w, &dy, &mut dx, &mut r_rows], (width as i32, eps))?;
    }
    // Column sums over chunks of rows, then the chunks' partials added in order.
    let chunks = rows.clamp(1, 64);
    let column_blocks = width.div_ceil(THREADS as usize) as u32;
    let mut partial = alloc(&dev, chunks * width)?;
    {
        let cfg = LaunchConfig { grid_dim: (column_blocks, chunks as u32, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: `partial` holds `chunks × width` f32; rows and columns are bounded in the kernel.
        launch!(dev, "motionvl_rms_norm_backward_weight_f32", cfg, [&x, &dy, &r_rows, &mut partial], (rows as i32, width as i32))?;
    }
    {
        let mut dweight = out.slice_mut(rows * width..);
        let cfg = LaunchConfig { grid_dim: (column_blocks, 1, 1), block_dim: (THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: `dweight` is the last `width` f32 of `out`.
        launch!(dev, "motionvl_sum_columns_f32", cfg, [&partial, &mut dweight], (chunks as i32, width as i32))?;
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
        // SAFETY: all three hold `n` f32.
        launch!(dev, "motionvl_swiglu_f32", elementwise(n), [&g, &u, &mut out], (n as u64))?;
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
        // SAFETY: `g`, `u`, `dy` hold `n` f32 and `out` `2n`.
        launch!(dev, "motionvl_swiglu_backward_f32", elementwise(n), [&g, &u, &dy, &mut out], (n as u64))?;
    }
    Ok(storage(out, &dev))
}

/// Where the rows of a rotary table broadcast to the input start, as `motionvl_rotary_f32` reads
/// it: the input's outer dimensions (front-padded to three) and each table's strides along them.
#[repr(C)]
#[derive(Clone, Copy)]
struct TableRows {
    dims: [i32; 3],
    cos_stride: [i64; 3],
    sin_stride: [i64; 3],
    cos_start: i64,
    sin_start: i64,
}

// SAFETY: plain integers, laid out (`repr(C)`) as the kernel's `TableRows`.
unsafe impl DeviceRepr for TableRows {}

/// Rotary embedding (`transpose`: its backward) of contiguous `xs` with `cos`/`sin` broadcast to
/// its shape (zero strides where they repeat).
pub(crate) fn rotary(
    xs: (&CudaStorage, &Layout),
    cos: (&CudaStorage, &Layout),
    sin: (&CudaStorage, &Layout),
    transpose: bool,
    op: &'static str,
) -> Result<CudaStorage> {
    let dev = xs.0.device().clone();
    let x = view(xs.0, xs.1, op)?;
    let dims = xs.1.dims();
    let Some((&width, outer)) = dims.split_last() else { candle_core::bail!("{op}: a scalar input") };
    if width % 2 != 0 || outer.len() > 3 {
        candle_core::bail!("{op}: input {dims:?} needs an even last dimension and at most three others")
    }
    let (cos_slice, sin_slice) = (cos.0.as_cuda_slice::<f32>()?, sin.0.as_cuda_slice::<f32>()?);
    let mut strides = [[0i64; 3]; 2];
    for ((table, len), strides) in [(cos.1, cos_slice.len()), (sin.1, sin_slice.len())].into_iter().zip(&mut strides) {
        if table.dims() != dims || table.stride().last() != Some(&1) {
            candle_core::bail!(
                "{op}: table {:?} (strides {:?}) is not broadcast to the input's {dims:?} with rows of its own",
                table.dims(),
                table.stride()
            )
        }
        let reach = table.start_offset() + outer.iter().zip(table.stride()).map(|(d, s)| (d - 1) * s).sum::<usize>() + width;
        if outer.iter().product::<usize>() > 0 && reach > len {
            candle_core::bail!("{op}: a table row would run past its {len} elements")
        }
        for (axis, &stride) in table.stride()[..outer.len()].iter().enumerate() {
            strides[3 - outer.len() + axis] = stride as i64;
        }
    }
    let mut padded = [1i32; 3];
    for (axis, &d) in outer.iter().enumerate() {
        padded[3 - outer.len() + axis] = d as i32;
    }
    let tables = TableRows {
        dims: padded,
        cos_stride: strides[0],
        sin_stride: strides[1],
        cos_start: cos.1.start_offset() as i64,
        sin_start: sin.1.start_offset() as i64,
    };
    let rows: usize = outer.iter().product();
    let mut out = alloc(&dev, rows * width)?;
    if rows > 0 && width > 0 {
        // SAFETY: `x` and `out` hold `rows × width` f32; every table row read lies inside its
        // table (checked above).
        launch!(
            dev,
            "motionvl_rotary_f32",
            elementwise(rows * width / 2),
            [&x, cos_slice, sin_slice, &mut out],
            (rows as u64, (width / 2) as i32, tables, i32::from(transpose))
        )?;
    }
    Ok(storage(out, &dev))
}
