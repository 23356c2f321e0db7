//! The estimators behind `--motion NAME`: their names, typed ([`EstimatorName`]), and one line
//! per estimator naming the function that builds it from an [`EstimatorSpec`]. Adding an
//! estimator is its own file, one name and one line here.

use std::path::Path;

use candle_core::Device;

use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, WeightPrecision};
use crate::memflow::MemFlowEstimator;
use crate::mofnet::MofNetEstimator;
pub use crate::name::{EstimatorName, MotionChoice};
use crate::raft::RaftEstimator;
use crate::sea_raft::SeaRaftEstimator;
use crate::zero::ZeroFlow;

type Build = fn(&EstimatorSpec, &Device) -> Result<Box<dyn FlowEstimator>>;

fn boxed<E: FlowEstimator + 'static>(estimator: Result<E>) -> Result<Box<dyn FlowEstimator>> {
    Ok(Box::new(estimator?))
}

/// The function that builds `name`, which reads `spec.name` for the variant: the registry, one
/// line per estimator (a match, so a name without a builder does not compile).
fn builder(name: EstimatorName) -> Build {
    use EstimatorName::*;
    match name {
        Dis | Classic | DisUltrafast | DisFast | DisMedium => |spec, _| boxed(crate::dis::Dis::from_spec(spec)),
        RaftSmall | RaftLarge => |spec, device| boxed(RaftEstimator::from_spec(spec, device)),
        SeaRaftS | SeaRaftM | SeaRaftL => |spec, device| boxed(SeaRaftEstimator::from_spec(spec, device)),
        MofNet => |spec, device| boxed(MofNetEstimator::from_spec(spec, device)),
        MemFlow => |spec, device| boxed(MemFlowEstimator::from_spec(spec, device)),
        Zero => |spec, _| boxed(ZeroFlow::from_spec(spec)),
    }
}

/// Every name [`estimator_by_name`] accepts.
pub fn known_estimators() -> Vec<&'static str> {
    crate::name::known_estimators()
}

/// The estimator behind `--motion NAME`, the name read here. `dis` (alias `classic`) needs no
/// weights; the networks need a checkpoint.
pub fn estimator_by_name(name: &str, weights: Option<&Path>, device: &Device) -> Result<Box<dyn FlowEstimator>> {
    estimator_from_spec(&EstimatorSpec { name: name.parse()?, weights, ..EstimatorSpec::default() }, device)
}

/// [`estimator_by_name`] with the extra knobs of [`EstimatorSpec`].
pub fn estimator_from_spec(spec: &EstimatorSpec, device: &Device) -> Result<Box<dyn FlowEstimator>> {
    // Only MOFNet's rounding is the official code's (SIS-Motion runs no other network).
    if spec.weight_precision != WeightPrecision::F32 && spec.name != EstimatorName::MofNet {
        return Err(FlowError::PrecisionNotFor { precision: spec.weight_precision.as_str(), estimator: spec.name.as_str() });
    }
    builder(spec.name)(spec, device)
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
        let rounded = EstimatorSpec { name: EstimatorName::Dis, weight_precision: WeightPrecision::Bf16Rounded, ..EstimatorSpec::default() };
        let refused = estimator_from_spec(&rounded, &dev).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("bf16-rounded") && refused.contains("`dis`"), "{refused}");
    }

    #[test]
    fn names_read_back() {
        for name in EstimatorName::ALL {
            assert_eq!(name.as_str().parse::<EstimatorName>().ok(), Some(name));
        }
        assert_eq!("none".parse::<MotionChoice>().ok(), Some(MotionChoice::None));
        assert_eq!("classic".parse::<MotionChoice>().ok(), Some(MotionChoice::Estimator(EstimatorName::Classic)));
        let json: Vec<MotionChoice> = serde_json::from_str(r#"["none", "sea-raft-m"]"#).expect("reads");
        assert_eq!(serde_json::to_string(&json).expect("writes"), r#"["none","sea-raft-m"]"#);
        let err = serde_json::from_str::<EstimatorName>(r#""farneback""#).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("unknown motion estimator `farneback`") && err.contains("memflow"), "{err}");
    }
}
