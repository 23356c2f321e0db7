//! CVAA end to end on a tiny synthetic world: `construct synth --satellite` pairs, a few
//! `train cvaa` steps that resume exactly, sliding-window retrieval from the checkpoint, and its
//! box appended to a LinkS²Bench question; and a small two-stage run whose retriever finds the
//! UAV frame's true footprint more often than a random window does.

use std::path::Path;

use motionvl_construct::synth::SynthConfig;
use motionvl_construct::synth::satellite::{SatelliteConfig, write_pairs};
use motionvl_data::cvaa::{UavView, read_pairs};
use motionvl_data::samples::ReadOptions;
use motionvl_data::video::{EncodeSettings, VideoWriter};
use motionvl_eval::prior::{CvaaPriorConfig, write_prompts};
use motionvl_eval::retrieve::serialise_box;
use motionvl_eval::retrieve::{Retriever, WindowConfig};
use motionvl_models::dinov2::Dinov2Config;
use motionvl_train::cvaa::{CheckpointSection, CvaaRecipe, CvaaStepLog, CvaaTrainer, DataSection, LoggingSection, ModelSection, OptimSection};

fn recipe(pairs: &Path, out: &Path, max_steps: usize) -> CvaaRecipe {
    CvaaRecipe {
        output_dir: out.to_path_buf(),
        seed: 3,
        model: ModelSection {
            backbone: None,
            init: Some(Dinov2Config {
                hidden_size: 32,
                num_hidden_layers: 1,
                num_attention_heads: 2,
                image_size: 28,
                patch_size: 14,
                ..Dinov2Config::default()
            }),
            train_backbone: true,
            init_from: None,
            embed_dim: 16,
            adapter_hidden: 32,
            gem_p: 3.0,
            temperature: 0.07,
            uav_size: [28, 28],
            satellite_size: 28,
            device: motionvl_models::device::DeviceName::Cpu,
        },
        data: DataSection {
            train: Some(pairs.to_path_buf()),
            university1652: None,
            crop_jitter: 0.1,
            same_image_batches: true,
            overlap_targets: true,
        },
        optim: OptimSection {
            lr: 1e-3,
            backbone_lr: Some(5e-4),
            weight_decay: 0.05,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            batch_size: 4,
            epochs: 2,
            max_steps: Some(max_steps),
            warmup_ratio: 0.25,
            schedule: motionvl_train::optim::LrSchedule::Cosine,
            max_grad_norm: 1.0,
            label_smoothing: 0.1,
        },
        checkpoint: CheckpointSection { every: 2, keep: 3 },
        logging: LoggingSection { tensorboard: true, progress_bar: false },
    }
}

fn losses(logs: &[CvaaStepLog]) -> Vec<(usize, f64)> {
    logs.iter().map(|l| (l.step, l.loss)).collect()
}

