//! The checkpoint lifecycle end to end: commit, prune, crash leftovers and resume lookups.

use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};

use super::lookup::{parse_step, read_marker_step};
use super::*;

fn k(n: usize) -> Option<NonZeroUsize> {
    NonZeroUsize::new(n)
}

/// Writes a checkpoint holding `state.json` = `{"step": step}`.
fn save(ckpts: &Checkpoints, step: u64) -> Committed {
    let pending = ckpts.begin(step).unwrap();
    save_json(pending.dir().join("state.json"), &serde_json::json!({ "step": step })).unwrap();
    pending.commit().unwrap()
}

fn steps(list: &[Checkpoint]) -> Vec<u64> {
    list.iter().map(|c| c.step).collect()
}

pub(super) fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn commit_renames_temp_dir_and_writes_marker() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path().join("run"), None).unwrap();
    let pending = ckpts.begin(7).unwrap();
    let tmp = pending.dir().to_path_buf();
    assert_eq!(tmp.file_name().unwrap().to_str().unwrap(), format!(".tmp-checkpoint-7-{}", std::process::id()));
    fs::create_dir(tmp.join("sub")).unwrap();
    fs::write(tmp.join("sub/a.bin"), b"abc").unwrap();
    // Not visible while being written.
    assert_eq!(latest_complete(ckpts.output_dir()).unwrap(), None);

    let committed = pending.commit().unwrap();
    let dir = ckpts.output_dir().join("checkpoint-7");
    assert_eq!(committed.checkpoint, Checkpoint { step: 7, path: dir.clone() });
    assert!(committed.pruned.is_empty());
    assert!(!tmp.exists());
    assert_eq!(fs::read(dir.join("sub/a.bin")).unwrap(), b"abc");
    assert_eq!(read_marker_step(&dir.join(COMPLETE_MARKER)).unwrap(), 7);
    assert_eq!(names(ckpts.output_dir()), ["checkpoint-7"]);
    assert_eq!(ckpts.latest().unwrap(), Some(committed.checkpoint));
}

#[test]
fn keep_last_k_prunes_oldest_only_after_commit() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path(), k(2)).unwrap();
    assert!(save(&ckpts, 10).pruned.is_empty());
    assert!(save(&ckpts, 20).pruned.is_empty());

    // While step 30 is being written, 10 and 20 must both still exist.
    let pending = ckpts.begin(30).unwrap();
    assert_eq!(steps(&ckpts.list().unwrap()), [10, 20]);
    fs::write(pending.dir().join("x"), b"x").unwrap();
    let c = pending.commit().unwrap();
    assert_eq!(steps(&c.pruned), [10]);
    assert_eq!(steps(&ckpts.list().unwrap()), [20, 30]);

    let c = save(&ckpts, 40);
    assert_eq!(steps(&c.pruned), [20]);
    // Steps compare as numbers, not strings ("100" < "40" as text).
    let c = save(&ckpts, 100);
    assert_eq!(steps(&c.pruned), [30]);
    assert_eq!(names(out.path()), ["checkpoint-100", "checkpoint-40"]);
}

#[test]
fn keep_last_one_and_keep_all() {
    let out = tempfile::tempdir().unwrap();
    let one = Checkpoints::open(out.path().join("one"), k(1)).unwrap();
    for s in 1..=3 {
        save(&one, s);
    }
    assert_eq!(steps(&one.list().unwrap()), [3]);
    let all = Checkpoints::open(out.path().join("all"), None).unwrap();
    for s in 1..=3 {
        save(&all, s);
    }
    assert_eq!(steps(&all.list().unwrap()), [1, 2, 3]);
}

#[test]
fn pruning_never_deletes_the_new_checkpoint_or_foreign_dirs() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path(), k(1)).unwrap();
    save(&ckpts, 50); // left by an abandoned run that got further
    // An incomplete dir (no marker) someone copied in: not ours to delete.
    fs::create_dir(out.path().join("checkpoint-5")).unwrap();
    let c = save(&ckpts, 20);
    assert_eq!(steps(&c.pruned), [50]);
    assert_eq!(steps(&ckpts.list().unwrap()), [20]);
    assert!(out.path().join("checkpoint-5").is_dir());
}

#[test]
fn recommitting_a_step_replaces_it() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path(), None).unwrap();
    save(&ckpts, 3);
    let pending = ckpts.begin(3).unwrap();
    fs::write(pending.dir().join("new"), b"2").unwrap();
    pending.commit().unwrap();
    assert_eq!(names(out.path()), ["checkpoint-3"]);
    assert!(out.path().join("checkpoint-3/new").is_file());
    assert!(!out.path().join("checkpoint-3/state.json").exists());
}

