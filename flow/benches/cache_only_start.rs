//! How long a `--flow-cache-only` start checks a large cache: 10,000 videos keyed in the key
//! index, each with its cache entry, checked as `train sft` checks them before its first step
//! (the identity of every video file, the index slot, the entry header; the 16 verified keys
//! decoded). The videos are placeholder files with the index's keys, but for the 16 that the
//! check decodes, which are real clips.
//!
//! `cargo bench -p motionvl-flow --bench cache_only_start [-- VIDEOS]`

use std::sync::Arc;
use std::time::Instant;

use candle_core::Device;
use motionvl_flow::cache::Precision;
use motionvl_flow::extract::plan_media;
use motionvl_flow::key_index::{check_cached, key_settings};
use motionvl_flow::media::MotionMedia;
use motionvl_flow::pseudo::PseudoImageConfig;
use motionvl_flow::{CacheKey, FlowCache, estimator_by_name};
use motionvl_models::machine::MachineReport;
use ndarray::Array4;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How many keys `train sft --flow-cache-only` verifies by decoding.
const VERIFY: usize = 16;

fn main() -> anyhow::Result<()> {
    let videos: usize = std::env::args().skip(1).find(|a| !a.starts_with('-')).map_or(Ok(10_000), |n| n.parse())?;
    let dir = tempfile::tempdir()?;
    let cache = FlowCache::new(dir.path().join("cache"))?;
    let estimator = Arc::from(estimator_by_name("dis", None, &Device::Cpu)?);
    let media = MotionMedia::new(plan_media("training")?, estimator, Some(cache.clone()), PseudoImageConfig::default());
    let (settings, index) = key_settings(&media).ok_or_else(|| anyhow::anyhow!("no cache"))?;
    let clips: Vec<_> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/data/tiny-sft"))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "mp4"))
        .collect();
    let flows = Array4::<f32>::from_shape_fn((1, 8, 8, 2), |(_, y, x, c)| (y * 8 + x) as f32 * if c == 0 { 0.5 } else { -0.25 });

    let start = Instant::now();
    let stride = (videos / VERIFY).max(1);
    let mut jobs = Vec::with_capacity(videos);
    for i in 0..videos {
        let video = dir.path().join("videos").join(format!("{:03}", i % 997)).join(format!("clip-{i:06}.mp4"));
        std::fs::create_dir_all(video.parent().expect("folder"))?;
        let key = if i % stride == 0 {
            // A verified key: decoded by the check, so a real clip.
            std::fs::copy(&clips[i / stride % clips.len()], &video)?;
            media.flow_input(&video)?.key
        } else {
            std::fs::write(&video, format!("placeholder {i}"))?;
            let frames = Array4::<f32>::from_elem((1, 2, 2, 3), i as f32);
            CacheKey::of_floats(frames.view(), "placeholder", media.estimator.as_ref())
        };
        index.record(&video, &settings, &key);
        cache.put(&key, &flows, "dis", Precision::Half)?;
        jobs.push((video, media.clone()));
    }
    eprintln!("{videos} videos keyed and cached in {:.1} s", start.elapsed().as_secs_f64());

    let start = Instant::now();
    let check = check_cached(&jobs, VERIFY, &|| {})?;
    let seconds = start.elapsed().as_secs_f64();
    anyhow::ensure!(check.missing.is_empty(), "{} entries missing: {:?}", check.missing.len(), check.missing.first());
    anyhow::ensure!(check.decoded <= VERIFY + 1, "the check decoded {} videos, not the {VERIFY} it verifies", check.decoded);
    println!("machine {}", serde_json::to_string(&MachineReport::now())?);
    println!(
        "{}",
        serde_json::json!({"videos": check.videos, "decoded": check.decoded, "check_s": (seconds * 1000.0).round() / 1000.0,
            "threads": rayon::current_num_threads()})
    );
    Ok(())
}
