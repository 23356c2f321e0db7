//! MemFlow parity with the official video runtime: every dump under
//! `tests/fixtures/flow/memflow/<name>/` (made by `tools/fixtures/memflow.py`, which
//! drives `InferenceCore` as `inference.py` does) must reproduce its flows within `tolerance::flow_px` for
//! every pair of the clip — the later pairs only match if the memory is kept and read as the
//! reference does. A new dump needs no code here.

use candle_core::{DType, Device};
use motionvl_flow::memflow::{MemFlowConfig, MemFlowEstimator};
use motionvl_flow::{FlowEstimator, estimator_by_name};
use motionvl_tests::fixtures::{dumps, fixtures_root, tolerance};
use motionvl_tests::flow_dump::FlowDump;
use ndarray::s;

#[test]
fn memflow_matches_the_official_runtime_on_every_dump() {
    for fx in dumps("flow/memflow").into_iter().map(FlowDump::open) {
        let cfg = MemFlowConfig::from_json(&fx.config_json()).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        let n = fx.frames.dim().0;
        assert!(n >= 3, "{}: the memory is only read from the second pair on; use ≥ 3 frames", fx.dump.label);
        let expected = fx.expected("flows");
        let path = fx.dump.path("model.safetensors");
        let est = MemFlowEstimator::from_checkpoint(&path, cfg, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let flows = est.estimate(fx.frames.view()).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        for t in 0..flows.dim().0 {
            fx.assert_flow(&format!("pair {t}"), flows.slice(s![t..t + 1, .., .., ..]), expected.slice(s![t..t + 1, .., .., ..]));
        }
        // The memory matters: the last pair alone (no memory) is measurably different.
        let alone = est.estimate(fx.frames.slice(s![n - 2.., .., .., ..])).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        let last = expected.slice(s![n - 2..n - 1, .., .., ..]);
        let without_memory = alone.iter().zip(last.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        let bound = tolerance::flow_px(motionvl_tests::flow_dump::max_abs(last));
        assert!(without_memory > 10.0 * bound, "{}: the memory changes the last flow by only {without_memory} px", fx.dump.label);
    }
}

#[test]
fn registry_names_the_checkpoint() {
    let missing = estimator_by_name("memflow", None, &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(missing.contains("MemFlowNet_sintel.pth") && missing.contains("`dis`"), "{missing}");
    let raft = fixtures_root().join("flow/sea_raft_s/tiny/model.safetensors");
    let wrong = estimator_by_name("memflow", Some(&raft), &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(wrong.contains("not a MemFlow checkpoint"), "{wrong}");
}

#[test]
fn released_wrapping_is_unwrapped() {
    // `{'model': {'module.<name>': …}}`, as MemFlowNet_*.pth are saved.
    let dir = fixtures_root().join("flow/memflow/tiny");
    let wrapped = motionvl_flow::sea_raft::weights::load_state_dict(
        &dir.join("wrapped_subset.pth"),
        &Device::Cpu,
        "MemFlow",
        "update_block.aggregator.to_v.weight",
    )
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
