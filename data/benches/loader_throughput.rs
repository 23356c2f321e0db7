//! Samples per second of the input pipeline for one 30 s 720p video at the SIS-Motion training
//! plan (2 FPS, 8–32 frames, 128–512 × 28² pixels): decode (ffmpeg) + plan + resize/normalise/
//! patchify + chat template and tokenisation, against qwen-vl-utils + transformers' video
//! processor on the same file when Python has them (`tools/bench/loader_throughput.py`).
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-data --bench loader_throughput`

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use motionvl_data::loader::{MediaProcessor, QwenMedia};
use motionvl_data::samples::TrainingSample;
use motionvl_data::text::{Message, TemplateOptions, train_tokenizer};
use motionvl_data::video::{EncodeSettings, VideoWriter};
use ndarray::Array3;

/// A 30 s 1280×720 30 FPS H.264 clip of moving gradients and blocks, written once.
fn test_video(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("bench-720p-30s.mp4");
    if path.is_file() {
        return Ok(path);
    }
    let (w, h) = (1280usize, 720usize);
    let settings = EncodeSettings { frame_rate: (30, 1), options: vec![("preset".into(), "veryfast".into())], ..EncodeSettings::default() };
    let mut writer = VideoWriter::create(&path, w, h, &settings)?;
    for t in 0..900usize {
        let frame = Array3::from_shape_fn((h, w, 3), |(y, x, c)| {
            let shifted = (x + 4 * t) % w;
            let block = ((shifted / 80) + (y / 80)) % 2;
            (((shifted * (c + 1)) / 5 + y / 3) % 200 + 40 * block) as u8
        });
        writer.push(frame.view())?;
    }
    writer.finish()?;
    Ok(path)
}

fn main() -> anyhow::Result<()> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&dir)?;
    let video = test_video(&dir)?;
    let media = QwenMedia::default();
    let tokenizer = train_tokenizer(["Which way does the drone fly?", "It flies forward and then turns left."], 400)?;
    let sample = TrainingSample {
        id: "bench".into(),
        messages: vec![Message::user("<video>\nWhich way does the drone fly?"), Message::assistant("It flies forward and then turns left.")],
        images: vec![],
        videos: vec![video.clone()],
        format: None,
        task: None,
        file: video.clone(),
        line: 1,
        with_motion: true,
    };
    let template = TemplateOptions { max_seq_len: None, ..TemplateOptions::default() };
    let one = || -> anyhow::Result<usize> {
        let processed = media.process(&sample).map_err(|e| anyhow::anyhow!("{e}"))?;
        let grids: Vec<[usize; 3]> = processed.videos.iter().map(|v| v.grid_thw).collect();
        let encoded = tokenizer.encode_chat(&sample.id, &sample.messages, &[], &grids, &template)?;
        Ok(encoded.len())
    };
    let tokens = one()?;
    let mut times = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        one()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let ours = times[times.len() / 2];
    println!("motionvl: {ours:.3} s per sample ({:.2} samples/s, {tokens} tokens)", 1.0 / ours);

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools/bench/loader_throughput.py");
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    match Command::new(python).arg(script).arg(&video).arg("5").output() {
        Ok(out) if out.status.success() => {
            let line = String::from_utf8_lossy(&out.stdout);
            let theirs: serde_json::Value = serde_json::from_str(line.trim().lines().last().unwrap_or("{}"))?;
            println!("qwen-vl-utils + HF processor: {theirs}");
            if let Some(t) = theirs["seconds_per_sample"].as_f64() {
                println!("speed-up of motionvl: {:.2}x", t / ours);
            }
        }
        Ok(out) => eprintln!("python reference failed:\n{}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => eprintln!("python reference not run: {e}"),
    }
    Ok(())
}
