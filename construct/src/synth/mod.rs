//! The embedded synthetic UAV world (`construct synth`): a procedural scene of textured
//! terrain and named landmarks, a 90° pinhole camera flown by ego-motion behaviours, a
//! ray-casting renderer with exact depth and optical flow, and SIS-Bench questions of all 13
//! tasks written as a manifest and as training conversations that the `data` readers load
//! unchanged.
//!
//! It exists so that the whole pipeline (flow, training, evaluation) can be seen working on
//! any machine with nothing downloaded, and so that flow estimators have exact ground truth to
//! be measured against. Read the files in the order data flows:
//! [`scene`] (world) → [`behaviours`] (flights) → [`camera`] → [`render`] (frames, depth,
//! flow) → [`annotate`] (ground truth as annotations) → [`qa`] (questions) → [`write`](mod@write)
//! (files) → [`generate`](mod@generate) (the pipeline).

pub mod annotate;
pub mod behaviours;
pub mod camera;
pub mod describe;
pub mod error;
pub mod generate;
pub mod geometry;
pub mod qa;
pub mod render;
pub use motionvl_util::rng;
pub mod satellite;
pub mod scene;
pub mod terrain;
pub mod write;

pub use error::SynthError;
pub use generate::{GroundTruth, Split, SplitSummary, SynthConfig, SynthSummary, generate, generate_with_progress};
