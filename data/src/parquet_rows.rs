//! Parquet files as rows, so that every reader of JSON / JSONL rows also reads `.parquet`
//! (UrbanVideo-Bench ships its questions as `MCQ.parquet`) with no conversion step.
//!
//! Each row becomes one JSON object keyed by column name (nested groups as objects, lists as
//! arrays, byte strings as UTF-8 text); its "line" is its 1-based row number, which is what row
//! errors then name. Snappy, gzip and zstd pages are read (what pandas and pyarrow write).

use std::fs::File;
use std::path::Path;

use parquet::file::reader::SerializedFileReader;

/// Why a Parquet file could not be read; the record reader names the file.
#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("not a readable Parquet file: {0}")]
    NotParquet(#[source] parquet::errors::ParquetError),
    #[error("row {row}: {source}")]
    Row { row: usize, source: parquet::errors::ParquetError },
    #[error("damaged pages (the parquet reader failed on them)")]
    DamagedPages,
}

/// Whether `path` is read as Parquet (by its extension).
pub fn is_parquet(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

/// Every row of a Parquet file, in order, as JSON objects.
pub fn read_parquet_rows(path: &Path) -> Result<Vec<serde_json::Value>, ParquetError> {
    let file = File::open(path)?;
    let reader = SerializedFileReader::new(file).map_err(ParquetError::NotParquet)?;
    // The parquet crate asserts on some damaged pages (definition levels out of range, found by
    // tests/tests/fuzz.rs) instead of returning an error: a damaged file is an error here.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        // Not preallocated from the footer's `num_rows`: a bogus count would abort the process.
        let mut rows = Vec::new();
        for (i, row) in reader.into_iter().enumerate() {
            let row = row.map_err(|source| ParquetError::Row { row: i + 1, source })?;
            rows.push(row.to_json_value());
        }
        Ok(rows)
    }))
    .unwrap_or_else(|_| Err(ParquetError::DamagedPages))
}
