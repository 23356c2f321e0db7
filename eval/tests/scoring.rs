//! `evaluate score` end to end: manifests and predictions written here, scores worked out by
//! hand, and every report file checked.

use std::path::{Path, PathBuf};

use motionvl_data::samples::ReadOptions;
use motionvl_eval::Results;
use motionvl_eval::report::compare;
use motionvl_eval::score_predictions;
use serde_json::json;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn write_lines(path: &Path, rows: &[serde_json::Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).expect("write");
}

fn no_media() -> ReadOptions {
    ReadOptions { media_root: None, check_media: false, skip_bad: false }
}

fn sis_row(id: &str, task: &str, answer: &str) -> serde_json::Value {
    json!({
        "question_id": id, "task_type": task, "video_path": format!("{id}.mp4"),
        "question": "How does the drone move?",
        "options": {"A": "move forward", "B": "move backward", "C": "ascend", "D": "descend"},
        "answer": answer,
    })
}

fn pred(id: &str, text: &str) -> serde_json::Value {
    json!({"question_id": id, "prediction": text})
}

/// Seven SIS-Bench questions over three tasks, two dimensions and two levels.
fn sis_fixture(dir: &Path) -> (PathBuf, PathBuf) {
    let manifest = dir.join("sis.jsonl");
    write_lines(
        &manifest,
        &[
            sis_row("oe1", "Object Existence", "A"),
            sis_row("oe2", "Object Existence", "B"),
            sis_row("oe3", "Object Existence", "C"),
            sis_row("lo1", "Landmark Order", "D"),
            sis_row("lo2", "Landmark Order", "A"),
            sis_row("ar1", "Action Recognition", "B"),
            sis_row("ar2", "Action Recognition", "C"),
        ],
    );
    let predictions = dir.join("api-model.jsonl");
    write_lines(
        &predictions,
        &[
            pred("oe1", "A"),                                // right
            pred("oe2", "The answer is (B)."),               // right
            pred("oe3", "D. descend"),                       // wrong
            pred("lo1", "Option: [D]; Reason: [last seen]"), // right
            pred("lo2", "I cannot tell from the video."),    // unanswered
            pred("ar1", "move backward"),                    // right, by option text
            // ar2 has no prediction: missing, scored as unanswered.
            pred("zz9", "A"), // not in the manifest
        ],
    );
    (manifest, predictions)
}

