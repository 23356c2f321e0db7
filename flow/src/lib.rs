//! Optical flow for motionvl: the [`FlowEstimator`] trait and its implementations (Dense
//! Inverse Search in pure Rust, RAFT small/large in Candle), flow → pseudo-images for the
//! motion encoder, an on-disk flow cache, and the loader hook that turns a video into motion
//! pixels ([`media`]), either motionvl's way or the SIS-Motion authors' ([`official`],
//! `pipeline = "official"`).

pub mod cache;
pub mod dis;
pub mod error;
pub mod estimator;
pub mod extract;
pub mod kernels;
pub mod key_index;
pub mod media;
pub mod memflow;
pub mod mofnet;
pub mod name;
pub mod official;
pub mod pseudo;
pub mod raft;
pub mod registry;
pub mod sea_raft;
pub mod state_dict;
pub mod synthetic;
pub mod viz;
pub mod zero;

pub use cache::{CacheKey, CacheStatus, FlowCache};
pub use dis::{Dis, DisParams, DisPreset};
pub use error::{FlowError, Result};
pub use estimator::{EstimatorSpec, FlowEstimator, Flows, Padding, WeightPrecision, settings_without_precision};
pub use pseudo::{Alignment, MotionPipeline, PseudoImageConfig, PseudoImages};
pub use raft::{Raft, RaftArch, RaftConfig, RaftEstimator};
pub use registry::{EstimatorName, MotionChoice, estimator_by_name, estimator_from_spec, known_estimators};
