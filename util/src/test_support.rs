//! What the crates' tests share (feature `test-support`, for dev-dependencies only): writing
//! fixture files.

use std::path::{Path, PathBuf};

/// Writes `text` to `dir/name` and returns its path; a test that cannot write its fixture
/// panics, naming the file.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}
