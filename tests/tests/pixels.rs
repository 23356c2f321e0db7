//! Parity of the pixel pipeline with Hugging Face's Qwen2.5-VL processor, over every reference
//! dump in `tests/fixtures/qwen2_5_vl/*/` (adding a dump needs no code here).
//!
//! Each dump's `inputs.safetensors` holds the raw uint8 frames, the processor's resized uint8
//! frames and its `pixel_values*` / `*_grid_thw`; `meta.json` gives the `min_pixels` /
//! `max_pixels` the processor ran with.
//!
//! Tolerances asserted here:
//! - normalise + patchify of `*_resized_u8` against `pixel_values*`: ≤ 1e-6 (it is bit-exact);
//! - grids: exact;
//! - our smart resize: the exact size of `*_resized_u8`;
//! - our bicubic resize of `*_u8` against `*_resized_u8`: [`RESIZE_TOLERANCE`] levels.

use motionvl_tests::fixtures::{Dump, dumps};

use motionvl_data::preprocess::{
    PreprocessConfig, normalize_image_resized, normalize_patchify, preprocess_image, preprocess_video, resize_bicubic_aa, resize_frames, smart_resize,
};
use ndarray::{Array2, Array3, Array4};
use safetensors::{Dtype, SafeTensors};

/// Largest per-pixel difference, in uint8 levels, allowed between our antialiased bicubic
/// resize and torchvision's. Our kernel reproduces ATen's int16 fixed-point arithmetic, so the
/// measured difference is 0 on every model dump, on the 20 extra cases of
/// `tests/fixtures/torchvision_resize/extra/resizes.safetensors`, and on 408 random sizes (up to 1080p → 476×840)
/// checked against torch 2.15 / torchvision 0.29 during development. Zero is what we assert:
/// any drift in the coefficient rounding shows up as a 1-level difference.
const RESIZE_TOLERANCE: i32 = 0;

/// Normalised values may differ from the reference by at most this much.
const VALUE_TOLERANCE: f32 = 1e-6;

struct Fixture {
    dump: Dump,
    bytes: Vec<u8>,
    meta: serde_json::Value,
}

impl Fixture {
    fn all() -> Vec<Fixture> {
        dumps("qwen2_5_vl")
            .into_iter()
            .map(|dump| {
                let path = dump.path("inputs.safetensors");
                let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                Fixture { meta: dump.json("meta.json"), bytes, dump }
            })
            .collect()
    }

    fn tensors(&self) -> SafeTensors<'_> {
        SafeTensors::deserialize(&self.bytes).unwrap_or_else(|e| panic!("{}: {e}", self.dump.label))
    }

    fn raw(&self, name: &str, dtype: Dtype) -> (Vec<usize>, Vec<u8>) {
        let st = self.tensors();
        let t = st.tensor(name).unwrap_or_else(|e| panic!("{}: tensor {name}: {e}", self.dump.label));
        assert_eq!(t.dtype(), dtype, "{}: tensor {name} dtype", self.dump.label);
        (t.shape().to_vec(), t.data().to_vec())
    }

    fn u8_4d(&self, name: &str) -> Array4<u8> {
        let (shape, data) = self.raw(name, Dtype::U8);
        Array4::from_shape_vec((shape[0], shape[1], shape[2], shape[3]), data).expect("u8 4-D shape")
    }

    fn u8_3d(&self, name: &str) -> Array3<u8> {
        let (shape, data) = self.raw(name, Dtype::U8);
        Array3::from_shape_vec((shape[0], shape[1], shape[2]), data).expect("u8 3-D shape")
    }

    fn f32_2d(&self, name: &str) -> Array2<f32> {
        let (shape, data) = self.raw(name, Dtype::F32);
        let values = data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
        Array2::from_shape_vec((shape[0], shape[1]), values).expect("f32 2-D shape")
    }

    fn grid(&self, name: &str) -> [usize; 3] {
        let (shape, data) = self.raw(name, Dtype::I64);
        assert_eq!(shape, vec![1, 3], "{}: {name} shape", self.dump.label);
        let v: Vec<usize> = data.chunks_exact(8).map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")) as usize).collect();
        [v[0], v[1], v[2]]
    }

    /// The processor settings this dump was made with (`variant_spec.video` / `.image`).
    fn config(&self, kind: &str) -> PreprocessConfig {
        let spec = &self.meta["variant_spec"][kind];
        let get = |k: &str| spec[k].as_u64().unwrap_or_else(|| panic!("{}: meta.json variant_spec.{kind}.{k}", self.dump.label)) as usize;
        PreprocessConfig { min_pixels: get("min_pixels"), max_pixels: get("max_pixels"), ..PreprocessConfig::default() }
    }

    fn name(&self) -> String {
        self.dump.label.clone()
    }
}

fn max_abs_diff_f32(a: &Array2<f32>, b: &Array2<f32>) -> f32 {
    assert_eq!(a.dim(), b.dim());
    a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn max_abs_diff_u8<'a>(a: impl Iterator<Item = &'a u8>, b: impl Iterator<Item = &'a u8>) -> i32 {
    a.zip(b).map(|(x, y)| (i32::from(*x) - i32::from(*y)).abs()).max().unwrap_or(0)
}

