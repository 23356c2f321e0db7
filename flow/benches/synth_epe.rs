//! Accuracy of the classical estimator on the synthetic UAV world, against the exact flow the
//! renderer computes from geometry: average end-point error over the pixels whose flow is
//! observable (in view and not occluded in the next frame), per flown movement, beside the
//! error of predicting no motion at all. Frames come from the MP4s, as training sees them.
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-flow --bench synth_epe`

use std::collections::BTreeMap;
use std::time::Instant;

use candle_core::Device;
use motionvl_construct::synth::{Split, SynthConfig, SynthSummary, generate};
use motionvl_data::video::decode_all;
use motionvl_flow::estimator_by_name;

fn main() -> anyhow::Result<()> {
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("synth-epe-world");
    let config = SynthConfig { train_worlds: 1, test_worlds: 2, concats_per_world: 0, ..SynthConfig::default() };
    let world = match SynthSummary::load(&out)? {
        Some(w) if w.config == config => w,
        _ => generate(&config, &out, true)?,
    };
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join(&world.split(Split::Test).world_file))?)?;
    let dis = estimator_by_name("dis", None, &Device::Cpu)?;
    let split_dir = out.join("test");
    let mut by_behaviour: BTreeMap<String, (f64, f64, usize)> = BTreeMap::new();
    let (mut seconds, mut pairs) = (0.0, 0usize);
    for w in record["worlds"].as_array().into_iter().flatten() {
        for clip in w["clips"].as_array().into_iter().flatten() {
            let (Some(video), Some(truth)) = (clip["video"].as_str(), clip["ground_truth"].as_str()) else { continue };
            let frames = decode_all(&split_dir.join(video))?.frames;
            let start = Instant::now();
            let flows = dis.estimate(frames.view())?;
            seconds += start.elapsed().as_secs_f64();
            pairs += flows.dim().0;
            let gt = candle_core::safetensors::load(split_dir.join(truth), &Device::Cpu)?;
            let exact: Vec<f32> = gt["flow"].flatten_all()?.to_vec1()?;
            let valid: Vec<u8> = gt["valid"].flatten_all()?.to_vec1()?;
            let (n, _, h, w) = flows.dim();
            let mut sums = (0.0f64, 0.0f64, 0usize);
            for t in 0..n {
                for y in 0..h {
                    for x in 0..w {
                        if valid[(t * h + y) * w + x] == 0 {
                            continue;
                        }
                        let (u, v) = (exact[((t * 2) * h + y) * w + x], exact[((t * 2 + 1) * h + y) * w + x]);
                        let (pu, pv) = (flows[[t, 0, y, x]], flows[[t, 1, y, x]]);
                        sums.0 += ((pu - u).powi(2) + (pv - v).powi(2)).sqrt() as f64;
                        sums.1 += (u * u + v * v).sqrt() as f64;
                        sums.2 += 1;
                    }
                }
            }
            let entry = by_behaviour.entry(clip["phrase"].as_str().unwrap_or("?").to_owned()).or_default();
            entry.0 += sums.0;
            entry.1 += sums.1;
            entry.2 += sums.2;
        }
    }
    let (h, w) = (config.height, config.width);
    println!(
        "DIS-MEDIUM on the synthetic world's held-out clips ({w}×{h}, decoded from MP4): {pairs} pairs, {:.1} ms per pair",
        1000.0 * seconds / pairs.max(1) as f64
    );
    println!("| movement | EPE (px) | EPE of zero flow (px) | pixels |\n|---|---|---|---|");
    let mut total = (0.0, 0.0, 0usize);
    for (name, (epe, zero, count)) in &by_behaviour {
        println!("| {name} | {:.3} | {:.3} | {count} |", epe / *count as f64, zero / *count as f64);
        total = (total.0 + epe, total.1 + zero, total.2 + count);
    }
    println!("| **all** | **{:.3}** | {:.3} | {} |", total.0 / total.2 as f64, total.1 / total.2 as f64, total.2);
    Ok(())
}