#[test]
fn trains_resumes_exactly_and_retrieves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let world = SynthConfig { train_worlds: 1, test_worlds: 1, ..SynthConfig::default() };
    let sat = SatelliteConfig {
        size_px: 96,
        metres_per_pixel: 3.0,
        frame_px: 28,
        train_frames_per_world: 8,
        test_frames_per_world: 4,
        ..SatelliteConfig::default()
    };
    let summary = write_pairs(&world, &sat, dir.path(), &|| {}).expect("pairs");
    assert_eq!(summary.pairs, [8, 4]);

    let straight = CvaaTrainer::new(&recipe(&summary.train_pairs, &dir.path().join("straight"), 4), None).expect("trainer").run().expect("4 steps");
    let first = CvaaTrainer::new(&recipe(&summary.train_pairs, &dir.path().join("resumed"), 2), None).expect("trainer").run().expect("2 steps");
    let resumed = CvaaTrainer::new(&recipe(&summary.train_pairs, &dir.path().join("resumed"), 4), Some("auto")).expect("resume");
    assert_eq!(resumed.step_count(), 2);
    let second = resumed.run().expect("2 more steps");
    let mut joined = losses(&first);
    joined.extend(losses(&second));
    assert_eq!(joined, losses(&straight), "2 steps + resume + 2 steps must equal 4 steps exactly");
    assert!(straight.iter().all(|l| l.loss.is_finite() && l.temperature > 0.0));

    // A stop request (a signal, in the binary): the step in flight finishes, a checkpoint of it
    // is saved although `every` is 2, and the resume continues exactly.
    let stop = motionvl_data::stop::StopFlag::new();
    let mut stopped = CvaaTrainer::new(&recipe(&summary.train_pairs, &dir.path().join("stopped"), 4), None).expect("trainer");
    stopped.stop_on(stop.clone());
    stop.request();
    match stopped.run() {
        Err(motionvl_train::sft::TrainError::Stopped { step: 1, checkpoint }) => {
            assert!(checkpoint.ends_with("checkpoint-1"), "{}", checkpoint.display())
        }
        other => panic!("not stopped after step 1: {:?}", other.map(|l| l.len())),
    }
    let rest =
        CvaaTrainer::new(&recipe(&summary.train_pairs, &dir.path().join("stopped"), 4), Some("auto")).expect("resume").run().expect("3 more steps");
    assert_eq!(losses(&rest), losses(&straight[1..]), "stopped after step 1 and resumed: the straight run's steps");

    let a = motionvl_models::cvaa::Cvaa::load(&dir.path().join("straight/checkpoint-4"), &candle_core::Device::Cpu).expect("checkpoint loads");
    let b = motionvl_models::cvaa::Cvaa::load(&dir.path().join("resumed/checkpoint-4"), &candle_core::Device::Cpu).expect("checkpoint loads");
    let pixels = candle_core::Tensor::ones((1, 3, 28, 28), candle_core::DType::F32, &candle_core::Device::Cpu).expect("pixels");
    let (ea, eb) = (a.embed_uav(&pixels).expect("embed"), b.embed_uav(&pixels).expect("embed"));
    assert_eq!(ea.to_vec2::<f32>().expect("values"), eb.to_vec2::<f32>().expect("values"), "resumed weights differ");
    let log = std::fs::read_to_string(dir.path().join("resumed/trainer_log.jsonl")).expect("log");
    assert_eq!(log.lines().count(), 4, "one log line per step after the resume");
    assert!(std::fs::read_dir(dir.path().join("resumed/tensorboard")).expect("events").next().is_some());

    let retriever =
        Retriever::load(&dir.path().join("straight/checkpoint-4"), WindowConfig::default(), &candle_core::Device::Cpu).expect("retriever");
    let test = read_pairs(&summary.test_pairs).expect("test pairs");
    let best = retriever.retrieve(&test[0].uav, &test[0].satellite, 5).expect("retrieve");
    assert_eq!(best.len(), 5);
    assert!(best.windows(2).all(|w| w[0].score >= w[1].score), "best first");
    assert!(best.iter().all(|r| r.bbox.iter().all(|v| (0.0..=1.0).contains(v)) && r.bbox[0] < r.bbox[2] && r.bbox[1] < r.bbox[3]));
    let report = retriever.evaluate_pairs(&test, 0, &|| {}).expect("metrics");
    let windowed = report.windowed.expect("the synthetic pairs have boxes");
    // Four steps at 28 px teach nothing; how well a trained retriever finds the footprint is
    // `a_trained_retriever_finds_the_footprint_better_than_a_random_window` below.
    assert_eq!(windowed.frames, 4);
    assert_eq!(report.drone_to_satellite.queries, 4);

    // The box in the prompt: a LinkS²Bench row with the UAV clip and the satellite image gets
    // the window retrieved for the clip's middle frame; a row without a satellite image does not.
    let frame = test[1].uav.load().expect("frame");
    let clip = dir.path().join("uav.mp4");
    let mut writer = VideoWriter::create(&clip, 28, 28, &EncodeSettings { frame_rate: (2, 1), ..EncodeSettings::default() }).expect("writer");
    for _ in 0..4 {
        writer.push(frame.view()).expect("frame");
    }
    writer.finish().expect("video");
    let manifest = dir.path().join("links2.jsonl");
    let row = |id: &str, satellite: Option<&Path>| {
        let mut row = serde_json::json!({"question_id": id, "task": "Target Visibility", "question": "Is the tank visible?", "answer": "yes", "video_path": "uav.mp4"});
        if let Some(s) = satellite {
            row["satellite_image"] = serde_json::Value::String(s.display().to_string());
        }
        row.to_string()
    };
    std::fs::write(&manifest, format!("{}\n{}\n", row("with-satellite", Some(&test[1].satellite)), row("video-only", None))).expect("manifest");
    let cfg = CvaaPriorConfig { checkpoint: Some(dir.path().join("straight/checkpoint-4")), ..CvaaPriorConfig::default() };
    let prompts = dir.path().join("prompts.jsonl");
    let opts = ReadOptions { media_root: None, check_media: true, skip_bad: false };
    let bench = motionvl_eval::bench::find("links2").expect("links2");
    let (rows, boxed) = write_prompts(bench, &manifest, &opts, &cfg, &candle_core::Device::Cpu, &prompts, &|| {}).expect("prompts");
    assert_eq!((rows, boxed), (2, 1));
    let lines: Vec<serde_json::Value> =
        std::fs::read_to_string(&prompts).expect("prompts").lines().map(|l| serde_json::from_str(l).expect("json")).collect();
    let duration = motionvl_data::video::probe_video(&clip).expect("probe").duration_s;
    let expected =
        retriever.retrieve(&UavView::VideoAt { path: clip.clone(), seconds: duration / 2.0 }, &test[1].satellite, 1).expect("retrieve")[0].bbox;
    let got: Vec<f64> = serde_json::from_value(lines[0]["box"].clone()).expect("a box");
    assert_eq!(got, expected.to_vec());
    let prompt = lines[0]["prompt"].as_str().expect("prompt");
    assert!(prompt.contains("Is the tank visible?") && prompt.contains(&serialise_box(expected)), "{prompt}");
    assert!(lines[1]["box"].is_null() && !lines[1]["prompt"].as_str().unwrap_or_default().contains("Alignment prior"));
}

