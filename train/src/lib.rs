//! Training motionvl models: full-parameter pretraining of fresh models, and supervised
//! fine-tuning — recipes, LoRA training with AdamW parameter
//! groups, exact-resume checkpoints, TensorBoard logs, and adapter merging.

pub mod batch;
pub mod checkpoint;
pub mod cvaa;
pub mod export;
pub mod guard;
pub mod hf_layout;
pub mod merge;
pub mod micro;
pub mod optim;
pub mod output_dir;
pub mod parallel;
pub mod pretrain;
pub mod recipe;
pub mod rendezvous;
pub mod sft;
pub mod tensorboard;
pub mod threads;
