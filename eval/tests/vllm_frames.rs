//! The vLLM baseline's frame path against Pillow and the official code
//! (`tests/fixtures/vllm_frames/`, made by `tools/fixtures/vllm_frames.py`): Pillow's bicubic
//! resize to the level, and a frame through `resize_to_pixel_range` and qwen-vl-utils'
//! `fetch_image` to the image vLLM receives.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use motionvl_eval::pil::{VLLM_MAX_PIXELS, VLLM_MIN_PIXELS, pil_resize_bicubic, resize_to_pixel_range, vllm_frame};
use ndarray::Array3;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/vllm_frames")
}

fn array(t: &Tensor) -> Array3<u8> {
    let (h, w, c) = t.dims3().expect("[H, W, C]");
    let data: Vec<u8> = t.to_dtype(DType::U8).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1()).expect("bytes");
    Array3::from_shape_vec((h, w, c), data).expect("shape")
}

fn png(path: &Path) -> Array3<u8> {
    let rgb = image::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).to_rgb8();
    let (w, h) = rgb.dimensions();
    Array3::from_shape_vec((h as usize, w as usize, 3), rgb.into_raw()).expect("shape")
}

#[test]
fn the_bicubic_resize_is_pillows_to_the_level() {
    let tensors = candle_core::safetensors::load(fixtures().join("kernel.safetensors"), &Device::Cpu).expect("kernel fixture");
    let mut cases = 0;
    for i in 0.. {
        let (Some(input), Some(output)) = (tensors.get(&format!("case{i}.input")), tensors.get(&format!("case{i}.output"))) else { break };
        let (input, expected) = (array(input), array(output));
        let (oh, ow, _) = expected.dim();
        let got = pil_resize_bicubic(input.view(), oh, ow);
        let worst = got.iter().zip(&expected).map(|(a, b)| a.abs_diff(*b)).max().unwrap_or(0);
        assert_eq!(worst, 0, "case {i}: {:?} -> {:?} differs from Pillow by up to {worst} levels", input.dim(), (oh, ow));
        cases += 1;
    }
    assert_eq!(cases, 6);
}

#[test]
fn frames_reach_vllm_as_the_official_code_sends_them() {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("chain/cases.json")).expect("cases.json")).expect("JSON");
    assert_eq!((meta["min_pixels"].as_u64(), meta["max_pixels"].as_u64()), (Some(VLLM_MIN_PIXELS as u64), Some(VLLM_MAX_PIXELS as u64)));
    let cases = meta["cases"].as_object().expect("cases");
    assert_eq!(cases.len(), 3);
    for (name, case) in cases {
        let size = |key: &str| -> (usize, usize) {
            let v = &case[key];
            (v[0].as_u64().unwrap_or(0) as usize, v[1].as_u64().unwrap_or(0) as usize)
        };
        let input = png(&fixtures().join(format!("chain/{name}.input.png")));
        let expected = png(&fixtures().join(format!("chain/{name}.output.png")));
        let ranged = resize_to_pixel_range(input.view(), VLLM_MIN_PIXELS, VLLM_MAX_PIXELS);
        assert_eq!((ranged.dim().0, ranged.dim().1), size("ranged"), "{name}: resize_to_pixel_range's size");
        let got = vllm_frame(input.view()).expect("frame path");
        assert_eq!(got.dim(), expected.dim(), "{name}: fetch_image's size");
        let worst = got.iter().zip(&expected).map(|(a, b)| a.abs_diff(*b)).max().unwrap_or(0);
        assert_eq!(worst, 0, "{name}: differs from the official frame by up to {worst} levels");
    }
}

#[test]
fn the_image_processor_only_normalises_what_the_frame_path_made() {
    use motionvl_data::preprocess::{PreprocessConfig, normalize_image_resized};
    let tensors = candle_core::safetensors::load(fixtures().join("chain/processor.safetensors"), &Device::Cpu).expect("processor fixture");
    let floats = |name: &str| -> Vec<f32> { tensors[name].flatten_all().and_then(|t| t.to_vec1()).unwrap_or_else(|e| panic!("{name}: {e}")) };
    for name in ["small", "inside", "large"] {
        let input = png(&fixtures().join(format!("chain/{name}.input.png")));
        let frame = vllm_frame(input.view()).expect("frame path");
        let ours = normalize_image_resized(frame.view(), &PreprocessConfig::default()).expect("normalises");
        let grid: Vec<i64> = tensors[&format!("{name}.grid_thw")].flatten_all().and_then(|t| t.to_vec1()).expect("grid");
        assert_eq!(ours.grid_thw.iter().map(|&g| g as i64).collect::<Vec<_>>(), grid, "{name}: grid");
        let values: Vec<f32> = ours.pixel_values.iter().copied().collect();
        let sums: Vec<f64> = values.chunks(1176).map(|row| row.iter().map(|&v| f64::from(v)).sum()).collect();
        for kind in ["fast", "slow"] {
            let head = floats(&format!("{name}.{kind}.head"));
            let worst = values.iter().zip(&head).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(worst <= 1e-6, "{name}: {kind} processor's first rows differ by {worst}");
            let reference = floats(&format!("{name}.{kind}.sum_last"));
            assert_eq!(sums.len(), reference.len(), "{name}: patch rows");
            let worst = sums.iter().zip(&reference).map(|(a, b)| (a - f64::from(*b)).abs()).fold(0.0f64, f64::max);
            assert!(worst <= 1e-3, "{name}: {kind} processor's row sums differ by {worst}");
        }
    }
}