#[test]
fn sisbench_breakdowns_and_report_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (manifest, predictions) = sis_fixture(dir.path());
    let out = dir.path().join("report");
    let (r, files) = score_predictions("sisbench", &manifest, &predictions, &out, None, &no_media()).expect("scores");

    assert_eq!((r.questions, r.predicted, r.missing, r.unmatched), (7, 6, 1, 1));
    assert_eq!(r.run, "api-model");
    let task = |n: &str| r.by_task.get(n).unwrap_or_else(|| panic!("task {n}"));
    assert!(close(task("Object Existence").accuracy, 2.0 / 3.0));
    assert_eq!((task("Object Existence").n, task("Object Existence").unanswered), (3, 0));
    assert!(close(task("Landmark Order").accuracy, 0.5));
    assert_eq!(task("Landmark Order").unanswered, 1);
    assert!(close(task("Action Recognition").accuracy, 0.5));
    assert_eq!(task("Action Recognition").unanswered, 1, "the missing prediction counts as unanswered");
    assert_eq!(task("Object Existence").random, Some(0.25));
    assert_eq!(task("Object Existence").dimension.as_deref(), Some("spatial"));
    assert_eq!(task("Object Existence").level.as_deref(), Some("perception"));
    // Paper order, not file order or alphabetical.
    let order: Vec<&str> = r.by_task.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(order, ["Object Existence", "Landmark Order", "Action Recognition"]);

    let spatial = r.by_dimension.get("spatial").expect("spatial");
    assert!(close(spatial.accuracy, 3.0 / 5.0), "question-weighted: 3 of 5");
    assert!(close(spatial.macro_accuracy.unwrap_or(-1.0), (2.0 / 3.0 + 0.5) / 2.0), "task mean");
    assert!(close(r.by_dimension.get("self").expect("self").accuracy, 0.5));
    assert!(close(r.by_level.get("perception").expect("perception").accuracy, 3.0 / 5.0));
    assert!(close(r.by_level.get("memory").expect("memory").accuracy, 0.5));
    assert!(r.by_level.get("reasoning").is_none(), "no reasoning task in this manifest");
    assert!(close(r.overall.accuracy, 4.0 / 7.0));
    assert_eq!((r.overall.n, r.overall.unanswered, r.overall.correct), (7, 2, 4));
    assert!(close(r.overall.macro_accuracy.unwrap_or(-1.0), (2.0 / 3.0 + 0.5 + 0.5) / 3.0));
    assert_eq!(r.overall.random, Some(0.25));
    assert_eq!(r.extraction.get("missing"), Some(&1));
    assert_eq!(r.extraction.get("option_text"), Some(&1));

    // The file contract, read back as plain JSON.
    for name in ["results.json", "scored.jsonl", "by_task.csv", "by_dimension.csv", "by_level.csv", "results.md", "chart.png"] {
        assert!(files.contains(&out.join(name)), "{name} listed");
        assert!(out.join(name).is_file(), "{name} written");
    }
    let raw: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).expect("read")).expect("results.json is JSON");
    for key in ["overall", "by_task", "by_dimension", "by_level"] {
        assert!(raw.get(key).is_some(), "results.json has {key}");
    }
    let oe = &raw["by_task"]["Object Existence"];
    assert!(close(oe["accuracy"].as_f64().unwrap_or(-1.0), 2.0 / 3.0));
    assert_eq!(oe["n"], 3);
    assert_eq!(oe["unanswered"], 0);
    assert_eq!(Results::read_run(&out).expect("reads back"), r);

    let scored = std::fs::read_to_string(out.join("scored.jsonl")).expect("read");
    assert_eq!(scored.lines().count(), 7);
    let lo2: serde_json::Value =
        scored.lines().map(|l| serde_json::from_str(l).expect("json")).find(|v: &serde_json::Value| v["question_id"] == "lo2").expect("lo2");
    assert_eq!(lo2["rule"], "none");
    assert_eq!(lo2["extracted"], serde_json::Value::Null);

    let csv = std::fs::read_to_string(out.join("by_task.csv")).expect("read");
    let mut lines = csv.lines();
    assert!(lines.next().unwrap_or_default().starts_with("name,dimension,level,accuracy,n,correct,unanswered,random"));
    assert_eq!(lines.next(), Some("Object Existence,spatial,perception,0.666667,3,2,0,0.250000,accuracy,"));
    assert!(csv.lines().last().unwrap_or_default().starts_with("overall,,,0.571429,7,4,2,0.250000"));

    let md = std::fs::read_to_string(out.join("results.md")).expect("read");
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    assert_eq!(rows[0], "|  | Spatial |  |  | Self |  |", "dimension header:\n{md}");
    assert!(rows[2].contains("*Perception*") && rows[2].contains("*Memory*"), "level row:\n{md}");
    assert_eq!(rows[3], "| **Model** | **OE** | **LO** | **Avg.** | **ARg** | **Overall** |");
    assert_eq!(rows[4], "| api-model | 66.7 | 50.0 | 58.3 | 50.0 | 57.1 |");
    assert_eq!(rows[5], "| Random | 25.0 | 25.0 | 25.0 | 25.0 | 25.0 |");

    let png = image::open(out.join("chart.png")).expect("chart.png decodes").to_rgb8();
    assert!(png.width() >= 640 && png.height() == 480);
    // The first dimension's colour (spatial bars) is drawn.
    assert!(png.pixels().any(|p| p.0 == [0, 114, 178]), "spatial bars present");
}

