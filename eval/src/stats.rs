//! Confidence intervals for accuracies: Wilson score intervals for one model's accuracy, and a
//! paired bootstrap for the difference of two models answering the same questions.

use motionvl_data::rng::SynthRng;

/// z of a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The Wilson score 95% interval of `correct` successes in `n` trials, as fractions. It stays
/// inside [0, 1] and is honest at small `n` and near 0 or 1, where the normal approximation is
/// not. `n == 0` gives the uninformative [0, 1].
pub fn wilson95(correct: usize, n: usize) -> [f64; 2] {
    if n == 0 {
        return [0.0, 1.0];
    }
    let (n, p) = (n as f64, correct as f64 / n as f64);
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    // At 0 or n successes the bound is exactly 0 or 1; computed, it misses by rounding.
    let lo = if correct == 0 { 0.0 } else { (centre - half).max(0.0) };
    let hi = if correct as f64 == n { 1.0 } else { (centre + half).min(1.0) };
    [lo, hi]
}

/// Mean of `b − a` over paired per-question scores, and its 95% percentile interval from
/// `resamples` bootstrap resamples of the questions (drawn with replacement, seeded). Pairing
/// keeps what both models find hard out of the interval, which is why it is narrower than the
/// two Wilson intervals side by side.
pub fn paired_bootstrap95(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Result<(f64, [f64; 2]), String> {
    if a.len() != b.len() {
        return Err(format!("paired scores need the same questions: {} against {}", a.len(), b.len()));
    }
    if a.is_empty() || resamples == 0 {
        return Err("a bootstrap needs at least one question and one resample".into());
    }
    let diffs: Vec<f64> = a.iter().zip(b).map(|(x, y)| y - x).collect();
    let n = diffs.len();
    let mean = diffs.iter().sum::<f64>() / n as f64;
    let mut rng = SynthRng::new(seed);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| diffs[rng.index(n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |q: f64| means[((q * (resamples - 1) as f64).round() as usize).min(resamples - 1)];
    Ok((mean, [at(0.025), at(0.975)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_the_closed_form_and_stays_in_the_unit_interval() {
        // 50 of 100: centre 0.5, half-width 1.96·√(0.25/100 + 1.96²/40000) / (1 + 1.96²/100).
        let [lo, hi] = wilson95(50, 100);
        assert!((lo - 0.403_85).abs() < 1e-4 && (hi - 0.596_15).abs() < 1e-4, "{lo} {hi}");
        let [lo, hi] = wilson95(0, 10);
        assert_eq!(lo, 0.0);
        assert!((hi - 0.277_5).abs() < 1e-3, "{hi}");
        assert_eq!(wilson95(10, 10)[1], 1.0);
        assert_eq!(wilson95(0, 0), [0.0, 1.0]);
    }

    #[test]
    fn the_paired_bootstrap_centres_on_the_difference_and_narrows_with_pairing() {
        // b is right wherever a is, and on 20 more of 200 questions: +10 points, and since the
        // disagreements all go one way the interval stays above zero.
        let a: Vec<f64> = (0..200).map(|i| f64::from(i % 2 == 0)).collect();
        let b: Vec<f64> = (0..200).map(|i| f64::from(i % 2 == 0 || i % 10 == 1)).collect();
        let (mean, [lo, hi]) = paired_bootstrap95(&a, &b, 2000, 7).unwrap_or_else(|e| panic!("{e}"));
        assert!((mean - 0.1).abs() < 1e-12);
        assert!(lo > 0.05 && lo < 0.1 && hi > 0.1 && hi < 0.15, "[{lo}, {hi}]");
        let (same, [lo, hi]) = paired_bootstrap95(&a, &a, 500, 7).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((same, lo, hi), (0.0, 0.0, 0.0), "identical answers differ by nothing");
        assert!(paired_bootstrap95(&a, &b[1..], 10, 0).is_err());
    }
}
