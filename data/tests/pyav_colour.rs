//! The official plan converts decoded video to RGB exactly as PyAV 13.1.0's `frame.to_image()`
//! does for the official SIS-Motion code, over every dump of `tests/fixtures/pyav_colour`
//! (made by `tools/fixtures/pyav_colour.py`): clips tagged BT.709 / BT.601 / nothing, limited
//! and full range, H.264 and VP9.

use std::path::{Path, PathBuf};

use motionvl_data::frames::FramePolicy;
use motionvl_data::video::{ColourConversion, DecodeOptions, VideoSource};
use ndarray::{Array4, ArrayView4};
use safetensors::{Dtype, SafeTensors};

fn dumps() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/pyav_colour");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .map(|entry| entry.expect("dump entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 3, "{}: expected the dumps of tools/fixtures/pyav_colour.py", root.display());
    dirs
}

/// The dump's clip (`clip.*`) and its `frames.safetensors` tensor `name`, `[T,H,W,3]` u8.
fn clip_of(dump: &Path) -> PathBuf {
    let clips: Vec<PathBuf> =
        std::fs::read_dir(dump).expect("dump").map(|e| e.expect("entry").path()).filter(|p| p.file_stem().is_some_and(|s| s == "clip")).collect();
    assert_eq!(clips.len(), 1, "{}: one clip.* expected", dump.display());
    clips[0].clone()
}

fn expected(dump: &Path, name: &str) -> Array4<u8> {
    let bytes = std::fs::read(dump.join("frames.safetensors")).expect("frames.safetensors");
    let tensors = SafeTensors::deserialize(&bytes).expect("safetensors");
    let view = tensors.tensor(name).unwrap_or_else(|e| panic!("{}: {name}: {e}", dump.display()));
    assert_eq!(view.dtype(), Dtype::U8, "{}: {name}", dump.display());
    let shape: [usize; 4] = view.shape().try_into().expect("[T,H,W,3]");
    Array4::from_shape_vec(shape, view.data().to_vec()).expect("shape")
}

/// Every frame of the clip (the official plan keeps all of ≤ 32), converted as `colour` says;
/// `None`: as the official policy picks.
fn decode(clip: &Path, colour: Option<ColourConversion>) -> Array4<u8> {
    let options = DecodeOptions { colour, ..DecodeOptions::default() };
    let (plan, decoded) =
        VideoSource::File(clip.to_path_buf()).load(&FramePolicy::Official { max_frames: 32 }, &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(plan.indices, (0..plan.indices.len()).collect::<Vec<_>>(), "{}", clip.display());
    decoded.frames
}

/// (largest absolute difference, differing bytes).
fn difference(got: ArrayView4<u8>, want: ArrayView4<u8>) -> (u8, usize) {
    got.iter().zip(want.iter()).fold((0, 0), |(max, n), (a, b)| (max.max(a.abs_diff(*b)), n + usize::from(a != b)))
}

#[test]
fn official_plan_converts_like_pyav_13_to_image() {
    for dump in dumps() {
        let clip = clip_of(&dump);
        let want = expected(&dump, "official");
        let got = decode(&clip, None);
        assert_eq!(got.dim(), want.dim(), "{}", dump.display());
        assert_eq!(difference(got.view(), want.view()), (0, 0), "{}: official conversion", dump.display());
        // Naming the conversion is the same as letting the official policy pick it.
        assert_eq!(decode(&clip, Some(ColourConversion::Pyav13)), got, "{}", dump.display());
    }
}

#[test]
fn frame_tagged_conversion_follows_the_tags() {
    for dump in dumps() {
        let clip = clip_of(&dump);
        let got = decode(&clip, Some(ColourConversion::FrameTagged));
        let tagged = expected(&dump, "tagged");
        assert_eq!(difference(got.view(), tagged.view()), (0, 0), "{}: tagged conversion", dump.display());
        // Where the tags say BT.709 or full range, the two conversions part.
        let official = expected(&dump, "official");
        let name = dump.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let (max, _) = difference(got.view(), official.view());
        if name.starts_with("bt709") {
            assert!(max >= 20, "{name}: tagged and official conversions differ by only {max}");
        } else {
            assert_eq!(max, 0, "{name}: BT.601 limited clips convert alike");
        }
    }
}

#[test]
fn policies_pick_their_conversion() {
    assert_eq!(ColourConversion::for_policy(&FramePolicy::Official { max_frames: 32 }), ColourConversion::Pyav13);
    assert_eq!(ColourConversion::for_policy(&FramePolicy::Uniform { frames: 8 }), ColourConversion::FrameTagged);
    let explicit = DecodeOptions { colour: Some(ColourConversion::FrameTagged), ..DecodeOptions::default() };
    assert_eq!(explicit.for_policy(&FramePolicy::Official { max_frames: 32 }).colour, Some(ColourConversion::FrameTagged));
    assert_eq!(DecodeOptions::default().for_policy(&FramePolicy::Official { max_frames: 4 }).colour, Some(ColourConversion::Pyav13));
}
