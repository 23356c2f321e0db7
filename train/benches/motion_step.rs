//! Extra cost of the SIS-Motion path per training step at the mid-size config (the model of
//! `models/benches/qwen25vl_midsize.rs`, LoRA r32): one optimiser step on one sample — a
//! 16-frame 224×224 video — including its media pipeline (decode + preprocess, and for motion
//! also flow → pseudo-images → patches, then the motion encoder and connector), for
//! visual-only, motion with the flow cache warm, and motion computing DIS flow.
//!
//! `RAYON_NUM_THREADS=2 cargo bench -p motionvl-train --bench motion_step`

use std::sync::Arc;
use std::time::Instant;

use candle_core::{Device, Tensor};
use motionvl_data::frames::{FramePolicy, TrainingPlan};
use motionvl_data::loader::QwenMedia;
use motionvl_data::preprocess::PreprocessConfig;
use motionvl_data::video::{EncodeSettings, VideoWriter};
use motionvl_flow::media::MotionMedia;
use motionvl_flow::{FlowCache, PseudoImageConfig, estimator_by_name};
use motionvl_models::Qwen25VlConfig;
use motionvl_models::init::random_model;
use motionvl_models::lora::{LoraConfig, LoraWeights};
use motionvl_models::motion::{Connector, MotionBranch, MotionTower, vision_features};
use motionvl_models::qwen25vl::{PixelInput, PromptBatch, VisionInputs};
use motionvl_models::rope::TokenKind;
use motionvl_train::guard::{Snapshot, TrainedGroup, require_gradients};
use motionvl_train::optim::{AdamW, AdamWConfig};
use ndarray::{Array2, Array3};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The mid-size config shared by the benchmarks (and the PyTorch scripts beside them).
const CONFIG: &str = include_str!("../../configs/models/midsize.json");

fn pixels(values: Array2<f32>, grid: [usize; 3]) -> anyhow::Result<PixelInput> {
    let (rows, cols) = values.dim();
    Ok(PixelInput { pixel_values: Tensor::from_vec(values.into_raw_vec_and_offset().0, (rows, cols), &Device::Cpu)?, grids: vec![grid] })
}

