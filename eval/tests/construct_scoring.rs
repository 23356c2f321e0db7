//! `construct` outputs read back through their `eval` readers and scored through `evaluate
//! score`: gold answers score 100%, a constant letter about chance.

use std::path::Path;

use motionvl_data::construct::nav::{self, Episode, StepRules};
use motionvl_data::samples::ReadOptions;
use motionvl_data::synth::rng::SynthRng;
use motionvl_eval::Results;
use motionvl_eval::score_predictions;

fn no_media() -> ReadOptions {
    ReadOptions {
        media_root: None,
        check_media: false,
        skip_bad: false,
    }
}

/// Writes one prediction per id and scores them.
fn score(
    bench: &str,
    manifest: &Path,
    answers: &[(String, String)],
    dir: &Path,
    name: &str,
) -> Results {
    let predictions = dir.join(format!("{name}.jsonl"));
    let text: String = answers
        .iter()
        .map(|(id, p)| {
            format!(
                "{}\n",
                serde_json::json!({"question_id": id, "prediction": p})
            )
        })
        .collect();
    std::fs::write(&predictions, text).expect("write predictions");
    let (results, _) = score_predictions(
        bench,
        manifest,
        &predictions,
        &dir.join(name),
        None,
        &no_media(),
    )
    .unwrap_or_else(|e| panic!("scoring {}: {e}", manifest.display()));
    results
}

/// A flight of climbs, straight legs and turns of random sizes.
fn random_flight(rng: &mut SynthRng) -> Vec<[f64; 3]> {
    let mut p = [0.0, 0.0, 0.0];
    let mut heading: f64 = rng.range(0.0, std::f64::consts::TAU);
    let mut out = vec![p];
    for _ in 0..(3 + rng.index(5)) {
        match rng.index(3) {
            0 => p[2] += rng.sign() * rng.range(6.0, 15.0),
            1 => heading += rng.sign() * rng.range(30.0, 110.0).to_radians(),
            _ => {}
        }
        let d = rng.range(10.0, 60.0);
        p = [p[0] + d * heading.cos(), p[1] + d * heading.sin(), p[2]];
        out.push(p);
    }
    out
}

#[test]
fn nav_rows_read_back_and_score_gold_100_and_constant_near_chance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = SynthRng::new(11);
    let episodes: Vec<Episode> = (0..40)
        .map(|i| Episode {
            id: format!("ep{i:03}"),
            video: format!("ep{i:03}"),
            positions: random_flight(&mut rng),
        })
        .collect();
    let (rows, skipped) = nav::build_rows(&episodes, &StepRules::default(), 3);
    assert!(skipped.is_empty(), "{skipped:?}");
    let manifest = nav::write_rows(dir.path(), &rows).expect("write nav.json");

    let gold: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r.question_id.clone(), r.answer.clone()))
        .collect();
    let r = score("nav", &manifest, &gold, dir.path(), "gold");
    assert_eq!(
        (r.questions, r.missing, r.unmatched, r.skipped_rows),
        (40, 0, 0, 0)
    );
    assert!(
        (r.overall.accuracy - 1.0).abs() < 1e-12,
        "gold scores {}",
        r.overall.accuracy
    );

    let constant: Vec<(String, String)> = rows
        .iter()
        .map(|r| (r.question_id.clone(), "A".to_string()))
        .collect();
    let r = score("nav", &manifest, &constant, dir.path(), "constant");
    assert!(
        (r.overall.accuracy - 0.25).abs() < 1e-12,
        "constant A scores {}",
        r.overall.accuracy
    );

    // A segments list of another form is refused, naming the row and the field.
    let mut bad: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| serde_json::to_value(r).expect("row"))
        .collect();
    bad[2]["segments"][0]["kind"] = serde_json::json!("barrel_roll");
    let bad_path = dir.path().join("bad.json");
    std::fs::write(&bad_path, serde_json::to_string(&bad).expect("json")).expect("write");
    let err = motionvl_eval::bench::find("nav")
        .expect("nav bench")
        .read(&bad_path, &no_media())
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("nav-ep002") && err.contains("segments[0]"),
        "{err}"
    );
}
