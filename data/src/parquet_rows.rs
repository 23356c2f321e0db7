//! Parquet files as rows, so that every reader of JSON / JSONL rows also reads `.parquet`
//! (UrbanVideo-Bench ships its questions as `MCQ.parquet`) with no conversion step.
//!
//! Each row becomes one JSON object keyed by column name (nested groups as objects, lists as
//! arrays, byte strings as UTF-8 text); its "line" is its 1-based row number, which is what row
//! errors then name. Snappy, gzip and zstd pages are read (what pandas and pyarrow write).

use std::fs::File;
use std::path::Path;

use parquet::file::reader::{FileReader, SerializedFileReader};

use crate::samples::{ReadError, Record};

/// Whether `path` is read as Parquet (by its extension).
pub fn is_parquet(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

/// Every row of a Parquet file, in order.
pub fn read_parquet_records(path: &Path) -> Result<Vec<Record>, ReadError> {
    let layout = |message: String| ReadError::Layout { path: path.to_path_buf(), message };
    let file = File::open(path).map_err(|source| ReadError::Io { path: path.to_path_buf(), source })?;
    let reader = SerializedFileReader::new(file).map_err(|e| layout(format!("not a readable Parquet file: {e}")))?;
    let expected = usize::try_from(reader.metadata().file_metadata().num_rows()).unwrap_or(0);
    let mut records = Vec::with_capacity(expected);
    for (i, row) in reader.into_iter().enumerate() {
        let row = row.map_err(|e| layout(format!("row {}: {e}", i + 1)))?;
        records.push(Record { line: i + 1, value: Ok(row.to_json_value()) });
    }
    Ok(records)
}
