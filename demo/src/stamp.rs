//! Input stamps: a stage's output folder records what it was made from (`inputs.json`), so a
//! rerun reuses the output when nothing changed and redoes the stage when anything did.

use std::path::Path;

use serde_json::Value;

use crate::DemoError;

pub const STAMP_FILE: &str = "inputs.json";

/// Whether `dir` was made from exactly `inputs`.
pub fn matches(dir: &Path, inputs: &Value) -> bool {
    std::fs::read_to_string(dir.join(STAMP_FILE)).ok().and_then(|t| serde_json::from_str::<Value>(&t).ok()).is_some_and(|v| &v == inputs)
}

/// Records `inputs` as what `dir` was made from (atomically).
pub fn write(dir: &Path, inputs: &Value) -> Result<(), DemoError> {
    let text = serde_json::to_string_pretty(inputs)?;
    motionvl_train::checkpoint::write_atomic(dir.join(STAMP_FILE), text.as_bytes())
        .map_err(|e| DemoError::Stage { stage: dir.display().to_string(), reason: e.to_string() })
}

/// The SHA-256 of a file's bytes, as a stamp entry.
pub fn digest(path: &Path) -> Result<Value, DemoError> {
    motionvl_data::digest::sha256_file(path)
        .map(Value::String)
        .map_err(|e| DemoError::Stage { stage: path.display().to_string(), reason: format!("cannot read: {e}") })
}