#[test]
fn a_pretrained_backbone_stays_frozen_while_the_heads_learn() {
    let dir = tempfile::tempdir().expect("temp dir");
    let world = SynthConfig { train_worlds: 1, test_worlds: 1, ..SynthConfig::default() };
    let sat = SatelliteConfig {
        size_px: 96,
        metres_per_pixel: 3.0,
        frame_px: 28,
        train_frames_per_world: 8,
        test_frames_per_world: 1,
        ..SatelliteConfig::default()
    };
    let summary = write_pairs(&world, &sat, dir.path(), &|| {}).expect("pairs");
    let fixture = motionvl_tests::fixtures::fixtures_root().join("dinov2/odd_size");
    let mut r = recipe(&summary.train_pairs, &dir.path().join("frozen"), 2);
    r.model.init = None;
    r.model.train_backbone = false;
    r.model.backbone = Some(fixture.display().to_string());
    let trainer = CvaaTrainer::new(&r, None).expect("trainer");
    // Variables are updated in place: keep the values, not the tensors.
    let projector_before = trainer.tensors()["projector.weight"].flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("projector");
    trainer.run().expect("2 steps");
    let after = motionvl_models::dinov2::Dinov2Weights::open(&fixture, &candle_core::Device::Cpu).expect("fixture").tensors;
    let saved =
        candle_core::safetensors::load(dir.path().join("frozen/checkpoint-2/model.safetensors"), &candle_core::Device::Cpu).expect("checkpoint");
    let same = |a: &candle_core::Tensor, b: &candle_core::Tensor| {
        a.flatten_all().and_then(|t| t.to_vec1::<f32>()).ok() == b.flatten_all().and_then(|t| t.to_vec1::<f32>()).ok()
    };
    for (name, tensor) in &after {
        let stored = saved.get(&format!("backbone.{name}")).unwrap_or_else(|| panic!("checkpoint lacks backbone.{name}"));
        assert!(same(stored, tensor), "frozen backbone tensor {name} changed");
    }
    let projector_after = saved["projector.weight"].flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("projector");
    assert_ne!(projector_after, projector_before, "the projector did not learn");
}

