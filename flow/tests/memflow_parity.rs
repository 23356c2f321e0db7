//! MemFlow parity with the official video runtime: every dump under
//! `tests/fixtures/flow/memflow/<name>/` (made by `tools/fixtures/make_memflow_fixture.py`, which
//! drives `InferenceCore` as `inference.py` does) must reproduce its flows within 1e-3 px for
//! every pair of the clip — the later pairs only match if the memory is kept and read as the
//! reference does. A new dump needs no code here.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use motionvl_flow::memflow::{MemFlowConfig, MemFlowEstimator};
use motionvl_flow::{estimator_by_name, FlowEstimator};
use ndarray::{s, Array4, ArrayView4};

const TOLERANCE: f32 = 1e-3;

fn fixture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/memflow");
    let mut dirs: Vec<PathBuf> =
        std::fs::read_dir(&root).expect("tests/fixtures/flow/memflow exists").flatten().map(|d| d.path()).filter(|p| p.join("config.json").is_file()).collect();
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
fn memflow_matches_the_official_runtime_on_every_dump() {
    let dirs = fixture_dirs();
    assert!(!dirs.is_empty(), "at least one MemFlow dump is expected");
    for dir in dirs {
        let cfg = MemFlowConfig::from_json(&std::fs::read_to_string(dir.join("config.json")).expect("config")).expect("valid config");
        let frames: Array4<u8> = to_array4(&tensor(&dir.join("inputs.safetensors"), "frames").to_dtype(DType::U8).expect("u8"));
        assert!(frames.dim().0 >= 3, "{}: the memory is only read from the second pair on; use ≥ 3 frames", dir.display());
        let expected: Array4<f32> = to_array4(&tensor(&dir.join("expected.safetensors"), "flows"));
        let scale = expected.iter().map(|v| v.abs()).fold(0.0, f32::max);
        assert!(scale > 0.5, "{}: the reference flow is too small to test anything ({scale})", dir.display());
        let path = dir.join("model.safetensors");
        let est = MemFlowEstimator::from_checkpoint(&path, cfg, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let flows = est.estimate(frames.view()).expect("flows");
        for t in 0..flows.dim().0 {
            let diff = max_diff(flows.slice(s![t..t + 1, .., .., ..]), expected.slice(s![t..t + 1, .., .., ..]));
            eprintln!("{} pair {t}: max |Δflow| = {diff:.2e} px (flow up to {scale:.2} px)", dir.display());
            assert!(diff < TOLERANCE, "{} pair {t}: max |Δflow| {diff} px ≥ {TOLERANCE}", dir.display());
        }
        // The memory matters: the last pair alone (no memory) is measurably different.
        let n = frames.dim().0;
        let alone = est.estimate(frames.slice(s![n - 2.., .., .., ..])).expect("flows");
        let without_memory = max_diff(alone.view(), expected.slice(s![n - 2..n - 1, .., .., ..]));
        assert!(without_memory > 10.0 * TOLERANCE, "{}: the memory changes the last flow by only {without_memory} px", dir.display());
    }
}

#[test]
fn registry_names_the_checkpoint() {
    let missing = estimator_by_name("memflow", None, &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(missing.contains("MemFlowNet_sintel.pth") && missing.contains("`dis`"), "{missing}");
    let raft = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/sea_raft_s/tiny/model.safetensors");
    let wrong = estimator_by_name("memflow", Some(&raft), &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(wrong.contains("not a MemFlow checkpoint"), "{wrong}");
}

#[test]
fn released_wrapping_is_unwrapped() {
    // `{'model': {'module.<name>': …}}`, as MemFlowNet_*.pth are saved.
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/memflow/tiny");
    let wrapped = motionvl_flow::sea_raft::weights::load_state_dict(&dir.join("wrapped_subset.pth"), &Device::Cpu, "MemFlow", "update_block.aggregator.to_v.weight")
        .expect("wrapped .pth reads");
    let mut names: Vec<&str> = wrapped.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(names, ["att.to_qk.weight", "update_block.aggregator.gamma", "update_block.aggregator.to_v.weight"]);
    let full = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).expect("model");
    for (name, t) in &wrapped {
        let reference = full[name].to_dtype(DType::F32).expect("f32");
        let diff = (t - reference).and_then(|d| d.abs()?.max_all()?.to_scalar::<f32>()).expect("diff");
        assert_eq!(diff, 0.0, "{name}");
    }
}
