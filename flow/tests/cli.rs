//! The `flow` binary end to end on a folder of PNG frames with a known motion.

use std::process::Command;

use motionvl_flow::synthetic::{synthetic_pair, Motion};

#[test]
fn extract_and_viz_on_a_frame_folder() {
    let dir = tempfile::tempdir().expect("tempdir");
    let frames_dir = dir.path().join("seq");
    std::fs::create_dir_all(&frames_dir).expect("mkdir");
    let pair = synthetic_pair(64, 96, Motion::Translation { dx: 2.0, dy: -1.0 }, 5);
    for t in 0..2 {
        let img = image::RgbImage::from_fn(96, 64, |x, y| image::Rgb([0, 1, 2].map(|c| pair.frames[[t, y as usize, x as usize, c]])));
        img.save(frames_dir.join(format!("{}.png", t + 1))).expect("png");
    }
    let out = dir.path().join("out");
    let status = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["extract", "--frames"])
        .arg(&frames_dir)
        .args(["--plan", "all", "--motion", "classic", "--out"])
        .arg(&out)
        .status()
        .expect("runs");
    assert!(status.success());
    let bytes = std::fs::read(out.join("seq.safetensors")).expect("output written");
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("safetensors");
    let flows = st.tensor("flows").expect("flows");
    assert_eq!(flows.shape(), &[1, 2, 64, 96]);
    let values: Vec<f32> = flows.data().chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let (u, v) = (values[..64 * 96].iter().sum::<f32>() / 6144.0, values[64 * 96..].iter().sum::<f32>() / 6144.0);
    assert!((u - 2.0).abs() < 0.2 && (v + 1.0).abs() < 0.2, "mean flow ({u}, {v})");

    let viz = dir.path().join("viz");
    let status = Command::new(env!("CARGO_BIN_EXE_flow")).args(["viz", "--frames"]).arg(&frames_dir).args(["--plan", "all", "--out"]).arg(&viz).status().expect("runs");
    assert!(status.success());
    assert!(viz.join("seq/flow_0000.png").is_file() && viz.join("seq/strip.png").is_file());

    let status = Command::new(env!("CARGO_BIN_EXE_flow")).args(["extract", "--frames"]).arg(&frames_dir).args(["--motion", "raft-small", "--out"]).arg(&out).output().expect("runs");
    assert!(!status.status.success());
    assert!(String::from_utf8_lossy(&status.stderr).contains("--weights"));
}

#[test]
fn extract_reads_every_video_of_a_manifest_and_fills_the_cache() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/tiny-sft/train.jsonl");
    let dir = tempfile::tempdir().expect("tempdir");
    let (out, cache) = (dir.path().join("out"), dir.path().join("cache"));
    let status = Command::new(env!("CARGO_BIN_EXE_flow"))
        .args(["extract", "--manifest"])
        .arg(&data)
        .args(["--motion", "dis", "--out"])
        .arg(&out)
        .arg("--cache")
        .arg(&cache)
        .status()
        .expect("runs");
    assert!(status.success());
    assert_eq!(std::fs::read_dir(&out).expect("out").count(), 8, "one flow file per video of the manifest");
    let cached = walk(&cache);
    assert_eq!(cached, 8, "one cache entry per video");
}

fn walk(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| if e.path().is_dir() { walk(&e.path()) } else { 1 }).sum())
        .unwrap_or(0)
}