/// Intersection over union of two `[x1, y1, x2, y2]` boxes.
fn iou(a: [f64; 4], b: [f64; 4]) -> f64 {
    let w = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let h = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let area = |r: [f64; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    w * h / (area(a) + area(b) - w * h)
}

// The README's two stages in miniature (56 px views, a 2-layer ViT, 60 + 64 steps on 4 training
// worlds of 24 frames), scored on 48 frames of a held-out world against the true footprints.
#[test]
fn a_trained_retriever_finds_the_footprint_better_than_a_random_window() {
    let dir = tempfile::tempdir().expect("temp dir");
    let world = SynthConfig { train_worlds: 4, test_worlds: 1, seed: 1, ..SynthConfig::default() };
    let sat = SatelliteConfig { train_frames_per_world: 24, test_frames_per_world: 48, ..SatelliteConfig::default() };
    let summary = write_pairs(&world, &sat, dir.path(), &|| {}).expect("pairs");
    assert_eq!(summary.pairs, [96, 48]);

    let small = |out: &str| {
        let mut r = recipe(&summary.train_pairs, &dir.path().join(out), 0);
        r.seed = 0;
        r.model.init = Some(Dinov2Config {
            hidden_size: 48,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            image_size: 56,
            patch_size: 14,
            ..Dinov2Config::default()
        });
        (r.model.embed_dim, r.model.adapter_hidden, r.model.uav_size, r.model.satellite_size) = (32, 64, [56, 56], 56);
        r.data.overlap_targets = false;
        r.optim.max_steps = None;
        r.optim.warmup_ratio = 0.05;
        r.checkpoint = CheckpointSection { every: 1000, keep: 1 };
        r.logging.tensorboard = false;
        r
    };
    // Stage 1: negatives from every world, 96 pairs / 16 × 10 epochs = 60 steps.
    let mut stage1 = small("stage1");
    stage1.data.same_image_batches = false;
    (stage1.optim.batch_size, stage1.optim.epochs) = (16, 10);
    CvaaTrainer::new(&stage1, None).expect("stage 1").run().expect("stage 1 trains");
    // Stage 2: every batch from one satellite image, 24 / 12 × 4 worlds × 8 epochs = 64 steps.
    let mut stage2 = small("stage2");
    stage2.model.init_from = Some(dir.path().join("stage1/checkpoint-60"));
    stage2.data.same_image_batches = true;
    (stage2.optim.lr, stage2.optim.backbone_lr, stage2.optim.batch_size, stage2.optim.epochs) = (3e-4, Some(1.5e-4), 12, 8);
    CvaaTrainer::new(&stage2, None).expect("stage 2").run().expect("stage 2 trains");

    let retriever = Retriever::load(&dir.path().join("stage2/checkpoint-64"), WindowConfig::default(), &candle_core::Device::Cpu).expect("retriever");
    let test = read_pairs(&summary.test_pairs).expect("test pairs");
    let windows = retriever.index(&test[0].satellite).expect("windows").boxes.clone();
    let (mut hits, mut ious, mut random_hits, mut random_ious) = (0.0, 0.0, 0.0, 0.0);
    for pair in &test {
        let truth = pair.footprint.expect("synthetic pairs have footprints");
        assert_eq!(pair.satellite, test[0].satellite, "one held-out world, one satellite image");
        let got = iou(retriever.retrieve(&pair.uav, &pair.satellite, 1).expect("retrieve")[0].bbox, truth);
        hits += f64::from(u8::from(got >= 0.5));
        ious += got;
        // A window drawn uniformly: its expected hit and IoU, exactly, over all 211 windows.
        let all: Vec<f64> = windows.iter().map(|w| iou(*w, truth)).collect();
        random_hits += all.iter().filter(|&&v| v >= 0.5).count() as f64 / all.len() as f64;
        random_ious += all.iter().sum::<f64>() / all.len() as f64;
    }
    let n = test.len() as f64;
    let (hit_rate, mean_iou, random_hit_rate, random_iou) = (hits / n, ious / n, random_hits / n, random_ious / n);
    // Measured: top window hits 9 of 48 frames (0.1875) at mean IoU 0.282, where a random window
    // hits 0.047 at 0.145; with training seeds 1 and 2 instead of 0, 0.250 / 0.293 and 0.229 /
    // 0.287. The bounds leave two frames of slack below the weakest seed.
    assert!(hit_rate > 3.0 * random_hit_rate, "hit rate {hit_rate} vs {random_hit_rate} for a random window");
    assert!(mean_iou > 1.5 * random_iou, "mean IoU {mean_iou} vs {random_iou} for a random window");

    // `evaluate pairs` reports the same top windows.
    let windowed = retriever.evaluate_pairs(&test, 0, &|| {}).expect("metrics").windowed.expect("boxes");
    assert!((windowed.hit_rate - hit_rate).abs() < 1e-12 && (windowed.mean_iou - mean_iou).abs() < 1e-9, "{windowed:?}");
}
