//! `construct` outputs read back through their `eval` readers and scored through `evaluate
//! score`: gold answers score 100%, a constant letter about chance.

use std::path::Path;

use motionvl_construct::nav::{self, Episode, StepRules};
use motionvl_construct::sisbench_qa::{
    self, AnnotatedAction, AnnotatedLandmark, AnnotatedObject, AnnotatedType, ClipSpan, Position, VideoAnnotation,
};
use motionvl_construct::synth::{GroundTruth, Split, SynthConfig, generate};
use motionvl_data::manifest::Answer;
use motionvl_data::rng::SynthRng;
use motionvl_data::samples::ReadOptions;
use motionvl_eval::Results;
use motionvl_eval::config::Continuation;
use motionvl_eval::score_predictions;

fn no_media() -> ReadOptions {
    ReadOptions { media_root: None, check_media: false, skip_bad: false }
}

/// Writes one prediction per id and scores them.
fn score(bench: &str, manifest: &Path, answers: &[(String, String)], dir: &Path, name: &str) -> Results {
    let predictions = dir.join(format!("{name}.jsonl"));
    let text: String = answers.iter().map(|(id, p)| format!("{}\n", serde_json::json!({"question_id": id, "prediction": p}))).collect();
    std::fs::write(&predictions, text).expect("write predictions");
    let (results, _) = score_predictions(bench, manifest, &predictions, &dir.join(name), None, &no_media())
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
    let episodes: Vec<Episode> =
        (0..40).map(|i| Episode { id: format!("ep{i:03}"), video: format!("ep{i:03}"), positions: random_flight(&mut rng) }).collect();
    let (rows, skipped) = nav::build_rows(&episodes, &StepRules::default(), 3);
    assert!(skipped.is_empty(), "{skipped:?}");
    let manifest = nav::write_rows(dir.path(), &rows).expect("write nav.json");

    let gold: Vec<(String, String)> = rows.iter().map(|r| (r.question_id.clone(), r.answer.clone())).collect();
    let r = score("nav", &manifest, &gold, dir.path(), "gold");
    assert_eq!((r.questions, r.missing, r.unmatched, r.skipped_rows), (40, 0, 0, 0));
    assert!((r.overall.accuracy - 1.0).abs() < 1e-12, "gold scores {}", r.overall.accuracy);

    let constant: Vec<(String, String)> = rows.iter().map(|r| (r.question_id.clone(), "A".to_string())).collect();
    let r = score("nav", &manifest, &constant, dir.path(), "constant");
    assert!((r.overall.accuracy - 0.25).abs() < 1e-12, "constant A scores {}", r.overall.accuracy);

    // A segments list of another form is refused, naming the row and the field.
    let mut bad: Vec<serde_json::Value> = rows.iter().map(|r| serde_json::to_value(r).expect("row")).collect();
    bad[2]["segments"][0]["kind"] = serde_json::json!("barrel_roll");
    let bad_path = dir.path().join("bad.json");
    std::fs::write(&bad_path, serde_json::to_string(&bad).expect("json")).expect("write");
    let err = motionvl_eval::bench::find("nav").expect("nav bench").read(&bad_path, &no_media()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("nav-ep002") && err.contains("segments[0]"), "{err}");
}

const CATEGORIES: [&str; 5] = ["car", "truck", "bus", "tower", "boat"];
const COLOURS: [&str; 5] = ["red", "blue", "white", "green", "yellow"];
const LANDMARKS: [&str; 8] = ["water tower", "church", "stadium", "bridge", "crane", "silo", "lighthouse", "mast"];
const ACTIONS: [&str; 7] = ["fly forward", "ascend", "descend", "turn left", "turn right", "fly backward", "hover"];

fn pick<'a>(rng: &mut SynthRng, items: &[&'a str]) -> &'a str {
    items[rng.index(items.len())]
}

fn random_object(rng: &mut SynthRng, category: &str, t: f64) -> AnnotatedObject {
    AnnotatedObject {
        category: category.to_string(),
        attribute: Some(pick(rng, &COLOURS).to_string()),
        intervals: vec![[t, t + 1.0]],
        positions: vec![Position { t, x: rng.range(0.0, 1.0), y: rng.range(0.0, 1.0) }],
    }
}

