//! The construction modules' files, read back: annotations in, manifests out.

use std::path::Path;

use motionvl_construct::sisbench_qa::{AnnotatedType, build_questions, read_annotations};
use motionvl_construct::sisbench_videos::{VideosConfig, build_videos, find_sources, overlap_s, plan_videos};
use motionvl_construct::synth::{GroundTruth, Split, SynthConfig, generate};
use motionvl_data::manifest::{Level, SisTask, Task, read_sisbench};
use motionvl_data::samples::{ReadError, ReadOptions};
use motionvl_data::video::{EncodeSettings, VideoWriter, probe_video};
use motionvl_util::test_support::write_file;

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
        let path = write_file(dir.path(), "ann.jsonl", &format!("{good}\n{row}\n"));
        let err = read_annotations(&path).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("ann.jsonl") && err.contains("line 2") && err.contains(expected), "{row}: {err}");
    }
    let path = write_file(dir.path(), "ann.jsonl", good);
    assert_eq!(read_annotations(&path).map(|v| v.len()).unwrap_or_default(), 1);
    let path = write_file(dir.path(), "ann.json", &format!("{{\"samples\": [{good}, {good}]}}"));
    assert_eq!(read_annotations(&path).map(|v| v.len()).unwrap_or_default(), 2, "rows under `samples`");
    assert!(matches!(read_sisbench(&dir.path().join("none.json"), &ReadOptions::rows_only()), Err(ReadError::Io { .. })));
}

