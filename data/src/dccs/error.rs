//! What can go wrong constructing UAV-DualCog data, and the atomic file writes every stage shares.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Failures of `construct dccs-video`, `dccs-image` and `synth --dccs`. Each names the file,
/// landmark, mission or setting it concerns.
#[derive(Debug, thiserror::Error)]
pub enum DccsError {
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

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename, so a
/// reader never sees half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DccsError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(DccsError::io(dir))?;
    }
    let tmp = temp_path(path);
    let mut file = std::fs::File::create(&tmp).map_err(DccsError::io(&tmp))?;
    file.write_all(bytes).map_err(DccsError::io(&tmp))?;
    file.sync_all().map_err(DccsError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(DccsError::io(path))
}

/// Pretty JSON with a final newline, written atomically.
pub fn write_json_atomic(path: &Path, value: &impl Serialize) -> Result<(), DccsError> {
    let mut text =
        serde_json::to_string_pretty(value).map_err(|source| DccsError::Json { path: path.to_path_buf(), source })?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// `dir/.name.tmp`, beside the final file so the rename never crosses file systems.
pub(crate) fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}

/// Reads a JSON file, naming it in every error.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value, DccsError> {
    let text = std::fs::read_to_string(path).map_err(DccsError::io(path))?;
    serde_json::from_str(&text).map_err(|source| DccsError::Json { path: path.to_path_buf(), source })
}