fn main() -> anyhow::Result<()> {
    let device = Device::Cpu;
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("motion-step");
    std::fs::create_dir_all(&dir)?;
    let video = dir.join("clip-224-16f.mp4");
    if !video.is_file() {
        let mut writer = VideoWriter::create(&video, 224, 224, &EncodeSettings { frame_rate: (2, 1), ..EncodeSettings::default() })?;
        for t in 0..16usize {
            let frame = Array3::from_shape_fn((224, 224, 3), |(y, x, c)| ((((x + 3 * t) / 7 + y / 9) * (c + 2) * 37) % 251) as u8);
            writer.push(frame.view())?;
        }
        writer.finish()?;
    }
    let pixels_cfg = PreprocessConfig { min_pixels: 224 * 224, max_pixels: 224 * 224, ..PreprocessConfig::default() };
    let qwen = QwenMedia {
        video_policy: FramePolicy::Training(TrainingPlan { fps: 2.0, min_frames: 16, max_frames: 16, ..TrainingPlan::default() }),
        video_config: pixels_cfg.clone(),
        image_config: pixels_cfg,
        ..QwenMedia::default()
    };
    let estimator: Arc<dyn motionvl_flow::FlowEstimator> = estimator_by_name("dis", None, &device)?.into();
    let cache_dir = dir.join("flow-cache");
    let motion_media = |cached: bool| -> anyhow::Result<MotionMedia> {
        if !cached {
            let _ = std::fs::remove_dir_all(&cache_dir);
        }
        Ok(MotionMedia::new(qwen.clone(), estimator.clone(), Some(FlowCache::new(&cache_dir)?), PseudoImageConfig::default()))
    };

    let cfg = Qwen25VlConfig::from_json(CONFIG).map_err(anyhow::Error::msg)?;
    let (mut model, _) = random_model(&cfg, 0.02, 0, &device)?;
    let lora = LoraWeights::init(&model.linear_shapes(), &LoraConfig::default(), 0, &device)?;
    lora.attach(model.linears_mut())?;
    let connector = Connector::init_vars(cfg.text.hidden_size, 0, &device)?;
    let branch = MotionBranch::from_visual(MotionTower::qwen25(model.visual()), &connector)?;
    let adam = AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
    let mut optim = AdamW::new(vec![("lora".into(), 1e-5, lora.named_vars()), ("connector".into(), 2e-5, connector.clone())], adam)?;

    let grid = [8, 16, 16];
    let mut ids = vec![151644u32; 21];
    ids.push(cfg.vision_start_token_id);
    ids.extend(std::iter::repeat_n(cfg.video_token_id, grid.iter().product::<usize>() / 4));
    ids.push(cfg.vision_end_token_id);
    ids.extend([200; 40]);
    let kinds = ids.iter().map(|&i| if i == cfg.video_token_id { TokenKind::Video } else { TokenKind::Text }).collect();
    let n = ids.len();
    let labels = vec![ids.iter().enumerate().map(|(i, &t)| if i + 30 >= n { t as i64 } else { -100 }).collect::<Vec<_>>()];
    let batch = PromptBatch::single(ids, kinds);

    let mut step = |mode: &str| -> anyhow::Result<f64> {
        let start = Instant::now();
        let (video_pixels, motion_pixels) = if mode == "visual-only" {
            (qwen.load_video(&video).map_err(|e| anyhow::anyhow!("{e}"))?, None)
        } else {
            let (v, m) = motion_media(mode == "motion, flow cached")?.load_video_with_motion(&video).map_err(|e| anyhow::anyhow!("{e}"))?;
            (v, Some(m))
        };
        anyhow::ensure!(video_pixels.grid_thw == grid, "unexpected grid {:?}", video_pixels.grid_thw);
        let inputs = VisionInputs { images: None, videos: Some(pixels(video_pixels.pixel_values, grid)?), video_seconds_per_grid: vec![1.0] };
        let motion = motion_pixels.map(|m| pixels(m.pixel_values, grid)).transpose()?;
        let features = vision_features(&model, motion.as_ref().map(|_| &branch), &inputs, motion.as_ref())?;
        let loss = model.training_loss(&batch, &features, &model.positions(&batch, &inputs)?, &labels)?;
        optim.accumulate(&loss.backward(1.0)?)?;
        let used: &[TrainedGroup] = if motion.is_some() { &[TrainedGroup::Lora, TrainedGroup::Connector] } else { &[TrainedGroup::Lora] };
        require_gradients(&optim.reach()?, used, mode)?;
        anyhow::ensure!(optim.step_with_clip(1.0, 1.0)? > 0.0, "{mode}: zero gradient norm");
        Ok(start.elapsed().as_secs_f64())
    };
    let trained: Vec<_> = lora.named_vars().into_iter().chain(connector.iter().cloned()).collect();
    let before = Snapshot::take(&trained)?;
    let modes = ["visual-only", "motion, flow cached", "motion, flow computed (DIS)"];
    let mut medians = Vec::new();
    for mode in modes {
        step(mode)?;
        let mut times: Vec<f64> = (0..3).map(|_| step(mode)).collect::<anyhow::Result<_>>()?;
        times.sort_by(f64::total_cmp);
        medians.push(times[1]);
        println!("{mode}: {:.3} s per step", times[1]);
    }
    let unchanged = before.unchanged(&trained)?;
    anyhow::ensure!(unchanged.is_empty(), "{} of {} trained tensors did not change, e.g. {}", unchanged.len(), trained.len(), unchanged[0]);
    println!(
        "extra cost of the motion path: {:+.0}% with the flow cache, {:+.0}% computing flow",
        100.0 * (medians[1] / medians[0] - 1.0),
        100.0 * (medians[2] / medians[0] - 1.0)
    );
    Ok(())
}
