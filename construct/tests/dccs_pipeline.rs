//! UAV-DualCog construction end to end on the synthetic world: Stage 3 missions and rows,
//! Stage 4 rows, render requests and their media, and the `dualcog` reader over every row.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use motionvl_construct::dccs::pipeline::{SynthDccsConfig, SynthDccsSummary, synthetic};
use motionvl_construct::dccs::world::Sampling;
use serde_json::Value;

fn tiny() -> SynthDccsConfig {
    SynthDccsConfig {
        seed: 11,
        landmarks: 2,
        extent: 60.0,
        video_size: (96, 72),
        image_size: (96, 72),
        sampling: Sampling { surface_m: 0.75, ground_m: 3.0, ground_margin_m: 120.0 },
        binary_ply: true,
    }
}

/// One synthetic set shared by the tests of this file.
fn built() -> &'static (tempfile::TempDir, SynthDccsSummary) {
    static SET: OnceLock<(tempfile::TempDir, SynthDccsSummary)> = OnceLock::new();
    SET.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let summary = synthetic(dir.path(), &tiny(), &()).unwrap();
        (dir, summary)
    })
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn samples(dir: &Path, name: &str) -> Vec<Value> {
    json(&dir.join(name))["samples"].as_array().unwrap().clone()
}

#[test]
fn synth_dccs_writes_every_file() {
    let (_, s) = built();
    for f in ["valid_instances.json", "points.ply", "stage3.json", "stage4.json", "stage3_render_requests.json", "stage4_render_requests.json"] {
        assert!(s.dir.join(f).is_file(), "{f}");
    }
    assert_eq!(s.stage4.rows, s.landmarks * 2 * 4, "Stage 4: landmarks × 2 difficulties × 4 families");
    let rows = samples(&s.dir, "stage3.json");
    for r in &rows {
        let video: PathBuf = s.dir.join(r["video_path"].as_str().unwrap());
        assert!(video.is_file(), "{}", video.display());
    }
}

#[test]
fn the_dualcog_reader_reads_every_row() {
    use motionvl_data::manifest::{Answer, Task, read_dualcog};
    use motionvl_data::samples::ReadOptions;
    let (_, s) = built();
    for (file, expected) in [("stage3.json", s.stage3.rows), ("stage4.json", s.stage4.rows)] {
        let out = read_dualcog(&s.dir.join(file), &ReadOptions::default()).unwrap();
        assert!(out.skipped.is_empty(), "{file}: {:?}", out.skipped);
        assert_eq!(out.items.len(), expected, "{file}");
        assert!(expected > 0);
        for q in &out.items {
            let Task::DualCog(task) = q.task else { panic!("{}", q.id) };
            if task.is_image_task() {
                assert!(q.videos.is_empty() && q.images.len() >= 2, "{}", q.id);
                assert!(matches!(q.answer, Answer::Choice(_)) && q.options.len() == 4, "{}", q.id);
            } else {
                assert_eq!((q.videos.len(), q.fps), (1, Some(10.0)), "{}", q.id);
            }
        }
    }
}

#[test]
fn videos_have_every_trajectory_frame_and_intervals_match_frames() {
    let (_, s) = built();
    for r in samples(&s.dir, "stage3.json") {
        let id = r["sample_id"].as_str().unwrap();
        let frames = r["frame_count"].as_u64().unwrap() as usize;
        let info = motionvl_data::video::probe_video(&s.dir.join(r["video_path"].as_str().unwrap())).unwrap();
        assert_eq!((info.frame_count, info.width, info.height), (frames, 96, 72), "{id}");
        let traj = json(&s.dir.join(r["trajectory_path"].as_str().unwrap()));
        assert_eq!(traj["frames"].as_array().unwrap().len(), frames, "{id}");
        assert_eq!(traj["fps"], 10.0);

        // Visibility intervals are the runs of the frames that have a box.
        let visible: Vec<u64> = r["keyframe_gt_dense"].as_array().unwrap().iter().map(|k| k["frame_index"].as_u64().unwrap()).collect();
        let mut runs: Vec<[f64; 2]> = Vec::new();
        let mut k = 0;
        while k < visible.len() {
            let mut e = k;
            while e + 1 < visible.len() && visible[e + 1] == visible[e] + 1 {
                e += 1;
            }
            runs.push([visible[k] as f64 / 10.0, visible[e] as f64 / 10.0]);
            k = e + 1;
        }
        let got: Vec<[f64; 2]> = serde_json::from_value(r["visible_intervals_sec"].clone()).unwrap();
        assert_eq!(got, runs, "{id}");
        assert_eq!(r["visible_count"].as_u64().unwrap() as usize, runs.len(), "{id}");

        // Behaviour segments tile the video, from the first frame to the last.
        let segs = r["behavior_intervals_sec"].as_array().unwrap();
        assert_eq!(segs[0]["start_frame"], 0, "{id}");
        assert_eq!(segs.last().unwrap()["end_frame"].as_u64().unwrap() as usize, frames - 1, "{id}");
        for w in segs.windows(2) {
            assert_eq!(w[0]["end_frame"], w[1]["start_frame"], "{id}");
        }
        if r["task_family"] == "temporal_localization" {
            for item in r["answer_items"].as_array().unwrap() {
                let seg = segs.iter().find(|s| {
                    let iv = &s["intervals_sec"][0];
                    item["intervals_sec"].as_array().unwrap().iter().any(|i| i[0] == iv["start_sec"] && i[1] == iv["end_sec"])
                });
                assert!(seg.is_some(), "{id}: every answer interval is a flown segment");
            }
        }
    }
}

