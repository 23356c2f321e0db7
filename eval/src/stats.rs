//! Confidence intervals for accuracies: Wilson score intervals for one model's accuracy, and a
//! paired bootstrap for the difference of two models answering the same questions — resampling
//! questions, or whole clusters of them (the questions asked about one clip) when questions of
//! a cluster are not independent.

use std::collections::HashMap;
use std::hash::Hash;

use motionvl_data::rng::SynthRng;

/// z of a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// Why a bootstrap cannot be computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatsError {
    #[error("paired scores need the same questions: {a} against {b}")]
    Unpaired { a: usize, b: usize },
    #[error("{labels} cluster labels for {questions} questions")]
    ClusterLabels { questions: usize, labels: usize },
    #[error("a bootstrap needs at least one question and one resample ({questions} questions, {resamples} resamples)")]
    Empty { questions: usize, resamples: usize },
}

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
/// two Wilson intervals side by side. It treats the questions as independent; see
/// [`cluster_paired_bootstrap95`] when they are not.
pub fn paired_bootstrap95(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Result<(f64, [f64; 2]), StatsError> {
    let each_its_own: Vec<usize> = (0..a.len()).collect();
    cluster_paired_bootstrap95(a, b, &each_its_own, resamples, seed)
}

/// [`paired_bootstrap95`] resampling clusters instead of questions: `clusters[i]` labels
/// question `i` (the clip it is asked about), each resample draws as many clusters as there
/// are, with replacement, and takes all their questions; its mean is the drawn questions' mean
/// difference. Questions about one clip share what the models make of that clip, so they
/// carry less evidence than as many independent questions, and resampling them together keeps
/// that in the interval (with clusters of `m` perfectly correlated questions it is about √m
/// times wider than the question-level one).
pub fn cluster_paired_bootstrap95<K: Eq + Hash>(
    a: &[f64],
    b: &[f64],
    clusters: &[K],
    resamples: usize,
    seed: u64,
) -> Result<(f64, [f64; 2]), StatsError> {
    if a.len() != b.len() {
        return Err(StatsError::Unpaired { a: a.len(), b: b.len() });
    }
    if clusters.len() != a.len() {
        return Err(StatsError::ClusterLabels { questions: a.len(), labels: clusters.len() });
    }
    if a.is_empty() || resamples == 0 {
        return Err(StatsError::Empty { questions: a.len(), resamples });
    }
    // (sum of b − a, questions) per cluster, in order of first appearance (seeded draws then
    // do not depend on hashing).
    let mut index: HashMap<&K, usize> = HashMap::new();
    let mut sums: Vec<(f64, usize)> = Vec::new();
    for ((x, y), k) in a.iter().zip(b).zip(clusters) {
        let i = *index.entry(k).or_insert_with(|| {
            sums.push((0.0, 0));
            sums.len() - 1
        });
        sums[i].0 += y - x;
        sums[i].1 += 1;
    }
    let mean = sums.iter().map(|s| s.0).sum::<f64>() / a.len() as f64;
    let c = sums.len();
    let mut rng = SynthRng::new(seed);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| {
            let (total, n) = (0..c).fold((0.0, 0), |(t, n), _| {
                let (s, m) = sums[rng.index(c)];
                (t + s, n + m)
            });
            total / n as f64
        })
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

    /// `b` is right wherever `a` is, and on 20 more of 200 questions (those with `i % 10 == 1`).
    fn ten_points_better() -> (Vec<f64>, Vec<f64>) {
        let a: Vec<f64> = (0..200).map(|i| f64::from(i % 2 == 0)).collect();
        let b: Vec<f64> = (0..200).map(|i| f64::from(i % 2 == 0 || i % 10 == 1)).collect();
        (a, b)
    }

    #[test]
    fn the_paired_bootstrap_gives_the_percentiles_of_the_resampled_mean() {
        // The differences are 20 ones and 180 zeros, so a resample's mean is X/200 with
        // X ~ Binomial(200, 0.1). Its exact 2.5% and 97.5% points are X = 12 and X = 29
        // (P(X ≤ 11) = 0.0168, P(X ≤ 12) = 0.0320; P(X ≤ 28) = 0.9729, P(X ≤ 29) = 0.9837):
        // [0.060, 0.145], around the normal approximation 0.1 ± 1.96·√(0.1·0.9/200) =
        // [0.058, 0.142]. One atom (1/200) of sampling slack either way; an interval √2 too
        // narrow, ≈ [0.07, 0.13], fails.
        let (a, b) = ten_points_better();
        let (mean, [lo, hi]) = paired_bootstrap95(&a, &b, 20_000, 7).unwrap_or_else(|e| panic!("{e}"));
        assert!((mean - 0.1).abs() < 1e-12);
        assert!((lo - 0.060).abs() <= 0.005 + 1e-12, "lower bound {lo}, exactly 0.060");
        assert!((hi - 0.145).abs() <= 0.005 + 1e-12, "upper bound {hi}, exactly 0.145");
        let (same, [lo, hi]) = paired_bootstrap95(&a, &a, 500, 7).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((same, lo, hi), (0.0, 0.0, 0.0), "identical answers differ by nothing");
        assert_eq!(paired_bootstrap95(&a, &b[1..], 10, 0), Err(StatsError::Unpaired { a: 200, b: 199 }));
        assert_eq!(paired_bootstrap95(&[], &[], 10, 0), Err(StatsError::Empty { questions: 0, resamples: 10 }));
    }

    #[test]
    fn pairing_narrows_the_interval_below_the_unpaired_one() {
        // The same data unpaired: a scores 100/200, b 120/200. Newcombe's interval for b − a
        // from the two Wilson intervals, [0.0026, 0.1948] (width 0.192 by hand: Wilson
        // [0.4314, 0.5686] and [0.5308, 0.6654]), ignores that b is right wherever a is; the
        // paired interval, ≈ [0.060, 0.145] (width ≈ 0.085), keeps only the 20 questions where
        // they differ.
        let (a, b) = ten_points_better();
        let (_, [lo, hi]) = paired_bootstrap95(&a, &b, 20_000, 7).unwrap_or_else(|e| panic!("{e}"));
        let ([la, ua], [lb, ub]) = (wilson95(100, 200), wilson95(120, 200));
        let (pa, pb) = (0.5, 0.6);
        let unpaired = [pb - pa - (pb - lb).hypot(ua - pa), pb - pa + (ub - pb).hypot(pa - la)];
        assert!((unpaired[0] - 0.0026).abs() < 1e-3 && (unpaired[1] - 0.1948).abs() < 1e-3, "{unpaired:?}");
        let (paired_width, unpaired_width) = (hi - lo, unpaired[1] - unpaired[0]);
        assert!(paired_width < 0.5 * unpaired_width, "paired {paired_width} against unpaired {unpaired_width}");
    }

    #[test]
    fn the_cluster_bootstrap_widens_by_the_root_of_the_cluster_size() {
        // 400 clips of 4 questions each; on every question of an even clip b is right and a
        // wrong, on an odd clip both answer alike: the 4 questions of a clip are perfectly
        // correlated. Resampling questions, the mean is X/1600 with X ~ Binomial(1600, ½):
        // exact 2.5% and 97.5% points 761 and 839, width 0.04875 (normal approximation
        // 2·1.96·½/√1600 = 0.049). Resampling clips, it is 4Y/1600 = Y/400 with
        // Y ~ Binomial(400, ½): points 180 and 220, width 0.100 (2·1.96·½/√400 = 0.098) —
        // √4 = 2 times wider.
        let clip: Vec<usize> = (0..1600).map(|i| i / 4).collect();
        let a = vec![0.0; 1600];
        let b: Vec<f64> = clip.iter().map(|c| f64::from(c % 2 == 0)).collect();
        let (mean, [qlo, qhi]) = paired_bootstrap95(&a, &b, 4000, 3).unwrap_or_else(|e| panic!("{e}"));
        let (cmean, [clo, chi]) = cluster_paired_bootstrap95(&a, &b, &clip, 4000, 3).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((mean, cmean), (0.5, 0.5));
        // Two atoms of sampling slack at each end.
        assert!((qlo - 761.0 / 1600.0).abs() <= 2.0 / 1600.0 && (qhi - 839.0 / 1600.0).abs() <= 2.0 / 1600.0, "questions: [{qlo}, {qhi}]");
        assert!((clo - 0.45).abs() <= 2.0 / 400.0 && (chi - 0.55).abs() <= 2.0 / 400.0, "clips: [{clo}, {chi}]");
        let ratio = (chi - clo) / (qhi - qlo);
        assert!((1.8..2.3).contains(&ratio), "the clip-level interval is {ratio} times the question-level one, not about 2");
        assert_eq!(cluster_paired_bootstrap95(&a, &b, &clip[1..], 10, 0), Err(StatsError::ClusterLabels { questions: 1600, labels: 1599 }));
    }

    #[test]
    fn the_cluster_bootstrap_of_unequal_clusters_centres_on_the_question_mean() {
        // Clusters of 1 and 3 questions: the estimate is the mean over questions (3 of 4 right
        // against none: 0.75), not the mean of the cluster means (0.5).
        let (a, b) = ([0.0; 4], [0.0, 1.0, 1.0, 1.0]);
        let (mean, [lo, hi]) = cluster_paired_bootstrap95(&a, &b, &["x", "y", "y", "y"], 1000, 1).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(mean, 0.75);
        // Two clusters: a resample holds x twice (0), y twice (1) or one of each (3/4).
        assert_eq!((lo, hi), (0.0, 1.0));
    }
}
