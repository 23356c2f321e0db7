//! The released benchmark files as the authors publish them: `SIS-Bench/SIS-Bench.jsonl` beside
//! `SIS-Bench/video/`, `OpenUAV-QA/TravelUAV_test.jsonl` beside `OpenUAV-QA/TravelUAV_dataset/`,
//! read with no flag, their media found the official resolver's way, left out by its min-frames
//! filter, and sampled by its frame plan (real clips and frame folders the test writes).

use std::path::{Path, PathBuf};

use motionvl_data::frames::{FramePolicy, official_indices};
use motionvl_data::loader::QwenMedia;
use motionvl_data::manifest::{
    Answer, Benchmark, Dimension, LeftOut, SisTask, Task, UnlistedTask, default_media_dir, official_left_out, read_sisbench, unlisted_tasks,
};
use motionvl_data::samples::{ReadOptions, RowProblem};
use motionvl_data::video::DecodeOptions;
use serde_json::json;

mod common;
use common::{codes, mpeg4, write_clip, write_png_sequence};

fn write_jsonl(path: &Path, rows: &[serde_json::Value]) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).expect("write manifest");
}

fn mkdir(path: &Path) -> &Path {
    std::fs::create_dir_all(path).expect("mkdir");
    path
}

fn row(id_key: &str, id: &str, video_name: &str, task: &str, answer: &str) -> serde_json::Value {
    json!({id_key: id, "video_name": video_name, "question": "Where does the drone go?",
           "options": {"B": "left", "A": "forward", "D": "down", "C": "up"}, "answer": answer, "task_type": task})
}

/// Unpadded frame names whose lexicographic order (frame_1, frame_10, frame_11, frame_12,
/// frame_2, …) is not their numeric one; frame `frame_{k}` carries code k − 1.
fn frame_names(n: usize) -> Vec<String> {
    (1..=n).map(|k| format!("frame_{k}.png")).collect()
}

