//! The official SIS-Motion motion pipeline (`pipeline = "official"`, `motionvl_flow::official`).
//!
//! `official_pipeline_through_motion_media`: the loader path end to end with a real (tiny)
//! MOFNet — which frames reach MOFNet, its one whole-clip pass, the f32 cache, the motion
//! pixels on the video's grid.

use std::sync::Arc;

use candle_core::Device;
use motionvl_data::frames::FramePolicy;
use motionvl_data::loader::QwenMedia;
use motionvl_data::preprocess::PreprocessConfig;
use motionvl_flow::media::MotionMedia;
use motionvl_flow::official::{self, MOFNET_HEIGHT, MOFNET_WIDTH};
use motionvl_flow::{estimator_from_spec, EstimatorSpec, FlowCache, FlowEstimator, PseudoImageConfig};
use motionvl_tests::fixtures::fixtures_root;
use ndarray::s;

#[test]
fn official_pipeline_through_motion_media() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 64×64, 20 frames of a red square moving right; 3 planned frames are an odd clip. One
    // iteration keeps the test short (our kernels are not optimised in test builds).
    let video = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/tiny-sft/right-red.mp4");
    let weights = fixtures_root().join("flow/mofnet/tiny/model.safetensors");
    let spec = EstimatorSpec { name: "mofnet", weights: Some(&weights), iters: Some(1) };
    let estimator: Arc<dyn FlowEstimator> = estimator_from_spec(&spec, &Device::Cpu).expect("tiny MOFNet").into();
    let qwen = QwenMedia {
        video_policy: FramePolicy::Uniform { frames: 3 },
        video_config: PreprocessConfig { min_pixels: 28 * 28 * 4, max_pixels: 28 * 28 * 12, ..PreprocessConfig::default() },
        ..QwenMedia::default()
    };
    let cache = FlowCache::new(dir.path().join("cache")).expect("cache");
    let media = MotionMedia::new(qwen.clone(), Arc::clone(&estimator), Some(cache.clone()), PseudoImageConfig::official());

    // 3 planned frames → 2 temporal patches → 4 MOFNet frames, frame 0 twice, at 320×480.
    let input = media.flow_input(&video).expect("flow input");
    let mofnet = input.mofnet_frames.as_ref().expect("the official pipeline's MOFNet frames");
    assert_eq!(mofnet.dim(), (4, 3, MOFNET_HEIGHT, MOFNET_WIDTH));
    assert_eq!(mofnet.slice(s![0, .., .., ..]), mofnet.slice(s![1, .., .., ..]));
    assert_ne!(mofnet.slice(s![1, .., .., ..]), mofnet.slice(s![2, .., .., ..]));
    let legacy = MotionMedia::new(qwen, Arc::clone(&estimator), Some(cache), PseudoImageConfig::default());
    assert_ne!(input.key, legacy.flow_input(&video).expect("legacy input").key, "the two pipelines never share cache entries");

    // One pass over the clip: the middle frames' 1/8-resolution flows, unrounded.
    let flows = media.flows(&video, &input).expect("flows");
    assert_eq!(flows.dim(), (2, 2, MOFNET_HEIGHT / 8, MOFNET_WIDTH / 8));
    assert_eq!(flows, estimator.coarse_clip_flows(mofnet.view()).expect("direct"));
    assert!(flows.iter().all(|v| v.is_finite()) && flows.iter().any(|v| v.to_bits() & 0x1fff != 0), "f32, not rounded to f16's 10-bit mantissa");
    assert_eq!(media.flows(&video, &input).expect("cached"), flows);
    assert_eq!(media.counts.snapshot(), (1, 1, 0), "computed once, then read back");

    // Motion pixels on the video's grid.
    let (vision, motion) = media.load_video_with_motion(&video).expect("pixels");
    assert_eq!(motion.grid_thw, vision.grid_thw);
    assert_eq!(motion.pixel_values.dim(), vision.pixel_values.dim());
    let expected = official::pixel_values_flow(official::clip_flows(flows.view()).expect("clip").view(), vision.grid_thw, &media.qwen.video_config).expect("pixels");
    assert_eq!(motion.pixel_values, expected);
}
