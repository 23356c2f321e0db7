//! The construction modules' files, read back: annotations in, manifests out, and the readers
//! of the real files (SIS-Bench rows with inline options).

use std::path::Path;

use motionvl_data::construct::sisbench_qa::read_annotations;
use motionvl_data::manifest::{Answer, SisTask, Task, read_sisbench};
use motionvl_data::samples::{ReadError, ReadOptions, RowProblem};

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    p
}

fn no_media() -> ReadOptions {
    ReadOptions { check_media: false, ..ReadOptions::default() }
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
    let path = write(dir.path(), "sis.jsonl", rows);
    let out = read_sisbench(&path, &ReadOptions { skip_bad: true, ..no_media() }).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.items.len(), 2);
    let q = &out.items[0];
    assert_eq!(q.question, "How does the drone move?");
    assert_eq!(
        q.options.iter().map(|o| o.text.as_str()).collect::<Vec<_>>(),
        ["ascend", "descend", "turn left", "hover"]
    );
    assert_eq!((q.task, &q.answer), (Task::Sis(SisTask::ActionRecognition), &Answer::Choice('C')));
    assert_eq!(out.items[1].options.len(), 2);
    assert_eq!(out.skipped.len(), 1);
    assert!(matches!(&out.skipped[0].problem, RowProblem::NoOptions(_)), "{:?}", out.skipped[0]);
    assert_eq!(out.skipped[0].line, 3);
}

#[test]
fn bad_annotations_name_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let good = r#"{"video": "a.mp4", "duration_s": 4, "actions": [{"action": "ascend", "start_s": 0, "end_s": 4}]}"#;
    let cases = [
        (r#"{"video": "b.mp4"}"#, "missing field `duration_s`"),
        (r#"{"video": "b.mp4", "duration_s": 3, "video_type": "sideways"}"#, "unknown variant `sideways`"),
        (
            r#"{"video": "b.mp4", "duration_s": 3, "objects": [{"category": "car", "positions": [{"t": 0, "x": 1.5, "y": 0}]}]}"#,
            "objects[0].positions",
        ),
        (r#"{"video": "b.mp4", "duration_s": 3, "video_type": "concatenated", "clips": []}"#, "needs `clips`"),
        (
            r#"{"video": "b.mp4", "duration_s": 8, "video_type": "shuffled_spatial", "segments": [[0, 4], [4, 8]], "permutation": [0, 1, 1]}"#,
            "permutation",
        ),
    ];
    for (row, expected) in cases {
        let path = write(dir.path(), "ann.jsonl", &format!("{good}\n{row}\n"));
        let err = read_annotations(&path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("ann.jsonl") && err.contains("line 2") && err.contains(expected), "{row}: {err}");
    }
    let path = write(dir.path(), "ann.jsonl", good);
    assert_eq!(read_annotations(&path).map(|v| v.len()).unwrap_or_default(), 1);
    assert!(matches!(read_sisbench(&dir.path().join("none.json"), &no_media()), Err(ReadError::Io { .. })));
}
