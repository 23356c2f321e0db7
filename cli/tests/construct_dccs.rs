//! `construct dccs-video` and `construct dccs-image` on hand-written handoff files: one box
//! landmark without support points and an XYZ cloud of the ground and the box's faces.

use std::path::Path;
use std::process::Command;

use motionvl_data::manifest::read_dualcog;
use motionvl_data::samples::ReadOptions;
use serde_json::json;

fn construct(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_construct")).args(args).env("RUST_BACKTRACE", "0").output().expect("construct runs")
}

fn handoff(dir: &Path) -> (String, String) {
    let instances = dir.join("valid_instances.json");
    let row = json!({"instance_id": "depot", "landmark_category": "building", "landmark_subcategory": "depot",
                     "landmark_description": "a grey bus depot with a flat roof", "center_3d": [0.0, 0.0, 5.0],
                     "bbox_3d": {"size": [12.0, 8.0, 10.0], "yaw_deg": 20.0}});
    std::fs::write(&instances, json!({ "valid_instances": [row] }).to_string()).unwrap();
    let mut xyz = String::from("# ground, then the depot's faces\n");
    for i in -60..=60 {
        for j in -60..=60 {
            xyz.push_str(&format!("{} {} 0\n", i * 3, j * 3));
        }
    }
    for i in 0..=24 {
        for k in 0..=20 {
            let (u, z) = (-6.0 + i as f64 * 0.5, k as f64 * 0.5);
            let (c, s) = (20f64.to_radians().cos(), 20f64.to_radians().sin());
            for (x, y) in [(u, -4.0), (u, 4.0), (-6.0, u * 8.0 / 12.0), (6.0, u * 8.0 / 12.0)] {
                xyz.push_str(&format!("{:.3},{:.3},{z}\n", c * x - s * y, s * x + c * y));
            }
        }
    }
    let cloud = dir.join("cloud.xyz");
    std::fs::write(&cloud, xyz).unwrap();
    (instances.display().to_string(), cloud.display().to_string())
}

#[test]
fn both_stages_from_handoff_files() {
    let dir = tempfile::tempdir().unwrap();
    let (instances, cloud) = handoff(dir.path());
    let out = dir.path().join("out");
    let out_s = out.display().to_string();
    let common = ["--instances", &instances, "--cloud", &cloud, "--out", &out_s, "--seed", "3"];
    let video = construct(&[&["dccs-video"], &common[..], &["--width", "64", "--height", "48"]].concat());
    assert!(video.status.success(), "{}", String::from_utf8_lossy(&video.stderr));
    assert!(String::from_utf8_lossy(&video.stdout).contains("4 rows from 2 missions"));
    let image = construct(&[&["dccs-image"], &common[..], &["--width", "64", "--height", "48"]].concat());
    assert!(image.status.success(), "{}", String::from_utf8_lossy(&image.stderr));
    assert!(String::from_utf8_lossy(&image.stdout).contains("8 rows"));
    // The media are a simulator's to render; the rows read once they exist.
    let unchecked = ReadOptions { check_media: false, ..ReadOptions::default() };
    assert_eq!(read_dualcog(&out.join("stage3.json"), &unchecked).unwrap().items.len(), 4);
    assert_eq!(read_dualcog(&out.join("stage4.json"), &unchecked).unwrap().items.len(), 8);
    for f in ["stage3_render_requests.json", "stage4_render_requests.json", "stage3_rejections.json"] {
        assert!(out.join(f).is_file(), "{f}");
    }

    // README: --check-kinematics records each mission's verdict against 8 m/s, 10 m/s² and
    // 120°/s; without it there is none. Checked here by hand on speed alone: a mission flown
    // faster than 8 m/s between two frames is never feasible.
    let samples = |dir: &Path| -> Vec<serde_json::Value> {
        let stage3: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("stage3.json")).unwrap()).unwrap();
        stage3["samples"].as_array().unwrap().clone()
    };
    assert!(samples(&out).iter().all(|s| s["kinematics_checked"] == false && s["kinematics_feasible"].is_null()));
    let checked = dir.path().join("checked");
    let checked_s = checked.display().to_string();
    let run = construct(&[
        "dccs-video",
        "--instances",
        &instances,
        "--cloud",
        &cloud,
        "--out",
        &checked_s,
        "--seed",
        "3",
        "--width",
        "64",
        "--height",
        "48",
        "--check-kinematics",
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    for sample in samples(&checked) {
        let feasible = sample["kinematics_feasible"].as_bool().unwrap_or_else(|| panic!("no verdict: {sample}"));
        let path = checked.join(format!("trajectories/{}.json", sample["mission_id"].as_str().unwrap()));
        let trajectory: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let frames = trajectory["frames"].as_array().unwrap();
        let at = |f: &serde_json::Value, k: &str| f[k].as_f64().unwrap();
        let fastest = frames
            .windows(2)
            .map(|w| ["x", "y", "z"].iter().map(|k| (at(&w[1], k) - at(&w[0], k)).powi(2)).sum::<f64>().sqrt() / (at(&w[1], "t") - at(&w[0], "t")))
            .fold(0.0, f64::max);
        assert!(!(feasible && fastest > 8.0 + 1e-3), "{}: feasible at {fastest:.2} m/s", path.display());
    }

    // --render needs the synthetic world; a real scene is refused with what to do.
    let render = construct(&[&["dccs-image"], &common[..], &["--width", "64", "--height", "48", "--render"]].concat());
    let err = String::from_utf8_lossy(&render.stderr);
    assert!(!render.status.success() && err.contains("render these requests with that simulator"), "{err}");
    // Not 4:3: refused before any work.
    let wide = construct(&[&["dccs-image"], &common[..], &["--width", "64", "--height", "32"]].concat());
    assert!(String::from_utf8_lossy(&wide.stderr).contains("4:3"));
    // A bad landmark is named with its file.
    std::fs::write(
        &instances,
        r#"[{"instance_id": "x1", "landmark_category": "castle", "landmark_description": "d", "center_3d": [0,0,0], "bbox_3d": [0,0,0,1,1,1,0]}]"#,
    )
    .unwrap();
    let bad = construct(&[&["dccs-video"], &common[..]].concat());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("valid_instances.json") && err.contains("`x1`") && err.contains("castle"), "{err}");
}

/// An `instance_id` that climbs out of `--out` or is an absolute path is refused by both stages,
/// with the id named, and nothing is written outside `--out` (nor inside it).
#[test]
fn both_stages_refuse_instance_ids_that_leave_the_output_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (instances, cloud) = handoff(dir.path());
    let handoff_rows: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&instances).unwrap()).unwrap();
    let out = dir.path().join("out");
    let out_s = out.display().to_string();
    for bad in ["../../escaped".to_owned(), dir.path().join("absolute").display().to_string()] {
        let mut rows = handoff_rows.clone();
        rows["valid_instances"][0]["instance_id"] = serde_json::Value::from(bad.as_str());
        std::fs::write(&instances, rows.to_string()).unwrap();
        for stage in ["dccs-video", "dccs-image"] {
            let run = construct(&[stage, "--instances", &instances, "--cloud", &cloud, "--out", &out_s, "--width", "64", "--height", "48"]);
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(!run.status.success() && err.contains(&bad) && err.contains("instance_id"), "{stage} with {bad}: {err}");
        }
    }
    let mut written = motionvl_util::test_support::files_under(dir.path());
    written.sort();
    let made = [dir.path().join("cloud.xyz"), dir.path().join("valid_instances.json")];
    assert_eq!(written, made, "a refused stage wrote files");
}
