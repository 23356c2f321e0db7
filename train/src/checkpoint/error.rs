//! Errors from checkpoint storage.

use std::io;
use std::path::{Path, PathBuf};

use motionvl_data::files::FileError;

use super::{CHECKPOINT_PREFIX, COMPLETE_MARKER};

/// Errors from checkpoint storage. Each names the path involved and, where
/// one exists, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, e.g. `"cannot rename"`.
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "no complete checkpoint in {dir} (looked for {CHECKPOINT_PREFIX}<step>/ holding \
         {COMPLETE_MARKER}); start without --resume, or pass a checkpoint directory"
    )]
    NoCheckpoint { dir: PathBuf },
    #[error("checkpoint directory {dir} does not exist")]
    NotFound { dir: PathBuf },
    #[error("{dir} is not a complete checkpoint (missing {COMPLETE_MARKER}){hint}")]
    Incomplete {
        dir: PathBuf,
        /// Extra advice, e.g. pointing at the newest checkpoint inside `dir`
        /// when the run directory was given instead of a checkpoint.
        hint: String,
    },
    #[error(
        "{dir} is an unfinished checkpoint (a run stopped while saving or deleting it); \
         resume from a {CHECKPOINT_PREFIX}<step> directory instead"
    )]
    Unfinished { dir: PathBuf },
    #[error(
        "{path} is not a valid {COMPLETE_MARKER} marker ({reason}), and the directory \
         name does not say the step either"
    )]
    BadMarker { path: PathBuf, reason: String },
    #[error(
        "checkpoint for step {step} is already being written in this process ({path}); \
         commit or drop the first one before beginning another"
    )]
    AlreadyPending { step: u64, path: PathBuf },
    #[error("cannot write tensors to {path}: {source}")]
    SaveTensors { path: PathBuf, source: Box<dyn std::error::Error + Send + Sync> },
    #[error("cannot load tensors from {path}: {source}")]
    LoadTensors { path: PathBuf, source: candle_core::Error },
    #[error("cannot serialise JSON for {path}: {source}")]
    JsonWrite { path: PathBuf, source: serde_json::Error },
    #[error("cannot parse JSON in {path}: {source}")]
    JsonRead { path: PathBuf, source: serde_json::Error },
}

pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

impl From<FileError> for CheckpointError {
    fn from(e: FileError) -> Self {
        CheckpointError::Io { action: e.action, path: e.path, source: e.source }
    }
}

pub(super) fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| CheckpointError::Io { action, path: path.to_path_buf(), source }
}
