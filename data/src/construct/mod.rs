//! Construction modules: benchmark and training files rebuilt from source footage,
//! annotations and trajectories, in the forms the `manifest` readers and `eval` load.
//!
//! | module | `construct` subcommand | makes |
//! |---|---|---|
//! | [`split`] | `split` | the AirScape train / benchmark lists from clip file names |
//! | [`nav`] | `nav` | navigation MCQ rows from flown trajectories |
//! | [`sisbench_qa`] | `sisbench-qa` | SIS-Bench questions for all 13 tasks from per-video annotations |
//! | [`sisbench_videos`] | `sisbench-videos` | converted, concatenated, long and shuffled videos |
//!
//! Every output file is written atomically (a temporary file beside it, then a rename), so an
//! interrupted run never leaves a half-written manifest that a reader would take as whole.

pub mod error;
pub mod nav;
pub mod sisbench_qa;
pub mod sisbench_videos;

pub mod split;

pub use error::ConstructError;
