//! The synthetic world end to end: exact flow agrees with the rendered frames, the motions
//! leave their textbook flow patterns, and `construct synth`'s files load with the crate's own
//! readers, balanced, split by world and reproducible from the seed.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use motionvl_construct::synth::behaviours::{Behaviour, Flight, Rates};
use motionvl_construct::synth::camera::{Intrinsics, Pose};
use motionvl_construct::synth::generate::SplitRecord;
use motionvl_construct::synth::geometry::Vec3;
use motionvl_construct::synth::render::{FlowField, Frame, RenderedClip, exact_flow, render_frame};
use motionvl_construct::synth::scene::{World, WorldSpec};
use motionvl_construct::synth::{GroundTruth, Split, SynthConfig, SynthError, SynthSummary, generate};
use motionvl_data::manifest::{Answer, SisTask, Task, VideoType, read_sisbench};
use motionvl_data::samples::{ReadOptions, read_training_samples};
use motionvl_data::video::{decode_all, probe_video};
use safetensors::SafeTensors;

// ---------------------------------------------------------------------------------------------
// Flow and depth against the renderer.

/// Frame `b` sampled bilinearly at `(x + u, y + v)` for each pixel of frame `a`'s grid.
fn warp_back(b: &Frame, flow: &FlowField, x: usize, y: usize, c: usize) -> f32 {
    let (w, h) = (b.width, b.height);
    let sx = (x as f32 + flow.u(x, y)).clamp(0.0, (w - 1) as f32);
    let sy = (y as f32 + flow.v(x, y)).clamp(0.0, (h - 1) as f32);
    let (x0, y0) = (sx.floor() as usize, sy.floor() as usize);
    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
    let (fx, fy) = (sx - x0 as f32, sy - y0 as f32);
    let px = |xx: usize, yy: usize| f32::from(b.rgb[(yy * w + xx) * 3 + c]);
    let top = px(x0, y0) * (1.0 - fx) + px(x1, y0) * fx;
    let bottom = px(x0, y1) * (1.0 - fx) + px(x1, y1) * fx;
    top * (1.0 - fy) + bottom * fy
}

/// Mean absolute difference between frame `a` and `b` warped by `flow`, over pixels that are
/// valid, away from the border, and textured (the 3×3 neighbourhood of `a` varies by at least
/// `min_contrast` levels); with the number of such pixels.
fn warp_error(a: &Frame, b: &Frame, flow: &FlowField, min_contrast: f32) -> (f32, usize) {
    let (w, h) = (a.width, a.height);
    let luma = |f: &Frame, x: usize, y: usize| {
        let i = (y * w + x) * 3;
        (f32::from(f.rgb[i]) + f32::from(f.rgb[i + 1]) + f32::from(f.rgb[i + 2])) / 3.0
    };
    let (mut sum, mut n) = (0.0, 0);
    for y in 2..h - 2 {
        for x in 2..w - 2 {
            if flow.valid[y * w + x] == 0 {
                continue;
            }
            let around: Vec<f32> = (0..9).map(|k| luma(a, x + k % 3 - 1, y + k / 3 - 1)).collect();
            let spread = around.iter().cloned().fold(f32::MIN, f32::max) - around.iter().cloned().fold(f32::MAX, f32::min);
            if spread < min_contrast {
                continue;
            }
            for c in 0..3 {
                sum += (f32::from(a.rgb[(y * w + x) * 3 + c]) - warp_back(b, flow, x, y, c)).abs();
            }
            n += 1;
        }
    }
    (sum / (3 * n.max(1)) as f32, n)
}

fn world(seed: u64) -> World {
    World::generate(seed, &WorldSpec::default()).expect("world")
}

fn zero_flow(w: usize, h: usize) -> FlowField {
    FlowField { width: w, height: h, uv: vec![0.0; 2 * w * h], valid: vec![1; w * h] }
}

/// A flight of `behaviour` over the middle of `world`, with the given rates.
fn flight(behaviour: Behaviour, rates: Rates, pitch_deg: f32) -> Flight {
    let start = Pose::new(Vec3::new(-20.0, -30.0, 45.0), 0.8, pitch_deg.to_radians());
    Flight::new(behaviour, start, rates, Vec3::default())
}

