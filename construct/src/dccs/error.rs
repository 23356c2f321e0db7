//! What can go wrong constructing UAV-DualCog data, and the atomic file writes every stage shares.

use std::path::{Path, PathBuf};

/// Failures of `construct dccs-video`, `dccs-image` and `synth --dccs`. Each names the file,
/// landmark, mission or setting it concerns.
#[derive(Debug, thiserror::Error)]
pub enum DccsError {
    #[error(transparent)]
    File(#[from] motionvl_util::files::FileError),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: not valid JSON: {source}", path.display())]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("{}: landmark `{landmark}`: {detail}", path.display())]
    Landmark { path: PathBuf, landmark: String, detail: String },
    #[error("{}: {detail}", path.display())]
    Instances { path: PathBuf, detail: String },
    #[error("{}: {detail}", path.display())]
    Cloud { path: PathBuf, detail: String },
    #[error("invalid setting: {0}")]
    Config(String),
    #[error("{}: {detail}", path.display())]
    Requests { path: PathBuf, detail: String },
    #[error("{}: cannot write image: {source}", path.display())]
    Image { path: PathBuf, source: image::ImageError },
    #[error(transparent)]
    Synth(#[from] crate::synth::SynthError),
}

impl DccsError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DccsError + '_ {
        move |source| DccsError::Io { path: path.to_path_buf(), source }
    }
}

/// Reads a JSON file, naming it in every error.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value, DccsError> {
    let text = std::fs::read_to_string(path).map_err(DccsError::io(path))?;
    serde_json::from_str(&text).map_err(|source| DccsError::Json { path: path.to_path_buf(), source })
}