/// A frame folder of `n` small frames whose colour changes with the frame number.
fn frame_folder(dir: &Path, name: &str, n: usize) {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..n {
        let v = (i * 255 / n.max(1)) as u8;
        let img = image::RgbImage::from_fn(33, 24, |x, _| image::Rgb([v, (x * 7) as u8, 255 - v]));
        img.save(folder.join(format!("{:07}.png", i + 1))).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn sisbench_videos_make_every_type_record_their_pieces_and_resume() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let src = dir.path().join("src");
    for (i, n) in [20, 30, 40, 60, 50].iter().enumerate() {
        frame_folder(&src, &format!("seq{i}"), *n);
    }
    // One long source, a video file: 32 s at 10 fps.
    let settings = EncodeSettings { frame_rate: (10, 1), ..EncodeSettings::default() };
    let mut writer = VideoWriter::create(&src.join("long.mp4"), 32, 24, &settings).unwrap_or_else(|e| panic!("{e}"));
    for i in 0..320 {
        let frame = ndarray::Array3::from_elem((24, 32, 3), (i % 250) as u8);
        writer.push(frame.view()).unwrap_or_else(|e| panic!("{e}"));
    }
    writer.finish().unwrap_or_else(|e| panic!("{e}"));

    let config = VideosConfig { frame_folder_fps: 10.0, concatenated: 6, shuffled: 4, seed: 4, ..VideosConfig::default() };
    let sources = find_sources(&src, config.frame_folder_fps).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sources.len(), 6);
    let jobs = plan_videos(&sources, &config).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(jobs, plan_videos(&sources, &config).unwrap_or_else(|e| panic!("{e}")), "planned from the seed");
    let out = dir.path().join("out");
    let summary = build_videos(&sources, &jobs, &config, &out, &|| ()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((summary.encoded, summary.kept), (jobs.len(), 0));

    let rows = read_annotations(&summary.index).unwrap_or_else(|e| panic!("{e}"));
    let of = |t: AnnotatedType| rows.iter().filter(|r| r.video_type == t).collect::<Vec<_>>();
    assert_eq!(of(AnnotatedType::Single).len(), 5);
    assert_eq!(of(AnnotatedType::Long).len(), 1);
    let mut counts: Vec<usize> = of(AnnotatedType::Concatenated).iter().map(|r| r.clips.len()).collect();
    counts.sort();
    assert_eq!(counts, [2, 2, 3, 3, 4, 4], "2, 3 and 4 clips equally often");
    for r in of(AnnotatedType::Concatenated) {
        let mut names: Vec<&str> = r.clips.iter().map(|c| c.source.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), r.clips.len(), "distinct clips");
        assert!(r.clips.windows(2).all(|w| w[0].end_s == w[1].start_s), "boundaries recorded back to back");
    }
    for r in of(AnnotatedType::ShuffledSpatial).into_iter().chain(of(AnnotatedType::ShuffledSpatiotemporal)) {
        assert_eq!((r.segments.len(), r.permutation.len()), (4, 4));
        assert_ne!(r.permutation, [0, 1, 2, 3]);
        let source_s = sources.iter().find(|s| s.name == r.clips[0].source).map(|s| s.duration_s()).unwrap_or(0.0);
        let mut original = vec![[0.0; 2]; 4];
        for (seg, &k) in r.segments.iter().zip(&r.permutation) {
            original[k] = *seg;
        }
        assert_eq!((original[0][0], original[3][1]), (0.0, source_s), "{}", r.video);
        let gap = if r.video_type == AnnotatedType::ShuffledSpatial { 0.0 } else { overlap_s(source_s) };
        for w in original.windows(2) {
            assert!((w[0][1] - w[1][0] - gap).abs() < 1e-9, "{}: {original:?}", r.video);
        }
    }
    for (job, row) in jobs.iter().zip(&rows) {
        let info = probe_video(&out.join(&row.video)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((info.width, info.height), (32, 24), "{}: odd width cropped to even", row.video);
        assert_eq!(info.frame_count, job.frame_count(15), "{}", row.video);
        assert!((info.fps - 15.0).abs() < 1e-6);
    }
    // The shuffled rows are answerable: sisbench-qa asks both consistency tasks of them.
    let questions = build_questions(&rows, "v", 1);
    for task in [SisTask::SpatialConsistency, SisTask::SpatioTemporalConsistency] {
        assert_eq!(questions.iter().filter(|q| q.task == task).count(), 4, "{}", task.name());
    }

    // Resumed: everything verifies and is kept; a removed video is made again.
    let again = build_videos(&sources, &jobs, &config, &out, &|| ()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((again.encoded, again.kept), (0, jobs.len()));
    std::fs::remove_file(out.join(&rows[0].video)).unwrap_or_else(|e| panic!("{e}"));
    let third = build_videos(&sources, &jobs, &config, &out, &|| ()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((third.encoded, third.kept), (1, jobs.len() - 1));
}

#[test]
fn synth_asks_all_13_tasks_from_its_annotations() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
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
        training_answers: motionvl_construct::synth::write::AnswerForm::Letter,
    };
    let summary = generate(&config, dir.path(), false).unwrap_or_else(|e| panic!("{e}"));
    let mut asked = std::collections::BTreeMap::new();
    for split in [Split::Train, Split::Test] {
        let out = read_sisbench(&summary.manifest(split), &ReadOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        assert!(out.skipped.is_empty(), "{:?}", out.skipped);
        for q in &out.items {
            *asked.entry(q.task.name()).or_insert(0) += 1;
            let Task::Sis(task) = q.task else { panic!("{} is not a SIS-Bench task", q.id) };
            assert!(split == Split::Test || task.level() != Level::Reasoning, "{}: reasoning in training", q.id);
        }
        let annotations = dir.path().join(split.name()).join("annotations.jsonl");
        let videos = read_annotations(&annotations).unwrap_or_else(|e| panic!("{e}"));
        for v in &videos {
            assert!(dir.path().join(split.name()).join(&v.video).is_file(), "{} is written", v.video);
        }
        let shuffled = videos.iter().any(|v| v.video_type == AnnotatedType::ShuffledSpatiotemporal);
        assert_eq!(shuffled, split == Split::Test, "shuffled cuts are held out only");
    }
    let missing: Vec<&str> = SisTask::ALL.iter().map(|t| t.name()).filter(|n| !asked.contains_key(n)).collect();
    assert!(missing.is_empty(), "not asked: {missing:?}; asked {asked:?}");
}
