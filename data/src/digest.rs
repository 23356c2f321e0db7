//! Content identity of files: a SHA-256 of their bytes, so that weights renamed, copied or
//! fine-tuned to the same size are told apart by what they hold, not by their names.
//!
//! Hashing a multi-gigabyte shard on every start costs seconds, so the digest is remembered
//! beside the file in `.<name>.sha256` together with the file's size and modification time;
//! a file changed in place (new size or mtime) is hashed again. Where the folder is read-only
//! the digest is simply recomputed each time.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Serialize, Deserialize, PartialEq)]
struct Remembered {
    size: u64,
    mtime_ns: u128,
    sha256: String,
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
    {
        return Ok(r.sha256);
    }
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
    let sha256: String = hasher.finalize().iter().map(|b| format!("{b:02x}")).collect();
    if let Some(side) = side {
        let record = Remembered { size: meta.len(), mtime_ns, sha256: sha256.clone() };
        let tmp = side.with_extension(format!("sha256.{}.tmp", std::process::id()));
        // Best effort: a read-only folder only costs a rehash next time.
        if std::fs::write(&tmp, serde_json::to_string(&record).unwrap_or_default()).is_ok() && std::fs::rename(&tmp, &side).is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    Ok(sha256)
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
}
