//! The fused ops (`motionvl_models::fused`) against the composed versions they replace and against
//! central finite differences: forward values, and the gradient of every input of
//! `L = Σ op(inputs) ⊙ R` for a fixed random `R`. Shapes are odd on purpose, the rotary tables are
//! broadcast as the decoder and the vision tower broadcast them, and some cases are large enough
//! to split over several rayon tasks. Each case first asserts that the fused path applies, so a
//! silent fallback to the composed code cannot pass for the fused op.

use candle_core::{DType, Device, Result, Tensor, Var};
use motionvl_models::config::Activation;
use motionvl_models::fused::{norm, rotary, swiglu};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Forward of the fused f32 op against the composed f32 op (same math, different rounding order).
const FORWARD_TOL: f64 = 1e-6;
/// Hand-written gradients against the composed op's autograd.
const AUTOGRAD_TOL: f64 = 1e-5;
/// Hand-written gradients against central differences of an f32 forward.
const FINITE_DIFF_TOL: f64 = 1e-4;

fn random(rng: &mut StdRng, dims: &[usize], lo: f32, hi: f32) -> Result<Tensor> {
    let n = dims.iter().product();
    Tensor::from_vec((0..n).map(|_| rng.random_range(lo..hi)).collect::<Vec<f32>>(), dims, &Device::Cpu)
}

fn values(t: &Tensor) -> Result<Vec<f64>> {
    t.to_dtype(DType::F64)?.flatten_all()?.to_vec1()
}

/// `max |a − b| / max |b|`: the error relative to the reference's scale, so that entries near
/// zero do not dominate.
fn relative(a: &Tensor, b: &Tensor) -> Result<f64> {
    assert_eq!(a.dims(), b.dims());
    let (a, b) = (values(a)?, values(b)?);
    let scale = b.iter().fold(0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    Ok(a.iter().zip(&b).fold(0f64, |m, (x, y)| m.max((x - y).abs())) / scale)
}

/// `Σ op(inputs) ⊙ weights`, summed in f64.
fn loss(op: &dyn Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor], weights: &Tensor) -> Result<f64> {
    (op(inputs)?.to_dtype(DType::F64)? * weights)?.sum_all()?.to_scalar()
}

/// Gradients of [`loss`] with respect to each input, by autograd through `op`.
fn autograd(op: &dyn Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor], weights: &Tensor) -> Result<Vec<Tensor>> {
    let vars = inputs.iter().map(Var::from_tensor).collect::<Result<Vec<_>>>()?;
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let out = op(&tensors)?;
    let grads = (out * weights.to_dtype(DType::F32)?)?.sum_all()?.backward()?;
    tensors.iter().map(|t| grads.get(t).cloned().ok_or_else(|| candle_core::Error::Msg("input got no gradient".into()))).collect()
}

/// Central differences of [`loss`] in input `which` at up to `limit` coordinates spread over
/// it, with the analytic gradient's values at the same coordinates.
fn finite_differences(
    op: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    weights: &Tensor,
    which: usize,
    analytic: &Tensor,
    limit: usize,
) -> Result<(Vec<f64>, Vec<f64>)> {
    // The forward is f32, so the step balances truncation (∝ h²) against rounding (∝ ε/h); a
    // perturbation only changes the rows it touches, the rest of the sum cancels exactly.
    let h = 1e-2f32;
    let base: Vec<f32> = inputs[which].flatten_all()?.to_vec1()?;
    let analytic = values(analytic)?;
    let stride = base.len().div_ceil(limit).max(1);
    let (mut numeric, mut expected) = (Vec::new(), Vec::new());
    for i in (0..base.len()).step_by(stride) {
        let at = |delta: f32| -> Result<f64> {
            let mut shifted = base.clone();
            shifted[i] += delta;
            let mut args = inputs.to_vec();
            args[which] = Tensor::from_vec(shifted, inputs[which].shape(), &Device::Cpu)?;
            loss(op, &args, weights)
        };
        // The step actually taken, after rounding `x ± h` to f32.
        let step = ((base[i] + h) as f64) - ((base[i] - h) as f64);
        numeric.push((at(h)? - at(-h)?) / step);
        expected.push(analytic[i]);
    }
    Ok((numeric, expected))
}

fn relative_vec(a: &[f64], b: &[f64]) -> f64 {
    let scale = b.iter().fold(0f64, |m, v| m.max(v.abs())).max(f64::MIN_POSITIVE);
    a.iter().zip(b).fold(0f64, |m, (x, y)| m.max((x - y).abs())) / scale
}

