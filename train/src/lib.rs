//! Supervised fine-tuning of motionvl models.

pub mod checkpoint;
pub mod tensorboard;
