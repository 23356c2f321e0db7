//! The one error type of the library: every failure says what the caller should do next.

use std::path::PathBuf;

/// Errors of `motionvl-flow`. The binary wraps them in `anyhow`.
#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("unknown motion estimator `{name}`; known estimators: {known}")]
    UnknownEstimator { name: String, known: String },

    #[error(
        "estimator `{name}` is a network and needs weights: pass --weights with {expected}; \
         the classical estimator `dis` (alias `classic`) needs no weights"
    )]
    MissingWeights { name: String, expected: String },

    #[error("estimator `{name}` takes no weights, but {path} was given")]
    UnexpectedWeights { name: String, path: PathBuf },

    #[error("invalid clip: {0}")]
    InvalidInput(String),

    #[error("invalid parameter: {0}")]
    InvalidParameter(String),

    #[error("checkpoint {path}: {reason}")]
    Checkpoint { path: PathBuf, reason: String },

    #[error("flow cache entry {path}: {reason}")]
    CorruptCacheEntry { path: PathBuf, reason: String },

    #[error(
        "no cached flow for {video} (frames {plan}) in {cache} — run `flow extract --config <the same recipe or evaluation config> --cache {cache}` first, or drop --flow-cache-only to compute missing flows"
    )]
    CacheMiss { video: PathBuf, plan: String, cache: PathBuf },

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("image {path}: {source}")]
    Image {
        path: PathBuf,
        #[source]
        source: image::ImageError,
    },

    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    #[error(transparent)]
    Safetensors(#[from] safetensors::SafeTensorError),

    #[error(transparent)]
    Json(#[from] serde_json::Error),
}

pub type Result<T> = std::result::Result<T, FlowError>;

impl FlowError {
    /// Wraps an I/O error with the path it happened on (std's errors do not name it).
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FlowError::Io { path: path.into(), source }
    }
}