#[test]
fn exact_flow_warps_the_next_frame_onto_the_current_one() {
    let world = world(5);
    let k = Intrinsics::drone(96, 72);
    let rates = Rates { forward: 6.0, up: 1.5, yaw: 0.3, ..Rates::default() };
    let clip = RenderedClip::render(&world, &k, flight(Behaviour::ForwardYawLeft, rates, -50.0).poses(10.0, 3));
    for (i, flow) in clip.flows.iter().enumerate() {
        let (a, b) = (&clip.frames[i], &clip.frames[i + 1]);
        let valid = flow.valid.iter().filter(|&&v| v == 1).count();
        assert!(valid > 96 * 72 * 8 / 10, "pair {i}: only {valid} valid pixels");
        let (err, n) = warp_error(a, b, flow, 12.0);
        let (still, _) = warp_error(a, b, &zero_flow(96, 72), 12.0);
        assert!(n > 500, "pair {i}: only {n} textured pixels");
        assert!(err < 5.0 && err < 0.35 * still, "pair {i}: warped error {err:.2} vs unwarped {still:.2} over {n} pixels");
    }
}

#[test]
fn a_pure_yaw_moves_the_centre_sideways_uniformly() {
    let world = world(6);
    let k = Intrinsics::drone(64, 48);
    let left = Rates { yaw: 0.4, ..Rates::default() };
    let clip = RenderedClip::render(&world, &k, flight(Behaviour::YawLeft, left, -40.0).poses(10.0, 2));
    let flow = &clip.flows[0];
    let (mut us, mut vs) = (Vec::new(), Vec::new());
    // A window of ±6 × ±3 pixels (±10° × ±5°): wider, the pan's (1 + x²) growth and the roll
    // that a pitched camera sees under a turn about the vertical stop being negligible.
    for y in 21..27 {
        for x in 26..38 {
            us.push(flow.u(x, y));
            vs.push(flow.v(x, y));
        }
    }
    let mean = us.iter().sum::<f32>() / us.len() as f32;
    let spread = us.iter().map(|u| (u - mean).abs()).fold(0.0, f32::max);
    // Turning left, the scene slides right: 0.04 rad per frame · fx 32 · cos 40° ≈ 1 px.
    assert!(mean > 0.8 && mean < 1.3, "mean horizontal flow {mean}");
    assert!(spread < 0.12 * mean, "horizontal flow varies by {spread} around {mean}");
    assert!(vs.iter().all(|v| v.abs() < 0.25 * mean), "vertical flow near the centre should be small");

    let right = Rates { yaw: -0.4, ..Rates::default() };
    let clip = RenderedClip::render(&world, &k, flight(Behaviour::YawRight, right, -40.0).poses(10.0, 2));
    assert!(clip.flows[0].u(32, 24) < -0.8, "turning right slides the scene left");
}

#[test]
fn forward_flight_expands_from_the_focus_of_expansion() {
    let world = world(7);
    let k = Intrinsics::drone(64, 48);
    let rates = Rates { forward: 8.0, ..Rates::default() };
    let f = flight(Behaviour::Forward, rates, -45.0);
    let clip = RenderedClip::render(&world, &k, f.poses(10.0, 2));
    // The heading is level, so the focus of expansion is on the horizon straight ahead:
    // x = cx, y = cy − fy · tan 45° (above the image).
    let foe = (k.cx, k.cy - k.fy * 45f32.to_radians().tan());
    let flow = &clip.flows[0];
    let (mut outward, mut total) = (0, 0);
    for y in 0..48 {
        for x in 0..64 {
            let (dx, dy) = (x as f32 - foe.0, y as f32 - foe.1);
            let (u, v) = (flow.u(x, y), flow.v(x, y));
            if u.hypot(v) < 1e-3 {
                continue;
            }
            total += 1;
            // Radial: along the ray from the focus, pointing away from it.
            let cos = (dx * u + dy * v) / (dx.hypot(dy) * u.hypot(v));
            if cos > 0.99 {
                outward += 1;
            }
        }
    }
    assert!(total > 3000 && outward == total, "{outward} of {total} flow vectors point away from the focus");

    let backward = Rates { forward: -8.0, ..Rates::default() };
    let clip = RenderedClip::render(&world, &k, flight(Behaviour::Backward, backward, -45.0).poses(10.0, 2));
    let (u, v) = (clip.flows[0].u(32, 40), clip.flows[0].v(32, 40));
    assert!(v < 0.0 && (v * (32.0 - foe.0) - u * (40.0 - foe.1)).abs() < 0.05 * v.abs() * 40.0, "backward contracts");
}

