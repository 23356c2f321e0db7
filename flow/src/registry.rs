//! The estimators behind `--motion NAME`: one line per estimator, naming it and the function
//! that builds it from an [`EstimatorSpec`]. Adding an estimator is its own file plus one line here.

use std::path::Path;

use candle_core::Device;

use crate::dis::Dis;
use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, WeightPrecision};
use crate::memflow::MemFlowEstimator;
use crate::mofnet::MofNetEstimator;
use crate::raft::RaftEstimator;
use crate::sea_raft::SeaRaftEstimator;
use crate::zero::ZeroFlow;

type Build = fn(&EstimatorSpec, &Device) -> Result<Box<dyn FlowEstimator>>;

fn boxed<E: FlowEstimator + 'static>(estimator: Result<E>) -> Result<Box<dyn FlowEstimator>> {
    Ok(Box::new(estimator?))
}

/// `(names, build)`: every name in `names` builds with `build`, which reads `spec.name` for the
/// variant.
const REGISTRY: &[(&[&str], Build)] = &[
    (&["dis", "classic", "dis-ultrafast", "dis-fast", "dis-medium"], |spec, _| boxed(Dis::from_spec(spec))),
    (&["raft-small", "raft-large"], |spec, device| boxed(RaftEstimator::from_spec(spec, device))),
    (&["sea-raft-s", "sea-raft-m", "sea-raft-l"], |spec, device| boxed(SeaRaftEstimator::from_spec(spec, device))),
    (&["mofnet"], |spec, device| boxed(MofNetEstimator::from_spec(spec, device))),
    (&["memflow"], |spec, device| boxed(MemFlowEstimator::from_spec(spec, device))),
    (&["zero"], |spec, _| boxed(ZeroFlow::from_spec(spec))),
];

/// Every name [`estimator_by_name`] accepts.
pub fn known_estimators() -> Vec<&'static str> {
    REGISTRY.iter().flat_map(|(names, _)| names.iter().copied()).collect()
}

/// The estimator behind `--motion NAME`. `dis` (alias `classic`) needs no weights; the networks
/// need a checkpoint.
pub fn estimator_by_name(name: &str, weights: Option<&Path>, device: &Device) -> Result<Box<dyn FlowEstimator>> {
    estimator_from_spec(&EstimatorSpec { name, weights, ..EstimatorSpec::default() }, device)
}

/// [`estimator_by_name`] with the extra knobs of [`EstimatorSpec`].
pub fn estimator_from_spec(spec: &EstimatorSpec, device: &Device) -> Result<Box<dyn FlowEstimator>> {
    let Some((_, build)) = REGISTRY.iter().find(|(names, _)| names.contains(&spec.name)) else {
        return Err(FlowError::UnknownEstimator { name: spec.name.to_string(), known: known_estimators().join(", ") });
    };
    // Only MOFNet's rounding is the official code's (SIS-Motion runs no other network).
    if spec.weight_precision != WeightPrecision::F32 && spec.name != "mofnet" {
        return Err(FlowError::InvalidParameter(format!(
            "estimator weights `{}` reproduce the SIS-Motion code's MOFNet; `{}` computes with its weights as stored (use f32)",
            spec.weight_precision.as_str(),
            spec.name
        )));
    }
    build(spec, device)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_names_and_errors() {
        let dev = Device::Cpu;
        assert_eq!(estimator_by_name("dis", None, &dev).map(|e| e.name().to_string()).ok().as_deref(), Some("dis"));
        assert_eq!(estimator_by_name("classic", None, &dev).map(|e| e.name().to_string()).ok().as_deref(), Some("classic"));
        let unknown = estimator_by_name("farneback", None, &dev).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(unknown.contains("raft-large") && unknown.contains("dis"), "{unknown}");
        let missing = estimator_by_name("raft-small", None, &dev).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(missing.contains("--weights") && missing.contains("`dis`") && missing.contains("raft_small"), "{missing}");
        let extra = estimator_by_name("dis", Some(Path::new("x.pth")), &dev).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(extra.contains("takes no weights"), "{extra}");
        let rounded = EstimatorSpec { name: "dis", weight_precision: WeightPrecision::Bf16Rounded, ..EstimatorSpec::default() };
        let refused = estimator_from_spec(&rounded, &dev).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("bf16-rounded") && refused.contains("`dis`"), "{refused}");
    }
}
