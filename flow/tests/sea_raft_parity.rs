//! SEA-RAFT parity with the official code: every dump under
//! `tests/fixtures/flow/sea_raft_{s,m,l}/<name>/` (made by
//! `tools/fixtures/make_searaft_fixture.py`) must reproduce princeton-vl/SEA-RAFT's flows within
//! 1e-3 px, from `model.safetensors` and, when present, the `.pth` of the same weights. A new
//! dump needs no code here.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use motionvl_flow::sea_raft::{SeaRaftConfig, SeaRaftEstimator};
use motionvl_flow::{estimator_by_name, FlowEstimator};
use ndarray::{Array4, ArrayView4};

const TOLERANCE: f32 = 1e-3;

fn fixture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow");
    let mut dirs = Vec::new();
    for arch in std::fs::read_dir(&root).expect("tests/fixtures/flow exists").flatten() {
        if !arch.file_name().to_string_lossy().starts_with("sea_raft_") {
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
fn sea_raft_matches_the_official_code_on_every_dump() {
    let dirs = fixture_dirs();
    let archs: std::collections::BTreeSet<String> = dirs.iter().filter_map(|d| d.parent()?.file_name()?.to_str().map(String::from)).collect();
    assert!(["sea_raft_s", "sea_raft_m", "sea_raft_l"].iter().all(|a| archs.contains(*a)), "dumps for S, M and L are expected, found {archs:?}");
    let mut checked_pth = false;
    for dir in dirs {
        let cfg = SeaRaftConfig::from_json(&std::fs::read_to_string(dir.join("config.json")).expect("config")).expect("valid config");
        let frames: Array4<u8> = to_array4(&tensor(&dir.join("inputs.safetensors"), "frames").to_dtype(DType::U8).expect("u8"));
        let expected: Array4<f32> = to_array4(&tensor(&dir.join("expected.safetensors"), "flows"));
        let scale = expected.iter().map(|v| v.abs()).fold(0.0, f32::max);
        assert!(scale > 0.5, "{}: the reference flow is too small to test anything ({scale})", dir.display());
        for weights in ["model.safetensors", "model.pth"] {
            let path = dir.join(weights);
            if !path.is_file() {
                continue;
            }
            checked_pth |= weights.ends_with(".pth");
            let est = SeaRaftEstimator::from_checkpoint(&path, &cfg, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let flows = est.estimate(frames.view()).expect("flows");
            let diff = max_diff(flows.view(), expected.view());
            eprintln!("{}: max |Δflow| = {diff:.2e} px (flow up to {scale:.2} px, {} iterations)", path.display(), cfg.iters);
            assert!(diff < TOLERANCE, "{}: max |Δflow| {diff} px ≥ {TOLERANCE}", path.display());
        }
    }
    assert!(checked_pth, "one dump should carry the weights as a .pth, as released");
}

#[test]
fn registry_names_the_checkpoint_and_rejects_weights_of_another_shape() {
    let dev = Device::Cpu;
    let missing = estimator_by_name("sea-raft-s", None, &dev).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(missing.contains("Tartan-C-T-TSKH432x960-S.pth") && missing.contains("`dis`"), "{missing}");
    let missing = estimator_by_name("sea-raft-l", None, &dev).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(missing.contains("Tartan-C-T-TSKH432x960-M.pth"), "{missing}");
    // A reduced-width dump does not fit the published S shapes: a checkpoint error, not a panic.
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/sea_raft_s/tiny/model.safetensors");
    let misfit = estimator_by_name("sea-raft-s", Some(&tiny), &dev).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(misfit.contains("does not fit SEA-RAFT"), "{misfit}");
}
