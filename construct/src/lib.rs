//! Builders of motionvl's data: benchmark and training files rebuilt from source footage,
//! annotations and trajectories, the synthetic UAV world, and UAV-DualCog's Stages 3 and 4, in
//! the forms `data`'s manifest readers and `eval` load.
//!
//! | module | `construct` subcommand | makes |
//! |---|---|---|
//! | [`split`] | `split` | the AirScape train / benchmark lists from clip file names |
//! | [`nav`] | `nav` | navigation MCQ rows from flown trajectories |
//! | [`sisbench_qa`] | `sisbench-qa` | SIS-Bench questions for all 13 tasks from per-video annotations |
//! | [`sisbench_videos`] | `sisbench-videos` | converted, concatenated, long and shuffled videos |
//! | [`synth`] | `synth` | the synthetic world: videos, exact depth and flow, questions, training sets |
//! | [`dccs`] | `dccs-video`, `dccs-image`, `synth --dccs` | UAV-DualCog Stage 3 video and Stage 4 image sets |
//!
//! Readers never depend on this crate: what they read (the manifest schemas) lives in `data`,
//! and these builders write it. Every output file is written atomically (a temporary file
//! beside it, then a rename), so an interrupted run never leaves a half-written manifest that
//! a reader would take as whole.

pub mod dccs;
pub mod error;
pub mod nav;
pub mod sisbench_qa;
pub mod sisbench_videos;
pub mod split;
pub mod synth;

pub use error::ConstructError;