/// Checks `fused` against `composed` at `inputs`: forward, autograd gradients of every input,
/// and finite differences of the fused forward; prints the measured errors.
fn check(
    name: &str,
    fused: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    composed: &dyn Fn(&[Tensor]) -> Result<Tensor>,
    inputs: &[Tensor],
    seed: u64,
) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let reference = composed(inputs)?;
    let out = fused(inputs)?;
    let forward = relative(&out, &reference)?;
    assert!(forward <= FORWARD_TOL, "{name}: forward differs from the composed op by {forward:e}");
    let weights = random(&mut rng, out.dims(), -1.0, 1.0)?.to_dtype(DType::F64)?;
    let grads = autograd(fused, inputs, &weights)?;
    let reference_grads = autograd(composed, inputs, &weights)?;
    for (i, (g, r)) in grads.iter().zip(&reference_grads).enumerate() {
        let vs_autograd = relative(g, r)?;
        let (numeric, analytic) = finite_differences(fused, inputs, &weights, i, g, 300)?;
        let vs_fd = relative_vec(&analytic, &numeric);
        println!("{name}: input {i}: forward {forward:.1e}, vs autograd {vs_autograd:.1e}, vs finite differences {vs_fd:.1e}");
        assert!(vs_autograd <= AUTOGRAD_TOL, "{name}: gradient of input {i} differs from autograd by {vs_autograd:e}");
        assert!(vs_fd <= FINITE_DIFF_TOL, "{name}: gradient of input {i} differs from finite differences by {vs_fd:e}");
    }
    Ok(())
}

fn norm_case(dims: &[usize], eps: f64, seed: u64) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    // An offset keeps rows away from zero mean square, where RMSNorm is steep and finite
    // differences would measure the curvature rather than the gradient.
    let xs = (random(&mut rng, dims, -1.0, 1.0)? + 0.3)?;
    let weight = random(&mut rng, &dims[dims.len() - 1..], 0.5, 1.5)?;
    assert!(norm::applies(&xs, &weight), "the fused RMSNorm must apply to contiguous f32 {dims:?}");
    check(&format!("rms-norm {dims:?}"), &|t| norm::rms_norm(&t[0], &t[1], eps), &|t| norm::composed(&t[0], &t[1], eps), &[xs, weight], seed + 1)
}

#[test]
fn rms_norm_matches_composed_and_finite_differences() -> Result<()> {
    norm_case(&[3, 5, 7], 1e-6, 1)?;
    norm_case(&[1, 13], 1e-5, 2)?;
    // 300 rows of 67: two rayon tasks, so the per-task weight-gradient partials are summed.
    norm_case(&[300, 67], 1e-6, 3)
}

fn rotary_case(xs_dims: &[usize], table_dims: &[usize], seed: u64) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    let xs = random(&mut rng, xs_dims, -1.0, 1.0)?;
    // Arbitrary tables rather than true cos/sin: the model's tables repeat across the two halves,
    // which would hide a kernel that reads the wrong half.
    let cos = random(&mut rng, table_dims, -1.0, 1.0)?;
    let sin = random(&mut rng, table_dims, -1.0, 1.0)?;
    assert!(rotary::applies(&xs, &cos, &sin), "the fused rotary must apply to {xs_dims:?} with tables {table_dims:?}");
    check(
        &format!("rotary {xs_dims:?} × {table_dims:?}"),
        &|t| rotary::apply_rotary(&t[0], &cos, &sin),
        &|t| rotary::composed(&t[0], &cos, &sin),
        &[xs],
        seed + 1,
    )
}

#[test]
fn rotary_matches_composed_and_finite_differences() -> Result<()> {
    // The decoder: [B, H, L, D] against [B, 1, L, D].
    rotary_case(&[2, 3, 5, 6], &[2, 1, 5, 6], 10)?;
    // The vision tower: [N, H, D] against [N, 1, D].
    rotary_case(&[7, 3, 10], &[7, 1, 10], 11)?;
    // Tables as large as the input, and tables broadcast over leading dimensions they lack.
    rotary_case(&[3, 4, 2], &[3, 4, 2], 12)?;
    rotary_case(&[2, 3, 5, 4], &[5, 4], 13)?;
    // The mid-size decoder's head dimension over several rayon tasks.
    rotary_case(&[1, 4, 301, 64], &[1, 1, 301, 64], 14)
}

#[test]
fn rotary_in_half_precision_matches_composed() -> Result<()> {
    // bf16 and f16 inputs are rotated in f32 and cast back, on both paths: the same rounding.
    let mut rng = StdRng::seed_from_u64(20);
    let cos = random(&mut rng, &[4, 1, 8], -1.0, 1.0)?;
    let sin = random(&mut rng, &[4, 1, 8], -1.0, 1.0)?;
    for dtype in [DType::BF16, DType::F16] {
        let xs = random(&mut rng, &[4, 3, 8], -1.0, 1.0)?.to_dtype(dtype)?;
        assert!(rotary::applies(&xs, &cos, &sin));
        let fused = rotary::apply_rotary(&xs, &cos, &sin)?;
        assert_eq!(fused.dtype(), dtype);
        assert_eq!(relative(&fused, &rotary::composed(&xs, &cos, &sin)?)?, 0.0, "{dtype:?}");
    }
    Ok(())
}

