//! Evaluation of motionvl checkpoints: batched greedy inference over benchmark manifests,
//! answer extraction, metrics and reports — lmms-eval's job, in the same binary as training.
//!
//! The flow of `evaluate run` ([`run::run`]): a [`bench::Bench`] reads the manifest into
//! [`item::Item`]s and writes each question's prompt; [`infer`] decodes the media with the
//! SPEC §2 protocol ([`config::ProtocolConfig`]), adds flow pseudo-images for motion-aware
//! checkpoints ([`config::MotionConfig`]) and generates greedily in batches (or, with
//! `[generation] answer = "likelihood"`, ranks each question's options, [`likelihood`]); every
//! answer is appended to `predictions.jsonl` ([`predictions`]) so an interrupted run resumes;
//! [`extract`] reads the answer out of the raw text and [`metrics`] scores it; [`results`]
//! groups the scores by task, dimension and level; [`report`] writes `results.json`, CSVs, a
//! Markdown table in the paper's layout and a PNG chart. `evaluate score` runs the last three
//! steps on predictions made by any model, and `evaluate compare` diffs two runs.
//!
//! Which evaluation is reproduced is the run's protocol ([`config::ProtocolKind`]): `paper`
//! (the flow above), `official` (the authors' released evaluator: its frames, prompt,
//! repetition penalty, question filter, regex extraction and `uav_accuracy.json`,
//! [`official`]) or `vllm-baseline` (their zero-shot vLLM path, one image per frame, [`pil`]).
//!
//! Adding a benchmark is one file in `bench/` and one line in [`bench::REGISTRY`].

pub mod bench;
pub mod config;
pub mod error;
pub mod extract;
pub mod infer;
pub mod item;
pub mod likelihood;
pub mod metrics;
pub mod official;
pub mod pil;
pub mod predictions;
pub mod prior;
pub mod report;
pub mod results;
pub mod retrieve;
pub mod run;
pub mod stats;

pub use bench::{Bench, REGISTRY};
pub use config::RunConfig;
pub use error::{EvalError, Result};
pub use item::Item;
pub use results::Results;
pub use run::{RunSummary, run, run_until, run_with, score_predictions};
