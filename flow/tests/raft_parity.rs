//! RAFT parity with torchvision: every dump under `tests/fixtures/flow/<arch>/<name>/` (made by
//! `tools/fixtures/make_flow_fixture.py`) must reproduce torchvision's flows within 1e-3 px,
//! from `model.safetensors` (torchvision names) and, when present, `model_princeton.pth`
//! (princeton-vl names, `module.` prefix, read by Candle's pickle reader). A new dump needs no
//! code here.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use motionvl_flow::{FlowEstimator, RaftConfig, RaftEstimator};
use ndarray::{Array4, ArrayView4};

const TOLERANCE: f32 = 1e-3;

fn fixture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow");
    let mut dirs = Vec::new();
    for arch in std::fs::read_dir(&root).expect("tests/fixtures/flow exists").flatten() {
        // Other networks' dumps (sea_raft_*, memflow, mofnet) live beside RAFT's.
        if !matches!(arch.file_name().to_str(), Some("raft_small" | "raft_large")) {
            continue;
        }
        for dump in std::fs::read_dir(arch.path()).expect("arch dir").flatten() {
            if dump.path().join("config.json").is_file() {
                dirs.push(dump.path());
            }
        }
    }
    dirs.sort();
    dirs
}

fn tensor(path: &Path, name: &str) -> Tensor {
    let mut all = candle_core::safetensors::load(path, &Device::Cpu).expect("readable safetensors");
    all.remove(name).unwrap_or_else(|| panic!("{} has no `{name}`", path.display()))
}

fn to_array4<T: candle_core::WithDType>(t: &Tensor) -> Array4<T> {
    let d = t.dims4().expect("4-D");
    Array4::from_shape_vec(d, t.flatten_all().and_then(|f| f.to_vec1::<T>()).expect("values")).expect("shape")
}

fn max_diff(a: ArrayView4<f32>, b: ArrayView4<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn raft_matches_torchvision_on_every_dump() {
    let dirs = fixture_dirs();
    let archs: std::collections::BTreeSet<String> = dirs.iter().filter_map(|d| d.parent()?.file_name()?.to_str().map(String::from)).collect();
    assert!(archs.contains("raft_small") && archs.contains("raft_large"), "dumps for both variants are expected, found {archs:?}");
    for dir in dirs {
        let (cfg, iters) = RaftConfig::from_json(&std::fs::read_to_string(dir.join("config.json")).expect("config")).expect("valid config");
        let iters = iters.expect("config.json names the iterations");
        let frames: Array4<u8> = to_array4(&tensor(&dir.join("inputs.safetensors"), "frames").to_dtype(DType::U8).expect("u8"));
        let expected: Array4<f32> = to_array4(&tensor(&dir.join("expected.safetensors"), "flows"));
        let scale = expected.iter().map(|v| v.abs()).fold(0.0, f32::max);
        assert!(scale > 0.05, "{}: the reference flow is too small to test anything ({scale})", dir.display());
        for weights in ["model.safetensors", "model_princeton.pth"] {
            let path = dir.join(weights);
            if !path.is_file() {
                continue;
            }
            let est = RaftEstimator::from_checkpoint(&path, cfg.clone(), iters, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let flows = est.estimate(frames.view()).expect("flows");
            let diff = max_diff(flows.view(), expected.view());
            eprintln!("{}: max |Δflow| = {diff:.2e} px (flow up to {scale:.2} px)", path.display());
            assert!(diff < TOLERANCE, "{}: max |Δflow| {diff} px ≥ {TOLERANCE}", path.display());
        }
    }
}

#[test]
fn frames_of_any_size_are_padded_and_cropped_back() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/raft_small/tiny");
    let (cfg, _) = RaftConfig::from_json(&std::fs::read_to_string(dir.join("config.json")).expect("config")).expect("valid config");
    let est = RaftEstimator::from_checkpoint(&dir.join("model.safetensors"), cfg, 2, &Device::Cpu).expect("model");
    assert_eq!(est.size_multiple(), 8);
    let frames = Array4::from_shape_fn((2, 130, 123, 3), |(t, y, x, c)| ((x * 7 + y * 3 + t * 5 + c * 11) % 256) as u8);
    let flows = est.estimate(frames.view()).expect("flows");
    assert_eq!(flows.dim(), (1, 2, 130, 123));
    assert!(flows.iter().all(|v| v.is_finite()));
    // The coarsest of 4 correlation levels needs a 1/64-scale cell: 64 px per side at least
    // (torchvision asks for 128 because its grid_sample normalisation divides by side − 1).
    let small = Array4::<u8>::zeros((2, 40, 48, 3));
    let err = est.estimate(small.view()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("at least 64"), "{err}");
}
