//! Data loader: deterministic order for any worker count, exact resume, bounded prefetch,
//! skips and errors that name the sample, and the real ffmpeg + preprocessing media path.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ndarray::Array2;

use motionvl_data::loader::{
    BoxError, DataLoader, LoadError, LoaderConfig, MediaGrids, MediaProcessor, PixelInput, Position, ProcessedMedia, QwenMedia,
};
use motionvl_data::preprocess::PreprocessConfig;
use motionvl_data::samples::TrainingSample;
use motionvl_data::text::{Message, QwenTokenizer, TemplateOptions, train_tokenizer};

fn tokenizer() -> QwenTokenizer {
    train_tokenizer(["What does the drone do?", "It flies forward and turns left."], 300).expect("tokenizer")
}

fn sample(i: usize, name: &str) -> TrainingSample {
    TrainingSample {
        id: format!("{name}-{i}"),
        messages: vec![Message::user("<video>What does the drone do?"), Message::assistant("It flies forward.")],
        images: Vec::new(),
        videos: vec![PathBuf::from(format!("/virtual/{name}-{i}.mp4"))],
        format: None,
        task: None,
        file: PathBuf::from("train.jsonl"),
        line: i + 1,
        with_motion: true,
    }
}

fn dataset(n: usize) -> Vec<TrainingSample> {
    (0..n).map(|i| sample(i, "s")).collect()
}

/// The sample's line, written into every pixel so the test can check pixels stay with their
/// sample; a small sleep that varies by sample scrambles the workers' finishing order.
fn fake_media(sample: &TrainingSample) -> Result<ProcessedMedia, BoxError> {
    std::thread::sleep(Duration::from_millis((sample.line as u64 * 7) % 4));
    let grid = if sample.id.starts_with("huge") { [8, 16, 16] } else { [2, 2, 2] };
    let n = grid.iter().product();
    let videos = sample
        .videos
        .iter()
        .map(|_| PixelInput {
            pixel_values: Array2::from_elem((n, 4), sample.line as f32),
            grid_thw: grid,
            second_per_grid: Some(1.0),
            grid_seconds: Vec::new(),
        })
        .collect();
    Ok(ProcessedMedia { images: Vec::new(), videos, motion: Vec::new() })
}

fn config(workers: usize) -> LoaderConfig {
    LoaderConfig { workers, prefetch: 6, seed: 42, ..LoaderConfig::default() }
}

fn ids(loader: &DataLoader<impl MediaProcessor + 'static>, epoch: u64) -> Vec<String> {
    loader.epoch(epoch).map(|r| r.expect("sample").encoded.id).collect()
}

#[test]
fn order_is_the_same_for_any_worker_count_and_pixels_stay_with_their_sample() {
    let mut expected: Option<Vec<String>> = None;
    for workers in [0, 1, 4] {
        let loader = DataLoader::new(dataset(40), tokenizer(), fake_media, config(workers));
        let order = loader.order(3);
        let mut got = Vec::new();
        for (k, item) in loader.epoch(3).enumerate() {
            let s = item.expect("sample");
            assert_eq!(s.position, Position { epoch: 3, index: k });
            assert_eq!(s.dataset_index, order[k]);
            let line = loader.samples()[s.dataset_index].line as f32;
            assert!(s.videos[0].pixel_values.iter().all(|&v| v == line), "pixels belong to their sample");
            assert_eq!(s.encoded.video_grids, vec![[2, 2, 2]]);
            got.push(s.encoded.id);
        }
        let from_order: Vec<String> = order.iter().map(|&i| loader.samples()[i].id.clone()).collect();
        assert_eq!(got, from_order);
        match &expected {
            None => expected = Some(got),
            Some(e) => assert_eq!(&got, e, "{workers} workers changed the order"),
        }
    }
}

