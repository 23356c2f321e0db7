//! Writing files so that no reader ever sees half of one, and with the permissions the user's
//! umask asks. Every crate writes through [`write_atomic`]: a temporary sibling (same file
//! system, so the rename is atomic), fsynced, renamed over the target, and the folder fsynced
//! so that the rename survives a crash. Writers that create through a temporary file
//! (safetensors' own writer uses `tempfile`, which creates 0600) would otherwise leave
//! checkpoints, adapters and flows readable by their owner only, whatever the umask says.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// A file operation that failed, with what was being done and to which path.
#[derive(Debug, thiserror::Error)]
#[error("{action} {}: {source}", path.display())]
pub struct FileError {
    /// What was being done, e.g. `"cannot rename into place"`.
    pub action: &'static str,
    pub path: PathBuf,
    #[source]
    pub source: io::Error,
}

impl FileError {
    pub fn at<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> FileError + 'a {
        move |source| FileError { action, path: path.to_path_buf(), source }
    }
}

/// `.<name>.tmp-<host>-<pid>-<nonce>-<n>` beside `path`: unique per call across the processes
/// of every machine sharing a folder — two nodes can run the same PID (containers), and a
/// random per-process nonce keeps even those apart.
pub fn temp_sibling(path: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    static NONCE: OnceLock<u64> = OnceLock::new();
    // RandomState is seeded from the OS's randomness once per process.
    let nonce = *NONCE.get_or_init(|| std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), std::process::id()));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "file".to_string());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}{TEMP_MARK}{}-{}-{nonce:016x}-{n}", host_name(), std::process::id()))
}

/// What [`temp_sibling`] puts in every temporary name, which [`sweep_stale_temps`] looks for.
pub const TEMP_MARK: &str = ".tmp-";

/// This machine's name (for temporary names, lock owners and TensorBoard files):
/// `MOTIONVL_HOST` where set (containers on different nodes often share one kernel host name),
/// else the kernel's; `unknown-host` when unreadable. Only file-name-safe characters are kept.
pub fn host_name() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        let raw = std::env::var("MOTIONVL_HOST")
            .ok()
            .or_else(|| fs::read_to_string("/proc/sys/kernel/hostname").ok())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_default();
        let clean: String = raw.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')).collect();
        if clean.is_empty() { "unknown-host".to_owned() } else { clean }
    })
}

/// Removes the temporary files ([`temp_sibling`]'s, and the `.tmp*` of other writers) in `dir`
/// older than `age`: what a writer killed mid-write leaves behind. Returns how many went.
pub fn sweep_stale_temps(dir: &Path, age: std::time::Duration) -> usize {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    let now = std::time::SystemTime::now();
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let temporary = name.starts_with('.') && (name.contains(TEMP_MARK) || name.starts_with(".tmp") || name.ends_with(".tmp"));
            let old = e.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| now.duration_since(t).ok()).is_some_and(|d| d > age);
            temporary && old && e.file_type().is_ok_and(|t| t.is_file())
        })
        .filter(|e| fs::remove_file(e.path()).is_ok())
        .count()
}

/// Writes `bytes` to `path` atomically (see the module docs), creating its folder if needed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(FileError::at("cannot create", dir))?;
    }
    let tmp = temp_sibling(path);
    let result = write_and_sync(&tmp, bytes).and_then(|()| rename_into_place(&tmp, path));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Pretty JSON with a final newline, written atomically.
pub fn write_json_atomic(path: &Path, value: &impl serde::Serialize) -> Result<(), FileError> {
    let mut text = serde_json::to_string_pretty(value).map_err(|e| FileError::at("cannot serialise", path)(io::Error::other(e)))?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// Appends `value` as one JSON line to `path` (created if missing): the step logs.
pub fn append_json_line(path: &Path, value: &impl serde::Serialize) -> Result<(), FileError> {
    let line = serde_json::to_string(value).map_err(|e| FileError::at("cannot serialise a line for", path)(io::Error::other(e)))?;
    let mut file = fs::OpenOptions::new().create(true).append(true).open(path).map_err(FileError::at("cannot open", path))?;
    writeln!(file, "{line}").map_err(FileError::at("cannot append to", path))
}

/// Creates `path` with `bytes` and fsyncs it.
pub fn write_and_sync(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let mut f = File::create(path).map_err(FileError::at("cannot create", path))?;
    f.write_all(bytes).map_err(FileError::at("cannot write", path))?;
    f.sync_all().map_err(FileError::at("cannot fsync", path))
}

/// Renames `tmp` over `path` and fsyncs the folder, so that the new entry is durable.
pub fn rename_into_place(tmp: &Path, path: &Path) -> Result<(), FileError> {
    fs::rename(tmp, path).map_err(FileError::at("cannot rename into place", path))?;
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => sync_dir(parent),
        _ => sync_dir(Path::new(".")),
    }
}

/// fsyncs every regular file under `dir` and every folder, `dir` included.
pub fn sync_tree(dir: &Path) -> Result<(), FileError> {
    for entry in fs::read_dir(dir).map_err(FileError::at("cannot list", dir))? {
        let entry = entry.map_err(FileError::at("cannot list", dir))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(FileError::at("cannot stat", &path))?;
        if kind.is_dir() {
            sync_tree(&path)?;
        } else if kind.is_file() {
            File::open(&path).and_then(|f| f.sync_all()).map_err(FileError::at("cannot fsync", &path))?;
        }
    }
    sync_dir(dir)
}

/// fsyncs a folder so that entries created or renamed in it are durable.
#[cfg(unix)]
pub fn sync_dir(dir: &Path) -> Result<(), FileError> {
    File::open(dir).and_then(|f| f.sync_all()).map_err(FileError::at("cannot fsync directory", dir))
}

#[cfg(not(unix))]
pub fn sync_dir(_dir: &Path) -> Result<(), FileError> {
    // Folders cannot be opened for fsync on Windows; NTFS journals renames.
    Ok(())
}

/// The mode a plain `File::create` gets here: `0o666 & !umask`.
pub fn default_file_mode() -> u32 {
    static MODE: OnceLock<u32> = OnceLock::new();
    *MODE.get_or_init(|| {
        let umask = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Umask:").and_then(|v| u32::from_str_radix(v.trim(), 8).ok())))
            .unwrap_or(0o022);
        0o666 & !umask
    })
}

/// Gives `path` the mode a freshly created file would have.
pub fn apply_default_mode(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(default_file_mode()))
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_the_one_file_create_gives() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("motionvl-mode-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let plain = dir.join("plain");
        std::fs::write(&plain, b"x").unwrap_or_else(|e| panic!("{e}"));
        let want = std::fs::metadata(&plain).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
        let private = dir.join("private");
        std::fs::write(&private, b"x").unwrap_or_else(|e| panic!("{e}"));
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).unwrap_or_else(|e| panic!("{e}"));
        apply_default_mode(&private).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::metadata(&private).map(|m| m.permissions().mode() & 0o777).unwrap_or(0), want);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
