//! Qwen3-VL's processor against transformers (`tests/fixtures/qwen3_vl_processor/*`, made by
//! `tools/fixtures/qwen3_vl_processor.py`): the video resize bounded over the whole clip, the
//! pixels of videos and images (patch 16, mean and std 0.5), and the `<t seconds>` blocks
//! transformers 5 writes in place of a video's pad; and its frame sampling
//! (`tests/fixtures/qwen3_vl_sampling/*`, `tools/fixtures/qwen3_vl_sampling.py`): the frames
//! `Qwen3VLVideoProcessor.sample_frames` keeps by rate or count and the times its processor gives
//! their temporal steps. Every dump is checked.

use candle_core::Tensor;
use motionvl_data::frames::{ClipTiming, FramePlan, FramePolicy, TrainingPlan};
use motionvl_data::preprocess::{PreprocessConfig, normalize_patchify, preprocess_image};
use motionvl_data::sampling::{Element, Sampling, resize_video, sampled_indices, video_size};
use motionvl_data::text::{Message, TemplateOptions, VideoLayout, render_chat_timed};
use motionvl_tests::fixtures::{Dump, dumps};
use ndarray::{Array2, Array3, Array4};

/// Our normalised pixels against transformers': the resize is ATen's exact uint8 kernel, so
/// only the f32 normalisation can differ.
const VALUE_TOLERANCE: f32 = 1e-6;

fn all() -> Vec<Dump> {
    let all = dumps("qwen3_vl_processor");
    assert!(all.len() >= 2, "expected the Qwen3-VL processor dumps");
    all
}

fn u8s(t: &Tensor) -> Vec<u8> {
    t.flatten_all().and_then(|t| t.to_vec1::<u8>()).expect("u8 tensor")
}

fn array2(t: &Tensor) -> Array2<f32> {
    let (rows, cols) = t.dims2().expect("2-D");
    Array2::from_shape_vec((rows, cols), t.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("f32")).expect("shape")
}

fn grid(t: &Tensor) -> [usize; 3] {
    let v = t.flatten_all().and_then(|t| t.to_vec1::<i64>()).expect("i64 grid");
    [v[0] as usize, v[1] as usize, v[2] as usize]
}