/// Annotations of one video of each type, with random but consistent labels.
fn random_annotations(rng: &mut SynthRng, i: usize) -> Vec<VideoAnnotation> {
    let mut cats = CATEGORIES.to_vec();
    rng.shuffle(&mut cats);
    let mut actions = ACTIONS.to_vec();
    rng.shuffle(&mut actions);
    let mut landmarks = LANDMARKS.to_vec();
    rng.shuffle(&mut landmarks);
    let single = VideoAnnotation {
        video: format!("videos/single{i}.mp4"),
        duration_s: 4.0,
        objects: vec![random_object(rng, cats[0], 0.5), random_object(rng, cats[1], 1.5)],
        actions: vec![AnnotatedAction { action: actions[0].to_string(), start_s: 0.0, end_s: 4.0 }],
        ..VideoAnnotation::default()
    };
    let clips: Vec<ClipSpan> =
        (0..3).map(|c| ClipSpan { source: format!("clip{c}.mp4"), start_s: 4.0 * c as f64, end_s: 4.0 * (c + 1) as f64 }).collect();
    let concatenated = VideoAnnotation {
        video: format!("videos/concat{i}.mp4"),
        duration_s: 12.0,
        video_type: AnnotatedType::Concatenated,
        objects: vec![random_object(rng, cats[2], 1.0), random_object(rng, cats[3], 1.1)],
        landmarks: (0..3)
            .map(|c| AnnotatedLandmark { name: landmarks[c].to_string(), intervals: vec![[4.0 * c as f64 + 1.0, 4.0 * c as f64 + 2.0]] })
            .collect(),
        actions: (0..3)
            .map(|c| AnnotatedAction { action: actions[c + 1].to_string(), start_s: 4.0 * c as f64, end_s: 4.0 * (c + 1) as f64 })
            .collect(),
        clips,
        ..VideoAnnotation::default()
    };
    let long = VideoAnnotation {
        video: format!("videos/long{i}.mp4"),
        duration_s: 40.0,
        video_type: AnnotatedType::Long,
        actions: (0..4)
            .map(|c| AnnotatedAction { action: actions[c + 2].to_string(), start_s: 10.0 * c as f64, end_s: 10.0 * (c + 1) as f64 })
            .collect(),
        ..VideoAnnotation::default()
    };
    let mut permutation = vec![0, 1, 2, 3];
    while permutation == [0, 1, 2, 3] {
        rng.shuffle(&mut permutation);
    }
    let shuffled = |kind: AnnotatedType, name: &str| VideoAnnotation {
        video: format!("videos/{name}{i}.mp4"),
        duration_s: 20.0,
        video_type: kind,
        segments: permutation.iter().map(|&k| [5.0 * k as f64, 5.0 * k as f64 + 5.0]).collect(),
        permutation: permutation.clone(),
        ..VideoAnnotation::default()
    };
    vec![
        single,
        concatenated,
        long,
        shuffled(AnnotatedType::ShuffledSpatial, "spatial"),
        shuffled(AnnotatedType::ShuffledSpatiotemporal, "spatiotemporal"),
    ]
}

#[test]
fn sisbench_qa_asks_all_13_tasks_and_scores_gold_100_and_constant_near_chance() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = SynthRng::new(5);
    let videos: Vec<VideoAnnotation> = (0..40).flat_map(|i| random_annotations(&mut rng, i)).collect();
    let annotations = dir.path().join("annotations.jsonl");
    let text: String = videos.iter().map(|v| format!("{}\n", serde_json::to_string(v).expect("json"))).collect();
    std::fs::write(&annotations, text).expect("write annotations");
    let read = sisbench_qa::read_annotations(&annotations).expect("annotations read back");
    let names = |vs: &[VideoAnnotation]| vs.iter().map(|v| (v.video.clone(), v.video_type)).collect::<Vec<_>>();
    assert_eq!(names(&read), names(&videos));

    let questions = sisbench_qa::build_questions(&read, "sis", 9);
    let manifest = dir.path().join("sisbench.json");
    sisbench_qa::write_manifest(&manifest, &questions).expect("write manifest");
    for (task, n) in sisbench_qa::count_by_task(&questions) {
        assert!(n >= 8, "{} has {n} questions", task.name());
        for letter in 0..4 {
            let k = questions.iter().filter(|q| q.task == task && q.answer == letter).count();
            assert_eq!(k * 4, n, "{}: letter {letter} is the answer {k} of {n} times", task.name());
        }
    }

    let gold: Vec<(String, String)> = questions.iter().map(|q| (q.id.clone(), q.answer_letter().to_string())).collect();
    let r = score("sisbench", &manifest, &gold, dir.path(), "gold");
    assert_eq!((r.questions, r.missing, r.skipped_rows), (questions.len(), 0, 0));
    assert_eq!(r.by_task.iter().count(), 13);
    assert!((r.overall.accuracy - 1.0).abs() < 1e-12);
    for letter in ["A", "B", "C", "D"] {
        let constant: Vec<(String, String)> = questions.iter().map(|q| (q.id.clone(), letter.to_string())).collect();
        let r = score("sisbench", &manifest, &constant, dir.path(), letter);
        assert!((r.overall.accuracy - 0.25).abs() < 1e-12, "constant {letter}: {}", r.overall.accuracy);
    }
}