#[test]
fn crash_while_replacing_a_step_restores_the_old_checkpoint() {
    let out = tempfile::tempdir().unwrap();
    let p = out.path();
    let ckpts = Checkpoints::open(p, None).unwrap();
    save(&ckpts, 3);
    // Killed after moving checkpoint-3 aside, before renaming the new
    // one in: both are under temp names.
    let pid = u32::MAX - 1;
    fs::rename(p.join("checkpoint-3"), p.join(format!(".tmp-checkpoint-3-{pid}-replaced"))).unwrap();
    fs::create_dir(p.join(format!(".tmp-checkpoint-3-{pid}"))).unwrap();
    assert_eq!(latest_complete(p).unwrap(), None);

    Checkpoints::open(p, None).unwrap();
    assert_eq!(names(p), ["checkpoint-3"]);
    assert!(p.join("checkpoint-3/state.json").is_file());
    assert_eq!(latest_complete(p).unwrap().unwrap().step, 3);
}

#[test]
fn incomplete_and_odd_dirs_are_ignored() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path(), None).unwrap();
    save(&ckpts, 5);
    let p = out.path();
    fs::create_dir(p.join("checkpoint-9")).unwrap(); // no marker
    fs::write(p.join("checkpoint-9/model.safetensors"), b"half").unwrap();
    fs::create_dir(p.join("checkpoint-x")).unwrap();
    fs::write(p.join("checkpoint-x/COMPLETE"), b"{\"step\": 99}").unwrap();
    fs::create_dir(p.join("checkpoint-+8")).unwrap();
    fs::write(p.join("checkpoint-+8/COMPLETE"), b"").unwrap();
    fs::write(p.join("checkpoint-12"), b"a file, not a dir").unwrap();
    fs::create_dir(p.join("checkpoint-11")).unwrap();
    fs::create_dir(p.join("checkpoint-11/COMPLETE")).unwrap(); // marker must be a file
    fs::create_dir(p.join(format!(".tmp-checkpoint-10-{}", std::process::id()))).unwrap();
    assert_eq!(steps(&list_complete(p).unwrap()), [5]);
    assert_eq!(latest_complete(p).unwrap().unwrap().step, 5);
    assert_eq!(resolve_resume("auto", p).unwrap().step, 5);
}

#[test]
fn missing_output_dir_has_no_checkpoints() {
    let out = tempfile::tempdir().unwrap();
    let gone = out.path().join("never-created");
    assert_eq!(list_complete(&gone).unwrap(), []);
    assert_eq!(latest_complete(&gone).unwrap(), None);
    assert_eq!(clean_stale_temp(&gone).unwrap(), Vec::<PathBuf>::new());
}

#[test]
fn resume_auto_without_checkpoint_names_the_dir() {
    let out = tempfile::tempdir().unwrap();
    let err = resolve_resume("auto", out.path()).unwrap_err();
    assert!(matches!(err, CheckpointError::NoCheckpoint { .. }));
    let msg = err.to_string();
    assert!(msg.starts_with(&format!("no complete checkpoint in {}", out.path().display())), "{msg}");
}

#[test]
fn resume_dir_errors_are_specific() {
    let out = tempfile::tempdir().unwrap();
    let p = out.path();

    let missing = p.join("checkpoint-1");
    let err = resolve_resume(missing.to_str().unwrap(), p).unwrap_err();
    assert!(matches!(err, CheckpointError::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("checkpoint-1"));

    let half = p.join("checkpoint-2");
    fs::create_dir(&half).unwrap();
    let err = resolve_resume(half.to_str().unwrap(), p).unwrap_err();
    assert!(matches!(err, CheckpointError::Incomplete { .. }), "{err}");
    assert!(err.to_string().starts_with(&format!("{} is not a complete checkpoint (missing COMPLETE)", half.display())), "{err}");

    let file = p.join("notes.txt");
    fs::write(&file, b"").unwrap();
    let err = resolve_resume(file.to_str().unwrap(), p).unwrap_err();
    assert!(matches!(err, CheckpointError::Incomplete { .. }), "{err}");
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[test]
fn resume_from_run_dir_hints_at_its_newest_checkpoint() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path(), None).unwrap();
    save(&ckpts, 4);
    let err = resolve_resume(out.path().to_str().unwrap(), out.path()).unwrap_err();
    assert!(matches!(err, CheckpointError::Incomplete { .. }), "{err}");
    assert!(err.to_string().contains("checkpoint-4"), "{err}");
}

