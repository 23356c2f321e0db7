use std::path::PathBuf;

/// Everything that can go wrong while loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a valid model config: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error("checkpoint has no tensor `{name}` (looked in {files})")]
    MissingTensor { name: String, files: String },
    #[error(
        "the adapter does not fit the base model: its update of `{module}` is {update}, the base's `{module}.weight` is {base} — the adapter was trained on another model"
    )]
    AdapterMismatch { module: String, update: String, base: String },
    #[error("the adapter adapts `{module}`, which the base model does not have — the adapter was trained on another model")]
    AdapterExtraModule { module: String },
    #[error("checkpoint tensor `{name}` has shape {found:?}, the config expects {expected:?}")]
    TensorShape { name: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("no safetensors weights in {0} (expected model.safetensors or model.safetensors.index.json)")]
    NoWeights(PathBuf),
    #[error(
        "model `{repo}` file `{file}` is not in the Hugging Face cache at {cache} and offline mode is on; download it first (or unset HF_HUB_OFFLINE) or pass a local directory"
    )]
    NotCached { repo: String, file: String, cache: PathBuf },
    #[error("downloading `{file}` of `{repo}` failed: {reason}")]
    Hub { repo: String, file: String, reason: String },
    #[error(
        "{kind} placeholder tokens and {kind} features disagree: the prompt holds {tokens} placeholder tokens but the vision tower produced {features} feature rows"
    )]
    PlaceholderMismatch { kind: &'static str, tokens: usize, features: usize },
    #[error("{path}: {reason}")]
    Package { path: PathBuf, reason: String },
    #[error("invalid input: {0}")]
    Input(String),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, ModelError>;

impl From<motionvl_util::files::FileError> for ModelError {
    fn from(e: motionvl_util::files::FileError) -> Self {
        ModelError::Io { path: e.path, source: e.source }
    }
}

/// A JSON config file, parsed and then checked by `validate`; every problem names the file.
pub(crate) fn read_validated_json<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
    validate: impl Fn(&T) -> std::result::Result<(), String>,
) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(|source| ModelError::Io { path: path.to_path_buf(), source })?;
    let cfg: T = serde_json::from_str(&text).map_err(|e| ModelError::Config { path: path.to_path_buf(), reason: e.to_string() })?;
    validate(&cfg).map_err(|reason| ModelError::Config { path: path.to_path_buf(), reason })?;
    Ok(cfg)
}
