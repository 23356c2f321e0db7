//! The retriever's loss: symmetric InfoNCE over the in-batch pairs, against the identity or
//! soft targets from footprint overlap.

use std::path::Path;

use candle_core::{D, DType, Tensor};
use motionvl_data::cvaa::box_iou;

/// Symmetric InfoNCE: `logits = s · uav satᵀ` [B, B], cross-entropy in both directions
/// against `targets` (row i: how much satellite view j matches UAV frame i; the identity when
/// `None`), each mixed with the uniform distribution by label smoothing ε, averaged.
pub fn symmetric_info_nce(uav: &Tensor, sat: &Tensor, scale: &Tensor, smoothing: f64, targets: Option<&Tensor>) -> candle_core::Result<Tensor> {
    let b = uav.dim(0)?;
    let logits = uav.matmul(&sat.t()?)?.broadcast_mul(scale)?;
    let identity = Tensor::eye(b, DType::F32, uav.device())?;
    let targets = targets.unwrap_or(&identity);
    let one_way = |logits: &Tensor, targets: &Tensor| -> candle_core::Result<Tensor> {
        let targets = targets.broadcast_div(&targets.sum_keepdim(D::Minus1)?)?;
        let smoothed = ((targets * (1.0 - smoothing))? + smoothing / b as f64)?;
        let log_probs = candle_nn::ops::log_softmax(logits, D::Minus1)?;
        log_probs.mul(&smoothed)?.sum_all()? / -(b as f64)
    };
    (one_way(&logits, targets)? + one_way(&logits.t()?, &targets.t()?)?)? / 2.0
}

/// Soft InfoNCE targets from footprint overlap (after Game4Loc's weighted InfoNCE): UAV frame i
/// and satellite crop j of the same image match as much as i's footprint overlaps j's crop box.
/// Pairs without a box, or from different images, match only themselves.
pub fn overlap_targets(satellites: &[&Path], footprints: &[Option<[f64; 4]>], crops: &[Option<[f64; 4]>]) -> Vec<f32> {
    let b = satellites.len();
    let mut t = vec![0f32; b * b];
    for i in 0..b {
        for j in 0..b {
            t[i * b + j] = match (footprints[i], crops[j]) {
                (Some(f), Some(c)) if satellites[i] == satellites[j] => box_iou(f, c) as f32,
                _ => f32::from(u8::from(i == j)),
            };
        }
        // A frame always matches its own crop, however far the jitter moved it.
        t[i * b + i] = t[i * b + i].max(0.5);
    }
    t
}

#[cfg(test)]
mod tests {
    use candle_core::Device;

    use super::*;

    #[test]
    fn info_nce_of_perfectly_aligned_views_approaches_zero_and_smoothing_adds_the_uniform_term() {
        let eye = Tensor::eye(4, DType::F32, &Device::Cpu).unwrap();
        let scale = Tensor::new(&[100f32], &Device::Cpu).unwrap();
        let loss = symmetric_info_nce(&eye, &eye, &scale, 0.0, None).unwrap().to_scalar::<f32>().unwrap();
        assert!(loss < 1e-6, "{loss}");
        // Unit logit scale, orthogonal views: log-probs are 1 − log(e + 3) on the diagonal and
        // −log(e + 3) elsewhere.
        let one = Tensor::new(&[1f32], &Device::Cpu).unwrap();
        let z = (1f64.exp() + 3.0).ln();
        let smoothed = symmetric_info_nce(&eye, &eye, &one, 0.1, None).unwrap().to_scalar::<f32>().unwrap();
        let want = 0.9 * (z - 1.0) + 0.1 * (z - 0.25);
        assert!((f64::from(smoothed) - want).abs() < 1e-5, "{smoothed} vs {want}");
    }

