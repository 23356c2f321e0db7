//! The storage side of checkpoints: atomic commit, keep-last-K, resume lookup.
//!
//! A run directory holds `checkpoint-<step>/` directories. What goes inside
//! one (adapter, optimiser moments, trainer state) is the trainer's business;
//! this module only guarantees that a directory named `checkpoint-<step>`
//! holding a [`COMPLETE_MARKER`] file is whole, because:
//!
//! 1. The trainer fills `<output_dir>/.tmp-checkpoint-<step>-<pid>/`
//!    ([`PendingCheckpoint::dir`]), a name no lookup ever takes for a
//!    checkpoint.
//! 2. [`PendingCheckpoint::commit`] fsyncs every file and directory in it,
//!    writes the marker (fsynced too), renames the directory to
//!    `checkpoint-<step>` — one atomic step on a POSIX filesystem — and
//!    fsyncs `output_dir` so the rename itself survives a power cut.
//! 3. Only then are checkpoints beyond the newest K removed; each is first
//!    renamed back to a `.tmp-checkpoint-…` name, so a deletion interrupted
//!    half-way never leaves a partial directory that still looks complete.
//!
//! A run killed at any moment therefore leaves at worst a `.tmp-checkpoint-*`
//! directory, which lookups ignore and [`Checkpoints::open`] /
//! [`Checkpoints::begin`] delete; the run loses only the steps since its last
//! commit. The marker also rejects directories that were copied partially by
//! other tools (`cp -r`, `rsync`) or written by a trainer that does not use
//! this module.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File};
use std::io;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use candle_core::{DType, Device, Tensor};
use serde::Serialize;
use serde::de::DeserializeOwned;

use motionvl_data::files::{self, FileError};

/// File whose presence makes `checkpoint-<step>/` a complete checkpoint. It
/// holds `{"step": N}`, which lets a checkpoint that was renamed (`best/`)
/// still be resumed from.
pub const COMPLETE_MARKER: &str = "COMPLETE";

/// Committed checkpoints are `checkpoint-<step>`, as in HF Trainer, so
/// scripts written for it find ours.
pub const CHECKPOINT_PREFIX: &str = "checkpoint-";

/// In-progress (or abandoned) checkpoints: `.tmp-checkpoint-<step>-<pid>`.
/// The leading dot keeps them out of globs like `checkpoint-*`.
pub const TMP_PREFIX: &str = ".tmp-checkpoint-";

/// Errors from checkpoint storage. Each names the path involved and, where
/// one exists, what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done, e.g. `"cannot rename"`.
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error(
        "no complete checkpoint in {dir} (looked for {CHECKPOINT_PREFIX}<step>/ holding \
         {COMPLETE_MARKER}); start without --resume, or pass a checkpoint directory"
    )]
    NoCheckpoint { dir: PathBuf },
    #[error("checkpoint directory {dir} does not exist")]
    NotFound { dir: PathBuf },
    #[error("{dir} is not a complete checkpoint (missing {COMPLETE_MARKER}){hint}")]
    Incomplete {
        dir: PathBuf,
        /// Extra advice, e.g. pointing at the newest checkpoint inside `dir`
        /// when the run directory was given instead of a checkpoint.
        hint: String,
    },
    #[error(
        "{dir} is an unfinished checkpoint (a run stopped while saving or deleting it); \
         resume from a {CHECKPOINT_PREFIX}<step> directory instead"
    )]
    Unfinished { dir: PathBuf },
    #[error(
        "{path} is not a valid {COMPLETE_MARKER} marker ({reason}), and the directory \
         name does not say the step either"
    )]
    BadMarker { path: PathBuf, reason: String },
    #[error(
        "checkpoint for step {step} is already being written in this process ({path}); \
         commit or drop the first one before beginning another"
    )]
    AlreadyPending { step: u64, path: PathBuf },
    #[error("cannot write tensors to {path}: {source}")]
    SaveTensors { path: PathBuf, source: Box<dyn std::error::Error + Send + Sync> },
    #[error("cannot load tensors from {path}: {source}")]
    LoadTensors { path: PathBuf, source: candle_core::Error },
    #[error("cannot serialise JSON for {path}: {source}")]
    JsonWrite { path: PathBuf, source: serde_json::Error },
    #[error("cannot parse JSON in {path}: {source}")]
    JsonRead { path: PathBuf, source: serde_json::Error },
}

pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

impl From<FileError> for CheckpointError {
    fn from(e: FileError) -> Self {
        CheckpointError::Io { action: e.action, path: e.path, source: e.source }
    }
}

fn io_err<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> CheckpointError + 'a {
    move |source| CheckpointError::Io { action, path: path.to_path_buf(), source }
}

/// A committed, complete checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The optimiser step it was taken after.
    pub step: u64,
    pub path: PathBuf,
}

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

/// Complete checkpoints (`checkpoint-<step>/` holding [`COMPLETE_MARKER`])
/// directly in `output_dir`, oldest step first. A missing `output_dir` has
/// none. Temp directories, directories without the marker and names whose
/// suffix is not a number are ignored.
pub fn list_complete(output_dir: impl AsRef<Path>) -> Result<Vec<Checkpoint>> {
    let output_dir = output_dir.as_ref();
    let entries = match fs::read_dir(output_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("cannot list", output_dir)(e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err("cannot list", output_dir))?;
        let name = entry.file_name();
        let Some(step) = name.to_str().and_then(|n| n.strip_prefix(CHECKPOINT_PREFIX)).and_then(parse_step) else {
            continue;
        };
        let path = entry.path();
        if path.is_dir() && path.join(COMPLETE_MARKER).is_file() {
            found.push(Checkpoint { step, path });
        }
    }
    found.sort_by_key(|c| c.step);
    Ok(found)
}

/// The complete checkpoint with the highest step in `output_dir`, for
/// `--resume auto`. Read-only: it never deletes anything, so it is safe to
/// call on a directory another process is training into.
pub fn latest_complete(output_dir: impl AsRef<Path>) -> Result<Option<Checkpoint>> {
    Ok(list_complete(output_dir)?.pop())
}

/// Resolves `--resume auto|DIR`.
///
/// `auto` is the newest complete checkpoint in `output_dir` (an error if
/// there is none). Anything else is a checkpoint directory, relative to the
/// current directory, which must hold [`COMPLETE_MARKER`]. Its step comes from
/// a `checkpoint-<step>` name, or else from the marker.
pub fn resolve_resume(arg: &str, output_dir: impl AsRef<Path>) -> Result<Checkpoint> {
    let output_dir = output_dir.as_ref();
    if arg == "auto" {
        return latest_complete(output_dir)?.ok_or_else(|| CheckpointError::NoCheckpoint { dir: output_dir.to_path_buf() });
    }
    let dir = PathBuf::from(arg);
    match fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(CheckpointError::Incomplete { hint: " — it is a file, not a directory".to_string(), dir });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(CheckpointError::NotFound { dir });
        }
        Err(e) => return Err(io_err("cannot read", &dir)(e)),
    }
    // Even with a marker: the rename is what commits, and a pruned
    // checkpoint is renamed to a temp name before its files go.
    if is_temp_name(&dir) {
        return Err(CheckpointError::Unfinished { dir });
    }
    let marker = dir.join(COMPLETE_MARKER);
    if !marker.is_file() {
        let hint = match latest_complete(&dir) {
            Ok(Some(c)) => format!(" — it looks like a run directory; its newest checkpoint is {}", c.path.display()),
            _ => String::new(),
        };
        return Err(CheckpointError::Incomplete { dir, hint });
    }
    let from_name = dir.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix(CHECKPOINT_PREFIX)).and_then(parse_step);
    let step = match from_name {
        Some(step) => step,
        None => read_marker_step(&marker)?,
    };
    Ok(Checkpoint { step, path: dir })
}

