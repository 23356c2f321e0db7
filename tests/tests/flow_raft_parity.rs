//! RAFT parity with torchvision: every dump under `tests/fixtures/flow/<arch>/<name>/` (made by
//! `tools/fixtures/raft.py`) must reproduce torchvision's flows within `tolerance::flow_px`,
//! from `model.safetensors` (torchvision names) and, when present, `model_princeton.pth`
//! (princeton-vl names, `module.` prefix, read by Candle's pickle reader). A new dump needs no
//! code here.

use candle_core::Device;
use motionvl_flow::{FlowEstimator, RaftConfig, RaftEstimator};
use motionvl_tests::fixtures::{families, fixtures_root};
use motionvl_tests::flow_dump::FlowDump;
use ndarray::Array4;

#[test]
fn raft_matches_torchvision_on_every_dump() {
    let dumps: Vec<FlowDump> = families("flow", "raft_").into_iter().map(FlowDump::open).collect();
    for arch in ["raft_small", "raft_large"] {
        assert!(dumps.iter().any(|d| d.dump.label.starts_with(&format!("flow/{arch}/"))), "no {arch} dump");
    }
    for fx in dumps {
        let (cfg, iters) = RaftConfig::from_json(&fx.config_json()).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        let iters = iters.unwrap_or_else(|| panic!("{}: config.json names no iterations", fx.dump.label));
        let expected = fx.expected("flows");
        // The princeton-vl `.pth` of the same weights is an optional second reading.
        let mut weights = vec![fx.dump.path("model.safetensors")];
        if fx.dump.has("model_princeton.pth") {
            weights.push(fx.dump.path("model_princeton.pth"));
        }
        for path in weights {
            let est = RaftEstimator::from_checkpoint(&path, cfg.clone(), iters, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let flows = est.estimate(fx.frames.view()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            fx.assert_flow(&path.display().to_string(), flows.view(), expected.view());
        }
    }
}

#[test]
fn frames_of_any_size_are_padded_and_cropped_back() {
    let dir = fixtures_root().join("flow/raft_small/tiny");
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
