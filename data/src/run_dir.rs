//! One writer per run directory: an advisory lock on `<dir>/.lock`, held for as long as the
//! [`RunLock`] lives (the OS releases it when the process dies, so a killed run never leaves a
//! stale lock). A second `train`, `evaluate run` or demo on the same folder gets an error naming
//! the holder's PID instead of interleaving logs and replacing checkpoints.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside a run directory.
pub const LOCK_FILE: &str = ".lock";

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("{dir} is being written by another process (PID {pid}, lock {lock}): wait for it to finish, or choose another output folder")]
    Busy { dir: PathBuf, pid: String, lock: PathBuf },
    #[error("the output folder {0} is a file: pass a folder path (it is created if missing)")]
    NotAFolder(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// The lock on a run directory.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    dir: PathBuf,
}

impl RunLock {
    /// Creates `dir` if needed and takes its lock, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<RunLock, RunDirError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| RunDirError::Io { path, source }
        };
        if dir.exists() && !dir.is_dir() {
            return Err(RunDirError::NotAFolder(dir.to_path_buf()));
        }
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let lock = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&lock).map_err(io(&lock))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = if pid.trim().is_empty() { "unknown".to_string() } else { pid.trim().to_string() };
                return Err(RunDirError::Busy { dir: dir.to_path_buf(), pid, lock });
            }
            Err(TryLockError::Error(e)) => return Err(io(&lock)(e)),
        }
        file.set_len(0).and_then(|()| file.seek(SeekFrom::Start(0))).and_then(|_| writeln!(file, "{}", std::process::id())).map_err(io(&lock))?;
        Ok(RunLock { _file: file, dir: dir.to_path_buf() })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("motionvl-lock-{}", std::process::id()));
        let first = RunLock::acquire(&dir).unwrap_or_else(|e| panic!("{e}"));
        let err = RunLock::acquire(&dir).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(&format!("PID {}", std::process::id())) && err.contains(".lock"), "{err}");
        drop(first);
        assert!(RunLock::acquire(&dir).is_ok());
        let file = dir.join("plain");
        std::fs::write(&file, b"x").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(RunLock::acquire(&file), Err(RunDirError::NotAFolder(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
