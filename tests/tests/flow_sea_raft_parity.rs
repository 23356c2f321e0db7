//! SEA-RAFT parity with the official code: every dump under
//! `tests/fixtures/flow/sea_raft_{s,m,l}/<name>/` (made by
//! `tools/fixtures/sea_raft.py`) must reproduce princeton-vl/SEA-RAFT's flows within
//! `tolerance::flow_px`, from `model.safetensors` and, when present, the `.pth` of the same weights. A new
//! dump needs no code here.

use candle_core::Device;
use motionvl_flow::sea_raft::{SeaRaftConfig, SeaRaftEstimator};
use motionvl_flow::{FlowEstimator, estimator_by_name};
use motionvl_tests::fixtures::{families, fixtures_root};
use motionvl_tests::flow_dump::FlowDump;

#[test]
fn sea_raft_matches_the_official_code_on_every_dump() {
    let dumps: Vec<FlowDump> = families("flow", "sea_raft_").into_iter().map(FlowDump::open).collect();
    for arch in ["sea_raft_s", "sea_raft_m", "sea_raft_l"] {
        assert!(dumps.iter().any(|d| d.dump.label.starts_with(&format!("flow/{arch}/"))), "no {arch} dump");
    }
    let mut checked_pth = false;
    for fx in dumps {
        let cfg = SeaRaftConfig::from_json(&fx.config_json()).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        let expected = fx.expected("flows");
        // The released `.pth` of the same weights is an optional second reading.
        let mut weights = vec![fx.dump.path("model.safetensors")];
        if fx.dump.has("model.pth") {
            weights.push(fx.dump.path("model.pth"));
            checked_pth = true;
        }
        for path in weights {
            let est = SeaRaftEstimator::from_checkpoint(&path, &cfg, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let flows = est.estimate(fx.frames.view()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            fx.assert_flow(&format!("{} ({} iterations)", path.display(), cfg.iters), flows.view(), expected.view());
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
    let tiny = fixtures_root().join("flow/sea_raft_s/tiny/model.safetensors");
    let misfit = estimator_by_name("sea-raft-s", Some(&tiny), &dev).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(misfit.contains("does not fit SEA-RAFT"), "{misfit}");
}