#[test]
fn links2bench_mixes_accuracy_mra_and_acc_at_1s() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("links2.jsonl");
    let row = |id: &str, task: &str, answer: serde_json::Value| json!({"question_id": id, "task": task, "question": "Q?", "answer": answer, "video_path": "v.mp4", "satellite_image": "s.png"});
    let mut rd = row("l7", "Relative Direction", json!("C"));
    rd["options"] = json!(["north", "south", "east", "west"]);
    write_lines(
        &manifest,
        &[
            row("l1", "Target Visibility", json!("yes")),
            row("l2", "Target Visibility", json!("no")),
            row("l3", "Zone Counting", json!(10)),
            row("l4", "Zone Counting", json!(0)),
            row("l5", "Temporal Grounding", json!("00:10")),
            row("l6", "Temporal Grounding", json!(10.1)),
            rd,
        ],
    );
    let predictions = dir.path().join("p.jsonl");
    write_lines(
        &predictions,
        &[
            pred("l1", "Yes, the vehicle is visible in both views."),
            pred("l2", "yes"),
            pred("l3", "12"),
            pred("l4", "zero"),
            pred("l5", "11 s"),
            pred("l6", "11.2s"),
            pred("l7", "C"),
        ],
    );
    let (r, _) = score_predictions("links2", &manifest, &predictions, &dir.path().join("out"), Some("m".into()), &no_media()).expect("scores");
    let task = |n: &str| r.by_task.get(n).unwrap_or_else(|| panic!("task {n}"));
    assert!(close(task("Target Visibility").accuracy, 0.5));
    assert_eq!(task("Target Visibility").random, Some(0.5));
    assert!(close(task("Zone Counting").accuracy, (0.6 + 1.0) / 2.0), "MRA 0.6 and the zero case 1.0");
    assert_eq!(task("Zone Counting").metric, "mra");
    assert_eq!(task("Zone Counting").random, None);
    assert!(close(task("Zone Counting").extras["exact"], 0.5));
    assert!(close(task("Temporal Grounding").accuracy, 0.5), "1.0 s late counts, 1.1 s does not");
    assert_eq!(task("Temporal Grounding").metric, "acc@1s");
    assert!(close(task("Relative Direction").accuracy, 1.0));
    assert!(close(r.by_dimension.get("perception").expect("perception").accuracy, (1.0 + 0.0 + 0.6 + 1.0) / 4.0));
    assert!(close(r.overall.accuracy, 4.6 / 7.0));
    assert_eq!(r.overall.random, None, "no baseline for a mix that includes MRA questions");
    assert_eq!(r.overall.metric, "accuracy+mra+acc@1s");
    assert!(r.by_level.is_empty());
}

#[test]
fn dualcog_json_answers_with_intervals() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("dualcog.jsonl");
    let choices = json!([{"option_id": "A", "label": "gradual approach"}, {"option_id": "B", "label": "circular orbit"},
                         {"option_id": "C", "label": "gradual depart"}, {"option_id": "D", "label": "sky rise"}]);
    write_lines(
        &manifest,
        &[
            json!({"sample_id": "d1", "task_name": "self_atomic_instance_recognition", "video_path": "d1.mp4", "fps": 10,
                   "user_prompt": "Which atomic flight behaviors appear?", "choice_options": choices, "multi_select": true,
                   "answer_option_ids": ["A", "C"],
                   "answer_items": [{"option_id": "A", "intervals_sec": [[0.0, 2.0]]}, {"option_id": "C", "intervals_sec": [[4.0, 6.0]]}]}),
            json!({"sample_id": "d2", "task_name": "self_composite_instance_recognition", "video_path": "d2.mp4", "fps": 10,
                   "user_prompt": "Which composite pattern appears?", "choice_options": choices, "answer_option_id": "B",
                   "answer_items": [{"option_id": "B", "intervals_sec": [[1.0, 3.0]]}]}),
            json!({"sample_id": "d3", "task_name": "env_visibility_reasoning", "video_path": "d3.mp4", "fps": 10,
                   "user_prompt": "How many times does the tower appear?",
                   "gold_environment_answer": {"visible_count": 2, "visible_intervals_sec": [[0.0, 9.1], [17.7, 26.8]]}}),
        ],
    );
    let predictions = dir.path().join("p.jsonl");
    write_lines(
        &predictions,
        &[
            pred(
                "d1",
                "```json\n{\"answers\":[{\"option_id\":\"A\",\"intervals_sec\":[[0.0,2.0]]},{\"option_id\":\"C\",\"intervals_sec\":[[4.0,5.0]]}]}\n```",
            ),
            pred("d2", "B"),
            pred("d3", "{'visible_count': 3, 'visible_intervals_sec': [[0.0, 9.1]]}"),
        ],
    );
    let (r, _) = score_predictions("dualcog", &manifest, &predictions, &dir.path().join("out"), None, &no_media()).expect("scores");
    let task = |n: &str| r.by_task.get(n).unwrap_or_else(|| panic!("task {n}"));
    let air = task("self_atomic_instance_recognition");
    assert!(close(air.accuracy, 1.0));
    assert!(close(air.extras["tiou"], (1.0 + 0.5) / 2.0));
    assert!(close(air.extras["f1"], 1.0));
    assert_eq!(air.random, Some(1.0 / 15.0), "a guess among the 15 non-empty subsets of 4 options");
    let cir = task("self_composite_instance_recognition");
    assert!(close(cir.accuracy, 1.0), "a bare letter still scores the choice");
    assert!(close(cir.extras["tiou"], 0.0), "but gives no intervals");
    let evr = task("env_visibility_reasoning");
    assert!(close(evr.accuracy, 0.0), "3 visible spans, truth 2");
    assert!(close(evr.extras["within_1"], 1.0));
    assert!(close(evr.extras["abs_error"], 1.0));
    assert!(close(evr.extras["tiou"], 0.5));
    assert_eq!(r.extraction.get("json"), Some(&2));
}