    /// Two different views, so `S = s · uav satᵀ` is not symmetric and each direction has its
    /// own loss. Expected values from PyTorch 2.15.0 in float64, with `I = arange(3)` and `T` the
    /// soft targets below:
    /// `(F.cross_entropy(S, I, label_smoothing=ε) + F.cross_entropy(S.T, I, label_smoothing=ε)) / 2`
    /// and `(F.cross_entropy(S, T / T.sum(1, keepdim=True), label_smoothing=ε)
    ///  + F.cross_entropy(S.T, T.T / T.T.sum(1, keepdim=True), label_smoothing=ε)) / 2`.
    #[test]
    fn info_nce_averages_both_directions_as_pytorch_cross_entropy() {
        let uav = Tensor::new(&[[1.0f32, 0.2, -0.5, 0.3], [0.1, 0.9, 0.4, -0.2], [-0.3, 0.5, 0.8, 0.6]], &Device::Cpu).unwrap();
        let sat = Tensor::new(&[[0.7f32, -0.1, 0.2, 0.9], [0.3, 1.1, -0.6, 0.0], [0.5, 0.4, 0.9, -0.7]], &Device::Cpu).unwrap();
        let scale = Tensor::new(&[2.5f32], &Device::Cpu).unwrap();
        let loss = |smoothing: f64, targets: Option<&Tensor>| {
            f64::from(symmetric_info_nce(&uav, &sat, &scale, smoothing, targets).unwrap().to_scalar::<f32>().unwrap())
        };
        // UAV → satellite alone is 0.8640 (ε = 0) and satellite → UAV 0.9540: a second direction
        // without the transpose, or the first one twice, gives 0.8640.
        for (smoothing, torch) in [(0.0, 0.9090241546065086), (0.1, 0.9648574879398422)] {
            let got = loss(smoothing, None);
            assert!((got - torch).abs() < 1e-6, "ε = {smoothing}: {got} vs torch {torch}");
        }
        // Soft targets, not symmetric either: the second direction reads them transposed (1.0841
        // if it did not).
        let targets = Tensor::new(&[[1.0f32, 0.4, 0.0], [0.1, 0.8, 0.0], [0.0, 0.3, 0.6]], &Device::Cpu).unwrap();
        let (got, torch) = (loss(0.1, Some(&targets)), 1.1408899554723098);
        assert!((got - torch).abs() < 1e-6, "soft targets: {got} vs torch {torch}");
    }

    #[test]
    fn overlap_targets_grade_crops_of_the_same_image_by_iou() {
        let (a, b) = (Path::new("a.png"), Path::new("b.png"));
        let footprints = [Some([0.0, 0.0, 0.5, 0.5]), Some([0.25, 0.0, 0.75, 0.5]), Some([0.0, 0.0, 0.5, 0.5])];
        let t = overlap_targets(&[a, a, b], &footprints, &footprints);
        let third = 1.0 / 3.0;
        let want = [1.0, third, 0.0, third, 1.0, 0.0, 0.0, 0.0, 1.0];
        for (got, want) in t.iter().zip(want) {
            assert!((got - want).abs() < 1e-6, "{t:?}");
        }
        // Identity targets give the plain loss (two different views: the logits are not symmetric).
        let uav = Tensor::new(&[[1f32, 0.0], [0.6, 0.8]], &Device::Cpu).unwrap();
        let sat = Tensor::new(&[[0.8f32, -0.6], [0.0, 1.0]], &Device::Cpu).unwrap();
        let s = Tensor::new(&[5f32], &Device::Cpu).unwrap();
        let eye = Tensor::eye(2, DType::F32, &Device::Cpu).unwrap();
        let plain = symmetric_info_nce(&uav, &sat, &s, 0.1, None).unwrap().to_scalar::<f32>().unwrap();
        let explicit = symmetric_info_nce(&uav, &sat, &s, 0.1, Some(&eye)).unwrap().to_scalar::<f32>().unwrap();
        assert_eq!(plain, explicit);
    }
}
