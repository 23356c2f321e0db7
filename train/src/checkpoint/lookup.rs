//! Finding checkpoints, read-only: the complete ones of a run directory, the newest, and the
//! one `--resume auto|DIR` names.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::error::{CheckpointError, Result, io_err};
use super::{CHECKPOINT_PREFIX, COMPLETE_MARKER, Checkpoint, TMP_PREFIX};

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

pub(super) fn read_marker_step(marker: &Path) -> Result<u64> {
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
pub(super) fn parse_step(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn is_temp_name(dir: &Path) -> bool {
    dir.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(TMP_PREFIX))
}