fn max_abs_diff(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    assert_eq!(a.dim(), b.dim());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// The processor settings of a dump (`<prefix>min_pixels`, `<prefix>max_pixels`) on Qwen3-VL's
/// defaults.
fn config(dump: &Dump, prefix: &str) -> PreprocessConfig {
    let spec = &dump.json("meta.json")["spec"];
    let get = |k: &str| spec[format!("{prefix}{k}")].as_u64().unwrap_or_else(|| panic!("{}: meta.json spec.{prefix}{k}", dump.label)) as usize;
    PreprocessConfig { min_pixels: get("min_pixels"), max_pixels: get("max_pixels"), ..PreprocessConfig::qwen3_vl() }
}

#[test]
fn video_pixels_and_grid_match_the_qwen3_video_processor() {
    for dump in all() {
        let t = dump.tensors("dump.safetensors");
        let frames = t.get("frames_u8");
        let (n, h, w, c) = frames.dims4().expect("[T, H, W, 3]");
        let frames = Array4::from_shape_vec((n, h, w, c), u8s(frames)).expect("frames");
        let cfg = config(&dump, "");
        let (rh, rw) = video_size(Sampling::Transformers, h, w, n, &cfg).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let resized = resize_video(Sampling::Transformers, frames.view(), rh, rw);
        let ours = normalize_patchify(resized.view(), &cfg).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        assert_eq!(ours.grid_thw, grid(t.get("video_grid_thw")), "{}: video grid (the clip-wide bound)", dump.label);
        let diff = max_abs_diff(&ours.pixel_values, &array2(t.get("pixel_values_videos")));
        assert!(diff <= VALUE_TOLERANCE, "{}: video pixels differ by {diff:e}", dump.label);
    }
}

#[test]
fn image_pixels_match_the_qwen3_image_settings() {
    for dump in all() {
        let t = dump.tensors("dump.safetensors");
        let image = t.get("image_u8");
        let (h, w, c) = image.dims3().expect("[H, W, 3]");
        let image = Array3::from_shape_vec((h, w, c), u8s(image)).expect("image");
        let ours = preprocess_image(image.view(), &config(&dump, "image_")).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        assert_eq!(ours.grid_thw, grid(t.get("image_grid_thw")), "{}: image grid", dump.label);
        let diff = max_abs_diff(&ours.pixel_values, &array2(t.get("pixel_values")));
        assert!(diff <= VALUE_TOLERANCE, "{}: image pixels differ by {diff:e}", dump.label);
    }
}

#[test]
fn the_video_block_carries_a_timestamp_per_temporal_step() {
    for dump in all() {
        let meta = dump.json("meta.json");
        let spec = &meta["spec"];
        let indices: Vec<usize> = spec["indices"].as_array().expect("indices").iter().map(|i| i.as_u64().expect("index") as usize).collect();
        let fps = spec["fps"].as_f64().expect("fps");
        // `presampled` hands the frames over as 0..n at the processor's rate, so its plan's
        // times are positions; the other dump's frames keep their time in the clip.
        let presampled = dump.label.ends_with("presampled");
        let plan = FramePlan { timestamps: indices.iter().map(|&i| i as f64 / fps).collect(), indices, fps };
        let t = dump.tensors("dump.safetensors");
        let grid = grid(t.get("video_grid_thw"));
        let seconds = plan.grid_seconds(2, presampled);
        // transformers 5 nests the steps' blocks in the template's (4.57's layout, motionvl's
        // default, is checked against the official evaluation in sis_lora_protocol.rs).
        let opts =
            TemplateOptions { system_prompt: None, video_layout: VideoLayout::TimestampedNested, max_seq_len: None, ..TemplateOptions::default() };
        let prompt = render_chat_timed("s", &[Message::user("<video>Where?")], &[], &[grid], &[seconds], &opts, true)
            .unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let block = meta["video_block"].as_str().expect("video_block");
        assert_eq!(prompt, format!("<|im_start|>user\n{block}Where?<|im_end|>\n<|im_start|>assistant\n"), "{}", dump.label);
    }
}

#[test]
fn timestamps_are_written_to_one_decimal_half_to_even_as_python_does() {
    // Python's f"{x:.1f}" on the exact binary value: 0.25 and 1.25 are ties and go to even.
    for (x, want) in [(0.25, "0.2"), (1.25, "1.2"), (2.75, "2.8"), (0.35, "0.3"), (10.05, "10.1"), (3.0, "3.0")] {
        assert_eq!(format!("{x:.1}"), want, "{x}");
    }
}

/// One sampling case of a `qwen3_vl_sampling` dump: the clip, what the sampler was asked, what
/// it kept and the times of the kept frames' temporal steps.
struct SamplingCase {
    label: String,
    clip: ClipTiming,
    indices: Vec<usize>,
    grid_seconds: Vec<f64>,
    case: serde_json::Value,
}

fn sampling_cases(dump_name: &str) -> Vec<SamplingCase> {
    let dump = dumps("qwen3_vl_sampling").into_iter().find(|d| d.dir.ends_with(dump_name)).expect("the Qwen3-VL sampling dump");
    let cases = dump.json("expected.json")["cases"].as_array().expect("cases").clone();
    assert!(cases.len() >= 20, "{}: expected the sampling cases", dump.label);
    cases
        .into_iter()
        .map(|case| {
            let number = |k: &str| case[k].as_f64().unwrap_or_else(|| panic!("{}: `{k}` in {case}", dump.label));
            let list = |k: &str| case[k].as_array().unwrap_or_else(|| panic!("{}: `{k}` in {case}", dump.label)).clone();
            SamplingCase {
                label: format!("{}: {case}", dump.label),
                clip: ClipTiming::new(number("frames") as usize, number("video_fps")),
                indices: list("indices").iter().map(|v| v.as_u64().expect("an index") as usize).collect(),
                grid_seconds: list("grid_seconds").iter().map(|v| v.as_f64().expect("a time")).collect(),
                case,
            }
        })
        .collect()
}

/// The grid-step times of `indices` as the processor computes them (it samples the clip itself:
/// each frame keeps its time in the clip).
fn grid_seconds(clip: ClipTiming, indices: Vec<usize>) -> Vec<f64> {
    let timestamps = indices.iter().map(|&i| i as f64 / clip.fps).collect();
    FramePlan { indices, timestamps, fps: clip.fps }.grid_seconds(2, false)
}

#[test]
fn qwen3_vl_samples_by_rate_as_its_video_processor() {
    for c in sampling_cases("rates") {
        let field = |k: &str| c.case[k].as_f64().expect("a number");
        let plan = TrainingPlan {
            fps: field("fps"),
            min_frames: field("min_frames") as usize,
            max_frames: field("max_frames") as usize,
            sampling: Sampling::Qwen3Vl,
        };
        let kept = FramePolicy::Training(plan).plan(c.clip).unwrap_or_else(|e| panic!("{}: {e}", c.label));
        assert_eq!(kept.indices, c.indices, "{}", c.label);
        assert_eq!(kept.grid_seconds(2, false), c.grid_seconds, "{}", c.label);
    }
}

#[test]
fn qwen3_vl_samples_a_count_as_its_video_processor() {
    for c in sampling_cases("counts") {
        let n = c.case["num_frames"].as_u64().expect("num_frames") as usize;
        let kept = sampled_indices(Sampling::Qwen3Vl, Element::Frames(n), c.clip.frame_count, c.clip.fps)
            .expect("a sampler")
            .unwrap_or_else(|n| panic!("{}: refused {n} frames", c.label));
        assert_eq!(kept, c.indices, "{}", c.label);
        assert_eq!(grid_seconds(c.clip, kept), c.grid_seconds, "{}", c.label);
    }
}