#[test]
fn depth_is_the_distance_along_the_optical_axis() {
    let bare = World::generate(8, &WorldSpec { landmarks: 0, extent: 100.0 }).expect("world");
    let k = Intrinsics::drone(40, 30);
    let pose = Pose::new(Vec3::new(10.0, 20.0, 30.0), 2.0, -60f32.to_radians());
    let frame = render_frame(&bare, &k, &pose);
    let b = pose.basis();
    for y in 0..30 {
        for x in 0..40 {
            let dir = b.forward + b.right * ((x as f32 - k.cx) / k.fx) + b.down * ((y as f32 - k.cy) / k.fy);
            let expected = if dir.z < 0.0 { 30.0 / -dir.z } else { 0.0 };
            let got = frame.depth[y * 40 + x];
            assert!((got - expected).abs() <= 1e-4 * expected.max(1.0), "({x}, {y}): {got} vs {expected}");
        }
    }
    // A camera looking level sees sky in the top half: depth 0 there, and flow from rotation
    // alone (a point at infinity does not move under translation).
    let level = Pose::new(Vec3::new(0.0, 0.0, 30.0), 0.0, 0.0);
    let moved = Pose::new(Vec3::new(5.0, 0.0, 30.0), 0.0, 0.0);
    let (fa, fb) = (render_frame(&bare, &k, &level), render_frame(&bare, &k, &moved));
    assert_eq!(fa.depth[20], 0.0);
    let flow = exact_flow(&k, &level, &fa, &moved, &fb);
    assert!(flow.u(20, 0).abs() < 1e-5 && flow.v(20, 0).abs() < 1e-5);
}

// ---------------------------------------------------------------------------------------------
// `construct synth` output.

fn tiny_config(seed: u64) -> SynthConfig {
    SynthConfig {
        train_worlds: 2,
        test_worlds: 1,
        clips_per_world: 8,
        concats_per_world: 4,
        landmarks_per_world: 8,
        width: 64,
        height: 48,
        fps: 6,
        seconds: 1.0,
        seed,
        ground_truth: GroundTruth::All,
        recognition_movements: Vec::new(),
        training_answers: motionvl_construct::synth::write::AnswerForm::Letter,
    }
}

/// One generated tiny world shared by the tests below (generation is the slow part).
fn generated() -> &'static (tempfile::TempDir, SynthSummary) {
    static WORLD: OnceLock<(tempfile::TempDir, SynthSummary)> = OnceLock::new();
    WORLD.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let summary = generate(&tiny_config(11), dir.path(), false).expect("generate");
        (dir, summary)
    })
}

fn split_record(summary: &SynthSummary, split: Split) -> SplitRecord {
    let path = summary.out_dir.join(&summary.split(split).world_file);
    serde_json::from_str(&fs::read_to_string(&path).expect("world.json")).expect("parse world.json")
}

#[test]
fn manifests_load_with_the_data_readers() {
    let (_dir, summary) = generated();
    let opts = ReadOptions::default();
    for split in [Split::Train, Split::Test] {
        let questions = read_sisbench(&summary.manifest(split), &opts).expect("SIS-Bench manifest");
        assert!(questions.skipped.is_empty());
        let counted: usize = summary.split(split).questions.values().sum();
        assert_eq!(questions.items.len(), counted);
        for q in &questions.items {
            assert_eq!(q.options.len(), 4, "{}", q.id);
            let Task::Sis(task) = q.task else { panic!("{} is not a SIS-Bench task", q.id) };
            let clips = q.clip_count.expect("concat_num");
            let info = probe_video(&q.videos[0]).expect("video");
            assert_eq!((info.width, info.height), (64, 48));
            match task.video_type() {
                VideoType::Single => assert_eq!(clips, 1),
                // The world's concatenated videos also stand in for long ones (see `annotate`).
                VideoType::Concatenated | VideoType::Long => assert!((2..=4).contains(&clips)),
                // Cut from a joined video of three or four clips.
                VideoType::Shuffled => assert!(clips == 1 && info.frame_count >= 3 * 6, "{}", q.id),
            }
            if task.video_type() != VideoType::Shuffled {
                assert_eq!(info.frame_count, 6 * clips as usize, "{}", q.id);
            }
        }
        let samples = read_training_samples(&summary.conversations(split), &opts).expect("conversations");
        assert_eq!(samples.items.len(), questions.items.len());
        for (s, q) in samples.items.iter().zip(&questions.items) {
            assert_eq!(s.videos, q.videos);
            let Answer::Choice(letter) = q.answer else { panic!("letter answer") };
            assert_eq!(s.messages.last().map(|m| m.content.as_str()), Some(letter.to_string().as_str()));
            assert!(s.messages[0].content.starts_with("<video>\n"));
            assert!(s.messages[0].content.contains(&format!("{letter}. {}", q.options[(letter as u8 - b'A') as usize].text)));
        }
    }
    assert_eq!(summary.train_conversations(), summary.conversations(Split::Train));
    assert_eq!(summary.test_manifest(), summary.manifest(Split::Test));
    let reloaded = SynthSummary::load(&summary.out_dir).expect("load").expect("synth.json");
    assert_eq!(&reloaded, summary);
}

