//! What can go wrong constructing benchmark files.

use std::path::{Path, PathBuf};

use motionvl_data::video::VideoError;

/// Failures of the construction modules; each names the file (and row or key) concerned.
#[derive(Debug, thiserror::Error)]
pub enum ConstructError {
    #[error(transparent)]
    File(#[from] motionvl_util::files::FileError),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A bad input file or row: `file` and, in `detail`, the row, key or name at fault.
    #[error("{}: {detail}", file.display())]
    Input { file: PathBuf, detail: String },
    /// A setting (`key`, as the command line or config names it) this construction cannot run with.
    #[error("{key}: {problem}")]
    Setting { key: &'static str, problem: String },
    /// Two listed clips share a name.
    #[error("clip `{name}` is listed twice")]
    DuplicateClip { name: String },
    /// Two sources would write the same video.
    #[error("two sources would both write {video}; rename one")]
    DuplicateVideo { video: String },
    #[error(transparent)]
    Video(#[from] VideoError),
}

impl ConstructError {
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ConstructError + '_ {
        move |source| ConstructError::Io { path: path.to_path_buf(), source }
    }

    pub(crate) fn input(file: &Path, detail: impl Into<String>) -> ConstructError {
        ConstructError::Input { file: file.to_path_buf(), detail: detail.into() }
    }
}
