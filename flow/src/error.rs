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

    /// Frames or flows of a shape a step cannot take: `needs` says what they must be.
    #[error("invalid clip: {what} needs {needs}, got {got}")]
    Clip { what: &'static str, needs: String, got: String },

    /// Frames smaller than a network's coarsest level or its patches.
    #[error("invalid clip: {what} needs frames of at least {min_side} px per side, got {width}x{height}")]
    FramesTooSmall { what: String, min_side: usize, width: usize, height: usize },

    /// A video whose frames could not be decoded or prepared for the flow.
    #[error("invalid clip: {}: {reason}", path.display())]
    Video { path: PathBuf, reason: String },

    /// A network config (a `config.json` beside the weights, or a preset's settings) that does
    /// not build the network.
    #[error("invalid parameter: {network} config: {problem}")]
    NetworkConfig { network: &'static str, problem: String },

    /// A refinement count of zero.
    #[error("invalid parameter: {network} needs at least one {step}")]
    NoIterations { network: &'static str, step: &'static str },

    /// A setting outside its range (DIS's patches, the pseudo-images' scale).
    #[error("invalid parameter: {key} {problem}")]
    BadSetting { key: &'static str, problem: String },

    /// Tensors a fused kernel cannot combine: a caller's bug, reported instead of a panic.
    #[error("invalid parameter: {kernel}: {problem}")]
    KernelShapes { kernel: &'static str, problem: String },

    /// A weight precision other than f32 for an estimator other than MOFNet (both as configs
    /// spell them: the error type names no other module's type, so the modules stay acyclic).
    #[error(
        "invalid parameter: estimator weights `{precision}` reproduce the SIS-Motion code's MOFNet; `{estimator}` computes with its weights as stored (use f32)"
    )]
    PrecisionNotFor { precision: &'static str, estimator: &'static str },

    #[error(
        "invalid parameter: the official SIS-Motion pipeline takes whole-clip 1/8-resolution flows from MOFNet (`--motion mofnet`, or `zero` for its control); `{estimator}` has none"
    )]
    NoCoarseFlows { estimator: String },

    #[error("invalid parameter: unknown plan `{plan}`: use training, sisbench, uniform:N (N ≥ 2) or all")]
    UnknownPlan { plan: String },

    #[error("{} is neither training conversations nor a benchmark manifest motionvl reads", path.display())]
    NotAManifest { path: PathBuf },

    /// Flows asked of the cache where the run keeps none.
    #[error("the run has no flow cache")]
    NoCache,

    #[error(transparent)]
    Text(Box<motionvl_data::text::TextError>),

    #[error(transparent)]
    Load(Box<motionvl_data::loader::LoadError>),

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

impl From<motionvl_data::text::TextError> for FlowError {
    fn from(e: motionvl_data::text::TextError) -> Self {
        FlowError::Text(Box::new(e))
    }
}

impl From<motionvl_data::loader::LoadError> for FlowError {
    fn from(e: motionvl_data::loader::LoadError) -> Self {
        FlowError::Load(Box::new(e))
    }
}

impl FlowError {
    /// Wraps an I/O error with the path it happened on (std's errors do not name it).
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FlowError::Io { path: path.into(), source }
    }
}