#[test]
fn every_letter_is_the_answer_equally_often_per_task() {
    let (_dir, summary) = generated();
    let mut asked = BTreeSet::new();
    for split in [Split::Train, Split::Test] {
        let questions = read_sisbench(&summary.manifest(split), &ReadOptions::default()).expect("manifest").items;
        let mut counts: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
        for q in &questions {
            let Answer::Choice(letter) = q.answer else { panic!("letter answer") };
            counts.entry(q.task.name()).or_default()[(letter as u8 - b'A') as usize] += 1;
            let texts: BTreeSet<&str> = q.options.iter().map(|o| o.text.as_str()).collect();
            assert_eq!(texts.len(), 4, "{}: options must differ", q.id);
        }
        for (task, c) in &counts {
            assert!(c.iter().all(|&n| n == c[0]), "{split} {task}: answers per letter {c:?}");
            asked.insert(*task);
        }
    }
    // The tiny world still asks the four tasks with rules of their own somewhere (all 13 in
    // a slightly larger world: `tests/construct.rs`).
    for task in ["Action Recognition", "Object Existence", "Action Sequence", "Landmark Order"] {
        assert!(asked.contains(task), "{task} not asked: {asked:?}");
    }
}

#[test]
fn recognition_answers_match_the_flown_behaviour() {
    let (_dir, summary) = generated();
    let record = split_record(summary, Split::Train);
    let behaviour_of: BTreeMap<String, Behaviour> = record.worlds.iter().flat_map(|w| &w.clips).map(|c| (c.video.clone(), c.behaviour)).collect();
    let questions = read_sisbench(&summary.manifest(Split::Train), &ReadOptions::default()).expect("manifest").items;
    let mut checked = 0;
    for q in questions.iter().filter(|q| q.task == Task::Sis(SisTask::ActionRecognition)) {
        let Answer::Choice(letter) = q.answer else { panic!("letter answer") };
        let video = q.videos[0].strip_prefix(summary.out_dir.join("train")).expect("under train/");
        let behaviour = behaviour_of[&video.to_string_lossy().into_owned()];
        assert_eq!(q.options[(letter as u8 - b'A') as usize].text, behaviour.phrase());
        checked += 1;
    }
    assert_eq!(checked, 16);
}

#[test]
fn train_and_test_come_from_different_worlds() {
    let (_dir, summary) = generated();
    let train: BTreeSet<u64> = summary.train.world_seeds.iter().copied().collect();
    assert_eq!(train.len(), 2);
    assert!(summary.test.world_seeds.iter().all(|s| !train.contains(s)));
    let (tr, te) = (split_record(summary, Split::Train), split_record(summary, Split::Test));
    for test_world in &te.worlds {
        for train_world in &tr.worlds {
            assert_ne!(test_world.world.terrain, train_world.world.terrain);
            assert_ne!(test_world.world.landmarks, train_world.world.landmarks);
        }
    }
}