fn swiglu_case(dims: &[usize], seed: u64) -> Result<()> {
    let mut rng = StdRng::seed_from_u64(seed);
    // Gates from deep in the saturated negative tail to well into the linear part.
    let gate = random(&mut rng, dims, -12.0, 8.0)?;
    let up = random(&mut rng, dims, -2.0, 2.0)?;
    assert!(swiglu::applies(Activation::Silu, &gate, &up));
    check(
        &format!("swiglu {dims:?}"),
        &|t| swiglu::gated_activation(Activation::Silu, &t[0], &t[1]),
        &|t| swiglu::composed(Activation::Silu, &t[0], &t[1]),
        &[gate, up],
        seed + 1,
    )
}

#[test]
fn swiglu_matches_composed_and_finite_differences() -> Result<()> {
    swiglu_case(&[3, 5, 7], 30)?;
    // Several rayon tasks, the last one partial.
    swiglu_case(&[41, 1003], 31)
}

#[test]
fn swiglu_saturates_without_overflow() -> Result<()> {
    // e^(−g) overflows f32 for g < −88: silu and both gradients must come out 0, not NaN.
    let gate = Tensor::new(&[-200f32, -89.0, 0.0, 89.0], &Device::Cpu)?;
    let up = Tensor::new(&[1f32, 1.0, 1.0, 1.0], &Device::Cpu)?;
    let (g, u) = (Var::from_tensor(&gate)?, Var::from_tensor(&up)?);
    let out = swiglu::gated_activation(Activation::Silu, g.as_tensor(), u.as_tensor())?;
    let grads = out.sum_all()?.backward()?;
    let finite = |t: &Tensor| -> Result<bool> { Ok(values(t)?.iter().all(|v| v.is_finite())) };
    assert!(finite(&out)?);
    for t in [g.as_tensor(), u.as_tensor()] {
        assert!(finite(grads.get(t).expect("gradient"))?);
    }
    assert_eq!(values(&out)?[..3], [0.0, 0.0, 0.0]);
    Ok(())
}

#[test]
fn inputs_the_fused_ops_do_not_serve_take_the_composed_path() -> Result<()> {
    let mut rng = StdRng::seed_from_u64(40);
    let xs = random(&mut rng, &[4, 6], -1.0, 1.0)?;
    let weight = random(&mut rng, &[6], 0.5, 1.5)?;
    // The values of `xs` in a transposed (non-contiguous) layout.
    let strided = xs.t()?.contiguous()?.t()?;
    assert!(!strided.is_contiguous());
    assert!(!norm::applies(&strided, &weight));
    assert!(!norm::applies(&xs.to_dtype(DType::BF16)?, &weight.to_dtype(DType::BF16)?));
    assert!(!norm::applies(&xs, &random(&mut rng, &[3], 0.5, 1.5)?));
    // The composed path still serves them, and agrees with the fused one on the same values.
    assert!(relative(&norm::rms_norm(&strided, &weight, 1e-6)?, &norm::rms_norm(&xs, &weight, 1e-6)?)? <= FORWARD_TOL);

    let cos = random(&mut rng, &[4, 6], -1.0, 1.0)?;
    assert!(!rotary::applies(&strided, &cos, &cos), "strided input");
    assert!(relative(&rotary::apply_rotary(&strided, &cos, &cos)?, &rotary::apply_rotary(&xs, &cos, &cos)?)? <= FORWARD_TOL);
    assert!(!rotary::applies(&xs, &cos.t()?.contiguous()?.t()?, &cos), "strided table");
    assert!(!rotary::applies(&xs, &cos.to_dtype(DType::BF16)?, &cos), "bf16 table");
    assert!(!rotary::applies(&xs, &Var::from_tensor(&cos)?.as_tensor().clone(), &cos), "table with a gradient");
    assert!(!rotary::applies(&random(&mut rng, &[4, 5], -1.0, 1.0)?, &cos, &cos), "odd head dimension");
    assert!(!rotary::applies(&random(&mut rng, &[1, 6], -1.0, 1.0)?, &cos, &cos), "table larger than the input");

    assert!(!swiglu::applies(Activation::Gelu, &xs, &xs));
    assert!(!swiglu::applies(Activation::GeluTanh, &xs, &xs));
    assert!(!swiglu::applies(Activation::Silu, &strided, &strided));
    let gelu = swiglu::gated_activation(Activation::Gelu, &xs, &weight.broadcast_as((4, 6))?.contiguous()?)?;
    assert!(relative(&gelu, &(xs.gelu_erf()? * weight.broadcast_as((4, 6))?)?)? == 0.0);
    Ok(())
}
