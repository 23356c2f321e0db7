//! Training-data and benchmark-manifest readers over the small files in `tests/data/`, each
//! holding good rows and bad rows of every kind the readers must catch.

use std::path::{Path, PathBuf};

use motionvl_data::manifest::{
    Answer, Benchmark, Dimension, DualCogTask, Interval, Level, LinkS2Task, Question, SisTask, Task, UrbanVideoTask, read_dualcog, read_links2bench,
    read_manifest, read_sisbench, read_urbanvideo, unlisted_tasks,
};
use motionvl_data::samples::{ReadError, ReadOptions, RowError, RowProblem, SampleFormat, read_training_samples};
use motionvl_data::text::Role;
use motionvl_util::test_support::write_file;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn skip_bad() -> ReadOptions {
    ReadOptions { skip_bad: true, ..ReadOptions::default() }
}

/// The first bad row in strict mode.
fn first_error(result: Result<impl std::fmt::Debug, ReadError>) -> RowError {
    match result {
        Err(ReadError::Row(e)) => e,
        other => panic!("expected a bad row, got {other:?}"),
    }
}

/// Line on which the element holding `needle` starts (the line before it, in these files).
fn line_of(file: &Path, needle: &str) -> usize {
    let text = std::fs::read_to_string(file).expect("read fixture");
    text.lines().position(|l| l.contains(needle)).expect("needle in fixture")
}

fn skipped(outcome: &[RowError]) -> Vec<(usize, Option<&str>)> {
    outcome.iter().map(|e| (e.line, e.id.as_deref())).collect()
}

#[test]
fn llava_rows_read_with_media_format_and_task() {
    let path = data("llava.json");
    let out = read_training_samples(&path, &skip_bad()).expect("read");
    let ids: Vec<&str> = out.items.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["sis54k-0001", "sis54k-0002", "sis54k-0004"]);

    let first = &out.items[0];
    assert_eq!(first.line, 2);
    assert_eq!(first.format, Some(SampleFormat::Mcq));
    assert_eq!(first.task.as_deref(), Some("Action Recognition"));
    assert_eq!(first.videos, vec![data("media/uav_001.mp4")]);
    assert_eq!(first.messages.len(), 2);
    assert_eq!(first.messages[0].role, Role::User);
    assert!(first.messages[0].content.starts_with("<video>\nWhat is the drone doing?"));
    assert_eq!(first.messages[1].role, Role::Assistant);
    assert_eq!(first.messages[1].content, "A");
    // A frame folder is a video too.
    assert_eq!(out.items[1].videos, vec![data("media/seq_0001")]);
    assert_eq!(out.items[1].format, Some(SampleFormat::OpenQa));
    assert_eq!(out.items[2].videos.len(), 2);

    let problems: Vec<&RowProblem> = out.skipped.iter().map(|e| &e.problem).collect();
    assert_eq!(out.skipped_count(), 4);
    assert!(matches!(problems[0], RowProblem::MissingMedia(p) if p.ends_with("media/missing.mp4")));
    assert!(matches!(problems[1], RowProblem::Conversation(m) if m.contains("2 <video> tag(s) but 1")));
    assert!(matches!(problems[2], RowProblem::UnknownFormat(f) if f == "essay"));
    assert!(matches!(problems[3], RowProblem::UnknownRole(r) if r == "robot"));
    assert_eq!(
        skipped(&out.skipped),
        vec![(13, Some("sis54k-0003")), (15, Some("sis54k-0005")), (16, Some("sis54k-0006")), (17, Some("sis54k-0007"))]
    );
}

#[test]
fn strict_mode_stops_at_the_first_bad_row_naming_file_and_line() {
    let path = data("llava.json");
    let err = first_error(read_training_samples(&path, &ReadOptions::default()));
    assert_eq!(err.line, 13);
    assert_eq!(err.id.as_deref(), Some("sis54k-0003"));
    let text = err.to_string();
    assert!(text.contains("llava.json:13 (sis54k-0003)"), "{text}");
    assert!(text.contains("missing.mp4"), "{text}");
}

#[test]
fn media_checks_can_be_turned_off_and_rooted_elsewhere() {
    let path = data("llava.json");
    let opts = ReadOptions { check_media: false, skip_bad: true, media_root: Some(PathBuf::from("/datasets/sis54k")) };
    let out = read_training_samples(&path, &opts).expect("read");
    assert_eq!(out.items.len(), 4, "the missing-media row is fine without the check");
    assert_eq!(out.items[0].videos, vec![PathBuf::from("/datasets/sis54k/media/uav_001.mp4")]);
}