#[test]
fn ground_truth_files_hold_the_clips_exact_flow_and_depth() {
    let (_dir, summary) = generated();
    let record = split_record(summary, Split::Test);
    let world = &record.worlds[0];
    let clip = &world.clips[0];
    let gt = clip.ground_truth.as_ref().expect("ground truth for test clips");
    let bytes = fs::read(summary.out_dir.join("test").join(gt)).expect("read ground truth");
    let st = SafeTensors::deserialize(&bytes).expect("safetensors");
    let flow = st.tensor("flow").expect("flow");
    let depth = st.tensor("depth").expect("depth");
    assert_eq!(flow.shape(), &[5, 2, 48, 64]);
    assert_eq!(depth.shape(), &[6, 48, 64]);
    assert_eq!(st.tensor("valid").expect("valid").shape(), &[5, 48, 64]);
    assert_eq!(st.tensor("camera_to_world").expect("cameras").shape(), &[6, 3, 4]);

    // Rendering the recorded flight again gives the stored numbers exactly.
    let k = record.intrinsics;
    let again = RenderedClip::render(&world.world, &k, clip.flight.poses(record.config.fps as f32, clip.frames));
    let floats = |b: &[u8]| b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect::<Vec<_>>();
    let stored_flow = floats(flow.data());
    let rendered_flow: Vec<f32> = again.flows.iter().flat_map(|f| f.uv.iter().copied()).collect();
    assert_eq!(stored_flow, rendered_flow);
    let stored_depth = floats(depth.data());
    let rendered_depth: Vec<f32> = again.frames.iter().flat_map(|f| f.depth.iter().copied()).collect();
    assert_eq!(stored_depth, rendered_depth);

    // The MP4 decodes to the rendered frames, up to compression.
    let decoded = decode_all(&summary.out_dir.join("test").join(&clip.video)).expect("decode");
    assert_eq!(decoded.frames.dim(), (6, 48, 64, 3));
    for (t, frame) in again.frames.iter().enumerate() {
        let pixels = decoded.frames.index_axis(ndarray::Axis(0), t);
        let diff: f64 = pixels.iter().zip(&frame.rgb).map(|(a, b)| f64::from(a.abs_diff(*b))).sum::<f64>();
        let mean = diff / frame.rgb.len() as f64;
        assert!(mean < 6.0, "frame {t}: decoded video is {mean:.2} levels off the render");
    }
}

/// Every file under `root` with its bytes, except videos (encoders need not be bit-exact).
fn files(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).expect("list") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e != "mp4") {
                let rel = path.strip_prefix(root).expect("under root").to_path_buf();
                out.insert(rel, fs::read(&path).expect("read"));
            }
        }
    }
    out
}

#[test]
fn the_same_seed_gives_identical_files_and_another_seed_does_not() {
    let (dir, _) = generated();
    let again = tempfile::tempdir().expect("tempdir");
    generate(&tiny_config(11), again.path(), false).expect("generate");
    let (first, second) = (files(dir.path()), files(again.path()));
    assert!(first.keys().any(|p| p.extension().is_some_and(|e| e == "safetensors")));
    assert_eq!(first.keys().collect::<Vec<_>>(), second.keys().collect::<Vec<_>>());
    for (path, bytes) in &first {
        assert!(bytes == &second[path], "{} differs between runs", path.display());
    }

    let other = tempfile::tempdir().expect("tempdir");
    let config = SynthConfig { train_worlds: 1, clips_per_world: 2, concats_per_world: 0, ..tiny_config(12) };
    generate(&config, other.path(), false).expect("generate");
    let a = fs::read(dir.path().join("test/world.json")).expect("world.json");
    let b = fs::read(other.path().join("test/world.json")).expect("world.json");
    assert_ne!(a, b);
}

#[test]
fn an_existing_world_is_kept_unless_forced() {
    let out = tempfile::tempdir().expect("tempdir");
    let config =
        SynthConfig { train_worlds: 1, test_worlds: 1, clips_per_world: 1, concats_per_world: 0, ground_truth: GroundTruth::None, ..tiny_config(3) };
    generate(&config, out.path(), false).expect("first run");
    assert!(matches!(generate(&config, out.path(), false), Err(SynthError::Exists(_))));
    let stray = out.path().join("notes.txt");
    fs::write(&stray, "mine").expect("write");
    let summary = generate(&config, out.path(), true).expect("forced run");
    assert!(stray.exists(), "--force removes only what construct synth writes");
    assert_eq!(summary.train.clips, 1);
    assert!(
        fs::read_dir(out.path().join("test/videos")).expect("videos").all(|e| { e.expect("entry").path().extension().is_some_and(|x| x == "mp4") })
    );
}

#[test]
fn bad_settings_say_what_to_change() {
    let out = tempfile::tempdir().expect("tempdir");
    for (config, needle) in [
        (SynthConfig { width: 63, ..tiny_config(1) }, "even"),
        (SynthConfig { fps: 0, ..tiny_config(1) }, "--fps"),
        (SynthConfig { test_worlds: 0, ..tiny_config(1) }, "--test-worlds"),
        (SynthConfig { seconds: 0.1, ..tiny_config(1) }, "two frames"),
        (SynthConfig { landmarks_per_world: 500, ..tiny_config(1) }, "distinct names"),
    ] {
        let err = generate(&config, out.path(), false).expect_err("refused").to_string();
        assert!(err.contains(needle), "`{err}` should mention `{needle}`");
    }
}
