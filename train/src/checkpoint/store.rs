//! Writing checkpoints: a pending checkpoint filled in a temp directory, its atomic commit,
//! keep-last-K pruning, and the clean-up of what killed runs left behind.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use motionvl_data::files;

use super::error::{CheckpointError, Result, io_err};
use super::lookup::{latest_complete, list_complete, parse_step};
use super::{CHECKPOINT_PREFIX, COMPLETE_MARKER, Checkpoint, TMP_PREFIX};

/// The checkpoints of one run directory, and the policy for keeping them.
#[derive(Debug, Clone)]
pub struct Checkpoints {
    output_dir: PathBuf,
    keep_last: Option<NonZeroUsize>,
}

impl Checkpoints {
    /// Creates `output_dir` if needed and removes `.tmp-checkpoint-*`
    /// directories left by killed runs (see [`clean_stale_temp`]).
    ///
    /// `keep_last: None` keeps every checkpoint.
    pub fn open(output_dir: impl Into<PathBuf>, keep_last: Option<NonZeroUsize>) -> Result<Self> {
        let output_dir = output_dir.into();
        fs::create_dir_all(&output_dir).map_err(io_err("cannot create output directory", &output_dir))?;
        clean_stale_temp(&output_dir)?;
        Ok(Self { output_dir, keep_last })
    }

    pub fn output_dir(&self) -> &Path {
        &self.output_dir
    }

    pub fn keep_last(&self) -> Option<NonZeroUsize> {
        self.keep_last
    }

    /// Starts the checkpoint for `step`: creates its temp directory for the
    /// caller to fill, then [`PendingCheckpoint::commit`]. Dropping the
    /// pending checkpoint without committing deletes the temp directory.
    pub fn begin(&self, step: u64) -> Result<PendingCheckpoint> {
        // A crash of an earlier run whose pid this process happens to reuse
        // (common in containers) would otherwise make `create_dir` fail.
        clean_stale_temp(&self.output_dir)?;
        let dir = self.output_dir.join(format!("{TMP_PREFIX}{step}-{}", std::process::id()));
        {
            let mut live = live_temp_dirs();
            if live.contains(&dir) {
                return Err(CheckpointError::AlreadyPending { step, path: dir });
            }
            fs::create_dir(&dir).map_err(io_err("cannot create checkpoint temp directory", &dir))?;
            live.insert(dir.clone());
        }
        Ok(PendingCheckpoint { step, dir, output_dir: self.output_dir.clone(), keep_last: self.keep_last, done: false })
    }

    /// Complete checkpoints in the run directory, oldest step first.
    pub fn list(&self) -> Result<Vec<Checkpoint>> {
        list_complete(&self.output_dir)
    }

    /// The complete checkpoint with the highest step, if any.
    pub fn latest(&self) -> Result<Option<Checkpoint>> {
        latest_complete(&self.output_dir)
    }
}

/// A checkpoint being written. Fill [`dir`](Self::dir), then
/// [`commit`](Self::commit).
#[derive(Debug)]
pub struct PendingCheckpoint {
    step: u64,
    dir: PathBuf,
    output_dir: PathBuf,
    keep_last: Option<NonZeroUsize>,
    done: bool,
}

/// What [`PendingCheckpoint::commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub checkpoint: Checkpoint,
    /// Older checkpoints deleted to respect keep-last-K.
    pub pruned: Vec<Checkpoint>,
}

impl PendingCheckpoint {
    /// The temp directory to write this checkpoint's files into.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn step(&self) -> u64 {
        self.step
    }

    /// Makes the checkpoint durable and visible as `checkpoint-<step>`, then
    /// prunes older ones down to keep-last-K.
    ///
    /// If `checkpoint-<step>` already exists (a run resumed from an earlier
    /// checkpoint of the same directory reached this step again), the new
    /// one replaces it: it is the state this run will continue from.
    ///
    /// On error the temp directory is removed and no existing checkpoint has
    /// been deleted, except when the error came from pruning, which happens
    /// strictly after the new checkpoint is in place.
    pub fn commit(mut self) -> Result<Committed> {
        files::sync_tree(&self.dir)?;
        let marker = self.dir.join(COMPLETE_MARKER);
        let body = format!("{{\"step\": {}}}\n", self.step);
        files::write_and_sync(&marker, body.as_bytes())?;
        files::sync_dir(&self.dir)?;

        let final_dir = self.output_dir.join(format!("{CHECKPOINT_PREFIX}{}", self.step));
        let mut displaced = None;
        if fs::symlink_metadata(&final_dir).is_ok() {
            let old = self.output_dir.join(format!("{TMP_PREFIX}{}-{}-replaced", self.step, std::process::id()));
            remove_path(&old)?;
            fs::rename(&final_dir, &old).map_err(io_err("cannot move aside", &final_dir))?;
            displaced = Some(old);
        }
        if let Err(e) = fs::rename(&self.dir, &final_dir) {
            // Put the checkpoint we displaced back, so failing to save never
            // costs an existing one.
            if let Some(old) = &displaced {
                let _ = fs::rename(old, &final_dir);
            }
            return Err(io_err("cannot rename", &self.dir)(e));
        }
        self.done = true;
        live_temp_dirs().remove(&self.dir);
        files::sync_dir(&self.output_dir)?;
        if let Some(old) = displaced {
            remove_path(&old)?;
        }

        let checkpoint = Checkpoint { step: self.step, path: final_dir };
        let pruned = match self.keep_last {
            Some(k) => prune(&self.output_dir, &checkpoint, k)?,
            None => Vec::new(),
        };
        Ok(Committed { checkpoint, pruned })
    }

    /// Abandons the checkpoint and deletes its temp directory, reporting
    /// errors (dropping does the same silently).
    pub fn abort(mut self) -> Result<()> {
        self.done = true;
        live_temp_dirs().remove(&self.dir);
        remove_path(&self.dir)
    }
}