#[test]
fn llama_factory_jsonl_rows() {
    let path = data("lf.jsonl");
    let out = read_training_samples(&path, &skip_bad()).expect("read");
    let ids: Vec<&str> = out.items.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["lf:1", "lf-dup"]);
    let s = &out.items[0];
    assert_eq!(s.messages[0].role, Role::System);
    assert_eq!(s.messages[0].content, "You are a drone pilot.");
    assert_eq!(s.videos, vec![data("media/uav_002.mp4")]);
    assert_eq!(s.images, vec![data("media/sat_001.png")]);
    assert_eq!(s.format, Some(SampleFormat::Description));
    assert_eq!(s.task.as_deref(), Some("Landmark Recall"));
    assert_eq!(s.location(), format!("{}:1", path.display()));

    assert_eq!(skipped(&out.skipped), vec![(2, Some("lf:2")), (4, Some("lf:4")), (5, None), (7, Some("lf-dup"))]);
    let problems: Vec<&RowProblem> = out.skipped.iter().map(|e| &e.problem).collect();
    assert!(matches!(problems[0], RowProblem::Conversation(m) if m.contains("final assistant answer")));
    assert!(matches!(problems[1], RowProblem::FrameListVideo));
    assert!(matches!(problems[2], RowProblem::Json(_)));
    assert!(matches!(problems[3], RowProblem::DuplicateId(id) if id == "lf-dup"));
}

#[test]
fn sisbench_rows_carry_the_spec_taxonomy() {
    let path = data("sisbench.json");
    let out = read_sisbench(&path, &skip_bad()).expect("read");
    assert_eq!(out.items.len(), 4);
    let q = &out.items[0];
    assert_eq!(q.benchmark, Benchmark::SisBench);
    assert_eq!(q.id, "1");
    assert_eq!(q.task, Task::Sis(SisTask::ObjectExistence));
    assert_eq!((q.dimension(), q.level()), (Dimension::Spatial, Some(Level::Perception)));
    assert_eq!(q.answer, Answer::Choice('B'));
    assert_eq!(q.options.len(), 4);
    assert_eq!(q.options[1].text, "No");
    // `video_name` (uav_001.mp4) is under no folder the official resolver tries; `video_path` is.
    assert_eq!(q.videos, vec![data("media/uav_001.mp4")]);
    assert_eq!(q.clip_count, Some(1));
    assert_eq!(q.options_text(), "A. Yes, on the road\nB. No\nC. Yes, parked\nD. Cannot tell");

    let q = &out.items[1];
    assert_eq!(q.task, Task::Sis(SisTask::LandmarkOrder));
    assert_eq!((q.dimension(), q.level()), (Dimension::Spatial, Some(Level::Memory)));
    // The official scorer compares "D." with one extracted letter: kept, never matched.
    assert_eq!(q.answer, Answer::Verbatim("D.".into()));
    assert_eq!(q.options.iter().map(|o| o.label).collect::<String>(), "ABCD", "options sorted by letter");
    assert_eq!(q.clip_count, Some(3));

    // A task outside the 13 is kept under its own name, as the official scorer keeps it.
    let q = &out.items[2];
    assert_eq!((q.task.name(), q.dimension(), q.level()), ("Object Counting", Dimension::Unlisted, None));
    assert_eq!(unlisted_tasks(&out.items).into_iter().collect::<Vec<_>>(), vec![("Object Counting", 1)]);
    // A letter no option has is kept: the official scorer never refuses an answer.
    assert_eq!(out.items[3].answer, Answer::Choice('E'));

    let problems: Vec<&RowProblem> = out.skipped.iter().map(|e| &e.problem).collect();
    assert!(matches!(problems[0], RowProblem::MissingMedia(_)));
    assert!(matches!(problems[1], RowProblem::DuplicateId(id) if id == "1"));
    assert_eq!(out.skipped.iter().map(|e| e.line).collect::<Vec<_>>(), vec![10, 12]);

    let err = first_error(read_sisbench(&path, &ReadOptions::default()));
    assert_eq!((err.line, err.id.as_deref()), (10, Some("5")));
    assert!(err.to_string().contains("gone.mp4"), "{err}");
}