#[test]
fn accepted_trajectories_keep_clearance_from_every_cloud_point() {
    use motionvl_construct::dccs::cloud::read_cloud;
    let (_, s) = built();
    let cloud = read_cloud(&s.dir.join("points.ply")).unwrap();
    for r in samples(&s.dir, "stage3.json") {
        let traj = json(&s.dir.join(r["trajectory_path"].as_str().unwrap()));
        for f in traj["frames"].as_array().unwrap() {
            let p = [f["x"].as_f64().unwrap(), f["y"].as_f64().unwrap(), f["z"].as_f64().unwrap()];
            let nearest = cloud
                .points
                .iter()
                .map(|q| ((q.x - p[0]).powi(2) + (q.y - p[1]).powi(2) + (q.z - p[2]).powi(2)).sqrt())
                .fold(f64::INFINITY, f64::min);
            // Trajectory files keep 4 decimals, the PLY single precision.
            assert!(nearest >= 2.0 - 1e-3, "{}: {p:?} is {nearest} m from the cloud", r["sample_id"]);
        }
    }
}

#[test]
fn paired_image_tasks_share_their_views() {
    let (_, s) = built();
    let rows = samples(&s.dir, "stage4.json");
    let by_id = |id: String| rows.iter().find(|r| r["sample_id"] == id.as_str()).unwrap_or_else(|| panic!("{id}"));
    let landmarks = json(&s.dir.join("valid_instances.json"))["valid_instances"].as_array().unwrap().clone();
    for lm in &landmarks {
        let lm = lm["instance_id"].as_str().unwrap();
        for d in ["4way", "8way"] {
            let w = by_id(format!("synth_11_{lm}_self_shared_{d}_where"));
            let h = by_id(format!("synth_11_{lm}_self_shared_{d}_what"));
            assert_eq!(w["reference_image"], h["reference_image"]);
            assert_eq!(w["target_image"], h["query_image"]);
            let answer = h["candidates"].as_array().unwrap().iter().find(|c| c["option_id"] == h["answer_option_id"]).unwrap();
            assert_eq!(answer["image"], w["target_image"], "the future view is the query view");
            let gold = w["label_options"].as_array().unwrap().iter().find(|o| o["option_id"] == w["answer_option_id"]).unwrap();
            assert_eq!(gold["label"], w["metadata"]["query_label"]);
            let ew = by_id(format!("synth_11_{lm}_env_shared_{d}_where"));
            let eh = by_id(format!("synth_11_{lm}_env_shared_{d}_how"));
            assert_eq!((&ew["reference_image"], &ew["target_image"]), (&eh["reference_image"], &eh["target_image"]));
            for row in [w, h, ew, eh] {
                let b: Vec<f64> = serde_json::from_value(row["answer_bbox_xyxy_norm"].clone()).unwrap();
                assert!(b[0] < b[2] && b[1] < b[3] && b.iter().all(|c| (0.0..=1.0).contains(c)), "{}", row["sample_id"]);
            }
        }
    }
    // Every image a row names was requested and rendered as a 4:3 JPEG.
    let requests = json(&s.dir.join("stage4_render_requests.json"));
    for r in requests["requests"].as_array().unwrap() {
        let img = image::open(s.dir.join(r["output_path"].as_str().unwrap())).unwrap();
        assert_eq!((img.width(), img.height()), (96, 72));
    }
}

#[test]
fn rebuilding_and_rerendering_reproduce_ids_options_and_answers() {
    let (_, s) = built();
    let again = tempfile::tempdir().unwrap();
    let s2 = synthetic(again.path(), &tiny(), &()).unwrap();
    for f in ["valid_instances.json", "stage3.json", "stage4.json", "stage3_render_requests.json", "stage4_render_requests.json"] {
        assert_eq!(std::fs::read(s.dir.join(f)).unwrap(), std::fs::read(s2.dir.join(f)).unwrap(), "{f}");
    }
    let requests = json(&s.dir.join("stage4_render_requests.json"));
    let first = requests["requests"][0]["output_path"].as_str().unwrap();
    assert_eq!(std::fs::read(s.dir.join(first)).unwrap(), std::fs::read(s2.dir.join(first)).unwrap());
    // Rendering again from the requests alone writes media only.
    let manifest = std::fs::read(s2.dir.join("stage4.json")).unwrap();
    motionvl_construct::dccs::pipeline::render(&s2.dir.join("stage4_render_requests.json"), 4, &()).unwrap();
    assert_eq!(std::fs::read(s2.dir.join("stage4.json")).unwrap(), manifest);
}

