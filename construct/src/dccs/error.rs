//! What can go wrong constructing UAV-DualCog data, and the file reads and output paths every
//! stage shares.

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
    /// A setting (`key`, as the command line or config names it) the stage cannot run with.
    #[error("{key}: {problem}")]
    Setting { key: &'static str, problem: String },
    #[error("{}: {detail}", path.display())]
    Requests { path: PathBuf, detail: String },
    /// A file named after a landmark or mission would land outside the output folder.
    #[error("{whose}: {source}")]
    Escape { whose: String, source: motionvl_util::confine::Escape },
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

/// `out/rel`, for a file that `whose` (a landmark or mission, named in the error) names after
/// the landmark id `id` from the handoff file: the id must be one plain file name, and the path
/// stay under `out`, through no link planted there.
pub(crate) fn named_after(out: &Path, id: &str, rel: &str, whose: impl Fn() -> String) -> Result<PathBuf, DccsError> {
    let escape = |source| DccsError::Escape { whose: whose(), source };
    motionvl_util::confine::safe_name(id).map_err(escape)?;
    motionvl_util::confine::confined_join(out, rel).map_err(escape)
}

/// Reads a JSON file, naming it in every error.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value, DccsError> {
    let text = std::fs::read_to_string(path).map_err(DccsError::io(path))?;
    serde_json::from_str(&text).map_err(|source| DccsError::Json { path: path.to_path_buf(), source })
}
