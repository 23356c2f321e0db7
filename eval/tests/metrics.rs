//! Every metric on cases worked out by hand.

use motionvl_data::manifest::Interval;
use motionvl_eval::metrics::{acc_at_1s, interval_iou, mean_best_tiou, mra, random_choice, random_multi, set_f1};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-12
}

#[test]
fn mra_over_the_ten_thresholds() {
    // y = 10: |ŷ−y| must stay below (1−θ)·10 = 5.0, 4.5, 4.0, 3.5, 3.0, 2.5, 2.0, 1.5, 1.0, 0.5.
    assert!(close(mra(10.0, 10.0), 1.0));
    assert!(close(mra(12.0, 10.0), 0.6), "error 2 passes the six bounds above 2: {}", mra(12.0, 10.0));
    assert!(close(mra(8.0, 10.0), 0.6), "symmetric");
    assert!(close(mra(14.0, 10.0), 0.2), "error 4 passes 5.0 and 4.5 only");
    assert!(close(mra(15.0, 10.0), 0.0), "relative error 0.5 fails θ = 0.50 (strict <)");
    assert!(close(mra(5.0, 10.0), 0.0));
    assert!(close(mra(10.5, 10.0), 0.9), "relative error 0.05 fails θ = 0.95 only");
    // Exactly 5 % again, where the float 1 − 0.95 would let it pass.
    assert!(close(mra(21.0, 20.0), 0.9), "got {}", mra(21.0, 20.0));
    assert!(close(mra(-12.0, -10.0), 0.6), "negative truths use |y|");
}

#[test]
fn mra_zero_ground_truth() {
    assert!(close(mra(0.0, 0.0), 1.0));
    assert!(close(mra(1.0, 0.0), 0.0));
    assert!(close(mra(1e-4, 0.0), 0.0), "anything but exactly 0 is wrong when y = 0");
    assert!(close(mra(f64::NAN, 3.0), 0.0));
}

#[test]
fn acc_at_1s_edges() {
    assert!(acc_at_1s(11.0, 10.0), "exactly 1 s late counts");
    assert!(acc_at_1s(9.0, 10.0), "exactly 1 s early counts");
    assert!(acc_at_1s(11.1, 10.1), "1 s apart despite binary rounding (|Δ| = 1.0000000000000009)");
    assert!(acc_at_1s(10.0, 10.0));
    assert!(!acc_at_1s(11.01, 10.0));
    assert!(!acc_at_1s(8.5, 10.0));
    assert!(!acc_at_1s(f64::NAN, 10.0));
}

#[test]
fn temporal_iou() {
    let iv = |start, end| Interval { start, end };
    assert!(close(interval_iou(iv(0.0, 10.0), iv(5.0, 15.0)), 5.0 / 15.0));
    assert!(close(interval_iou(iv(0.0, 10.0), iv(10.0, 20.0)), 0.0), "touching intervals do not overlap");
    assert!(close(interval_iou(iv(2.0, 4.0), iv(0.0, 10.0)), 0.2));
    assert!(close(interval_iou(iv(10.0, 0.0), iv(0.0, 10.0)), 1.0), "reversed bounds are reordered");
    assert!(close(interval_iou(iv(3.0, 3.0), iv(3.0, 3.0)), 0.0), "empty union scores 0, as UAV-DualCog does");

    let gold = [iv(0.0, 10.0), iv(20.0, 30.0)];
    assert_eq!(mean_best_tiou(&gold, &[iv(0.0, 10.0), iv(25.0, 30.0)]), Some(0.75));
    assert_eq!(mean_best_tiou(&gold, &[]), Some(0.0));
    assert_eq!(mean_best_tiou(&[], &[iv(0.0, 1.0)]), None);
    // One prediction may be the best match of several truths (UAV-DualCog's mean_best_tIoU).
    assert_eq!(mean_best_tiou(&gold, &[iv(0.0, 30.0)]), Some((10.0 / 30.0 + 10.0 / 30.0) / 2.0));
}

#[test]
fn option_sets_and_random_baselines() {
    assert!(close(set_f1(&['A', 'C'], &['A']), 2.0 / 3.0));
    assert!(close(set_f1(&['A', 'C'], &['A', 'C']), 1.0));
    assert!(close(set_f1(&['A', 'C'], &['B']), 0.0));
    assert!(close(set_f1(&[], &[]), 1.0));
    assert_eq!(random_choice(4), Some(0.25));
    assert_eq!(random_choice(7), Some(1.0 / 7.0));
    assert_eq!(random_multi(2), Some(1.0 / 3.0));
}
