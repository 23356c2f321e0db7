//! TensorBoard event files, written and read without tensorboard-rs.
//!
//! tensorboard-rs panics on IO errors, has `unimplemented!()` methods and pulls
//! in protobuf 2 and image 0.23. Scalars need
//! only two small pieces, so they are written by hand here:
//!
//! * **TFRecord framing**, one record per event:
//!   `u64 LE length`, `masked CRC32C(length bytes)`, `payload`,
//!   `masked CRC32C(payload)`, with
//!   `mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8` (wrapping).
//! * **Protobuf** for `tensorflow.Event` — `wall_time` (1, double), `step`
//!   (2, int64), `file_version` (3, string), `summary` (5, message) — and
//!   `Summary { repeated Value value = 1 }` with `Value { tag = 1 (string),
//!   simple_value = 2 (float) }`.
//!
//! The first record of every file is `file_version: "brain.Event:2"`, which is
//! what TensorBoard expects before it trusts the rest of the file.
//!
//! A resumed run writes `session_log` (6) `{status: START}` at its first step:
//! TensorBoard then drops every scalar at that step or later that an earlier
//! file holds (the steps a killed run took after its last checkpoint), and so
//! does [`read_scalars`].
//!
//! [`read_scalars`] reads such files back (ours, or any writer's scalars
//! stored as `simple_value`), checking every CRC, so tests and run-inspection
//! tools see exactly what TensorBoard would.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// What the first record of an event file says; TensorBoard checks it.
pub const FILE_VERSION: &str = "brain.Event:2";

/// Every event file name starts with this; TensorBoard finds files by it.
pub const FILE_PREFIX: &str = "events.out.tfevents.";

/// Errors from writing or reading event files. Each names the file involved.
#[derive(Debug, thiserror::Error)]
pub enum TensorBoardError {
    #[error("cannot create TensorBoard log directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot create TensorBoard event file {path}: {source}")]
    CreateFile { path: PathBuf, source: io::Error },
    #[error("cannot write TensorBoard event file {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("cannot read TensorBoard events from {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error(
        "{path}: record {record} at byte {offset} is cut short: the file ends \
         inside it (was the writer killed mid-write?)"
    )]
    Truncated { path: PathBuf, record: usize, offset: u64 },
    #[error(
        "{path}: record {record} at byte {offset}: {which} CRC mismatch \
         (stored {stored:#010x}, computed {computed:#010x}); the file is corrupt"
    )]
    Crc {
        path: PathBuf,
        record: usize,
        offset: u64,
        /// `"length"` or `"payload"`.
        which: &'static str,
        stored: u32,
        computed: u32,
    },
    #[error("{path}: record {record} at byte {offset} is not a valid Event protobuf: {reason}")]
    Malformed { path: PathBuf, record: usize, offset: u64, reason: String },
    #[error("no TensorBoard event files ({FILE_PREFIX}*) in directory {path}")]
    NoEventFiles { path: PathBuf },
}

pub type Result<T, E = TensorBoardError> = std::result::Result<T, E>;

