//! One writer per run directory: an advisory lock on `<dir>/.lock`, held for as long as the
//! [`RunLock`] lives (the OS releases it when the process dies, so a killed run never leaves a
//! stale lock). A second `train`, `evaluate run` or demo on the same folder gets an error naming
//! the holder's host and PID instead of interleaving logs and replacing checkpoints.
//!
//! The lock file is opened without following links (a planted `.lock → victim` would be
//! truncated otherwise). Where the filesystem has no `flock` (Lustre mounted without `-o
//! flock`, some NFS setups answer ENOLCK or EOPNOTSUPP), the lock falls back to a file created
//! with `O_EXCL`, `.lock.excl`, holding `host:pid`: removed when the holder ends, and taken over
//! when its holder is gone (same host, PID no longer alive). A fallback lock of a process killed
//! on another host cannot be checked from here: the error names it, to be removed by hand.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Name of the lock file inside a run directory.
pub const LOCK_FILE: &str = ".lock";
/// The lock file of filesystems without `flock`.
pub const EXCLUSIVE_LOCK_FILE: &str = ".lock.excl";

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("{dir} is being written by another process ({holder}, lock {lock}): wait for it to finish, or choose another output folder")]
    Busy { dir: PathBuf, holder: String, lock: PathBuf },
    #[error("the output folder {0} is a file: pass a folder path (it is created if missing)")]
    NotAFolder(PathBuf),
    #[error("{0} is a symbolic link; a run's lock file must be a plain file (remove the link)")]
    LinkedLock(PathBuf),
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// The lock on a run directory.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
    dir: PathBuf,
    /// The `O_EXCL` file to remove on release, when the fallback holds the lock.
    exclusive: Option<PathBuf>,
}

/// `host:pid` of this process, what a lock file holds.
fn owner() -> String {
    format!("{}:{}", crate::files::host_name(), std::process::id())
}

/// "host H, PID P" from a lock file's `host:pid` (or a bare PID of older runs).
fn describe(holder: &str) -> String {
    match holder.trim().rsplit_once(':') {
        Some((host, pid)) => format!("host {host}, PID {pid}"),
        None if !holder.trim().is_empty() => format!("PID {}", holder.trim()),
        None => "unknown holder".to_owned(),
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RunDirError + '_ {
    move |source| RunDirError::Io { path: path.to_path_buf(), source }
}

/// Opens `path` for writing without following a link at its last component.
fn open_unfollowed(path: &Path, options: &mut OpenOptions) -> Result<File, RunDirError> {
    if path.is_symlink() {
        return Err(RunDirError::LinkedLock(path.to_path_buf()));
    }
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(options, libc::O_NOFOLLOW);
    options.open(path).map_err(|e| if e.raw_os_error() == Some(libc::ELOOP) { RunDirError::LinkedLock(path.to_path_buf()) } else { io(path)(e) })
}

impl RunLock {
    /// Creates `dir` if needed and takes its lock, or says who holds it.
    pub fn acquire(dir: &Path) -> Result<RunLock, RunDirError> {
        if dir.exists() && !dir.is_dir() {
            return Err(RunDirError::NotAFolder(dir.to_path_buf()));
        }
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let lock = dir.join(LOCK_FILE);
        let mut file = open_unfollowed(&lock, OpenOptions::new().create(true).truncate(false).read(true).write(true))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(RunDirError::Busy { dir: dir.to_path_buf(), holder: describe(&holder), lock });
            }
            Err(TryLockError::Error(e)) if no_flock(&e) => return Self::acquire_exclusive(dir),
            Err(TryLockError::Error(e)) => return Err(io(&lock)(e)),
        }
        file.set_len(0).and_then(|()| file.seek(SeekFrom::Start(0))).and_then(|_| writeln!(file, "{}", owner())).map_err(io(&lock))?;
        Ok(RunLock { _file: file, dir: dir.to_path_buf(), exclusive: None })
    }

    /// The fallback of filesystems without `flock`: `.lock.excl` created with `O_EXCL`, taken
    /// over from a holder on this host whose process is gone.
    pub fn acquire_exclusive(dir: &Path) -> Result<RunLock, RunDirError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let lock = dir.join(EXCLUSIVE_LOCK_FILE);
        for _ in 0..2 {
            match open_unfollowed(&lock, OpenOptions::new().write(true).create_new(true)) {
                Ok(mut file) => {
                    writeln!(file, "{}", owner()).and_then(|()| file.sync_all()).map_err(io(&lock))?;
                    return Ok(RunLock { _file: file, dir: dir.to_path_buf(), exclusive: Some(lock) });
                }
                Err(RunDirError::Io { source, .. }) if source.kind() == ErrorKind::AlreadyExists => {
                    let holder = std::fs::read_to_string(&lock).unwrap_or_default();
                    if !held_by_a_dead_local_process(&holder) {
                        return Err(RunDirError::Busy { dir: dir.to_path_buf(), holder: describe(&holder), lock });
                    }
                    std::fs::remove_file(&lock).map_err(io(&lock))?;
                }
                Err(e) => return Err(e),
            }
        }
        Err(RunDirError::Busy { dir: dir.to_path_buf(), holder: "a process that took it just now".into(), lock })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for RunLock {
    fn drop(&mut self) {
        if let Some(lock) = &self.exclusive {
            let _ = std::fs::remove_file(lock);
        }
    }
}