#[test]
fn each_epoch_is_a_new_permutation_and_seed_matters() {
    let loader = DataLoader::new(dataset(30), tokenizer(), fake_media, config(2));
    let e0 = ids(&loader, 0);
    let e1 = ids(&loader, 1);
    assert_ne!(e0, e1);
    let mut a = e0.clone();
    let mut b = e1.clone();
    a.sort();
    b.sort();
    assert_eq!(a, b);
    assert_eq!(a.len(), 30);
    let other_seed = DataLoader::new(dataset(30), tokenizer(), fake_media, LoaderConfig { seed: 43, ..config(2) });
    assert_ne!(ids(&other_seed, 0), e0);
    let unshuffled = DataLoader::new(dataset(5), tokenizer(), fake_media, LoaderConfig { shuffle: false, ..config(2) });
    assert_eq!(ids(&unshuffled, 9), ["s-0", "s-1", "s-2", "s-3", "s-4"]);
}

#[test]
fn resume_continues_exactly_where_a_checkpoint_left_off() {
    let loader = DataLoader::new(dataset(25), tokenizer(), fake_media, config(3));
    let full = ids(&loader, 2);
    let mut it = loader.epoch(2);
    let head: Vec<String> = it.by_ref().take(13).map(|r| r.expect("sample").encoded.id).collect();
    let saved = it.position();
    drop(it);
    assert_eq!(saved, Position { epoch: 2, index: 13 });
    assert_eq!(head, full[..13]);

    // A fresh loader (a restarted process) with the same data and seed.
    let restarted = DataLoader::new(dataset(25), tokenizer(), fake_media, config(1));
    let rest: Vec<String> = restarted.resume(saved).expect("resume").map(|r| r.expect("sample").encoded.id).collect();
    assert_eq!(rest, full[13..]);
    assert_eq!(restarted.resume(Position { epoch: 2, index: 25 }).expect("end").count(), 0);
    assert!(matches!(restarted.resume(Position { epoch: 2, index: 26 }), Err(LoadError::BadPosition { index: 26, len: 25 })));
}

#[test]
fn too_long_samples_are_skipped_counted_and_named() {
    let mut data = dataset(6);
    data[3] = sample(3, "huge");
    let cfg = LoaderConfig { template: TemplateOptions { max_seq_len: Some(256), ..TemplateOptions::default() }, shuffle: false, ..config(2) };
    let loader = DataLoader::new(data, tokenizer(), fake_media, cfg);
    let mut it = loader.epoch(0);
    let got: Vec<String> = it.by_ref().map(|r| r.expect("sample").encoded.id).collect();
    assert_eq!(got, ["s-0", "s-1", "s-2", "s-4", "s-5"]);
    let skipped = it.skipped();
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].sample_id, "huge-3");
    assert_eq!(skipped[0].location, "train.jsonl:4");
    assert_eq!(skipped[0].position, Position { epoch: 0, index: 3 });
    assert!(skipped[0].reason.contains("max_seq_len 256"), "{}", skipped[0].reason);
    assert_eq!(it.position(), Position { epoch: 0, index: 6 });
}

/// Predicts grids like [`fake_media`] and counts how often it really decodes.
struct Predicting {
    decoded: Arc<AtomicUsize>,
}

impl MediaProcessor for Predicting {
    fn process(&self, sample: &TrainingSample) -> Result<ProcessedMedia, BoxError> {
        self.decoded.fetch_add(1, Ordering::SeqCst);
        fake_media(sample)
    }

    fn grids(&self, sample: &TrainingSample) -> Option<Result<MediaGrids, BoxError>> {
        let grid = if sample.id.starts_with("huge") { [8, 16, 16] } else { [2, 2, 2] };
        Some(Ok(MediaGrids { images: Vec::new(), videos: vec![grid; sample.videos.len()], video_seconds: Vec::new() }))
    }
}

#[test]
fn predicted_grids_skip_long_samples_without_decoding_them() {
    let mut data = dataset(5);
    data[1] = sample(1, "huge");
    let decoded = Arc::new(AtomicUsize::new(0));
    let cfg = LoaderConfig { template: TemplateOptions { max_seq_len: Some(256), ..TemplateOptions::default() }, shuffle: false, ..config(2) };
    let loader = DataLoader::new(data, tokenizer(), Predicting { decoded: Arc::clone(&decoded) }, cfg);
    let mut it = loader.epoch(0);
    let ids: Vec<String> = it.by_ref().map(|r| r.expect("sample").encoded.id).collect();
    assert_eq!(ids, ["s-0", "s-2", "s-3", "s-4"]);
    assert_eq!(it.skipped().len(), 1);
    assert_eq!(it.skipped()[0].sample_id, "huge-1");
    assert_eq!(decoded.load(Ordering::SeqCst), 4, "the long sample was never decoded");
}