#[test]
fn urbanvideo_options_come_out_of_the_question_text() {
    let path = data("urbanvideo/MCQ.jsonl");
    let out = read_urbanvideo(&path, &skip_bad()).expect("read");
    assert_eq!(out.items.len(), 3);
    let q = &out.items[0];
    assert_eq!(q.task, Task::UrbanVideo(UrbanVideoTask::LandmarkPosition));
    assert_eq!(q.dimension(), Dimension::Perception);
    assert_eq!(q.level(), None);
    assert_eq!(q.question, "You are navigating to the rooftop. Where is the destination?");
    assert_eq!(q.options.len(), 5);
    assert_eq!(q.options[0].text, "By the edge of the rooftop.");
    assert_eq!(q.answer, Answer::Choice('A'));
    // Media default to the dataset's videos/ folder.
    assert_eq!(q.videos, vec![data("urbanvideo/videos/AerialVLN_1.mp4")]);

    let q = &out.items[1];
    assert_eq!(q.task, Task::UrbanVideo(UrbanVideoTask::ActionGeneration));
    assert_eq!(q.dimension(), Dimension::Navigation);
    assert_eq!(q.options.iter().map(|o| o.label).collect::<String>(), "ABCDEFG");
    assert_eq!(q.options[6].text, "stop");
    assert_eq!(q.answer, Answer::Choice('G'));

    // A category outside the paper's 16 is kept under its own name.
    let q = &out.items[2];
    assert_eq!((q.task.name(), q.dimension()), ("Weather", Dimension::Unlisted));

    let problems: Vec<&RowProblem> = out.skipped.iter().map(|e| &e.problem).collect();
    assert!(matches!(problems[0], RowProblem::AnswerNotInOptions { answer, options } if answer == "F" && options == "A/B/C"));
    assert!(matches!(problems[1], RowProblem::NoOptions(_)));
    assert!(matches!(problems[2], RowProblem::MissingMedia(p) if p.ends_with("videos/Missing_9.mp4")));
    assert_eq!(skipped(&out.skipped), vec![(4, Some("4")), (5, Some("5")), (6, Some("6"))]);
}

#[test]
fn dualcog_choice_and_visibility_rows() {
    let path = data("dualcog.json");
    let out = read_dualcog(&path, &skip_bad()).expect("read");
    assert_eq!(out.items.len(), 4);

    let joint = &out.items[0];
    assert_eq!(joint.task, Task::DualCog(DualCogTask::JointBehaviorRecognition));
    assert_eq!(joint.dimension(), Dimension::SelfState);
    assert_eq!(joint.answer, Answer::Choices(vec!['A', 'C']));
    assert_eq!(joint.options.len(), 3);
    assert_eq!(joint.options[2].text, "Sky Rise");
    assert_eq!(joint.fps, Some(10.0));
    assert_eq!(joint.intervals, vec![Interval { start: 0.0, end: 4.0 }, Interval { start: 8.0, end: 12.0 }]);
    assert_eq!(joint.line, line_of(&path, "\"dc-joint-1\""));
    assert!(joint.question.starts_with("Which behaviours"));

    let set = &out.items[1];
    assert_eq!(set.answer, Answer::Choice('B'));
    assert_eq!(set.question, "Which composite inspection is this?");

    let env = &out.items[2];
    assert_eq!(env.task, Task::DualCog(DualCogTask::EnvVisibilityReasoning));
    assert_eq!(env.dimension(), Dimension::Environment);
    assert_eq!(env.answer, Answer::Number(37.0));
    assert!(env.options.is_empty());
    assert_eq!(env.intervals, vec![Interval { start: 1.0, end: 2.5 }, Interval { start: 6.0, end: 8.0 }]);

    // Multi-landmark visibility: the total over the targets.
    let multi = &out.items[3];
    assert_eq!((multi.id.as_str(), &multi.answer), ("dc-env-2", &Answer::Number(3.0)));

    let lines: Vec<usize> = out.skipped.iter().map(|e| e.line).collect();
    assert_eq!(lines, vec![line_of(&path, "\"dc-bad-task\""), line_of(&path, "\"dc-bad-answer\"")]);
    let problems: Vec<&RowProblem> = out.skipped.iter().map(|e| &e.problem).collect();
    assert!(matches!(problems[0], RowProblem::UnknownTask { task, .. } if task == "self_teleport"));
    assert!(matches!(problems[1], RowProblem::AnswerNotInOptions { answer, .. } if answer == "H"));
}

