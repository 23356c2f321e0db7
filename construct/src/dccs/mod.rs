//! UAV-DualCog's construction stages 3 and 4 (its DCCS pipeline), from Stage 2's handoff files
//! to manifests in UAV-DualCog's own sample schema, so that its evaluation code and ours both
//! read them.
//!
//! Read the files in the order data flows: [`instances`] and [`cloud`] (inputs) →
//! [`maneuvers`] (the behaviour library) → [`trajectory`] (flown, screened, repaired) →
//! [`visibility`] → [`stage3`] (missions, video rows, render requests) → [`stage4`] (image
//! rows, render requests) → [`render`] (the synthetic world renders both) and [`world`] (the
//! synthetic world's landmarks and point cloud as Stage 2 files); [`pipeline`] runs them as
//! `construct dccs-video`, `construct dccs-image` and `construct synth --dccs` do.

pub mod cloud;
pub mod error;
pub mod geom;
pub mod instances;
pub mod maneuvers;
pub mod pipeline;
pub mod render;
pub mod stage3;
pub mod stage4;
pub mod trajectory;
pub mod visibility;
pub mod world;

pub use error::DccsError;
