//! Data parallel over threads: the semantics NCCL ranks share. Two ranks × `grad_accum` 4 train
//! on exactly the micro-batches of one rank × `grad_accum` 8 (same samples, same dropout masks,
//! gradients summed before clipping), and a two-rank run resumed from its checkpoint continues
//! the uninterrupted one.

use std::path::Path;

use motionvl_data::stop::StopFlag;
use motionvl_train::parallel::ThreadExchange;
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::{Start, StepLog, TrainError, Trainer};
use motionvl_train::threads::train_threads;

mod common;

/// The tiny recipe (eight clips, one per micro-batch, LoRA dropout on) into `out`.
fn tiny(out: &Path, extra: &[(&str, &str)]) -> Recipe {
    let mut extra = extra.to_vec();
    extra.push(("logging.tensorboard", "false"));
    common::tiny(out, &extra)
}

fn assert_close(a: &[StepLog], b: &[StepLog], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}: step counts");
    for (x, y) in a.iter().zip(b) {
        assert_eq!(x.step, y.step);
        assert!((x.loss - y.loss).abs() <= 1e-5, "{what}, step {}: loss {} vs {}", x.step, x.loss, y.loss);
        assert!(
            (x.grad_norm - y.grad_norm).abs() <= 1e-4 * x.grad_norm.max(1.0),
            "{what}, step {}: grad_norm {} vs {}",
            x.step,
            x.grad_norm,
            y.grad_norm
        );
    }
}