#[test]
fn video_normalize_patchify_matches_hf() {
    for fx in Fixture::all() {
        let cfg = fx.config("video");
        let resized = fx.u8_4d("video_resized_u8");
        let got = normalize_patchify(resized.view(), &cfg).expect("patchify");
        let want = fx.f32_2d("pixel_values_videos");
        assert_eq!(got.grid_thw, fx.grid("video_grid_thw"), "{}: video grid", fx.name());
        assert_eq!(got.pixel_values.dim(), want.dim(), "{}: pixel_values_videos shape", fx.name());
        let d = max_abs_diff_f32(&got.pixel_values, &want);
        assert!(d <= VALUE_TOLERANCE, "{}: pixel_values_videos max abs diff {d}", fx.name());
    }
}

#[test]
fn image_normalize_patchify_matches_hf() {
    for fx in Fixture::all() {
        let cfg = fx.config("image");
        let resized = fx.u8_3d("image_resized_u8");
        let got = normalize_image_resized(resized.view(), &cfg).expect("patchify");
        let want = fx.f32_2d("pixel_values");
        assert_eq!(got.grid_thw, fx.grid("image_grid_thw"), "{}: image grid", fx.name());
        assert_eq!(got.pixel_values.dim(), want.dim(), "{}: pixel_values shape", fx.name());
        let d = max_abs_diff_f32(&got.pixel_values, &want);
        assert!(d <= VALUE_TOLERANCE, "{}: pixel_values max abs diff {d}", fx.name());
    }
}

#[test]
fn smart_resize_matches_hf_sizes() {
    for fx in Fixture::all() {
        for (kind, raw_name, resized_name) in [("video", "video_frames_u8", "video_resized_u8"), ("image", "image_u8", "image_resized_u8")] {
            let cfg = fx.config(kind);
            let (raw_shape, _) = fx.raw(raw_name, Dtype::U8);
            let (resized_shape, _) = fx.raw(resized_name, Dtype::U8);
            let (h, w) = if kind == "video" { (raw_shape[1], raw_shape[2]) } else { (raw_shape[0], raw_shape[1]) };
            let want = if kind == "video" { (resized_shape[1], resized_shape[2]) } else { (resized_shape[0], resized_shape[1]) };
            let got = smart_resize(h, w, cfg.factor(), cfg.min_pixels, cfg.max_pixels).expect("smart_resize");
            assert_eq!(got, want, "{}: {kind} smart_resize of {h}x{w}", fx.name());
        }
    }
}

#[test]
fn bicubic_resize_matches_torchvision() {
    for fx in Fixture::all() {
        let raw = fx.u8_4d("video_frames_u8");
        let want = fx.u8_4d("video_resized_u8");
        let got = resize_frames(raw.view(), want.dim().1, want.dim().2);
        let d = max_abs_diff_u8(got.iter(), want.iter());
        assert!(d <= RESIZE_TOLERANCE, "{}: video resize differs by {d} levels", fx.name());

        let raw = fx.u8_3d("image_u8");
        let want = fx.u8_3d("image_resized_u8");
        let got = resize_bicubic_aa(raw.view(), want.dim().0, want.dim().1);
        let d = max_abs_diff_u8(got.iter(), want.iter());
        assert!(d <= RESIZE_TOLERANCE, "{}: image resize differs by {d} levels", fx.name());
    }
}

#[test]
fn end_to_end_matches_hf_processor() {
    for fx in Fixture::all() {
        let video = preprocess_video(fx.u8_4d("video_frames_u8").view(), &fx.config("video")).expect("video");
        assert_eq!(video.grid_thw, fx.grid("video_grid_thw"), "{}: video grid", fx.name());
        let d = max_abs_diff_f32(&video.pixel_values, &fx.f32_2d("pixel_values_videos"));
        assert!(d <= VALUE_TOLERANCE, "{}: end-to-end video max abs diff {d}", fx.name());

        let image = preprocess_image(fx.u8_3d("image_u8").view(), &fx.config("image")).expect("image");
        assert_eq!(image.grid_thw, fx.grid("image_grid_thw"), "{}: image grid", fx.name());
        let d = max_abs_diff_f32(&image.pixel_values, &fx.f32_2d("pixel_values"));
        assert!(d <= VALUE_TOLERANCE, "{}: end-to-end image max abs diff {d}", fx.name());
    }
}

/// 20 extra sizes (shrink, grow, mixed axes, ratios up to 25×, one-pixel edges) from
/// `tools/fixtures/torchvision_resize.py`, beyond the four resizes in the model dumps.
#[test]
fn bicubic_resize_matches_torchvision_on_extra_sizes() {
    let mut cases = dumps("torchvision_resize");
    assert_eq!(cases.len(), 1, "one dump of extra resizes");
    let path = cases.remove(0).path("resizes.safetensors");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let st = SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut names: Vec<String> = st.names().into_iter().filter_map(|n| n.strip_suffix(".input").map(str::to_string)).collect();
    names.sort();
    assert!(names.len() >= 20, "expected 20 cases in {}", path.display());
    let load = |name: &str| {
        let t = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(t.dtype(), Dtype::U8, "{name}");
        let s = t.shape();
        Array3::from_shape_vec((s[0], s[1], s[2]), t.data().to_vec()).expect("HWC shape")
    };
    for case in names {
        let input = load(&format!("{case}.input"));
        let want = load(&format!("{case}.output"));
        let got = resize_bicubic_aa(input.view(), want.dim().0, want.dim().1);
        let d = max_abs_diff_u8(got.iter(), want.iter());
        assert!(d <= RESIZE_TOLERANCE, "{case}: {:?} -> {:?} differs by {d} levels", input.dim(), want.dim());
    }
}
