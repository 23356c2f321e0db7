//! Construction modules: benchmark and training files rebuilt from source footage,
//! annotations and trajectories, in the forms the `manifest` readers and `eval` load.
//!
//! | module | `construct` subcommand | makes |
//! |---|---|---|
//! | [`split`] | `split` | the AirScape train / benchmark lists from clip file names |
//! | [`nav`] | `nav` | navigation MCQ rows from flown trajectories |
//! | [`sisbench_qa`] | `sisbench-qa` | SIS-Bench questions for all 13 tasks from per-video annotations |
//! | [`sisbench_videos`] | `sisbench-videos` | converted, concatenated, long and shuffled videos |
//!
//! Every output file is written atomically (a temporary file beside it, then a rename), so an
//! interrupted run never leaves a half-written manifest that a reader would take as whole.

pub mod error;
pub mod nav;
pub mod sisbench_qa;
pub mod sisbench_videos;

pub mod split;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

pub use error::ConstructError;

/// Writes `bytes` to `path` through a temporary file in the same folder and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ConstructError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).map_err(ConstructError::io(dir))?;
    }
    let tmp = temp_path(path);
    let mut file = fs::File::create(&tmp).map_err(ConstructError::io(&tmp))?;
    file.write_all(bytes).map_err(ConstructError::io(&tmp))?;
    file.sync_all().map_err(ConstructError::io(&tmp))?;
    fs::rename(&tmp, path).map_err(ConstructError::io(path))
}

/// Writes `value` as pretty JSON with a final newline, atomically.
pub fn write_json_atomic(path: &Path, value: &impl serde::Serialize) -> Result<(), ConstructError> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| ConstructError::Input { file: path.to_path_buf(), detail: e.to_string() })?;
    text.push('\n');
    write_atomic(path, text.as_bytes())
}

/// `dir/.name.tmp` beside `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp"))
}