fn flaky_media(sample: &TrainingSample) -> Result<ProcessedMedia, BoxError> {
    if sample.id == "s-3" {
        return Err("moov atom not found".into());
    }
    if sample.id == "s-4" {
        panic!("decoder bug");
    }
    if sample.id == "s-5" {
        return Ok(ProcessedMedia::default());
    }
    fake_media(sample)
}

#[test]
fn media_failures_name_the_sample_and_iteration_goes_on() {
    let cfg = LoaderConfig { shuffle: false, ..config(3) };
    let loader = DataLoader::new(dataset(7), tokenizer(), flaky_media, cfg.clone());
    let results: Vec<Result<String, LoadError>> = loader.epoch(0).map(|r| r.map(|s| s.encoded.id)).collect();
    assert_eq!(results.len(), 7);
    let ok: Vec<&String> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(ok, ["s-0", "s-1", "s-2", "s-6"]);
    match &results[3] {
        Err(e @ LoadError::Media { sample_id, location, .. }) => {
            assert_eq!((sample_id.as_str(), location.as_str()), ("s-3", "train.jsonl:4"));
            assert!(e.to_string().contains("moov atom not found"));
        }
        other => panic!("expected a media error, got {other:?}"),
    }
    assert!(matches!(&results[4], Err(LoadError::Panicked { sample_id, message, .. }) if sample_id == "s-4" && message == "decoder bug"));
    assert!(matches!(&results[5], Err(LoadError::MediaCount { expected: 1, got: 0, .. })));

    // With skip_errors the same failures become skipped samples.
    let loader = DataLoader::new(dataset(7), tokenizer(), flaky_media, LoaderConfig { skip_errors: true, ..cfg });
    let mut it = loader.epoch(0);
    let loaded: Vec<String> = it.by_ref().map(|r| r.expect("no errors").encoded.id).collect();
    assert_eq!(loaded, ["s-0", "s-1", "s-2", "s-6"]);
    let skipped: Vec<&str> = it.skipped().iter().map(|s| s.sample_id.as_str()).collect();
    assert_eq!(skipped, ["s-3", "s-4", "s-5"]);
}

#[test]
fn prefetch_is_bounded() {
    let started = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&started);
    let counting = move |s: &TrainingSample| {
        counter.fetch_add(1, Ordering::SeqCst);
        fake_media(s)
    };
    let cfg = LoaderConfig { workers: 4, prefetch: 3, ..config(4) };
    let loader = DataLoader::new(dataset(50), tokenizer(), counting, cfg);
    let mut it = loader.epoch(0);
    // Wait (generously, CI may be loaded) for the window to fill, then check nothing more runs.
    let settle = |n: usize| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while started.load(Ordering::SeqCst) < n && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100));
        started.load(Ordering::SeqCst)
    };
    assert_eq!(settle(3), 3, "workers fill the window and stop");
    it.next().expect("one").expect("sample");
    assert_eq!(settle(4), 4, "one consumed, one more claimed");
    drop(it); // must not hang
    assert!(started.load(Ordering::SeqCst) <= 4);
}

