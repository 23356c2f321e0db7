//! What stops a run: every error of setting one up, training it and saving it, grouped by what
//! the user changes to get past it (the recipe, the run folder, the data, the checkpoint).

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
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("step {step}: non-finite {what} (samples {samples:?}); stopped, the last checkpoint is intact")]
    NonFinite { step: usize, what: String, samples: Vec<String> },
    #[error(transparent)]
    Flow(#[from] motionvl_flow::FlowError),
    /// The checkpoint's `preprocessor_config.json` does not read.
    #[error(transparent)]
    Processor(#[from] motionvl_data::preprocess::PreprocessError),
    #[error(transparent)]
    Parallel(#[from] crate::parallel::ParallelError),
    #[error(transparent)]
    Gradient(#[from] crate::guard::GradientError),
    #[error("stopped on request after step {step}; {} holds it — continue with --resume auto", checkpoint.display())]
    Stopped { step: usize, checkpoint: PathBuf },

    // The recipe.
    /// Neither a checkpoint to fine-tune nor a config to build a fresh model from.
    #[error("[model] needs `checkpoint` or `init_config`")]
    NoModel,
    #[error(transparent)]
    RecipeFile(Box<crate::recipe::RecipeError>),
    /// A recipe key this command cannot run with: `problem` says why and what to set instead.
    #[error("{key}: {problem}")]
    Recipe { key: &'static str, problem: String },
    /// `[model] init_config` does not read as a model config.
    #[error("{}: {reason}", path.display())]
    InitConfig { path: PathBuf, reason: String },
    #[error(transparent)]
    Tokenizer(Box<motionvl_data::text::TextError>),

    // The run folder.
    #[error(transparent)]
    RunLock(Box<motionvl_data::run_dir::RunDirError>),
    #[error(transparent)]
    File(Box<motionvl_data::files::FileError>),
    /// `--out` names a file.
    #[error("{} is not a folder; choose another --out", dir.display())]
    OutNotAFolder { dir: PathBuf },
    /// `--out` holds files this command did not write.
    #[error("{} is not empty and not a previous {what} (it holds {holds}); choose another --out", dir.display())]
    OutNotOurs { dir: PathBuf, what: &'static str, holds: String },
    #[error(
        "{} already holds a run ({}): pass --resume auto to continue it, --overwrite to start it over, or choose another --output-dir",
        dir.display(),
        found.display()
    )]
    RunExists { dir: PathBuf, found: PathBuf },

    // The training data.
    #[error("training data: {0}")]
    Read(Box<motionvl_data::samples::ReadError>),
    #[error("training data: {0}")]
    Load(Box<motionvl_data::loader::LoadError>),
    #[error("training data: {0}")]
    Batch(Box<crate::micro::MicroError>),
    #[error("training data: {0}")]
    Pairs(Box<motionvl_data::cvaa::PairsError>),
    #[error("training data: pair {pair}: {source}")]
    Pair {
        pair: String,
        #[source]
        source: Box<motionvl_data::cvaa::PairsError>,
    },
    #[error("training data: {0}")]
    Image(Box<motionvl_data::video::VideoError>),
    /// A sample that does not serialise for `--show-samples`.
    #[error("training data: {0}")]
    Show(#[from] serde_json::Error),
    #[error("training data: {location}: {source}")]
    SampleMedia {
        location: String,
        #[source]
        source: motionvl_data::media::BoxError,
    },
    #[error("training data: {} holds no usable sample", file.display())]
    NoUsableSample { file: PathBuf },
    #[error(
        "training data: no sample of {} fits max_seq_len {max_seq_len} even at min_pixels {min_pixels} and min_frames {min_frames} \
         ({too_long} too long, {failed} failed){}",
        file.display(),
        longest.as_deref().map(|(id, at, tokens)| format!("; the longest is sample {id} ({at}) at {tokens} tokens")).unwrap_or_default()
    )]
    NothingFits {
        file: PathBuf,
        max_seq_len: usize,
        min_pixels: usize,
        min_frames: usize,
        too_long: usize,
        failed: usize,
        /// Id, location and token count of the longest sample.
        longest: Option<Box<(String, String, usize)>>,
    },
    #[error("training data: no satellite image has {batch_size} pairs for a batch of its own (data.same_image_batches)")]
    NoImageBatch { batch_size: usize },
    #[error("training data: {pairs} pairs are fewer than one batch of {batch_size}")]
    TooFewPairs { pairs: usize, batch_size: usize },
    #[error("training data: epoch {epoch} yielded no sample: every one was skipped")]
    EmptyEpoch { epoch: u64 },
    #[error("training data: {} holds no answer token to score", file.display())]
    NoAnswerTokens { file: PathBuf },
    #[error("training data: {missing} of {total} flows are not in the cache; the first: {first}")]
    FlowsNotCached { missing: usize, total: usize, first: Box<motionvl_flow::FlowError> },

    // A checkpoint to resume from, export or merge.
    /// A checkpoint this run cannot continue or start from: `problem` says how it differs.
    #[error("{}: {problem}", checkpoint.display())]
    CheckpointMismatch { checkpoint: PathBuf, problem: String },
    #[error("{} holds no adapter_config.json (nor does its adapter/ folder){hint}", dir.display())]
    NoAdapter { dir: PathBuf, hint: &'static str },
    /// A run or package that cannot be written in a released layout: `problem` says why.
    #[error("{}: {problem}", path.display())]
    Export { path: PathBuf, problem: String },

    // Data-parallel ranks.
    #[error("--data-parallel needs at least one rank")]
    NoRanks,
    #[error("data-parallel rank {rank} panicked")]
    RankPanicked { rank: usize },
    #[error("{failed} data-parallel rank(s) failed to start; their errors are above")]
    RanksFailed { failed: usize },
    #[error("rank 0 failed to prepare {} (its error is in its output); this rank stops too", dir.display())]
    RankZeroFailed { dir: PathBuf },
    #[error(
        "the data-parallel ranks start from different states (rank {rank}: step {step}, next micro-batch {micro}, data sha256 {data}): every rank must read the same output_dir (a shared filesystem, not a node-local one) and the same data"
    )]
    RanksDisagree { rank: usize, step: usize, micro: u64, data: String },
}

/// The sources held boxed (they would make every `Result` of the crate as large as the largest),
/// converted by `?` all the same.
macro_rules! from_boxed {
    ($($variant:ident: $source:ty),* $(,)?) => {$(
        impl From<$source> for TrainError {
            fn from(e: $source) -> Self {
                TrainError::$variant(Box::new(e))
            }
        }
    )*};
}
from_boxed!(
    Tokenizer: motionvl_data::text::TextError,
    RunLock: motionvl_data::run_dir::RunDirError,
    File: motionvl_data::files::FileError,
    RecipeFile: crate::recipe::RecipeError,
    Read: motionvl_data::samples::ReadError,
    Load: motionvl_data::loader::LoadError,
    Batch: crate::micro::MicroError,
    Pairs: motionvl_data::cvaa::PairsError,
    Image: motionvl_data::video::VideoError,
);

pub(super) type Result<T> = std::result::Result<T, TrainError>;

/// Names `path` in an I/O error.
pub(super) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}
