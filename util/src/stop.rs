//! Stopping a run at a checkpoint when asked: a cluster's SIGTERM (preemption, time limit),
//! SIGINT, or SIGUSR1 (`#SBATCH --signal=USR1@90`). The binary turns signals into a
//! [`StopFlag`]; a trainer reads it once per optimiser step, finishes that step, saves a
//! checkpoint and returns its `Stopped` error (data-parallel ranks read it inside the step's
//! collective, so all of them stop after the same step); an evaluation finishes the batch in
//! flight, whose answers are on disk, and returns its `Stopped` error, resumable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// The exit status of a run stopped at a checkpoint (`EX_TEMPFAIL`): what a requeue script
/// tests for before resubmitting with `--resume auto` (`--resume` for an evaluation).
pub const EXIT_STOPPED: i32 = 75;

/// Whether a stop was requested. Clones share one flag.
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// The shared flag, for signal handlers to set.
    pub fn atomic(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.0)
    }
}
