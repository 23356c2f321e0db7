//! The storage side of checkpoints: atomic commit, keep-last-K, resume lookup.
//!
//! A run directory holds `checkpoint-<step>/` directories. What goes inside
//! one (adapter, optimiser moments, trainer state) is the trainer's business;
//! this module only guarantees that a directory named `checkpoint-<step>`
//! holding a [`COMPLETE_MARKER`] file is whole, because:
//!
//! 1. The trainer fills `<output_dir>/.tmp-checkpoint-<step>-<pid>/`
//!    ([`PendingCheckpoint::dir`]), a name no lookup ever takes for a
//!    checkpoint.
//! 2. [`PendingCheckpoint::commit`] fsyncs every file and directory in it,
//!    writes the marker (fsynced too), renames the directory to
//!    `checkpoint-<step>` — one atomic step on a POSIX filesystem — and
//!    fsyncs `output_dir` so the rename itself survives a power cut.
//! 3. Only then are checkpoints beyond the newest K removed; each is first
//!    renamed back to a `.tmp-checkpoint-…` name, so a deletion interrupted
//!    half-way never leaves a partial directory that still looks complete.
//!
//! A run killed at any moment therefore leaves at worst a `.tmp-checkpoint-*`
//! directory, which lookups ignore and [`Checkpoints::open`] /
//! [`Checkpoints::begin`] delete; the run loses only the steps since its last
//! commit. The marker also rejects directories that were copied partially by
//! other tools (`cp -r`, `rsync`) or written by a trainer that does not use
//! this module.//!
//! Beside the lifecycle (`store.rs`) and the read-only lookups (`lookup.rs`), `state_files.rs`
//! writes and reads the files a trainer puts inside a checkpoint (tensors, JSON), atomically.

mod error;
mod lookup;
mod state_files;
mod store;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use error::{CheckpointError, Result};
pub use lookup::{latest_complete, list_complete, resolve_resume};
pub use state_files::{append_json_line, load_json, load_tensors, save_json, save_tensors, write_atomic};
pub use store::{Checkpoints, Committed, PendingCheckpoint, clean_stale_temp};

/// File whose presence makes `checkpoint-<step>/` a complete checkpoint. It
/// holds `{"step": N}`, which lets a checkpoint that was renamed (`best/`)
/// still be resumed from.
pub const COMPLETE_MARKER: &str = "COMPLETE";

/// Committed checkpoints are `checkpoint-<step>`, as in HF Trainer, so
/// scripts written for it find ours.
pub const CHECKPOINT_PREFIX: &str = "checkpoint-";

/// In-progress (or abandoned) checkpoints: `.tmp-checkpoint-<step>-<pid>`.
/// The leading dot keeps them out of globs like `checkpoint-*`.
pub const TMP_PREFIX: &str = ".tmp-checkpoint-";

/// A committed, complete checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The optimiser step it was taken after.
    pub step: u64,
    pub path: PathBuf,
}