/// Appends scalar summaries to one new event file in a log directory.
///
/// Records are buffered; call [`EventWriter::flush`] (the trainer does at each
/// logging step) for TensorBoard to see them. Dropping the writer flushes too,
/// but a drop cannot report an error, so flush explicitly before exiting.
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// Creates `log_dir` if needed and a new file
    /// `events.out.tfevents.<secs>.<hostname>.<pid>.<n>` in it, then writes
    /// the `file_version` record.
    ///
    /// `<n>` starts at 0 and counts up if the name is taken, so two writers
    /// opened in the same second never clobber each other's file (the file is
    /// created with `create_new`).
    pub fn create(log_dir: impl AsRef<Path>) -> Result<Self> {
        let log_dir = log_dir.as_ref();
        std::fs::create_dir_all(log_dir).map_err(|source| TensorBoardError::CreateDir { path: log_dir.to_path_buf(), source })?;
        let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let host = motionvl_data::files::host_name();
        let pid = std::process::id();
        let mut n = 0u32;
        let (path, file) = loop {
            let path = log_dir.join(format!("{FILE_PREFIX}{secs:010}.{host}.{pid}.{n}"));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(file) => break (path, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(source) => return Err(TensorBoardError::CreateFile { path, source }),
            }
        };
        let mut writer = Self { path, out: BufWriter::new(file) };
        let mut event = Vec::with_capacity(32);
        encode_event_header(&mut event, wall_time(), 0);
        put_bytes_field(&mut event, 3, FILE_VERSION.as_bytes());
        writer.write_record(&event)?;
        // Make the file valid for TensorBoard right away, even before a scalar.
        writer.flush()?;
        Ok(writer)
    }

    /// The event file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Logs one scalar at `step`. TensorBoard stores scalars as f32
    /// (`simple_value`), so that is what this takes.
    pub fn add_scalar(&mut self, tag: &str, value: f32, step: i64) -> Result<()> {
        self.add_scalars(&[(tag, value)], step)
    }

    /// Logs several scalars that share a step (loss, learning rates, grad
    /// norm, ...) as one event, so they carry the same wall time.
    pub fn add_scalars(&mut self, scalars: &[(&str, f32)], step: i64) -> Result<()> {
        if scalars.is_empty() {
            return Ok(());
        }
        let mut summary = Vec::with_capacity(scalars.len() * 24);
        let mut value = Vec::with_capacity(32);
        for &(tag, v) in scalars {
            value.clear();
            put_bytes_field(&mut value, 1, tag.as_bytes());
            put_key(&mut value, 2, WIRE_FIXED32);
            value.extend_from_slice(&v.to_le_bytes());
            put_bytes_field(&mut summary, 1, &value);
        }
        let mut event = Vec::with_capacity(summary.len() + 24);
        encode_event_header(&mut event, wall_time(), step);
        put_bytes_field(&mut event, 5, &summary);
        self.write_record(&event)
    }

    /// Marks a restart at `step` (`SessionLog { status: START }`): readers drop the scalars
    /// at `step` and later written before it, which a resumed run is about to log again.
    pub fn add_session_start(&mut self, step: i64) -> Result<()> {
        let mut session_log = Vec::with_capacity(2);
        put_key(&mut session_log, 1, WIRE_VARINT);
        put_varint(&mut session_log, SESSION_START);
        let mut event = Vec::with_capacity(24);
        encode_event_header(&mut event, wall_time(), step);
        put_bytes_field(&mut event, 6, &session_log);
        self.write_record(&event)
    }

    /// Hands buffered records to the operating system, so TensorBoard (and
    /// [`read_scalars`]) see them. Does not fsync: losing the last few scalars
    /// in a power cut is acceptable, an fsync per step is not.
    pub fn flush(&mut self) -> Result<()> {
        self.out.flush().map_err(|source| TensorBoardError::Write { path: self.path.clone(), source })
    }

    fn write_record(&mut self, payload: &[u8]) -> Result<()> {
        let len = (payload.len() as u64).to_le_bytes();
        let mut frame = Vec::with_capacity(payload.len() + 16);
        frame.extend_from_slice(&len);
        frame.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
        frame.extend_from_slice(payload);
        frame.extend_from_slice(&masked_crc32c(payload).to_le_bytes());
        self.out.write_all(&frame).map_err(|source| TensorBoardError::Write { path: self.path.clone(), source })
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        // Best effort: errors here cannot be reported; `flush` reports them.
        let _ = self.out.flush();
    }
}

impl std::fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWriter").field("path", &self.path).finish()
    }
}

/// One scalar read back from an event file.
#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    pub tag: String,
    pub step: i64,
    pub value: f32,
    /// Seconds since the Unix epoch when the event was written.
    pub wall_time: f64,
}

