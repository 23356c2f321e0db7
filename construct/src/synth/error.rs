//! What can go wrong building the synthetic world.

use std::path::PathBuf;

use motionvl_data::video::VideoError;

/// Failures of `construct synth`. Each says what to change or which file it concerns.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// A setting (`key`, as the command line names it) the world cannot be built with.
    #[error("{key}: {problem}")]
    Setting { key: &'static str, problem: String },
    /// An image whose pixel buffer does not fill its size (a bug, reported with the file).
    #[error("{}: a {width}×{height} image with a pixel buffer of the wrong length", path.display())]
    ImageBuffer { path: PathBuf, width: usize, height: usize },
    #[error("world seed {seed}: {detail}")]
    Planning { seed: u64, detail: String },
    #[error(
        "{} already holds a generated world (synth.json); pass --force to replace it or choose another --out",
        .0.display()
    )]
    Exists(PathBuf),
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}: cannot write JSON: {source}", path.display())]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("{}: cannot write ground truth: {source}", path.display())]
    GroundTruth { path: PathBuf, source: safetensors::SafeTensorError },
    #[error(transparent)]
    Video(#[from] VideoError),
}

impl SynthError {
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> SynthError + '_ {
        move |source| SynthError::Io { path: path.to_path_buf(), source }
    }
}
