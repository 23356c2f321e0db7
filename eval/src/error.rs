//! Errors of the evaluator. Every variant that comes from a file names it, and from a row of a
//! file names the line, so a user can open the file at the fault.

use std::path::PathBuf;

use motionvl_data::samples::{ReadError, RowError};

/// Everything that can stop an evaluation.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// The manifest cannot be read, or one of its rows is bad (without `--skip-bad`).
    #[error(transparent)]
    Manifest(Box<ReadError>),
    /// A bad manifest row found by a reader of this crate (the navigation manifests).
    #[error(transparent)]
    Row(Box<RowError>),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A predictions line that is not `{"question_id": …, "prediction": "…"}`.
    #[error("{path}:{line}: {message}")]
    Predictions { path: PathBuf, line: usize, message: String },
    /// `results.json` (or another file this crate wrote) that does not parse.
    #[error("{path}: {message}")]
    BadFile { path: PathBuf, message: String },
    #[error("unknown benchmark `{name}`; known: {known}")]
    UnknownBench { name: String, known: String },
    /// The output folder already holds predictions and `--resume` was not given.
    #[error("{} already holds predictions; pass --resume to continue that run, or choose another --out", out.display())]
    NotResumed { out: PathBuf },
    /// The output folder holds the predictions of a run with other settings (`record` names them).
    #[error(
        "{} belongs to a run with different {}; its predictions would be mixed with this run's. Choose another --out",
        record.display(),
        differences.join(", ")
    )]
    OtherRun { record: PathBuf, differences: Vec<&'static str> },
    /// Stopped on request (a signal) after a batch; every answer so far is on disk.
    #[error("stopped on request with {answered} question(s) answered and {remaining} left; continue with --resume into {}", out.display())]
    Stopped { answered: usize, remaining: usize, out: PathBuf },
    /// A config or settings file that does not read (the run config, a checkpoint's
    /// `preprocessor_config.json`, a motion branch's `motion.json`, a package's config).
    #[error("configuration: {}: {reason}", path.display())]
    ConfigFile { path: PathBuf, reason: String },
    /// A setting the run needs and nobody gave.
    #[error("configuration: no {what}: pass {flag} or set `{key}` in the config file")]
    Missing { what: &'static str, flag: &'static str, key: &'static str },
    /// A setting outside what it may be.
    #[error("configuration: {key} = {value} {problem}")]
    BadValue { key: &'static str, value: String, problem: String },
    /// What a protocol does not do, and what to choose instead.
    /// (`protocol` as `--protocol` spells it: the error type names no other module's type.)
    #[error("configuration: the {protocol} protocol {problem}")]
    NotInProtocol { protocol: &'static str, problem: &'static str },
    #[error("configuration: --no-motion and --motion {motion} contradict each other")]
    NoMotionAndMotion { motion: motionvl_flow::MotionChoice },
    /// The motion branch asked for does not fit the model: `problem` says how, and what to pass.
    #[error("configuration: {}: {problem}", model.display())]
    MotionBranch { model: PathBuf, problem: String },
    #[error(
        "configuration: {} holds no adapter_config.json (nor does its adapter/ folder); pass a PEFT LoRA folder or a trainer checkpoint",
        dir.display()
    )]
    NoAdapter { dir: PathBuf },
    #[error("configuration: checkpoint {checkpoint} has no tokenizer.json (looked in {})", looked_in.display())]
    NoTokenizer { checkpoint: String, looked_in: PathBuf },
    #[error("configuration: cannot tell which benchmark {} belongs to; pass --bench ({})", manifest.display(), reasons.join("; "))]
    UnknownManifest { manifest: PathBuf, reasons: Vec<String> },
    /// The media of a question cannot be decoded or preprocessed.
    #[error("{file}:{line} ({id}): {message}")]
    Media { file: PathBuf, line: usize, id: String, message: String },
    /// Tokenisation of a prompt failed.
    #[error("{file}:{line} ({id}): {source}")]
    Prompt {
        file: PathBuf,
        line: usize,
        id: String,
        #[source]
        source: Box<motionvl_data::text::TextError>,
    },
    /// A manifest row the official protocol cannot read as the official code would (a
    /// question or options of the wrong type, an id not in the file).
    #[error("{file}:{line} ({id}): {message}")]
    OfficialRow { file: PathBuf, line: usize, id: String, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(#[source] Box<motionvl_data::text::TextError>),
    #[error(transparent)]
    Model(#[from] motionvl_models::ModelError),
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error("CVAA checkpoint {}: {source}", checkpoint.display())]
    CvaaCheckpoint { checkpoint: PathBuf, source: motionvl_models::ModelError },
    #[error("CVAA: the window batch must be at least 1")]
    WindowBatch,
    /// CVAA's views: a UAV frame, a satellite image, a window layout.
    #[error(transparent)]
    Pairs(Box<motionvl_data::cvaa::PairsError>),
    #[error(transparent)]
    Video(Box<motionvl_data::video::VideoError>),
    /// A retrieval that failed for one pair or question (`whose`).
    #[error("CVAA retrieval for {whose}: {source}")]
    Retrieval { whose: String, source: Box<EvalError> },
    #[error("cannot serialise a row: {0}")]
    Serialise(#[from] serde_json::Error),
    #[error(transparent)]
    Flow(Box<motionvl_flow::FlowError>),
    #[error("chart {path}: {message}")]
    Chart { path: PathBuf, message: String },
    #[error(transparent)]
    RunDir(#[from] motionvl_data::run_dir::RunDirError),
    /// A caller's predictor (a stand-in for the model) failed on a batch.
    #[error("the predictor failed: {0}")]
    Predictor(Box<dyn std::error::Error + Send + Sync>),
    /// A motion-aware model given a batch whose videos do not all carry motion pixels.
    #[error("the model is motion-aware but {with_motion} of the {videos} videos carry motion pixels")]
    MotionPixels { videos: usize, with_motion: usize },
    /// Ranking by likelihood left a question without a finite score.
    #[error("question {question}: no option has a finite score ({scores:?})")]
    NoFiniteScore { question: String, scores: Vec<f64> },
    /// The run's own bookkeeping broke: a question unanswered or never tokenised, an output for
    /// a question not asked, a batch answered by the wrong count, the preparing thread gone.
    #[error("generation: {0}")]
    Bookkeeping(Bookkeeping),
    /// `answer = "likelihood"` on a benchmark or question whose answer is not one bare option.
    #[error("{bench}{}: cannot rank options by likelihood: {reason}; answer it with [generation] answer = \"generate\"", .question.as_ref().map(|q| format!(" question {q}")).unwrap_or_default())]
    NotRankable { bench: &'static str, question: Option<String>, reason: NotRankable },
}

/// What [`EvalError::Bookkeeping`] found.
#[derive(Debug, thiserror::Error)]
pub enum Bookkeeping {
    #[error("question {0} got no answer")]
    NoAnswer(String),
    #[error("question {0} was not tokenised")]
    NotTokenised(String),
    #[error("an output for question {0}, which was not asked")]
    Unasked(String),
    #[error("{outputs} outputs for a batch of {questions} questions")]
    OutputCount { outputs: usize, questions: usize },
    #[error("the preparing thread stopped")]
    PreparerStopped,
}

impl From<motionvl_data::cvaa::PairsError> for EvalError {
    fn from(e: motionvl_data::cvaa::PairsError) -> Self {
        EvalError::Pairs(Box::new(e))
    }
}

impl From<motionvl_data::video::VideoError> for EvalError {
    fn from(e: motionvl_data::video::VideoError) -> Self {
        EvalError::Video(Box::new(e))
    }
}

impl From<ReadError> for EvalError {
    fn from(e: ReadError) -> Self {
        EvalError::Manifest(Box::new(e))
    }
}

impl From<motionvl_flow::FlowError> for EvalError {
    fn from(e: motionvl_flow::FlowError) -> Self {
        EvalError::Flow(Box::new(e))
    }
}

impl From<RowError> for EvalError {
    fn from(e: RowError) -> Self {
        EvalError::Row(Box::new(e))
    }
}

impl EvalError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| EvalError::Io { action, path, source }
    }
}

pub type Result<T> = std::result::Result<T, EvalError>;

impl From<motionvl_data::files::FileError> for EvalError {
    fn from(e: motionvl_data::files::FileError) -> Self {
        EvalError::Io { action: e.action, path: e.path, source: e.source }
    }
}

/// Why a question's options cannot be ranked by likelihood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotRankable {
    /// The benchmark asks for a JSON object.
    JsonAnswers,
    /// More than one option may be right (`Answer::Choices`).
    MultiSelect,
    /// The question lists options but its answer is not one of them (a count, a time, …).
    NotAChoice,
}

impl std::fmt::Display for NotRankable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotRankable::JsonAnswers => "its prompts ask for a JSON object, and a ranked option is a bare option",
            NotRankable::MultiSelect => "it is multi-select, and ranking answers with exactly one option",
            NotRankable::NotAChoice => "its answer is not one of its options",
        })
    }
}