impl Drop for PendingCheckpoint {
    fn drop(&mut self) {
        if !self.done {
            live_temp_dirs().remove(&self.dir);
            // Best effort; a leftover is removed by the next `open`/`begin`.
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Deletes complete checkpoints other than `keep` beyond the newest `k`
/// (`keep` counts as one of them even if older checkpoints from an abandoned
/// run have higher steps). Directories without the marker are not ours to
/// delete and are left alone.
fn prune(output_dir: &Path, keep: &Checkpoint, k: NonZeroUsize) -> Result<Vec<Checkpoint>> {
    let mut others: Vec<Checkpoint> = list_complete(output_dir)?.into_iter().filter(|c| c.path != keep.path).collect();
    // Newest first; keep the first k-1.
    others.sort_by_key(|c| std::cmp::Reverse(c.step));
    let doomed: Vec<Checkpoint> = others.into_iter().skip(k.get() - 1).collect();
    for c in &doomed {
        // Rename first, so an interrupted delete leaves a temp dir, not a
        // half-deleted directory that still carries its marker.
        let name = c.path.file_name().and_then(|n| n.to_str()).unwrap_or("checkpoint");
        let trash = output_dir.join(format!("{TMP_PREFIX}{}-{}-pruned-{name}", c.step, std::process::id()));
        remove_path(&trash)?;
        fs::rename(&c.path, &trash).map_err(io_err("cannot move aside for deletion", &c.path))?;
        remove_path(&trash)?;
    }
    if !doomed.is_empty() {
        files::sync_dir(output_dir)?;
    }
    Ok(doomed)
}

/// Removes `.tmp-checkpoint-*` entries in `output_dir` left by runs that
/// died while saving (or pruning). Returns what was removed.
///
/// One exception is restored instead: a complete checkpoint that a commit
/// had moved aside (`…-replaced`) to make room for a new one of the same
/// step, when the run died before the new one was renamed in. It goes back
/// to `checkpoint-<step>` and is not listed as removed.
///
/// Not removed: temp directories of checkpoints this process is still
/// writing, and (on Linux) those whose pid belongs to another live process,
/// which may be a second run saving into the same directory right now.
pub fn clean_stale_temp(output_dir: impl AsRef<Path>) -> Result<Vec<PathBuf>> {
    let output_dir = output_dir.as_ref();
    let entries = match fs::read_dir(output_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("cannot list", output_dir)(e)),
    };
    let own_pid = std::process::id();
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err("cannot list", output_dir))?;
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(TMP_PREFIX)) else {
            continue;
        };
        let path = entry.path();
        if live_temp_dirs().contains(&path) {
            continue;
        }
        // `<step>-<pid>[-suffix]`
        let pid = rest.split('-').nth(1).and_then(|p| p.parse::<u32>().ok());
        if pid.is_some_and(|pid| pid != own_pid && process_alive(pid)) {
            continue;
        }
        if rest.ends_with("-replaced") && path.join(COMPLETE_MARKER).is_file() {
            let step = rest.split('-').next().and_then(parse_step);
            if let Some(step) = step {
                let home = output_dir.join(format!("{CHECKPOINT_PREFIX}{step}"));
                if fs::symlink_metadata(&home).is_err() {
                    fs::rename(&path, &home).map_err(io_err("cannot restore", &path))?;
                    files::sync_dir(output_dir)?;
                    continue;
                }
            }
        }
        remove_path(&path)?;
        removed.push(path);
    }
    Ok(removed)
}

#[cfg(target_os = "linux")]
fn process_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

#[cfg(not(target_os = "linux"))]
fn process_alive(_pid: u32) -> bool {
    // No cheap portable check; assume dead so leftovers do not pile up.
    false
}

/// Temp directories of checkpoints this process is writing right now, so
/// stale-directory cleanup never deletes one from under its writer.
fn live_temp_dirs() -> std::sync::MutexGuard<'static, HashSet<PathBuf>> {
    static LIVE: OnceLock<Mutex<HashSet<PathBuf>>> = OnceLock::new();
    LIVE.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn remove_path(path: &Path) -> Result<()> {
    let result = match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("cannot remove", path)(e)),
    }
}
