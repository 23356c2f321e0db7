//! What the crates' tests share: writing fixture files, listing what a command wrote. Built
//! always, not behind a feature: a feature enabled by some crates' dev-dependencies only would
//! give `motionvl-util` two feature sets, and every release build that selects one package (CI's
//! `cargo test --release -p …`, the GPU check's `cargo build -p …`) would rebuild it and every
//! crate above it.

use std::path::{Path, PathBuf};

/// Writes `text` to `dir/name` and returns its path; a test that cannot write its fixture
/// panics, naming the file.
pub fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

/// Every file under `root`, links included and not followed (a test that plants a link sees the
/// link, not what it points to); panics naming an unreadable folder.
pub fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let entries = std::fs::read_dir(root).unwrap_or_else(|e| panic!("read {}: {e}", root.display()));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| panic!("read {}: {e}", root.display())).path();
        let is_dir = path.symlink_metadata().unwrap_or_else(|e| panic!("stat {}: {e}", path.display())).is_dir();
        if is_dir {
            found.extend(files_under(&path));
        } else {
            found.push(path);
        }
    }
    found
}
