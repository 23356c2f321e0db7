//! SEA-RAFT (Wang, Lipson & Deng, "SEA-RAFT: Simple, Efficient, Accurate RAFT for Optical
//! Flow", ECCV 2024) in Candle, frozen, loading princeton-vl/SEA-RAFT checkpoints.
//!
//! What changes from RAFT ([`crate::raft`]), file by file in the order data flows:
//! [`extractor`] — ImageNet-style ResNet18/34 trunks with batch norm (`ResNetFPN`), the context
//! network seeing *both* frames; [`update`] — ConvNeXt blocks instead of a GRU, a flow head that
//! also predicts uncertainty (ignored at inference); [`model`] — iteration 0 regresses the flow
//! directly from the context, then a few refinements (S/M: 4, L: 12). The correlation pyramid,
//! its lookup kernel and convex upsampling are RAFT's. [`config`] holds the official arguments
//! and the S/M/L presets, [`weights`] reads checkpoints, [`estimator`] is the
//! [`crate::FlowEstimator`].

pub mod config;
pub mod conv;
pub mod estimator;
pub mod extractor;
pub mod model;
pub mod update;
pub mod weights;

pub use config::{Backbone, SeaRaftConfig, SeaRaftPreset};
pub use estimator::SeaRaftEstimator;
pub use model::SeaRaft;
