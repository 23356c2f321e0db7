//! The estimators behind `--motion NAME`: their names, typed ([`EstimatorName`]), and one line
//! per estimator naming the function that builds it from an [`EstimatorSpec`]. Adding an
//! estimator is its own file, one name and one line here.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use candle_core::Device;

use crate::error::{FlowError, Result};
use crate::estimator::{EstimatorSpec, FlowEstimator, WeightPrecision};
use crate::memflow::MemFlowEstimator;
use crate::mofnet::MofNetEstimator;
use crate::raft::RaftEstimator;
use crate::sea_raft::SeaRaftEstimator;
use crate::zero::ZeroFlow;

/// A flow estimator as recipes, flags, evaluation configs and cache keys name it; read from and
/// written as the same string. Every spelling is its own value, aliases included: `classic`
/// builds `dis` but keeps its name, which the flow cache keys on, so entries made under either
/// stay apart as they always were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum EstimatorName {
    /// Dense Inverse Search, medium preset.
    #[default]
    Dis,
    /// `dis` under its older name.
    Classic,
    DisUltrafast,
    DisFast,
    DisMedium,
    RaftSmall,
    RaftLarge,
    SeaRaftS,
    SeaRaftM,
    SeaRaftL,
    MofNet,
    MemFlow,
    /// Zero flow: pseudo-images without motion (the control).
    Zero,
}

impl EstimatorName {
    /// Every name, in the order `--help` and errors list them.
    pub const ALL: [EstimatorName; 13] = [
        EstimatorName::Dis,
        EstimatorName::Classic,
        EstimatorName::DisUltrafast,
        EstimatorName::DisFast,
        EstimatorName::DisMedium,
        EstimatorName::RaftSmall,
        EstimatorName::RaftLarge,
        EstimatorName::SeaRaftS,
        EstimatorName::SeaRaftM,
        EstimatorName::SeaRaftL,
        EstimatorName::MofNet,
        EstimatorName::MemFlow,
        EstimatorName::Zero,
    ];

    /// The name as `--motion` takes it.
    pub fn as_str(self) -> &'static str {
        match self {
            EstimatorName::Dis => "dis",
            EstimatorName::Classic => "classic",
            EstimatorName::DisUltrafast => "dis-ultrafast",
            EstimatorName::DisFast => "dis-fast",
            EstimatorName::DisMedium => "dis-medium",
            EstimatorName::RaftSmall => "raft-small",
            EstimatorName::RaftLarge => "raft-large",
            EstimatorName::SeaRaftS => "sea-raft-s",
            EstimatorName::SeaRaftM => "sea-raft-m",
            EstimatorName::SeaRaftL => "sea-raft-l",
            EstimatorName::MofNet => "mofnet",
            EstimatorName::MemFlow => "memflow",
            EstimatorName::Zero => "zero",
        }
    }
}

impl FromStr for EstimatorName {
    type Err = FlowError;
    fn from_str(name: &str) -> Result<Self> {
        EstimatorName::ALL
            .into_iter()
            .find(|known| known.as_str() == name)
            .ok_or_else(|| FlowError::UnknownEstimator { name: name.to_string(), known: known_estimators().join(", ") })
    }
}

impl fmt::Display for EstimatorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `--motion` and `[motion] estimator` choose: an estimator, or `none` for the visual-only
/// model (the motion branch left out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MotionChoice {
    #[default]
    None,
    Estimator(EstimatorName),
}

impl MotionChoice {
    /// The estimator chosen, `None` for `none`.
    pub fn estimator(self) -> Option<EstimatorName> {
        match self {
            MotionChoice::None => None,
            MotionChoice::Estimator(name) => Some(name),
        }
    }

    /// `none` or the estimator's name.
    pub fn as_str(self) -> &'static str {
        self.estimator().map_or("none", EstimatorName::as_str)
    }
}

impl FromStr for MotionChoice {
    type Err = FlowError;
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "none" => Ok(MotionChoice::None),
            name => name.parse().map(MotionChoice::Estimator),
        }
    }
}

impl fmt::Display for MotionChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// Both are written as their strings in recipes, configs and records.
motionvl_util::serde_as_string!(EstimatorName, MotionChoice);

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
    EstimatorName::ALL.into_iter().map(EstimatorName::as_str).collect()
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
