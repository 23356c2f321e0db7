//! What stops a run: every error of setting one up, training it and saving it.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    #[error(transparent)]
    Model(#[from] motionvl_models::ModelError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error(transparent)]
    Optim(#[from] crate::optim::OptimError),
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    #[error(transparent)]
    TensorBoard(#[from] crate::tensorboard::TensorBoardError),
    #[error("training data: {0}")]
    Data(String),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("step {step}: non-finite {what} (samples {samples:?}); stopped, the last checkpoint is intact")]
    NonFinite { step: usize, what: String, samples: Vec<String> },
    #[error(transparent)]
    Flow(#[from] motionvl_flow::FlowError),
    #[error(transparent)]
    Parallel(#[from] crate::parallel::ParallelError),
    #[error(transparent)]
    Gradient(#[from] crate::guard::GradientError),
    #[error("{0}")]
    Setup(String),
    #[error("stopped on request after step {step}; {} holds it — continue with --resume auto", checkpoint.display())]
    Stopped { step: usize, checkpoint: PathBuf },
}

pub(super) type Result<T> = std::result::Result<T, TrainError>;

/// Names `path` in an I/O error.
pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}
