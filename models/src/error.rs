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
    /// A tokenizer whose vision token ids are not the model config's.
    #[error("the model's {key} is {model} but the tokenizer gives {tokenizer}: they come from different checkpoints")]
    VisionTokens { key: &'static str, model: u32, tokenizer: u32 },
    /// A device or dtype name no spelling matches.
    #[error("{what} `{name}`: expected {expected}")]
    UnknownName { what: &'static str, name: String, expected: &'static str },
    #[error("device {device}: {reason} (was motionvl built with --features cuda?)")]
    NoDevice { device: String, reason: String },
    /// A model config (built in code, not read from a file) that cannot build its model.
    #[error("invalid input: {model} config: {problem}")]
    ModelConfig { model: &'static str, problem: String },
    /// A LoRA config that selects nothing or cannot train.
    #[error("invalid input: LoRA {problem}")]
    Lora { problem: String },
    #[error("invalid input: tensor `{tensor}` is {dtype:?}; only f32, bf16 and f16 tensors can be written to a torch file")]
    TorchDtype { tensor: String, dtype: candle_core::DType },
    /// Pixels, grids or motion tokens that do not fit one another or the vision tower.
    #[error("invalid input: {problem}")]
    Pixels { problem: String },
    /// A prompt batch whose rows, token kinds or vision blocks do not fit its inputs.
    #[error("invalid input: {problem}")]
    Prompt { problem: String },
    #[error("invalid input: label {label} at row {row}, position {position} is outside the vocabulary of {vocab}")]
    LabelOutOfVocabulary { label: i64, row: usize, position: usize, vocab: usize },
    #[error("invalid input: no position has a label: nothing to train on")]
    NoLabels,
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
