//! `ops::Linear` with a constant weight (frozen under LoRA) gives the input the same gradient as
//! candle's matmul autograd, and no gradient to the weight.

use candle_core::{DType, Device, Module, Result, Tensor, Var};
use motionvl_models::ops::Linear;
use motionvl_models::seeded;

fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    (a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar()
}

#[test]
fn a_frozen_weight_passes_the_input_gradient_and_gets_none() -> Result<()> {
    let device = Device::Cpu;
    let weight = seeded::randn((5, 7), 1.0, 1, &device)?;
    let bias = seeded::randn(5, 1.0, 2, &device)?;
    // Three leading dimensions, odd sizes, and a weighted loss so every output entry matters.
    let xs = Var::from_tensor(&seeded::randn((2, 3, 7), 1.0, 3, &device)?)?;
    let weights = seeded::randn((2, 3, 5), 1.0, 4, &device)?;
    let linear = Linear::from_parts(weight.clone(), Some(bias.clone()));

    let ys = linear.forward(xs.as_tensor())?;
    let reference = xs.as_tensor().broadcast_matmul(&weight.t()?)?.broadcast_add(&bias)?;
    assert!(max_abs_diff(&ys, &reference)? <= 1e-6);

    let grads = (ys * &weights)?.sum_all()?.backward()?;
    let reference_grads = (reference * &weights)?.sum_all()?.backward()?;
    let (dx, dx_ref) = (grads.get(xs.as_tensor()).expect("input gradient"), reference_grads.get(xs.as_tensor()).expect("input gradient"));
    assert_eq!(dx.dims(), xs.dims());
    assert!(max_abs_diff(dx, dx_ref)? <= 1e-6, "input gradient differs by {}", max_abs_diff(dx, dx_ref)?);
    // The plain matmul's autograd computes (and keeps) a gradient for the constant weight (its
    // transposed view, `[7, 5]`); the frozen-weight path computes none.
    let weight_shaped = |store: &candle_core::backprop::GradStore| {
        store.get_ids().filter_map(|id| store.get_id(*id)).filter(|g| g.dims() == [7, 5] || g.dims() == [5, 7]).count()
    };
    assert_eq!(weight_shaped(&reference_grads), 1);
    assert_eq!(weight_shaped(&grads), 0);
    Ok(())
}

#[test]
fn a_trained_weight_still_gets_its_gradient() -> Result<()> {
    let device = Device::Cpu;
    let weight = Var::from_tensor(&seeded::randn((4, 3), 1.0, 5, &device)?)?;
    let xs = Var::from_tensor(&seeded::randn((6, 3), 1.0, 6, &device)?)?;
    let linear = Linear::from_parts(weight.as_tensor().clone(), None);
    let grads = linear.forward(xs.as_tensor())?.sum_all()?.backward()?;
    let dw = grads.get(weight.as_tensor()).expect("weight gradient");
    // d(Σ x Wᵀ)/dW = column sums of x, the same for every output row.
    let expected = xs.as_tensor().sum_keepdim(0)?.broadcast_as((4, 3))?.to_dtype(DType::F32)?;
    assert!(max_abs_diff(dw, &expected)? <= 1e-5);
    Ok(())
}