#[test]
fn links2bench_answers_by_task_kind() {
    let path = data("links2bench.jsonl");
    let out = read_links2bench(&path, &skip_bad()).expect("read");
    let answers: Vec<(&str, Task, &Answer)> = out.items.iter().map(|q| (q.id.as_str(), q.task, &q.answer)).collect();
    assert_eq!(
        answers,
        vec![
            ("l1", Task::LinkS2(LinkS2Task::TargetVisibility), &Answer::YesNo(true)),
            ("l2", Task::LinkS2(LinkS2Task::ZoneCounting), &Answer::Number(7.0)),
            ("l3", Task::LinkS2(LinkS2Task::TemporalGrounding), &Answer::Timestamp(12.5)),
            ("l4", Task::LinkS2(LinkS2Task::SceneAssociation), &Answer::Choice('B')),
        ]
    );
    assert_eq!(out.items[0].images, vec![data("media/sat_001.png")]);
    assert_eq!(out.items[0].videos, vec![data("media/uav_001.mp4")]);
    assert!(out.items[2].images.is_empty());
    assert_eq!(out.items[3].options[2].text, "stadium");
    assert_eq!(out.items[1].dimension(), Dimension::Perception);
    assert_eq!(out.items[2].dimension(), Dimension::Localization);

    assert_eq!(skipped(&out.skipped), vec![(5, Some("l5")), (6, Some("l6")), (7, Some("l7")), (8, Some("l8"))]);
    let problems: Vec<&RowProblem> = out.skipped.iter().map(|e| &e.problem).collect();
    assert!(matches!(problems[0], RowProblem::BadAnswer { expected: "yes or no", .. }));
    assert!(matches!(problems[1], RowProblem::UnknownTask { .. }));
    assert!(matches!(problems[2], RowProblem::BadAnswer { expected: "a timestamp", .. }));
    assert!(matches!(problems[3], RowProblem::MissingField("video_path")));
}

#[test]
fn read_manifest_dispatches_and_file_errors_are_typed() {
    let out = read_manifest("sis-bench".parse().expect("name"), &data("sisbench.json"), &skip_bad()).expect("read");
    assert_eq!(out.items.len(), 4);
    assert!("nope".parse::<Benchmark>().is_err());
    for b in Benchmark::ALL {
        assert_eq!(b.name().parse::<Benchmark>(), Ok(b));
    }
    assert!(matches!(read_sisbench(&data("no-such-file.json"), &ReadOptions::default()), Err(ReadError::Io { .. })));
    let dir = std::env::temp_dir().join(format!("motionvl-readers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let broken = dir.join("broken.json");
    std::fs::write(&broken, "[\n {\"question_id\": 1},\n {\"question_id\": 2}\n {\"question_id\": 3}\n]").expect("write");
    match read_sisbench(&broken, &skip_bad()) {
        Err(ReadError::Syntax { line, .. }) => assert_eq!(line, 4),
        other => panic!("expected a syntax error, got {other:?}"),
    }
    let wrapper = dir.join("wrapper.json");
    std::fs::write(&wrapper, "{\"meta\": 1}").expect("write");
    assert!(matches!(read_sisbench(&wrapper, &skip_bad()), Ok(o) if o.items.is_empty() && o.skipped.len() == 1));
    std::fs::remove_dir_all(&dir).ok();
}

/// A training file of `rows` in `dir`, as a JSON array (pretty, one key a line) or JSON lines.
fn write_rows(dir: &Path, name: &str, rows: &[serde_json::Value], array: bool) -> PathBuf {
    let text = if array { serde_json::to_string_pretty(rows).expect("json") } else { rows.iter().map(|r| r.to_string() + "\n").collect() };
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write rows");
    path
}

fn image_row(id: &str, image: &str) -> serde_json::Value {
    serde_json::json!({"id": id, "image": image, "conversations": [{"from": "human", "value": "<image>What?"}, {"from": "gpt", "value": "A road."}]})
}

#[test]
fn an_empty_or_undecodable_image_names_its_file_and_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    image::RgbImage::new(8, 8).save(dir.path().join("good.png")).expect("png");
    std::fs::write(dir.path().join("empty.png"), b"").expect("empty");
    std::fs::write(dir.path().join("text.jpg"), b"not a jpeg").expect("text");
    for (bad, line) in [("empty.png", 2), ("text.jpg", 2)] {
        let rows = [image_row("ok", "good.png"), image_row("bad", bad)];
        let path = write_rows(dir.path(), "train.jsonl", &rows, false);
        let err = first_error(read_training_samples(&path, &ReadOptions::default()));
        assert_eq!((err.line, err.id.as_deref()), (line, Some("bad")), "{err}");
        assert!(matches!(&err.problem, RowProblem::UnreadableImage { path, .. } if path.ends_with(bad)), "{err}");
        assert!(err.to_string().contains(bad), "{err}");
    }
}

#[test]
fn a_json_syntax_error_points_at_its_line_and_column_in_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    image::RgbImage::new(8, 8).save(dir.path().join("good.png")).expect("png");
    let rows = [image_row("a", "good.png"), image_row("b", "good.png"), image_row("c", "good.png")];
    // Pretty JSON: drop the comma after row "b"'s `"from": "gpt"`; serde sees the fault on the
    // next line, which the message must name as a line of the file, not of the row.
    let path = write_rows(dir.path(), "train.json", &rows, true);
    let text = std::fs::read_to_string(&path).expect("read");
    let at = text.match_indices("\"from\": \"gpt\",").nth(1).expect("second answer").0 + "\"from\": \"gpt\"".len();
    let broken = format!("{}{}", &text[..at], &text[at + 1..]);
    std::fs::write(&path, &broken).expect("break");
    let fault_line = broken[..at].lines().count() + 1;
    let err = first_error(read_training_samples(&path, &ReadOptions::default()));
    let lines: Vec<&str> = broken.lines().collect();
    let row_line = lines[..fault_line].iter().rposition(|l| *l == "  {").expect("the row's opening brace") + 1;
    assert_eq!(err.line, row_line, "the row's first line: {err}");
    assert!(err.to_string().contains(&format!("at line {fault_line} column ")), "{err}");

    // JSON lines: the column is the row's own, on the row's line.
    let path = write_rows(dir.path(), "train.jsonl", &rows, false);
    let text = std::fs::read_to_string(&path).expect("read").replacen("\"from\":\"gpt\",", "\"from\":\"gpt\"", 2);
    std::fs::write(&path, &text).expect("break");
    let err = first_error(read_training_samples(&path, &ReadOptions::default()));
    assert_eq!(err.line, 1, "{err}");
    assert!(err.to_string().contains("at line 1 column "), "{err}");
}