#[test]
fn sis_bench_reads_as_released_with_no_flag() {
    let tmp = tempfile::tempdir().expect("tmp");
    let bench = tmp.path().join("SIS-Bench");
    let video = bench.join("video");
    write_clip(&mkdir(&video.join("AirScape")).join("long.mp4"), 40, &mpeg4((10, 1), 10));
    write_clip(&mkdir(&video.join("UrbanVideo")).join("noext.mp4"), 12, &mpeg4((10, 1), 10));
    write_clip(&video.join("UrbanVideo").join("short.mp4"), 5, &mpeg4((10, 1), 10));
    write_png_sequence(mkdir(&video.join("VisDrone").join("seq")), &frame_names(12));

    let mut legacy = row("question_id", "q4", "VisDrone/seq.mp4", "Path Planning", "D");
    legacy["video_path"] = json!("UAVideo/VisDrone/seq.mp4");
    let mut with_split = row("id", "q2", "UrbanVideo/noext", "landmark_appearance_order", "c");
    with_split["split"] = json!("memory");
    let rows = [
        row("question_id", "q1", "AirScape/long.mp4", "action_recognition", "A"),
        with_split,
        row("question_id", "q3", "video/AirScape/long.mp4", "Altitude Trend", "B."),
        legacy,
        row("question_id", "q5", "UrbanVideo/short.mp4", "spatio-temporal_consistency", "b"),
        row("question_id", "q6", "AirScape/not_there.mp4", "object_existence", "A"),
    ];
    let manifest = bench.join("SIS-Bench.jsonl");
    write_jsonl(&manifest, &rows);
    assert_eq!(default_media_dir(&manifest), video);

    let out = read_sisbench(&manifest, &ReadOptions { skip_bad: true, ..ReadOptions::default() }).expect("read");
    let got: Vec<(&str, PathBuf, Task, &Answer, Option<&str>)> =
        out.items.iter().map(|q| (q.id.as_str(), q.videos[0].clone(), q.task, &q.answer, q.split.as_deref())).collect();
    let unlisted = Task::Unlisted(UnlistedTask::new(Benchmark::SisBench, "Altitude Trend"));
    assert_eq!(
        got,
        vec![
            ("q1", video.join("AirScape/long.mp4"), Task::Sis(SisTask::ActionRecognition), &Answer::Choice('A'), None),
            // No suffix: the official resolver adds `.mp4`.
            ("q2", video.join("UrbanVideo/noext.mp4"), Task::Sis(SisTask::LandmarkOrder), &Answer::Choice('C'), Some("memory")),
            // A leading `video/` (the media folder's own name) is dropped.
            ("q3", video.join("AirScape/long.mp4"), unlisted, &Answer::Verbatim("B.".into()), None),
            // `seq.mp4` is the frame folder `seq/`; the legacy `UAVideo/` video_path is never needed.
            ("q4", video.join("VisDrone/seq"), Task::Sis(SisTask::PathPlanning), &Answer::Choice('D'), None),
            ("q5", video.join("UrbanVideo/short.mp4"), Task::Sis(SisTask::SpatioTemporalConsistency), &Answer::Choice('B'), None),
        ]
    );
    assert_eq!(out.items[2].dimension(), Dimension::Unlisted);
    assert_eq!(unlisted_tasks(&out.items).into_iter().collect::<Vec<_>>(), vec![("Altitude Trend", 1)]);
    assert_eq!(out.skipped.len(), 1);
    assert!(matches!(&out.skipped[0].problem, RowProblem::MissingMedia(p) if p.ends_with("AirScape/not_there.mp4")));
    assert_eq!((out.skipped[0].line, out.skipped[0].id.as_deref()), (6, Some("q6")));

    // The min-frames filter: the 5-frame clip goes, 12 and 40 frames and the folder stay.
    let left_out: Vec<Option<LeftOut>> = out.items.iter().map(|q| official_left_out(&q.videos[0], 8).expect("count frames")).collect();
    assert_eq!(left_out, vec![None, None, None, None, Some(LeftOut::TooFewFrames { frames: 5, min_frames: 8 })]);

    // The official plan: np.linspace(0, 39, 32, dtype=int) of the 40-frame clip; every frame of
    // the folder, in `sorted()` name order.
    let media = QwenMedia { video_policy: FramePolicy::Official { max_frames: 32 }, ..QwenMedia::default() };
    let load = |path: &Path| media.source(path).load(&media.video_policy, &DecodeOptions::default()).expect("load");
    let (plan, frames) = load(&out.items[0].videos[0]);
    assert_eq!(plan.indices, official_indices(40, 32));
    assert_eq!(codes(&frames.frames), official_indices(40, 32));
    let (plan, frames) = load(&out.items[3].videos[0]);
    assert_eq!(plan.indices, (0..12).collect::<Vec<_>>());
    assert_eq!(codes(&frames.frames), vec![0, 9, 10, 11, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert!((plan.second_per_grid(2) - 1.0).abs() < 1e-12);
}

#[test]
fn openuav_qa_reads_as_released_with_no_flag() {
    let tmp = tempfile::tempdir().expect("tmp");
    let root = tmp.path().join("OpenUAV-QA");
    let dataset = root.join("TravelUAV_dataset");
    write_png_sequence(mkdir(&dataset.join("ep_3")), &frame_names(10));
    write_png_sequence(mkdir(&dataset.join("ep_4")), &frame_names(3));
    let manifest = root.join("TravelUAV_test.jsonl");
    let mut second = row("question_id", "t2", "ep_4", "route_reasoning", "A");
    second["split"] = json!("");
    write_jsonl(&manifest, &[row("question_id", "t1", "TravelUAV_dataset/ep_3", "landmark_reasoning", "a"), second]);

    let out = read_sisbench(&manifest, &ReadOptions::default()).expect("read");
    // `TravelUAV_dataset/ep_3` under the media folder TravelUAV_dataset: the leading component
    // equal to its name is dropped.
    let media: Vec<&Path> = out.items.iter().map(|q| q.videos[0].as_path()).collect();
    assert_eq!(media, vec![dataset.join("ep_3").as_path(), dataset.join("ep_4").as_path()]);
    assert_eq!(out.items[1].split, None, "an empty split is no split");
    assert_eq!(unlisted_tasks(&out.items).into_iter().collect::<Vec<_>>(), vec![("landmark_reasoning", 1), ("route_reasoning", 1)]);
    assert_eq!(official_left_out(media[0], 8).expect("count"), None);
    assert_eq!(official_left_out(media[1], 8).expect("count"), Some(LeftOut::TooFewFrames { frames: 3, min_frames: 8 }));

    // An explicit media root replaces the default.
    let out = read_sisbench(&manifest, &ReadOptions { media_root: Some(root.clone()), ..ReadOptions::default() }).expect("read");
    assert_eq!(out.items[0].videos, vec![dataset.join("ep_3")], "found under root/TravelUAV_dataset/");
}
