//! Content identity of files: a SHA-256 of their bytes, so that weights renamed, copied or
//! fine-tuned to the same size are told apart by what they hold, not by their names.
//!
//! Hashing a multi-gigabyte shard on every start costs seconds, so the digest is remembered
//! beside the file in `.<name>.sha256` together with the file's size, modification time and
//! inode; a file changed in place (new size or mtime) or replaced (a new inode: a copy or a
//! rename over it that kept the mtime, as `cp -p` and `rsync -t` do) is hashed again. Where the
//! folder is read-only the digest is simply recomputed each time.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Serialize, Deserialize, PartialEq)]
struct Remembered {
    size: u64,
    mtime_ns: u128,
    /// Absent in digests remembered before it was recorded: those are hashed again.
    #[serde(default)]
    inode: Option<u64>,
    sha256: String,
}

#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> Option<u64> {
    Some(std::os::unix::fs::MetadataExt::ino(meta))
}

#[cfg(not(unix))]
fn inode(_meta: &std::fs::Metadata) -> Option<u64> {
    None
}

fn sidecar(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_string_lossy();
    Some(path.with_file_name(format!(".{name}.sha256")))
}

/// Hex SHA-256 of the bytes of `path` (symlinks followed).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let meta = std::fs::metadata(path)?;
    let mtime_ns = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
    let side = sidecar(path);
    if let Some(side) = &side
        && let Ok(text) = std::fs::read_to_string(side)
        && let Ok(r) = serde_json::from_str::<Remembered>(&text)
        && r.size == meta.len()
        && r.mtime_ns == mtime_ns
        && r.inode == inode(&meta)
    {
        return Ok(r.sha256);
    }
    let sha256 = sha256_contents(path)?;
    if let Some(side) = side {
        let record = Remembered { size: meta.len(), mtime_ns, inode: inode(&meta), sha256: sha256.clone() };
        // Best effort: a read-only folder only costs a rehash next time.
        let _ = crate::files::write_atomic(&side, serde_json::to_string(&record).unwrap_or_default().as_bytes());
    }
    Ok(sha256)
}

/// Hex SHA-256 of the bytes of `path`, read now and remembered nowhere (small files, or folders
/// that must not gain sidecars, like a benchmark's).
pub fn sha256_contents(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// One digest over several files (a sharded checkpoint, an adapter folder's files), in the
/// order given, each file's digest and name included.
pub fn sha256_files(paths: &[PathBuf]) -> std::io::Result<String> {
    let mut hasher = Sha256::new();
    for path in paths {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        hasher.update(name.as_bytes());
        hasher.update([0]);
        hasher.update(sha256_file(path)?.as_bytes());
    }
    Ok(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_name_and_size_but_other_bytes_differ() {
        let dir = std::env::temp_dir().join(format!("motionvl-digest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let a = dir.join("a").join("w.bin");
        let b = dir.join("b").join("w.bin");
        for (p, bytes) in [(&a, b"0123"), (&b, b"0124")] {
            std::fs::create_dir_all(p.parent().unwrap_or(&dir)).unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(p, bytes).unwrap_or_else(|e| panic!("{e}"));
        }
        let (da, db) = (sha256_file(&a).unwrap_or_default(), sha256_file(&b).unwrap_or_default());
        assert_ne!(da, db);
        assert_eq!(da.len(), 64);
        // Remembered, and still right after an in-place change of the same size.
        assert!(sidecar(&a).is_some_and(|s| s.is_file()));
        assert_eq!(sha256_file(&a).unwrap_or_default(), da);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&a, b"0124").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(sha256_file(&a).unwrap_or_default(), db);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A file replaced by another of the same size and modification time (`cp -p`, `rsync -t`
    /// over it) is another inode: hashed again, not taken for the old one.
    #[test]
    fn a_replacement_keeping_size_and_mtime_is_hashed_again() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (weights, other) = (dir.path().join("w.bin"), dir.path().join("other.bin"));
        std::fs::write(&weights, b"first weights").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&other, b"other weights").unwrap_or_else(|e| panic!("{e}"));
        let first = sha256_file(&weights).unwrap_or_default();
        let mtime = std::fs::metadata(&weights).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{e}"));
        std::fs::File::options().write(true).open(&other).and_then(|f| f.set_modified(mtime)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(&other, &weights).unwrap_or_else(|e| panic!("{e}"));
        let now = sha256_file(&weights).unwrap_or_default();
        assert_ne!(now, first, "the replaced file's own digest");
        assert_eq!(now, sha256_file(&dir.path().join("w.bin")).unwrap_or_default());
    }
}