/// Reads every `simple_value` scalar from an event file, or from all event
/// files (`events.out.tfevents.*`, in name order, i.e. creation-time order)
/// directly inside a directory, in file order.
///
/// Every record's length and payload CRC is checked, and a file that ends
/// inside a record is an error rather than silently shorter, so a test that
/// passes here means TensorBoard sees the same data. Events without scalars
/// (the `file_version` record, other writers' images or histograms) and
/// scalars stored as tensors by newer TensorFlow writers are skipped. A
/// `SessionLog START` at step S drops the scalars read so far at S or later,
/// as TensorBoard does.
pub fn read_scalars(path: impl AsRef<Path>) -> Result<Vec<Scalar>> {
    let path = path.as_ref();
    let meta = std::fs::metadata(path).map_err(|source| TensorBoardError::Read { path: path.to_path_buf(), source })?;
    if !meta.is_dir() {
        let mut all = Vec::new();
        read_scalars_file(path, &mut all)?;
        return Ok(all);
    }
    let entries = std::fs::read_dir(path).map_err(|source| TensorBoardError::Read { path: path.to_path_buf(), source })?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| TensorBoardError::Read { path: path.to_path_buf(), source })?;
        let is_event_file = entry.file_name().to_str().is_some_and(|n| n.starts_with(FILE_PREFIX));
        if is_event_file && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    if files.is_empty() {
        return Err(TensorBoardError::NoEventFiles { path: path.to_path_buf() });
    }
    files.sort();
    let mut all = Vec::new();
    for file in files {
        read_scalars_file(&file, &mut all)?;
    }
    Ok(all)
}

fn read_scalars_file(path: &Path, scalars: &mut Vec<Scalar>) -> Result<()> {
    let data = std::fs::read(path).map_err(|source| TensorBoardError::Read { path: path.to_path_buf(), source })?;
    let mut pos = 0usize;
    let mut record = 0usize;
    while pos < data.len() {
        let offset = pos as u64;
        let truncated = || TensorBoardError::Truncated { path: path.to_path_buf(), record, offset };
        let header = data.get(pos..pos + 12).ok_or_else(truncated)?;
        let (len_bytes, len_crc) = header.split_at(8);
        check_crc(path, record, offset, "length", len_bytes, len_crc)?;
        let len = u64::from_le_bytes(len_bytes.try_into().map_err(|_| truncated())?);
        let start = pos + 12;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| start.checked_add(l))
            .filter(|&e| e.checked_add(4).is_some_and(|t| t <= data.len()))
            .ok_or_else(truncated)?;
        let payload = &data[start..end];
        check_crc(path, record, offset, "payload", payload, &data[end..end + 4])?;
        decode_event(payload, scalars).map_err(|reason| TensorBoardError::Malformed { path: path.to_path_buf(), record, offset, reason })?;
        pos = end + 4;
        record += 1;
    }
    Ok(())
}

fn check_crc(path: &Path, record: usize, offset: u64, which: &'static str, data: &[u8], stored: &[u8]) -> Result<()> {
    let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
    let computed = masked_crc32c(data);
    if stored == computed { Ok(()) } else { Err(TensorBoardError::Crc { path: path.to_path_buf(), record, offset, which, stored, computed }) }
}

// ---------------------------------------------------------------- protobuf

const WIRE_VARINT: u32 = 0;
const WIRE_FIXED64: u32 = 1;
const WIRE_LEN: u32 = 2;
const WIRE_FIXED32: u32 = 5;

/// `SessionLog.SessionStatus.START`.
const SESSION_START: u64 = 1;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, field: u32, wire: u32) {
    put_varint(out, u64::from((field << 3) | wire));
}

fn put_bytes_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    put_key(out, field, WIRE_LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// `wall_time` and `step`, the fields every event carries.
fn encode_event_header(out: &mut Vec<u8>, wall_time: f64, step: i64) {
    put_key(out, 1, WIRE_FIXED64);
    out.extend_from_slice(&wall_time.to_le_bytes());
    if step != 0 {
        put_key(out, 2, WIRE_VARINT);
        // int64 is encoded as the two's-complement u64 (10 bytes if negative).
        put_varint(out, step as u64);
    }
}

/// A protobuf field as read: its number and its value.
enum Field<'a> {
    Varint(u64),
    Fixed64([u8; 8]),
    Fixed32([u8; 4]),
    Bytes(&'a [u8]),
}

/// Walks the fields of one protobuf message.
struct Fields<'a> {
    buf: &'a [u8],
}

