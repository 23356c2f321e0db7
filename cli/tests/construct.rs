//! The `construct` binary end to end: each new subcommand on small inputs, and bad input
//! refused with the file and row named and a failing exit status.

use std::path::Path;
use std::process::{Command, Output};

fn construct(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_construct"))
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("running construct: {e}"))
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn split_nav_and_sisbench_qa_run_and_refuse_bad_input() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let d = dir.path();
    let names = "00001_urbanvideo_test_A_1.mp4\n00002_NAT2021_train_N_1.mp4\n00003_WebUAV3M_test_W_1.mp4\n00004_WebUAV3M_train_W_1.mp4\n";
    std::fs::write(d.join("clips.txt"), names).unwrap_or_else(|e| panic!("{e}"));
    let out = construct(&["split", "--input", "clips.txt", "--out", "split", "--webuav-benchmark", "1"], d);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("WebUAV3M           1          1"), "{}", text(&out));
    let benchmark = std::fs::read_to_string(d.join("split/benchmark.txt")).unwrap_or_default();
    assert_eq!(benchmark, "00001_urbanvideo_test_A_1.mp4\n00003_WebUAV3M_test_W_1.mp4\n");

    std::fs::write(d.join("bad.txt"), "00001_urbanvideo_test_A_1.mp4\n7_visdrone_test_X.mp4\n").unwrap_or_else(|e| panic!("{e}"));
    let out = construct(&["split", "--input", "bad.txt", "--out", "split2"], d);
    assert!(!out.status.success());
    assert!(text(&out).contains("bad.txt: line 2") && text(&out).contains("visdrone"), "{}", text(&out));
    assert!(!d.join("split2").exists(), "nothing written for bad input");

    let csv = "episode,x,y,z\na,0,0,0\na,0,0,9\na,30,0,9\na,30,25,9\nb,0,0,0\nb,40,0,0\nb,40,-30,0\nb,70,-30,-8\n";
    std::fs::write(d.join("flights.csv"), csv).unwrap_or_else(|e| panic!("{e}"));
    let out = construct(&["nav", "--input", "flights.csv", "--out", "nav"], d);
    assert!(out.status.success(), "{}", text(&out));
    let rows: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(d.join("nav/nav.json")).unwrap_or_default()).unwrap_or_default();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["segments"][0]["kind"], "take_off");
    std::fs::write(d.join("broken.csv"), "episode,x,y,z\na,0,0,0\na,1,up,0\n").unwrap_or_else(|e| panic!("{e}"));
    let out = construct(&["nav", "--input", "broken.csv", "--out", "nav2"], d);
    assert!(!out.status.success());
    assert!(text(&out).contains("broken.csv: line 3: `y` is not a number"), "{}", text(&out));

    let ann = r#"{"video": "v.mp4", "duration_s": 4, "video_type": "concatenated", "clips": [{"source": "a", "start_s": 0, "end_s": 2}]}"#;
    std::fs::write(d.join("ann.jsonl"), format!("{ann}\n")).unwrap_or_else(|e| panic!("{e}"));
    let out = construct(&["sisbench-qa", "--annotations", "ann.jsonl", "--out", "sis.json"], d);
    assert!(!out.status.success());
    assert!(text(&out).contains("ann.jsonl: line 1 (`v.mp4`): a concatenated video needs `clips`"), "{}", text(&out));
}

/// The world's flags of a small synthetic world (the defaults render 10 worlds of 224×168 clips).
const SMALL_WORLD: [&str; 14] = [
    "--train-worlds",
    "1",
    "--test-worlds",
    "1",
    "--clips-per-world",
    "2",
    "--concats-per-world",
    "0",
    "--width",
    "64",
    "--height",
    "48",
    "--seconds",
    "1",
];

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).lines().count()
}

// README: `construct synth --satellite --out DIR` renders the world and adds the cross-view
// pairs in DIR/{train,test}/cvaa_pairs.jsonl. The pairs used to be written first, and the
// world's guard then refused the folder they had just created.
#[test]
fn synth_with_satellite_writes_the_world_and_its_pairs_into_a_fresh_folder() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let d = dir.path();
    let frames = ["--satellite-train-frames", "3", "--satellite-test-frames", "2"];
    let args = |extra: &[&'static str]| -> Vec<&str> {
        let mut a = vec!["synth", "--satellite", "--out", "fresh"];
        a.extend(SMALL_WORLD);
        a.extend(frames);
        a.extend(extra);
        a
    };
    let out = construct(&args(&[]), d);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("synthetic world in fresh") && text(&out).contains("cross-view pairs: fresh/train/cvaa_pairs.jsonl (3 pairs)"),
        "{}",
        text(&out)
    );
    assert!(d.join("fresh/synth.json").is_file() && d.join("fresh/test/sisbench.json").is_file(), "the world and its held-out manifest");
    assert_eq!((lines(&d.join("fresh/train/cvaa_pairs.jsonl")), lines(&d.join("fresh/test/cvaa_pairs.jsonl"))), (3, 2));
    let pairs = motionvl_data::cvaa::read_pairs(&d.join("fresh/test/cvaa_pairs.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    assert!(pairs.iter().all(|p| p.satellite.is_file() && p.footprint.is_some()), "every pair's satellite image exists and has a footprint box");

    // The folder now holds a world: a second run is refused unless --force, which rebuilds both.
    let again = construct(&args(&[]), d);
    assert!(!again.status.success() && text(&again).contains("pass --force"), "{}", text(&again));
    let forced = construct(&args(&["--force"]), d);
    assert!(forced.status.success(), "{}", text(&forced));
    assert_eq!(lines(&d.join("fresh/train/cvaa_pairs.jsonl")), 3, "--force keeps the pairs it rewrites");

    // The README's CVAA step (`--satellite-only`) and then a world in the same folder: the
    // pairs are not a world, so no --force is needed, and they stay.
    let mut only = vec!["synth", "--satellite-only", "--out", "pairs-first"];
    only.extend(SMALL_WORLD);
    only.extend(frames);
    let out = construct(&only, d);
    assert!(out.status.success() && !d.join("pairs-first/synth.json").exists(), "{}", text(&out));
    let pairs_before = std::fs::read(d.join("pairs-first/test/cvaa_pairs.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    let mut world = vec!["synth", "--out", "pairs-first"];
    world.extend(SMALL_WORLD);
    let out = construct(&world, d);
    assert!(out.status.success(), "{}", text(&out));
    assert!(d.join("pairs-first/synth.json").is_file());
    assert_eq!(std::fs::read(d.join("pairs-first/test/cvaa_pairs.jsonl")).unwrap_or_default(), pairs_before, "the pairs survive the world");
    let pairs = motionvl_data::cvaa::read_pairs(&d.join("pairs-first/test/cvaa_pairs.jsonl")).unwrap_or_else(|e| panic!("{e}"));
    assert!(pairs.iter().all(|p| p.satellite.is_file()), "and their images");
    let forced = construct(&[&world[..], &["--force"]].concat(), d);
    assert!(
        forced.status.success() && d.join("pairs-first/test/satellite/world-00.png").is_file(),
        "--force replaces the world only: {}",
        text(&forced)
    );
}
