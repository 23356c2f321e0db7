//! Frame sampling against qwen-vl-utils and transformers: every dump under
//! `tests/fixtures/video_sampling/` (made by tools/fixtures/video_sampling.py on ffmpeg clips)
//! must give the same frame indices, `second_per_grid_ts` and, for qwen-vl-utils, the same
//! resized size and grid — and on the committed small clip the same resized pixels (an exact
//! f32 tie may round either way: at most one level on one value in 10⁴).

use motionvl_data::frames::{ClipTiming, FramePolicy};
use motionvl_data::preprocess::PreprocessConfig;
use motionvl_data::sampling::{Sampling, resize_video, video_size};
use motionvl_data::video::{DecodeOptions, VideoSource, load_image};
use motionvl_tests::fixtures::dumps;
use ndarray::Axis;
use serde_json::Value;

#[test]
fn frames_sizes_and_pixels_equal_qwen_vl_utils_and_transformers_on_every_dump() {
    let mut checked = 0;
    for dump in dumps("video_sampling") {
        let (clip, expected) = (dump.json("clip.json"), dump.json("expected.json"));
        let timing = ClipTiming::new(dump.field("clip.json", &clip, "num_frames"), dump.field("clip.json", &clip, "average_fps"));
        let (width, height): (usize, usize) = (dump.field("clip.json", &clip, "width"), dump.field("clip.json", &clip, "height"));
        let cases: Vec<Value> = dump.field("expected.json", &expected, "cases");
        for case in cases {
            let sampling: Sampling = dump.field("expected.json", &case, "sampling");
            let policy: FramePolicy = dump.field("expected.json", &case, "policy");
            let what = format!("{}: {sampling:?} {policy:?}", dump.label);
            let got = policy.plan_with(sampling, timing).unwrap_or_else(|e| panic!("{what}: {e}"));
            let indices: Vec<usize> = dump.field("expected.json", &case, "indices");
            assert_eq!(got.indices, indices, "{what}: indices");
            let want: f64 = dump.field("expected.json", &case, "second_per_grid_ts");
            assert!((got.second_per_grid(2) - want).abs() <= 1e-12 * want, "{what}: second_per_grid_ts {} vs {want}", got.second_per_grid(2));
            if sampling != Sampling::QwenVlUtils {
                continue;
            }
            let cfg = PreprocessConfig {
                min_pixels: dump.field("expected.json", &case, "min_pixels"),
                max_pixels: dump.field("expected.json", &case, "max_pixels"),
                ..PreprocessConfig::default()
            };
            let (h, w) = video_size(sampling, height, width, got.len(), &cfg).unwrap_or_else(|e| panic!("{what}: {e}"));
            let resized: [usize; 2] = dump.field("expected.json", &case, "resized");
            assert_eq!([h, w], resized, "{what}: resized size");
            let grid: [usize; 3] = dump.field("expected.json", &case, "grid_thw");
            assert_eq!([got.len().div_ceil(2), h / 14, w / 14], grid, "{what}: grid");
            if let Some(pngs) = case.get("frames_png") {
                let pngs: Vec<String> = serde_json::from_value(pngs.clone()).unwrap_or_else(|e| panic!("{what}: frames_png: {e}"));
                let decoded =
                    VideoSource::File(dump.path("clip.mp4")).decode(&got, &DecodeOptions::default()).unwrap_or_else(|e| panic!("{what}: {e}"));
                let float = resize_video(sampling, decoded.frames.view(), h, w);
                let uint8 = resize_video(Sampling::Transformers, decoded.frames.view(), h, w);
                let (mut off_float, mut off_uint8, mut values) = (0usize, 0usize, 0usize);
                for (k, png) in pngs.iter().enumerate() {
                    let reference = load_image(&dump.path(png)).unwrap_or_else(|e| panic!("{what}: {e}"));
                    for ((r, f), u) in reference.iter().zip(float.index_axis(Axis(0), k)).zip(uint8.index_axis(Axis(0), k)) {
                        assert!(r.abs_diff(*f) <= 1, "{what}: {png} differs by more than one level");
                        off_float += usize::from(r != f);
                        off_uint8 += usize::from(r != u);
                        values += 1;
                    }
                }
                // Only exact f32 ties (x.5) may round the other way; the uint8 kernel is far off.
                assert!(off_float * 10_000 <= values, "{what}: {off_float} of {values} values off by one");
                assert!(off_uint8 * 100 > values, "{what}: the uint8 kernel should differ visibly ({off_uint8} of {values})");
            }
            checked += 1;
        }
    }
    assert!(checked > 0, "no qwen-vl-utils case was checked");
}