impl<'a> Fields<'a> {
    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self.buf.split_first().ok_or_else(|| "varint runs past the end".to_string())?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".to_string())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if n > self.buf.len() {
            return Err(format!("field of {n} bytes runs past the end ({} left)", self.buf.len()));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn next_field(&mut self) -> Result<Option<(u64, Field<'a>)>, String> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let key = self.varint()?;
        let field = key >> 3;
        let value = match (key & 7) as u32 {
            WIRE_VARINT => Field::Varint(self.varint()?),
            WIRE_FIXED64 => Field::Fixed64(self.take(8)?.try_into().map_err(|_| "fixed64")?),
            WIRE_LEN => {
                let n = usize::try_from(self.varint()?).map_err(|_| "length overflows usize")?;
                Field::Bytes(self.take(n)?)
            }
            WIRE_FIXED32 => Field::Fixed32(self.take(4)?.try_into().map_err(|_| "fixed32")?),
            wire => return Err(format!("field {field} has unsupported wire type {wire}")),
        };
        Ok(Some((field, value)))
    }
}

fn decode_event(payload: &[u8], out: &mut Vec<Scalar>) -> Result<(), String> {
    let mut wall_time = 0.0;
    let mut step = 0i64;
    let mut summaries = Vec::new();
    let mut session_log = None;
    let mut fields = Fields { buf: payload };
    while let Some((field, value)) = fields.next_field()? {
        match (field, value) {
            (1, Field::Fixed64(b)) => wall_time = f64::from_le_bytes(b),
            (2, Field::Varint(v)) => step = v as i64,
            (5, Field::Bytes(b)) => summaries.push(b),
            (6, Field::Bytes(b)) => session_log = Some(b),
            (1 | 2 | 5 | 6, _) => return Err(format!("Event field {field} has the wrong wire type")),
            _ => {}
        }
    }
    if let Some(log) = session_log {
        let mut fields = Fields { buf: log };
        while let Some((field, value)) = fields.next_field()? {
            if let (1, Field::Varint(SESSION_START)) = (field, value) {
                out.retain(|s| s.step < step);
            }
        }
    }
    for summary in summaries {
        let mut fields = Fields { buf: summary };
        while let Some((field, value)) = fields.next_field()? {
            if let (1, Field::Bytes(v)) = (field, value)
                && let Some((tag, value)) = decode_value(v)?
            {
                out.push(Scalar { tag, step, value, wall_time });
            }
        }
    }
    Ok(())
}

/// `Summary.Value` → `(tag, simple_value)`, or `None` if it holds something
/// else (an image, a histogram, a tensor).
fn decode_value(buf: &[u8]) -> Result<Option<(String, f32)>, String> {
    let mut tag = None;
    let mut value = None;
    let mut fields = Fields { buf };
    while let Some((field, v)) = fields.next_field()? {
        match (field, v) {
            (1, Field::Bytes(b)) => tag = Some(String::from_utf8(b.to_vec()).map_err(|_| "Summary.Value tag is not UTF-8".to_string())?),
            (2, Field::Fixed32(b)) => value = Some(f32::from_le_bytes(b)),
            _ => {}
        }
    }
    Ok(tag.zip(value))
}

// ------------------------------------------------------------------ CRC32C

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) lookup table,
/// built at compile time.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// Plain CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc = CRC32C_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The TFRecord mask: a CRC stored next to data that itself contains CRCs
/// would be weak, so TensorFlow rotates and offsets it.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c(data);
    // `rotate_right(15)` is TensorFlow's `(crc >> 15) | (crc << 17)`.
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

// ------------------------------------------------------------------ helpers