#[test]
fn resume_explicit_dir_takes_step_from_name_or_marker() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path().join("run"), None).unwrap();
    let c = save(&ckpts, 42).checkpoint;
    let got = resolve_resume(c.path.to_str().unwrap(), "unused").unwrap();
    assert_eq!(got, c);
    // Trailing slash as shells complete it.
    let slash = format!("{}/", c.path.display());
    assert_eq!(resolve_resume(&slash, "unused").unwrap().step, 42);

    let best = out.path().join("best");
    fs::rename(&c.path, &best).unwrap();
    assert_eq!(resolve_resume(best.to_str().unwrap(), "unused").unwrap().step, 42);

    fs::write(best.join(COMPLETE_MARKER), b"").unwrap();
    let err = resolve_resume(best.to_str().unwrap(), "unused").unwrap_err();
    assert!(matches!(err, CheckpointError::BadMarker { .. }), "{err}");
}

#[test]
fn simulated_crash_leftover_is_ignored_then_cleaned() {
    let out = tempfile::tempdir().unwrap();
    let p = out.path();
    {
        let ckpts = Checkpoints::open(p, k(3)).unwrap();
        save(&ckpts, 100);
    }
    // A run killed while saving step 200: full-looking files, even a
    // marker, but still under the temp name. Its pid is our own (as after
    // a container restart) or a process that no longer exists.
    let own = p.join(format!(".tmp-checkpoint-200-{}", std::process::id()));
    let dead = p.join(format!(".tmp-checkpoint-300-{}", u32::MAX - 1));
    let dead_prune = p.join(format!(".tmp-checkpoint-50-{}-pruned-checkpoint-50", u32::MAX - 1));
    for d in [&own, &dead, &dead_prune] {
        fs::create_dir(d).unwrap();
        fs::write(d.join("adapter_model.safetensors"), b"partial").unwrap();
        fs::write(d.join(COMPLETE_MARKER), b"{\"step\": 200}").unwrap();
    }
    // Lookups never pick it ...
    assert_eq!(latest_complete(p).unwrap().unwrap().step, 100);
    assert_eq!(resolve_resume("auto", p).unwrap().step, 100);
    let err = resolve_resume(own.to_str().unwrap(), p).unwrap_err();
    assert!(matches!(err, CheckpointError::Unfinished { .. }), "{err}");
    assert!(err.to_string().contains("unfinished checkpoint"), "{err}");
    // ... and read-only lookups leave it alone ...
    assert!(own.exists());
    // ... until the next run opens the directory.
    let ckpts = Checkpoints::open(p, k(3)).unwrap();
    assert!(!own.exists() && !dead.exists() && !dead_prune.exists());
    assert_eq!(names(p), ["checkpoint-100"]);
    // The resumed run can save the same step again.
    save(&ckpts, 200);
    assert_eq!(steps(&ckpts.list().unwrap()), [100, 200]);
}

#[cfg(target_os = "linux")]
#[test]
fn temp_dirs_of_live_processes_and_pending_checkpoints_are_kept() {
    let out = tempfile::tempdir().unwrap();
    let p = out.path();
    let ckpts = Checkpoints::open(p, None).unwrap();
    let pending = ckpts.begin(1).unwrap();
    // pid 1 always exists: another live run saving into this directory.
    let other = p.join(".tmp-checkpoint-2-1");
    fs::create_dir(&other).unwrap();
    assert_eq!(clean_stale_temp(p).unwrap(), Vec::<PathBuf>::new());
    assert!(pending.dir().exists() && other.exists());
    pending.commit().unwrap();
}

#[test]
fn dropping_or_aborting_a_pending_checkpoint_removes_it() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path(), None).unwrap();
    let pending = ckpts.begin(1).unwrap();
    fs::write(pending.dir().join("f"), b"x").unwrap();
    let dir = pending.dir().to_path_buf();
    drop(pending);
    assert!(!dir.exists());
    let pending = ckpts.begin(1).unwrap();
    pending.abort().unwrap();
    assert_eq!(names(out.path()), Vec::<String>::new());
}

#[test]
fn beginning_the_same_step_twice_is_an_error() {
    let out = tempfile::tempdir().unwrap();
    let ckpts = Checkpoints::open(out.path(), None).unwrap();
    let first = ckpts.begin(5).unwrap();
    let err = ckpts.begin(5).unwrap_err();
    assert!(matches!(err, CheckpointError::AlreadyPending { step: 5, .. }), "{err}");
    assert!(first.dir().exists(), "the second begin must not clean the first");
    first.commit().unwrap();
}

#[test]
fn step_parsing_is_strict() {
    assert_eq!(parse_step("120"), Some(120));
    assert_eq!(parse_step("0"), Some(0));
    for bad in ["", "+1", "-1", "1a", " 1", "99999999999999999999999"] {
        assert_eq!(parse_step(bad), None, "{bad:?}");
    }
}
