//! The estimators' names, typed: what recipes, flags, evaluation configs and cache keys spell
//! (the registry, [`crate::registry`], builds an estimator from one).

use std::fmt;
use std::str::FromStr;

use crate::error::{FlowError, Result};

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

/// Every estimator name, in the order `--help` and errors list them.
pub fn known_estimators() -> Vec<&'static str> {
    EstimatorName::ALL.into_iter().map(EstimatorName::as_str).collect()
}
