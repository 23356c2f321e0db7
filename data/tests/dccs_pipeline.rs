//! UAV-DualCog construction end to end on the synthetic world: Stage 3 missions and rows,
//! Stage 4 rows, render requests and their media, and the `dualcog` reader over every row.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use motionvl_data::dccs::pipeline::{SynthDccsConfig, SynthDccsSummary, synthetic};
use motionvl_data::dccs::world::Sampling;
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
    for f in [
        "valid_instances.json",
        "points.ply",
        "stage3.json",
        "stage4.json",
        "stage3_render_requests.json",
        "stage4_render_requests.json",
    ] {
        assert!(s.dir.join(f).is_file(), "{f}");
    }
    assert_eq!(s.stage4.rows, s.landmarks * 2 * 4, "Stage 4: landmarks × 2 difficulties × 4 families");
    let rows = samples(&s.dir, "stage3.json");
    for r in &rows {
        let video: PathBuf = s.dir.join(r["video_path"].as_str().unwrap());
        assert!(video.is_file(), "{}", video.display());
    }
}
