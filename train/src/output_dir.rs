//! The folder a command writes whole (`train merge --out`, `train export --out`): built in a
//! temporary sibling, then swapped in, and never one that holds something the command did not
//! make — `--out runs/x` must not wipe a run.

use std::path::{Path, PathBuf};

use crate::checkpoint::CheckpointError;
use crate::sft::TrainError;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError + '_ {
    move |source| TrainError::Io { path: path.to_path_buf(), source }
}

/// A fresh temporary folder beside `out`, once `out` is found fit to be replaced: absent,
/// empty, or holding only entries `ours` says the command writes (or their digest caches,
/// `.<file>.sha256`, which loading leaves). `what` names the command's output in the error.
pub fn prepare(out: &Path, what: &'static str, ours: impl Fn(&str) -> bool) -> Result<PathBuf, TrainError> {
    if out.is_symlink() || (out.exists() && !out.is_dir()) {
        return Err(TrainError::OutNotAFolder { dir: out.to_path_buf() });
    }
    if out.exists() {
        for entry in std::fs::read_dir(out).map_err(io(out))? {
            let name = entry.map_err(io(out))?.file_name().to_string_lossy().into_owned();
            let cached_digest = name.strip_prefix('.').and_then(|n| n.strip_suffix(".sha256"));
            if !ours(&name) && !cached_digest.is_some_and(&ours) {
                return Err(TrainError::OutNotOurs { dir: out.to_path_buf(), what, holds: name });
            }
        }
    }
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let tmp = out.with_file_name(format!(".tmp-{name}"));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io(&tmp))?;
    }
    std::fs::create_dir_all(&tmp).map_err(io(&tmp))?;
    Ok(tmp)
}

/// Moves the finished `tmp` to `out`: the previous output is moved aside first and deleted only
/// once the new one is in place, so a crash leaves one of them whole.
pub fn replace(tmp: &Path, out: &Path) -> Result<(), TrainError> {
    motionvl_data::files::sync_tree(tmp).map_err(CheckpointError::from)?;
    if out.exists() {
        let old = out.with_file_name(format!(".old-{}", out.file_name().and_then(|n| n.to_str()).unwrap_or("out")));
        if old.exists() {
            std::fs::remove_dir_all(&old).map_err(io(&old))?;
        }
        std::fs::rename(out, &old).map_err(io(out))?;
        std::fs::rename(tmp, out).map_err(io(out))?;
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    } else {
        std::fs::rename(tmp, out).map_err(io(out))?;
    }
    Ok(())
}