/// `flock` is not offered here (rather than held by someone).
fn no_flock(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOLCK | libc::ENOSYS | libc::EOPNOTSUPP))
}

/// `holder` (`host:pid`) names this host and a PID that no longer runs.
fn held_by_a_dead_local_process(holder: &str) -> bool {
    let Some((host, pid)) = holder.trim().rsplit_once(':') else { return false };
    let Ok(pid) = pid.parse::<i32>() else { return false };
    // SAFETY: kill with signal 0 only checks whether the process exists.
    host == crate::files::host_name()
        && pid > 0
        && unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let dir = dir.path().join("run");
        let first = RunLock::acquire(&dir).unwrap_or_else(|e| panic!("{e}"));
        let err = RunLock::acquire(&dir).err().map(|e| e.to_string()).unwrap_or_default();
        let me = format!("host {}, PID {}", crate::files::host_name(), std::process::id());
        assert!(err.contains(&me) && err.contains(".lock"), "{err}");
        drop(first);
        assert!(RunLock::acquire(&dir).is_ok());
        let file = dir.join("plain");
        std::fs::write(&file, b"x").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(RunLock::acquire(&file), Err(RunDirError::NotAFolder(_))));
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_link_is_refused_and_its_target_untouched() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let victim = dir.path().join("victim.txt");
        std::fs::write(&victim, b"precious").unwrap_or_else(|e| panic!("{e}"));
        let run = dir.path().join("run");
        std::fs::create_dir_all(&run).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&victim, run.join(LOCK_FILE)).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(RunLock::acquire(&run), Err(RunDirError::LinkedLock(_))));
        std::os::unix::fs::symlink(&victim, run.join(EXCLUSIVE_LOCK_FILE)).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(RunLock::acquire_exclusive(&run), Err(RunDirError::LinkedLock(_))));
        assert_eq!(std::fs::read(&victim).unwrap_or_default(), b"precious");
    }

    /// Without `flock`: one holder at a time, released on drop, taken over from a dead
    /// process of this host, refused for a live one or another host's.
    #[test]
    fn the_exclusive_fallback_has_one_holder_and_detects_a_dead_one() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let first = RunLock::acquire_exclusive(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let err = RunLock::acquire_exclusive(dir.path()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains(&format!("PID {}", std::process::id())) && err.contains(EXCLUSIVE_LOCK_FILE), "{err}");
        drop(first);
        let lock = dir.path().join(EXCLUSIVE_LOCK_FILE);
        assert!(!lock.exists(), "released on drop");

        // A holder killed on this host: a PID that no longer runs (a child that has exited).
        let mut child = std::process::Command::new("true").spawn().unwrap_or_else(|e| panic!("{e}"));
        let dead = child.id();
        child.wait().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&lock, format!("{}:{dead}\n", crate::files::host_name())).unwrap_or_else(|e| panic!("{e}"));
        let taken = RunLock::acquire_exclusive(dir.path()).unwrap_or_else(|e| panic!("a dead holder's lock is taken over: {e}"));
        assert_eq!(std::fs::read_to_string(&lock).unwrap_or_default().trim(), owner());
        drop(taken);

        // Another host's holder cannot be checked from here.
        std::fs::write(&lock, format!("node-17:{dead}\n")).unwrap_or_else(|e| panic!("{e}"));
        let err = RunLock::acquire_exclusive(dir.path()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("host node-17"), "{err}");
    }
}