#[test]
fn two_ranks_of_four_micro_batches_equal_one_rank_of_eight() {
    // Three steps of 8 micro-batches over 8 samples: each step is one epoch, shuffled anew.
    let steps = ("optim.max_steps", "3");
    let alone = tempfile::tempdir().unwrap();
    let single = Trainer::new(&tiny(alone.path(), &[steps, ("optim.grad_accum", "8")]), None).unwrap().run().unwrap();
    let pair = tempfile::tempdir().unwrap();
    let parallel = train_threads(&tiny(pair.path(), &[steps, ("optim.grad_accum", "4")]), Start::Fresh, 2, &StopFlag::new()).unwrap();
    assert_close(&single, &parallel, "2 × 4 vs 1 × 8");
    assert!(single.windows(2).any(|w| w[0].loss != w[1].loss), "the steps train: {single:?}");

    // Only rank 0 writes the run directory: one log line per step.
    let log = std::fs::read_to_string(pair.path().join("trainer_log.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 3, "{log}");
}

#[test]
fn averaged_over_tokens_two_ranks_of_four_equal_one_rank_of_eight() {
    // Each rank weighs its micro-batches by the step's token count over both ranks: a rank that
    // used its own count would double every gradient.
    let settings = [("optim.max_steps", "2"), ("optim.loss_average", "\"tokens\"")];
    let alone = tempfile::tempdir().unwrap();
    let single = Trainer::new(&tiny(alone.path(), &[settings[0], settings[1], ("optim.grad_accum", "8")]), None).unwrap().run().unwrap();
    let pair = tempfile::tempdir().unwrap();
    let parallel =
        train_threads(&tiny(pair.path(), &[settings[0], settings[1], ("optim.grad_accum", "4")]), Start::Fresh, 2, &StopFlag::new()).unwrap();
    assert_close(&single, &parallel, "tokens: 2 × 4 vs 1 × 8");
}

#[test]
fn a_resumed_two_rank_run_equals_the_uninterrupted_one() {
    let settings = [("optim.max_steps", "4"), ("optim.grad_accum", "3"), ("checkpoint.every", "2")];
    let whole = tempfile::tempdir().unwrap();
    let uninterrupted = train_threads(&tiny(whole.path(), &settings), Start::Fresh, 2, &StopFlag::new()).unwrap();

    // Killed after the checkpoint at step 2 (3 × 2 micro-batches per step do not divide the
    // 8-sample epoch, so the resume lands mid-epoch), then resumed by a fresh pair of ranks.
    let split = tempfile::tempdir().unwrap();
    let recipe = tiny(split.path(), &settings);
    let first: Vec<StepLog> = std::thread::scope(|scope| {
        let handles: Vec<_> = ThreadExchange::group(2)
            .into_iter()
            .map(|exchange| {
                let recipe = &recipe;
                scope.spawn(move || {
                    let mut trainer = Trainer::start_parallel(recipe, Start::Fresh, Some(Box::new(exchange))).unwrap();
                    (0..2).map(|_| trainer.train_step().unwrap()).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).next().unwrap()
    });
    let second = train_threads(&recipe, Start::Resume("auto"), 2, &StopFlag::new()).unwrap();
    let resumed: Vec<StepLog> = first.into_iter().chain(second).collect();
    assert_close(&uninterrupted, &resumed, "2 steps + resume + 2 steps vs 4 steps");
    let losses = |logs: &[StepLog]| logs.iter().map(|l| l.loss).collect::<Vec<_>>();
    assert_eq!(losses(&resumed), losses(&uninterrupted), "the same ranks reproduce the run bit for bit");
}

/// A stop requested on one rank only stops both after the same step (the request travels in
/// the step's collective), with rank 0's checkpoint of that step; the resumed pair finishes
/// the run bit for bit as an uninterrupted one.
#[test]
fn a_stop_seen_by_one_rank_stops_both_at_one_checkpoint_and_resumes_exactly() {
    let settings = [("optim.max_steps", "4"), ("optim.grad_accum", "2"), ("checkpoint.every", "100")];
    let whole = tempfile::tempdir().unwrap();
    let uninterrupted = train_threads(&tiny(whole.path(), &settings), Start::Fresh, 2, &StopFlag::new()).unwrap();

    let split = tempfile::tempdir().unwrap();
    let recipe = tiny(split.path(), &settings);
    let outcomes: Vec<Result<Vec<StepLog>, TrainError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = ThreadExchange::group(2)
            .into_iter()
            .enumerate()
            .map(|(rank, exchange)| {
                let recipe = &recipe;
                scope.spawn(move || {
                    let mut trainer = Trainer::start_parallel(recipe, Start::Fresh, Some(Box::new(exchange))).unwrap();
                    let stop = StopFlag::new();
                    trainer.stop_on(stop.clone());
                    let first = trainer.train_step().unwrap();
                    // Rank 1's signal arrives during step 2; rank 0 never sees one.
                    if rank == 1 {
                        stop.request();
                    }
                    trainer.run().map(|rest| std::iter::once(first).chain(rest).collect())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rank, outcome) in outcomes.iter().enumerate() {
        match outcome {
            Err(TrainError::Stopped { step, checkpoint }) => {
                assert_eq!(*step, 2, "rank {rank}");
                assert!(checkpoint.ends_with("checkpoint-2"), "rank {rank}: {}", checkpoint.display());
            }
            other => panic!("rank {rank} did not stop: {:?}", other.as_ref().map(|l| l.len())),
        }
    }
    assert!(split.path().join("checkpoint-2").is_dir(), "the stop saved the current step");
    assert!(!split.path().join("adapter_model.safetensors").exists(), "a stopped run publishes no final adapter");
    let second = train_threads(&recipe, Start::Resume("auto"), 2, &StopFlag::new()).unwrap();
    assert_eq!(second.first().map(|l| l.step), Some(3));
    let losses = |logs: &[StepLog]| logs.iter().map(|l| l.loss).collect::<Vec<_>>();
    assert_eq!(losses(&second), losses(&uninterrupted[2..]), "the resumed steps are the uninterrupted run's");
    let adapter = |dir: &Path| std::fs::read(dir.join("adapter_model.safetensors")).unwrap();
    assert_eq!(adapter(split.path()), adapter(whole.path()), "the same final adapter, byte for byte");
}

/// Ranks that resumed different states (rank 1 reads a node-local folder without the
/// checkpoint rank 0 resumes) refuse to train together, naming what they start from.
#[test]
fn ranks_that_resume_different_states_refuse_to_train_together() {
    let settings = [("optim.max_steps", "4"), ("optim.grad_accum", "2"), ("checkpoint.every", "2")];
    let shared = tempfile::tempdir().unwrap();
    train_threads(&tiny(shared.path(), &[("optim.max_steps", "2"), settings[1], settings[2]]), Start::Fresh, 2, &StopFlag::new()).unwrap();
    let local = tempfile::tempdir().unwrap();
    let recipes = [tiny(shared.path(), &settings), tiny(local.path(), &settings)];
    let outcomes: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = ThreadExchange::group(2)
            .into_iter()
            .zip(&recipes)
            .map(|(exchange, recipe)| {
                scope.spawn(move || {
                    Trainer::start_parallel(recipe, Start::Resume("auto"), Some(Box::new(exchange))).err().map(|e| e.to_string()).unwrap_or_default()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (rank, err) in outcomes.iter().enumerate() {
        assert!(err.contains("start from different states") && err.contains(&format!("rank {rank}")), "rank {rank}: {err}");
    }
    assert!(outcomes[0].contains("step 2") && outcomes[1].contains("step 0"), "{outcomes:?}");
}

/// Rank 0's refusal to start (here: the folder holds a run and no --resume was given) ends
/// rank 1 too, at the start barrier, with an error saying so.
#[test]
fn rank_zeros_refusal_to_start_ends_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = tiny(dir.path(), &[("optim.max_steps", "2"), ("checkpoint.every", "2")]);
    train_threads(&recipe, Start::Fresh, 2, &StopFlag::new()).unwrap();
    let outcomes: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = ThreadExchange::group(2)
            .into_iter()
            .map(|exchange| {
                let recipe = &recipe;
                // Each rank keeps its exchange after failing: only the vote can tell rank 1.
                scope.spawn(move || {
                    let outcome = Trainer::start_parallel(recipe, Start::Fresh, Some(Box::new(exchange)));
                    outcome.err().map(|e| e.to_string()).unwrap_or_default()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(outcomes[0].contains("already holds a run"), "{}", outcomes[0]);
    assert!(outcomes[1].contains("rank 0 failed to prepare"), "{}", outcomes[1]);
}

/// Threads sum on the host: a GPU recipe is refused before anything starts, pointing at the
/// launchers that run one process per GPU.
#[test]
fn thread_ranks_refuse_a_gpu_recipe_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = tiny(dir.path(), &[("model.device", "\"cuda\"")]);
    let err = train_threads(&recipe, Start::Fresh, 2, &StopFlag::new()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("--data-parallel") && err.contains("torchrun --no-python"), "{err}");
    assert!(std::fs::read_dir(dir.path()).map(|d| d.count()).unwrap_or(0) == 0, "nothing was written");
}