#[test]
fn compare_prints_per_task_deltas() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (manifest, predictions) = sis_fixture(dir.path());
    let (a, _) = score_predictions("sisbench", &manifest, &predictions, &dir.path().join("a"), Some("base".into()), &no_media()).expect("a");
    let better = dir.path().join("better.jsonl");
    write_lines(
        &better,
        &[pred("oe1", "A"), pred("oe2", "B"), pred("oe3", "C"), pred("lo1", "D"), pred("lo2", "A"), pred("ar1", "B"), pred("ar2", "C")],
    );
    let (b, _) = score_predictions("sisbench", &manifest, &better, &dir.path().join("b"), Some("tuned".into()), &no_media()).expect("b");
    let text = compare(&a, &b);
    let tail = |label: &str| -> Vec<String> {
        let line = text.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("{label} in\n{text}"));
        line.split_whitespace().rev().take(3).map(str::to_string).collect::<Vec<_>>().into_iter().rev().collect()
    };
    assert_eq!(tail("Object Existence"), ["66.7", "100.0", "+33.3"], "{text}");
    assert_eq!(tail("Landmark Order"), ["50.0", "100.0", "+50.0"], "{text}");
    assert_eq!(tail("spatial"), ["60.0", "100.0", "+40.0"], "{text}");
    assert_eq!(tail("overall"), ["57.1", "100.0", "+42.9"], "{text}");
    assert!(text.contains("A: base") && text.contains("B: tuned"));
}

#[test]
fn bad_prediction_lines_and_rows_name_file_and_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (manifest, _) = sis_fixture(dir.path());
    let broken = dir.path().join("broken.jsonl");
    std::fs::write(&broken, "{\"question_id\": \"oe1\", \"prediction\": \"A\"}\n{\"question_id\": \"oe2\"}\n").expect("write");
    let err =
        score_predictions("sisbench", &manifest, &broken, &dir.path().join("o"), None, &no_media()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("broken.jsonl:2") && err.contains("prediction"), "{err}");

    let bad_manifest = dir.path().join("bad.jsonl");
    write_lines(
        &bad_manifest,
        &[
            sis_row("x1", "Object Existence", "A"),
            // An unlisted task is kept (as the official scorer keeps it); options that are no
            // map of letters are not.
            json!({"question_id": "x2", "task_type": "Teleportation", "video_path": "x2.mp4", "question": "Where to?", "options": 7, "answer": "A"}),
        ],
    );
    let ok = dir.path().join("ok.jsonl");
    write_lines(&ok, &[pred("x1", "A")]);
    let err =
        score_predictions("sisbench", &bad_manifest, &ok, &dir.path().join("o2"), None, &no_media()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("bad.jsonl:2") && err.contains("options"), "{err}");
    let skip = ReadOptions { skip_bad: true, ..no_media() };
    let (r, _) = score_predictions("sisbench", &bad_manifest, &ok, &dir.path().join("o3"), None, &skip).expect("skips the bad row");
    assert_eq!((r.questions, r.skipped_rows), (1, 1));
    assert!(close(r.overall.accuracy, 1.0));
}