fn read_marker_step(marker: &Path) -> Result<u64> {
    #[derive(serde::Deserialize)]
    struct Marker {
        step: u64,
    }
    let text = fs::read_to_string(marker).map_err(io_err("cannot read", marker))?;
    serde_json::from_str::<Marker>(&text)
        .map(|m| m.step)
        .map_err(|e| CheckpointError::BadMarker { path: marker.to_path_buf(), reason: e.to_string() })
}

/// `"120"` → 120; rejects `"+1"`, `"01x"`, `""`.
fn parse_step(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn is_temp_name(dir: &Path) -> bool {
    dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(TMP_PREFIX))
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

// ------------------------------------------------------------- durability

// Atomic writes, fsyncs and the temporary siblings are `motionvl_data::files`', shared by every
// crate; this module keeps the checkpoint lifecycle.

/// Writes `path` so that readers see either the old content or all of the new
/// ([`motionvl_data::files::write_atomic`]).
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    Ok(files::write_atomic(path.as_ref(), bytes)?)
}

/// Appends `value` as one JSON line to `path` (created if missing): the step logs.
pub fn append_json_line(path: impl AsRef<Path>, value: &impl serde::Serialize) -> Result<()> {
    Ok(files::append_json_line(path.as_ref(), value)?)
}

// ---------------------------------------------------------------- helpers

/// Saves named tensors as safetensors, atomically (see [`write_atomic`]).
///
/// The header carries `{"format": "pt"}`, which transformers and PEFT
/// require of the safetensors files they load. Tensors on an accelerator are
/// copied to the CPU first, so a device error is returned rather than
/// panicking inside the safetensors writer.
pub fn save_tensors(path: impl AsRef<Path>, tensors: &HashMap<String, Tensor>) -> Result<()> {
    let path = path.as_ref();
    let save_err = |source: Box<dyn std::error::Error + Send + Sync>| CheckpointError::SaveTensors { path: path.to_path_buf(), source };
    let mut cpu = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if matches!(t.dtype(), DType::F6E2M3 | DType::F6E3M2 | DType::F4 | DType::F8E8M0) {
            return Err(save_err(format!("tensor {name}: dtype {:?} cannot be saved", t.dtype()).into()));
        }
        let t = t.to_device(&Device::Cpu).and_then(|t| t.contiguous()).map_err(|e| save_err(format!("tensor {name}: {e}").into()))?;
        cpu.push((name.as_str(), t));
    }
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let tmp = files::temp_sibling(path);
    let result = safetensors::serialize_to_file(cpu, Some(metadata), &tmp)
        .map_err(|e| save_err(Box::new(e)))
        .and_then(|()| files::apply_default_mode(&tmp).map_err(io_err("cannot set the mode of", &tmp)))
        .and_then(|()| File::open(&tmp).and_then(|f| f.sync_all()).map_err(io_err("cannot fsync", &tmp)))
        .and_then(|()| Ok(files::rename_into_place(&tmp, path)?));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Loads every tensor of a safetensors file onto `device`.
pub fn load_tensors(path: impl AsRef<Path>, device: &Device) -> Result<HashMap<String, Tensor>> {
    let path = path.as_ref();
    let bytes = fs::read(path).map_err(io_err("cannot read", path))?;
    candle_core::safetensors::load_buffer(&bytes, device).map_err(|source| CheckpointError::LoadTensors { path: path.to_path_buf(), source })
}

