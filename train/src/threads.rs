//! `train sft --data-parallel N`: the ranks of a data-parallel run as threads of one process,
//! exchanging gradients through a [`ThreadExchange`] — the CPU stand-in for one process per GPU.

use crate::parallel::{ParallelError, ThreadExchange};
use crate::recipe::Recipe;
use crate::sft::{Start, StepLog, TrainError, Trainer};
use motionvl_data::stop::StopFlag;

/// `train sft --data-parallel N` on one machine: `world` trainers as threads, summing through a
/// [`ThreadExchange`]. Returns rank 0's step logs, or the error of the rank that failed first.
pub fn train_threads(recipe: &Recipe, start: Start<'_>, world: usize, stop: &StopFlag) -> std::result::Result<Vec<StepLog>, TrainError> {
    // The threads sum on the host: a GPU recipe would fail at its first exchange.
    if !recipe.model.device.is_cpu() {
        return Err(TrainError::Recipe {
            key: "model.device",
            problem: format!(
                "--data-parallel runs ranks as CPU threads, but the recipe trains on `{}`: launch one process per GPU instead (torchrun --no-python --nproc-per-node {world} train sft …, or srun)",
                recipe.model.device
            ),
        });
    }
    let outcomes: Vec<std::result::Result<Vec<StepLog>, TrainError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ThreadExchange::group(world)
            .into_iter()
            .map(|exchange| {
                scope.spawn(move || {
                    let mut trainer = Trainer::start_parallel(recipe, start, Some(Box::new(exchange)))?;
                    trainer.stop_on(stop.clone());
                    trainer.run()
                })
            })
            .collect();
        handles.into_iter().enumerate().map(|(rank, h)| h.join().unwrap_or_else(|_| Err(TrainError::RankPanicked { rank }))).collect()
    });
    // A rank that fails releases the others with `PeerGone`: report the cause, not the echo.
    let mut echo = None;
    let mut logs = None;
    for outcome in outcomes {
        match outcome {
            Ok(l) => logs = logs.or(Some(l)),
            Err(TrainError::Parallel(ParallelError::PeerGone(r))) => echo = echo.or(Some(r)),
            Err(e) => return Err(e),
        }
    }
    match (echo, logs) {
        (Some(rank), _) => Err(ParallelError::PeerGone(rank).into()),
        (None, Some(logs)) => Ok(logs),
        (None, None) => Err(TrainError::NoRanks),
    }
}