#[test]
fn sisbench_rows_with_inline_options_parse() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let rows = concat!(
        r#"{"question_id": "q1", "video_path": "a.mp4", "task_type": "Action Recognition", "question": "How does the drone move?\nA. ascend\nB. descend\nC. turn left\nD. hover", "answer": "C"}"#,
        "\n",
        r#"{"question_id": "q2", "video_path": "a.mp4", "task_type": "Landmark Order", "question": "Which comes first? (A) the church (B) the bridge", "answer": "B"}"#,
        "\n",
        r#"{"question_id": "q3", "video_path": "a.mp4", "task_type": "Landmark Order", "question": "Which comes first?", "answer": "B"}"#,
        "\n",
    );
    let path = write_file(dir.path(), "sis.jsonl", rows);
    let out = read_sisbench(&path, &ReadOptions { skip_bad: true, ..ReadOptions::rows_only() }).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.items.len(), 2);
    let q = &out.items[0];
    assert_eq!(q.question, "How does the drone move?");
    assert_eq!(q.options.iter().map(|o| o.text.as_str()).collect::<Vec<_>>(), ["ascend", "descend", "turn left", "hover"]);
    assert_eq!((q.task, &q.answer), (Task::Sis(SisTask::ActionRecognition), &Answer::Choice('C')));
    assert_eq!(out.items[1].options.len(), 2);
    assert_eq!(out.skipped.len(), 1);
    assert!(matches!(&out.skipped[0].problem, RowProblem::NoOptions(_)), "{:?}", out.skipped[0]);
    assert_eq!(out.skipped[0].line, 3);
}

#[test]
fn urbanvideo_mcq_parquet_reads_like_its_json_rows() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/urbanvideo");
    let opts = ReadOptions { skip_bad: true, ..ReadOptions::default() };
    let from_json = read_urbanvideo(&dir.join("MCQ.jsonl"), &opts).unwrap_or_else(|e| panic!("{e}"));
    let parquet = dir.join("MCQ.parquet");
    let from_parquet = read_urbanvideo(&parquet, &opts).unwrap_or_else(|e| panic!("{e}"));
    assert!(!from_parquet.items.is_empty());
    let without_file = |qs: &[Question]| qs.iter().map(|q| Question { file: PathBuf::new(), ..q.clone() }).collect::<Vec<_>>();
    assert_eq!(without_file(&from_parquet.items), without_file(&from_json.items));
    let problems = |o: &[motionvl_data::samples::RowError]| o.iter().map(|e| (e.line, e.problem.clone())).collect::<Vec<_>>();
    assert_eq!(problems(&from_parquet.skipped), problems(&from_json.skipped), "bad rows named by row number");
    assert!(from_parquet.skipped.iter().all(|e| e.file == parquet));

    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let broken = write_file(tmp.path(), "MCQ.parquet", "PAR1 not really");
    let err = read_urbanvideo(&broken, &opts).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("MCQ.parquet") && err.contains("Parquet"), "{err}");
}