/// Saves `value` as pretty JSON, atomically (see [`write_atomic`]).
pub fn save_json<T: Serialize + ?Sized>(path: impl AsRef<Path>, value: &T) -> Result<()> {
    let path = path.as_ref();
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| CheckpointError::JsonWrite { path: path.to_path_buf(), source })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Loads a JSON file written by [`save_json`] (or anyone).
pub fn load_json<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<T> {
    let path = path.as_ref();
    let bytes = fs::read(path).map_err(io_err("cannot read", path))?;
    serde_json::from_slice(&bytes).map_err(|source| CheckpointError::JsonRead { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
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

    fn names(dir: &Path) -> Vec<String> {
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
    fn tensors_round_trip_with_pt_metadata() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("adapter_model.safetensors");
        let dev = Device::Cpu;
        let a = Tensor::arange(0f32, 6., &dev).unwrap().reshape((2, 3)).unwrap();
        let b = a.t().unwrap().to_dtype(DType::BF16).unwrap(); // non-contiguous
        let c = Tensor::new(&[1i64, -2, 3], &dev).unwrap();
        let map = HashMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone()), ("c".to_string(), c.clone())]);
        save_tensors(&path, &map).unwrap();
        assert_eq!(names(out.path()), ["adapter_model.safetensors"]);

        let bytes = fs::read(&path).unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let info = meta.metadata().as_ref().unwrap();
        assert_eq!(info.get("format").map(String::as_str), Some("pt"));

        let got = load_tensors(&path, &dev).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got["a"].to_vec2::<f32>().unwrap(), a.to_vec2::<f32>().unwrap());
        assert_eq!(got["b"].dtype(), DType::BF16);
        assert_eq!(got["b"].dims(), [3, 2]);
        assert_eq!(got["b"].to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap(), [[0., 3.], [1., 4.], [2., 5.]]);
        assert_eq!(got["c"].to_vec1::<i64>().unwrap(), [1, -2, 3]);
    }

    #[test]
    fn load_errors_name_the_file() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("garbage.safetensors");
        fs::write(&path, b"not safetensors").unwrap();
        let err = load_tensors(&path, &Device::Cpu).unwrap_err();
        assert!(matches!(err, CheckpointError::LoadTensors { .. }), "{err}");
        assert!(err.to_string().contains("garbage.safetensors"));

        let err = load_tensors(out.path().join("none.safetensors"), &Device::Cpu).unwrap_err();
        assert!(matches!(err, CheckpointError::Io { .. }), "{err}");
        assert!(err.to_string().contains("none.safetensors"));
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct State {
        step: u64,
        rng: [u64; 2],
        lr: f64,
    }

    #[test]
    fn json_round_trips_and_overwrites_atomically() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("trainer_state.json");
        let s1 = State { step: 1, rng: [u64::MAX, 7], lr: 1e-5 };
        save_json(&path, &s1).unwrap();
        assert_eq!(load_json::<State>(&path).unwrap(), s1);
        let s2 = State { step: 2, rng: [3, 4], lr: 2e-5 };
        save_json(&path, &s2).unwrap();
        assert_eq!(load_json::<State>(&path).unwrap(), s2);
        assert_eq!(names(out.path()), ["trainer_state.json"], "no temp file left");

        fs::write(&path, b"{\"step\": ").unwrap();
        let err = load_json::<State>(&path).unwrap_err();
        assert!(matches!(err, CheckpointError::JsonRead { .. }), "{err}");
        assert!(err.to_string().contains("trainer_state.json"));
    }

    #[test]
    fn failed_atomic_write_leaves_old_file_and_no_temp() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("state.json");
        save_json(&path, &1u32).unwrap();
        // Renaming a file over a non-empty directory fails.
        let blocked = out.path().join("blocked");
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("x"), b"").unwrap();
        let err = save_json(&blocked, &2u32).unwrap_err();
        assert!(matches!(err, CheckpointError::Io { .. }), "{err}");
        assert_eq!(names(out.path()), ["blocked", "state.json"]);
        assert_eq!(load_json::<u32>(&path).unwrap(), 1);
    }

    #[test]
    fn step_parsing_is_strict() {
        assert_eq!(parse_step("120"), Some(120));
        assert_eq!(parse_step("0"), Some(0));
        for bad in ["", "+1", "-1", "1a", " 1", "99999999999999999999999"] {
            assert_eq!(parse_step(bad), None, "{bad:?}");
        }
    }
}