/// Names from the handoff files never leave the output folder: an `instance_id` that climbs is
/// refused with its entry named, and render requests whose `output_path` climbs, is absolute or
/// runs through a link planted in the folder are refused before anything is written.
#[test]
fn ids_and_request_paths_that_leave_the_output_folder_are_refused() {
    let (_, s) = built();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir_all(&out).unwrap();

    let mut instances = json(&s.dir.join("valid_instances.json"));
    let list = match instances.as_object_mut().and_then(|o| o.values_mut().find(|v| v.is_array())) {
        Some(list) => list,
        None => &mut instances,
    };
    list[1]["instance_id"] = Value::from("../../escaped");
    let file = out.join("valid_instances.json");
    std::fs::write(&file, instances.to_string()).unwrap();
    let err = motionvl_construct::dccs::instances::read_instances(&file).expect_err("a climbing id").to_string();
    assert!(err.contains("entry 1") && err.contains("../../escaped"), "{err}");

    let requests = json(&s.dir.join("stage4_render_requests.json"));
    let escape = dir.path().join("escaped.jpg");
    let outside = dir.path().join("elsewhere");
    std::fs::create_dir_all(&outside).unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(&outside, out.join("images")).unwrap();
    let first = requests["requests"][0]["output_path"].as_str().unwrap().to_owned();
    assert!(first.starts_with("images/"), "{first}");
    for bad in ["../escaped.jpg".to_owned(), escape.display().to_string(), first] {
        let mut planted = requests.clone();
        planted["requests"][0]["output_path"] = Value::from(bad.as_str());
        let file = out.join("stage4_render_requests.json");
        std::fs::write(&file, planted.to_string()).unwrap();
        let err = motionvl_construct::dccs::pipeline::render(&file, 4, &()).expect_err("leaves the folder").to_string();
        assert!(err.contains("output_path"), "{bad}: {err}");
    }
    assert!(!escape.exists(), "nothing was written outside the output folder");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "nothing was written through the link");

    // Construction itself: a `trajectories` link planted in the output folder is not followed.
    #[cfg(unix)]
    {
        let planted = dir.path().join("planted");
        std::fs::create_dir_all(planted.join("dccs")).unwrap();
        std::os::unix::fs::symlink(&outside, planted.join("dccs/trajectories")).unwrap();
        let err = synthetic(&planted, &tiny(), &()).expect_err("refused").to_string();
        assert!(err.contains("trajectories/") && err.contains("leads outside"), "{err}");
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "no trajectory was written through the link");
    }
}

/// The stages' own writers refuse a landmark id that would leave the output folder, even for
/// landmarks made in code rather than read by `read_instances` (which refuses them first):
/// Stage 3 before writing any trajectory, Stage 4 before building; and a Stage 4 request whose
/// `output_path` climbs before the request file is written. Nothing lands outside `out`.
#[test]
fn stage_writers_refuse_ids_that_leave_the_output_folder() {
    use motionvl_construct::dccs::cloud::read_cloud;
    use motionvl_construct::dccs::instances::read_instances;
    use motionvl_construct::dccs::stage3::{Stage3Config, plan_missions, write_stage3};
    use motionvl_construct::dccs::stage4::{Stage4Config, Stage4Output, build_stage4, write_stage4};
    use motionvl_construct::dccs::visibility::VisibilityConfig;
    let (_, s) = built();
    let mut landmarks = read_instances(&s.dir.join("valid_instances.json")).unwrap();
    landmarks.truncate(1);
    let cloud = read_cloud(&s.dir.join("points.ply")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("deep/out");
    let visibility = VisibilityConfig { width: 96, height: 72, splat_radius_m: 0.375, ..VisibilityConfig::default() };
    let s3 = Stage3Config { seed: 11, visibility: visibility.clone(), ..Stage3Config::default() };
    let s4 = Stage4Config { seed: 11, visibility, ..Stage4Config::default() };
    for bad in ["../../escaped".to_owned(), dir.path().join("absolute").display().to_string()] {
        landmarks[0].id = bad.clone();
        let (missions, _) = plan_missions(&landmarks, &cloud, &s3, &|| ());
        assert!(!missions.is_empty(), "{bad}: no mission planned, so nothing would be refused");
        let err = write_stage3(&out, &landmarks, &missions, &[], &s3).expect_err("stage 3 refuses").to_string();
        assert!(err.contains(&missions[0].id) && err.contains(&bad), "{err}");
        let err = build_stage4(&landmarks, &cloud, &s4, &|| ()).expect_err("stage 4 refuses").to_string();
        assert!(err.contains("landmark") && err.contains(&bad), "{err}");
    }
    let climbing = Stage4Output {
        samples: Vec::new(),
        requests: vec![serde_json::json!({"request_id": "x", "output_path": "../escaped.jpg"})],
        rejections: Vec::new(),
    };
    let err = write_stage4(&out, &climbing, &s4).expect_err("a climbing request").to_string();
    assert!(err.contains("request `x`") && err.contains("../escaped.jpg"), "{err}");
    let written = motionvl_util::test_support::files_under(dir.path());
    assert!(written.is_empty(), "refused stages wrote {written:?}");
}