#[test]
fn synth_manifests_score_gold_100_and_constant_near_chance_over_all_13_tasks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = SynthConfig {
        train_worlds: 2,
        test_worlds: 2,
        clips_per_world: 8,
        concats_per_world: 6,
        landmarks_per_world: 8,
        width: 64,
        height: 48,
        fps: 6,
        seconds: 1.5,
        seed: 3,
        ground_truth: GroundTruth::None,
        recognition_movements: Vec::new(),
        // The demo's form: conversations answer with the option's text.
        training_answers: motionvl_construct::synth::write::AnswerForm::Text,
    };
    let summary = generate(&config, &dir.path().join("world"), false).expect("synthetic world");
    // Training conversations ask exactly what the evaluation asks of the same question when it
    // scores the option's text, and answer with that text.
    let bench = motionvl_eval::bench::find("sisbench").expect("sisbench");
    let items = bench.read(&summary.manifest(Split::Train), &ReadOptions::default()).expect("manifest").items;
    let conversations: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(summary.conversations(Split::Train)).expect("conversations")).expect("json");
    assert_eq!(items.len(), conversations.len());
    for (item, row) in items.iter().zip(&conversations) {
        assert_eq!(row["id"].as_str(), Some(item.id.as_str()));
        let asked = bench.prompt_asking(item, Continuation::Text.asked());
        assert_eq!(row["conversations"][0]["value"].as_str(), Some(asked.as_str()), "{}", item.id);
        assert!(asked.ends_with("Answer with the option's text from the given choices directly."), "{asked}");
        let Answer::Choice(letter) = item.answer else { panic!("{}: not a single choice", item.id) };
        let text = item.options.iter().find(|o| o.label == letter).map(|o| o.text.as_str());
        assert_eq!(row["conversations"][1]["value"].as_str(), text, "{}", item.id);
    }
    let mut tasks = std::collections::BTreeSet::new();
    for split in [Split::Train, Split::Test] {
        let manifest = summary.manifest(split);
        let rows: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&manifest).expect("manifest")).expect("json");
        let answers = |letter: Option<&str>| -> Vec<(String, String)> {
            rows.iter()
                .map(|r| {
                    let id = r["question_id"].as_str().unwrap_or_default().to_string();
                    (id, letter.unwrap_or_else(|| r["answer"].as_str().unwrap_or_default()).to_string())
                })
                .collect()
        };
        let gold = score("sisbench", &manifest, &answers(None), dir.path(), &format!("{split}-gold"));
        assert_eq!((gold.questions, gold.skipped_rows), (rows.len(), 0));
        assert!((gold.overall.accuracy - 1.0).abs() < 1e-12, "{split}: gold {}", gold.overall.accuracy);
        if split == Split::Test {
            tasks.extend(gold.by_task.iter().map(|(t, _)| t.clone()));
        }
        let constant = score("sisbench", &manifest, &answers(Some("B")), dir.path(), &format!("{split}-b"));
        assert!((constant.overall.accuracy - 0.25).abs() < 1e-12, "{split}: constant B {}", constant.overall.accuracy);
    }
    assert_eq!(tasks.len(), 13, "the held-out split asks every task: {tasks:?}");
}