fn wall_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_standard_check_value() {
        // The CRC catalogue's check value for CRC-32C over "123456789".
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn masked_crc_matches_tensorboards_own_implementation() {
        // Values from tensorboard 2.21's
        // `compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c`.
        assert_eq!(masked_crc32c(b""), 0xa282_ead8);
        assert_eq!(masked_crc32c(&0u64.to_le_bytes()), 0x0798_0329);
        assert_eq!(masked_crc32c(b"brain.Event:2"), 0x7c06_01ee);
    }

    #[test]
    fn varints_round_trip_including_negative_steps() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            let mut f = Fields { buf: &buf };
            assert_eq!(f.varint().unwrap(), v);
            assert!(f.buf.is_empty());
        }
        let mut buf = Vec::new();
        put_varint(&mut buf, (-5i64) as u64);
        assert_eq!(buf.len(), 10);
    }

    #[test]
    fn first_record_is_file_version() {
        let dir = tempfile::tempdir().unwrap();
        let w = EventWriter::create(dir.path()).unwrap();
        let data = std::fs::read(w.path()).unwrap();
        let len = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
        assert_eq!(data.len(), 16 + len, "exactly one record before any scalar");
        let payload = &data[12..12 + len];
        let needle = FILE_VERSION.as_bytes();
        assert!(payload.windows(needle.len()).any(|w| w == needle));
        // Field 3, wire type 2, length 13, then the string.
        let mut expect = vec![0x1a, needle.len() as u8];
        expect.extend_from_slice(needle);
        assert!(payload.ends_with(&expect));
    }

    #[test]
    fn file_name_follows_tensorflow_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let w = EventWriter::create(dir.path()).unwrap();
        let name = w.path().file_name().unwrap().to_str().unwrap().to_string();
        let rest = name.strip_prefix(FILE_PREFIX).unwrap();
        let parts: Vec<&str> = rest.split('.').collect();
        assert!(parts.len() >= 4, "{name}");
        assert_eq!(parts[0].len(), 10);
        assert!(parts[0].chars().all(|c| c.is_ascii_digit()));
        assert_eq!(parts[parts.len() - 2], std::process::id().to_string());
        assert_eq!(parts[parts.len() - 1], "0");
    }

    #[test]
    fn two_writers_in_one_second_get_distinct_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = EventWriter::create(dir.path()).unwrap();
        let mut b = EventWriter::create(dir.path()).unwrap();
        assert_ne!(a.path(), b.path());
        a.add_scalar("a", 1.0, 1).unwrap();
        b.add_scalar("b", 2.0, 1).unwrap();
        a.flush().unwrap();
        b.flush().unwrap();
        let all = read_scalars(dir.path()).unwrap();
        let mut tags: Vec<_> = all.iter().map(|s| s.tag.as_str()).collect();
        tags.sort();
        assert_eq!(tags, ["a", "b"]);
    }

    #[test]
    fn scalars_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path().join("tb")).unwrap();
        w.add_scalar("train/loss", 2.5, 1).unwrap();
        w.add_scalars(&[("train/loss", 1.25), ("train/lr/lora", 1e-5)], 2).unwrap();
        w.add_scalars(&[], 3).unwrap();
        w.add_scalar("train/grad_norm", f32::NAN, 4).unwrap();
        w.add_scalar("ü/weird tag", -0.0, 0).unwrap();
        w.add_scalar("big", f32::MAX, i64::MAX).unwrap();
        w.add_scalar("neg", 1.0, -7).unwrap();
        w.flush().unwrap();

        let got = read_scalars(w.path()).unwrap();
        let triples: Vec<(&str, i64, f32)> = got.iter().map(|s| (s.tag.as_str(), s.step, s.value)).collect();
        assert_eq!(triples.len(), 7);
        assert_eq!(triples[0], ("train/loss", 1, 2.5));
        assert_eq!(triples[1], ("train/loss", 2, 1.25));
        assert_eq!(triples[2], ("train/lr/lora", 2, 1e-5));
        assert_eq!((triples[3].0, triples[3].1), ("train/grad_norm", 4));
        assert!(triples[3].2.is_nan());
        assert_eq!(triples[4], ("ü/weird tag", 0, -0.0));
        assert!(triples[4].2.is_sign_negative());
        assert_eq!(triples[5], ("big", i64::MAX, f32::MAX));
        assert_eq!(triples[6], ("neg", -7, 1.0));
        // Scalars written together share one event, hence one wall time.
        assert_eq!(got[1].wall_time, got[2].wall_time);
        let now = wall_time();
        assert!(got.iter().all(|s| s.wall_time > now - 60.0 && s.wall_time <= now));
    }

    #[test]
    fn a_session_start_drops_the_earlier_files_later_steps() {
        let dir = tempfile::tempdir().unwrap();
        let mut killed = EventWriter::create(dir.path()).unwrap();
        for step in 1..=4 {
            killed.add_scalar("train/loss", step as f32, step).unwrap();
        }
        drop(killed);
        let mut resumed = EventWriter::create(dir.path()).unwrap();
        resumed.add_session_start(3).unwrap();
        resumed.add_scalar("train/loss", 30.0, 3).unwrap();
        resumed.flush().unwrap();
        let got: Vec<(i64, f32)> = read_scalars(dir.path()).unwrap().iter().map(|s| (s.step, s.value)).collect();
        assert_eq!(got, [(1, 1.0), (2, 2.0), (3, 30.0)]);
    }

    #[test]
    fn reading_a_directory_reads_every_event_file() {
        let dir = tempfile::tempdir().unwrap();
        {
            let mut w = EventWriter::create(dir.path()).unwrap();
            w.add_scalar("x", 1.0, 1).unwrap();
            // Dropping flushes.
        }
        std::fs::write(dir.path().join("not-an-event-file.txt"), b"junk").unwrap();
        let got = read_scalars(dir.path()).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].tag.as_str(), got[0].step, got[0].value), ("x", 1, 1.0));
    }

    #[test]
    fn empty_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_scalars(dir.path()).unwrap_err();
        assert!(matches!(err, TensorBoardError::NoEventFiles { .. }), "{err}");
        assert!(err.to_string().contains(&dir.path().display().to_string()));
    }

    fn written_file(dir: &Path) -> PathBuf {
        let mut w = EventWriter::create(dir).unwrap();
        w.add_scalar("train/loss", 3.0, 1).unwrap();
        w.add_scalar("train/loss", 2.0, 2).unwrap();
        w.flush().unwrap();
        w.path().to_path_buf()
    }

    #[test]
    fn payload_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = written_file(dir.path());
        let mut data = std::fs::read(&path).unwrap();
        // Flip a bit inside the last record's float value (4 bytes before
        // the trailing CRC): a plausible-looking but wrong loss.
        let n = data.len();
        data[n - 6] ^= 0x01;
        std::fs::write(&path, &data).unwrap();
        let err = read_scalars(&path).unwrap_err();
        match &err {
            TensorBoardError::Crc { which, record, .. } => {
                assert_eq!(*which, "payload");
                assert_eq!(*record, 2);
            }
            other => panic!("expected a CRC error, got {other}"),
        }
        assert!(err.to_string().contains(&path.display().to_string()));
    }

    #[test]
    fn length_corruption_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = written_file(dir.path());
        let mut data = std::fs::read(&path).unwrap();
        data[0] ^= 0x04; // first record's length
        std::fs::write(&path, &data).unwrap();
        match read_scalars(&path).unwrap_err() {
            TensorBoardError::Crc { which, record, offset, .. } => {
                assert_eq!((which, record, offset), ("length", 0, 0));
            }
            other => panic!("expected a CRC error, got {other}"),
        }
    }

    #[test]
    fn truncated_file_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = written_file(dir.path());
        let data = std::fs::read(&path).unwrap();
        for cut in [data.len() - 1, data.len() - 5, data.len() - 20] {
            std::fs::write(&path, &data[..cut]).unwrap();
            let err = read_scalars(&path).unwrap_err();
            assert!(matches!(err, TensorBoardError::Truncated { record: 2, .. }), "cut at {cut}: {err}");
        }
    }

    #[test]
    fn malformed_payload_with_valid_crc_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(format!("{FILE_PREFIX}bad"));
        let payload = [0x2a, 0x05, 0x01]; // summary claims 5 bytes, has 1
        let len = (payload.len() as u64).to_le_bytes();
        let mut data = len.to_vec();
        data.extend_from_slice(&masked_crc32c(&len).to_le_bytes());
        data.extend_from_slice(&payload);
        data.extend_from_slice(&masked_crc32c(&payload).to_le_bytes());
        std::fs::write(&path, &data).unwrap();
        let err = read_scalars(&path).unwrap_err();
        assert!(matches!(err, TensorBoardError::Malformed { record: 0, .. }), "{err}");
    }

    #[test]
    fn unwritable_log_dir_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let err = EventWriter::create(file.join("tb")).unwrap_err();
        assert!(matches!(err, TensorBoardError::CreateDir { .. }), "{err}");
        assert!(err.to_string().contains("a-file"));
    }

    #[test]
    fn missing_path_is_a_read_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_scalars(dir.path().join("nope")).unwrap_err();
        assert!(matches!(err, TensorBoardError::Read { .. }), "{err}");
    }
}