#[test]
fn qwen_media_decodes_real_videos_frame_folders_and_images() {
    use motionvl_data::video::{EncodeSettings, VideoWriter};
    let dir = std::env::temp_dir().join(format!("motionvl-loader-{}", std::process::id()));
    let frames_dir = dir.join("seq");
    std::fs::create_dir_all(&frames_dir).expect("mkdir");

    // A 2 s, 10 FPS, 64×48 clip with a moving bright bar.
    let clip = dir.join("clip.mp4");
    let settings = EncodeSettings { frame_rate: (10, 1), ..EncodeSettings::default() };
    let mut writer = VideoWriter::create(&clip, 64, 48, &settings).expect("writer");
    for t in 0..20 {
        let mut frame = ndarray::Array3::<u8>::from_elem((48, 64, 3), 40);
        for y in 0..48 {
            for x in (t * 3)..(t * 3 + 6) {
                frame[[y, x, 0]] = 230;
            }
        }
        writer.push(frame.view()).expect("push");
    }
    writer.finish().expect("finish");
    for i in 1..=8 {
        image::RgbImage::from_pixel(32, 32, image::Rgb([i * 25, 90, 200])).save(frames_dir.join(format!("{i:07}.png"))).expect("png");
    }
    let photo = dir.join("sat.png");
    image::RgbImage::from_pixel(60, 40, image::Rgb([10, 200, 30])).save(&photo).expect("png");

    let small = PreprocessConfig { min_pixels: 56 * 56, max_pixels: 112 * 112, ..PreprocessConfig::default() };
    let media = QwenMedia { video_config: small.clone(), image_config: small, ..QwenMedia::default() };
    let s = TrainingSample {
        id: "real".into(),
        messages: vec![Message::user("<video> and <video> over <image>: what does the drone do?"), Message::assistant("It flies forward.")],
        images: vec![photo],
        videos: vec![clip, frames_dir],
        format: None,
        task: None,
        file: PathBuf::from("real.json"),
        line: 1,
        with_motion: true,
    };
    // Header-only prediction of the grids, used to skip long samples before decoding.
    let predicted = media.grids(&s).expect("QwenMedia predicts grids").expect("headers readable");
    let loader = DataLoader::new(vec![s], tokenizer(), media, LoaderConfig { workers: 1, ..LoaderConfig::default() });
    let loaded = loader.epoch(0).next().expect("one").expect("loaded");

    // 20 frames at 10 FPS under the 2 FPS / 8–32 plan: 8 frames spread over the clip → t = 4;
    // 48×64 resizes to 56×56 → 4×4 patches.
    let v = &loaded.videos[0];
    assert_eq!(v.grid_thw, [4, 4, 4]);
    assert_eq!(v.pixel_values.dim(), (64, 3 * 2 * 14 * 14));
    let spg = v.second_per_grid.expect("video timing");
    assert!((spg - 2.0 / (10.0 / (19.0 / 7.0))).abs() < 1e-9, "second_per_grid {spg} uses the actual rate");
    // A folder of eight 32×32 frames at the declared 15 FPS (0.53 s): 2 frames at 2 FPS, raised
    // to the plan's minimum of 8, i.e. all of them → t = 4; min_pixels lifts 32² to 56².
    let f = &loaded.videos[1];
    assert_eq!(f.grid_thw, [4, 4, 4]);
    assert!((f.second_per_grid.expect("timing") - 2.0 / 15.0).abs() < 1e-9);
    let img = &loaded.images[0];
    assert_eq!(img.grid_thw[0], 1);
    assert!(img.second_per_grid.is_none());

    // Predicted from headers, equal to what decoding gave: grids and the steps' times alike.
    let seconds = vec![v.grid_seconds.clone(), f.grid_seconds.clone()];
    assert_eq!(predicted, MediaGrids { images: vec![img.grid_thw], videos: vec![v.grid_thw, f.grid_thw], video_seconds: seconds });
    assert_eq!(f.grid_seconds.len(), f.grid_thw[0], "one time per temporal step");
    let enc = &loaded.encoded;
    assert_eq!(enc.video_grids, vec![v.grid_thw, f.grid_thw]);
    assert_eq!(enc.image_grids, vec![img.grid_thw]);
    let video_pads = enc.mm_token_type_ids.iter().filter(|&&t| t == 2).count();
    let image_pads = enc.mm_token_type_ids.iter().filter(|&&t| t == 1).count();
    assert_eq!(video_pads, (v.pixel_values.nrows() + f.pixel_values.nrows()) / 4);
    assert_eq!(image_pads, img.pixel_values.nrows() / 4);
    std::fs::remove_dir_all(&dir).ok();
}
