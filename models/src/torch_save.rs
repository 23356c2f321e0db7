//! Writing a `dict[str, Tensor]` the way `torch.save` (torch ≥ 1.6, zip format) does, so that
//! `torch.load` — and `load_state_dict` after it — read our files as their own; and reading
//! such files with every tensor's size checked against its storage before anything is allocated.
//!
//! ```text
//! <stem>/data.pkl                 pickle protocol 2: {key: _rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())}
//! <stem>/byteorder                "little"
//! <stem>/data/<k>                 the raw little-endian bytes of the k-th storage
//! <stem>/version                  "3\n"
//! <stem>/.data/serialization_id   40 decimal digits
//! ```
//! Every entry is stored (not deflated) with its data aligned to 64 bytes, as torch writes it.
//! Each storage is referenced from the pickle by a persistent id
//! `("storage", torch.<Dtype>Storage, "<k>", "cpu", numel)`.

use std::io::Write;
use std::path::Path;

use candle_core::{DType, Tensor};

use crate::error::{ModelError, Result};

/// The serialisation version torch 2.x writes (`<stem>/version`).
const FORMAT_VERSION: &str = "3\n";

/// Alignment of every entry's data (`torch/csrc/.../inline_container.cc`, `kFieldAlignment`).
const ALIGNMENT: u16 = 64;

/// Writes `tensors` (f32, bf16 or f16, any shape) to `path` as `torch.save(dict(tensors), path)` would,
/// keys in the given order; atomically. The archive's folder is the file's stem, as in torch.
pub fn save_state_dict(path: &Path, tensors: &[(String, Tensor)]) -> Result<()> {
    let stem = path.file_stem().and_then(|s| s.to_str()).filter(|s| !s.is_empty()).unwrap_or("archive");
    let mut storages = Vec::with_capacity(tensors.len());
    for (key, tensor) in tensors {
        storages.push(storage_bytes(key, tensor)?);
    }
    let pickle = state_dict_pickle(tensors)?;
    let zip_error = |e: zip::result::ZipError| ModelError::Io { path: path.to_path_buf(), source: std::io::Error::other(e) };
    let io_error = |source: std::io::Error| ModelError::Io { path: path.to_path_buf(), source };
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let options = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored).with_alignment(ALIGNMENT);
    let mut entry = |name: String, bytes: &[u8]| -> Result<()> {
        zip.start_file(name, options).map_err(zip_error)?;
        zip.write_all(bytes).map_err(io_error)
    };
    entry(format!("{stem}/data.pkl"), &pickle)?;
    entry(format!("{stem}/byteorder"), b"little")?;
    for (k, bytes) in storages.iter().enumerate() {
        entry(format!("{stem}/data/{k}"), bytes)?;
    }
    entry(format!("{stem}/version"), FORMAT_VERSION.as_bytes())?;
    entry(format!("{stem}/.data/serialization_id"), serialization_id(&pickle, &storages).as_bytes())?;
    let bytes = zip.finish().map_err(zip_error)?.into_inner();
    Ok(motionvl_util::files::write_atomic(path, &bytes)?)
}

/// torch's storage class for a dtype.
fn storage_class(key: &str, dtype: DType) -> Result<&'static str> {
    match dtype {
        DType::F32 => Ok("FloatStorage"),
        DType::BF16 => Ok("BFloat16Storage"),
        DType::F16 => Ok("HalfStorage"),
        other => Err(ModelError::TorchDtype { tensor: key.to_string(), dtype: other }),
    }
}

/// A tensor's elements in row-major order as little-endian bytes.
fn storage_bytes(key: &str, tensor: &Tensor) -> Result<Vec<u8>> {
    storage_class(key, tensor.dtype())?;
    let flat = tensor.flatten_all()?;
    Ok(match tensor.dtype() {
        DType::BF16 => flat.to_vec1::<half::bf16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => flat.to_vec1::<half::f16>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
        _ => flat.to_vec1::<f32>()?.iter().flat_map(|v| v.to_le_bytes()).collect(),
    })
}

/// torch names each archive with a random id; ours is derived from the content (two FNV-1a
/// hashes), so that the same tensors always give the same bytes.
fn serialization_id(pickle: &[u8], storages: &[Vec<u8>]) -> String {
    let fnv = |offset: u64| {
        let mut h = offset;
        for byte in std::iter::once(pickle).chain(storages.iter().map(Vec::as_slice)).flatten() {
            h = (h ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
        }
        h
    };
    format!("{:020}{:020}", fnv(0xcbf2_9ce4_8422_2325), fnv(0x8422_2325_cbf2_9ce4))
}

/// The `data.pkl` of a plain dict of tensors, opcode for opcode as torch's pickler writes it
/// (memo entries left out: they only shorten repeated globals).
fn state_dict_pickle(tensors: &[(String, Tensor)]) -> Result<Vec<u8>> {
    let mut p = Pickle::default();
    p.op(PROTO);
    p.op(2);
    p.op(EMPTY_DICT);
    // Python's pickler batches SETITEMS by 1000.
    for batch in tensors.chunks(1000).enumerate() {
        let (first, batch) = batch;
        p.op(MARK);
        for (offset, (key, tensor)) in batch.iter().enumerate() {
            let k = first * 1000 + offset;
            p.string(key);
            p.global("torch._utils", "_rebuild_tensor_v2");
            p.op(MARK);
            // Persistent id of the storage.
            p.op(MARK);
            p.string("storage");
            p.global("torch", storage_class(key, tensor.dtype())?);
            p.string(&k.to_string());
            p.string("cpu");
            p.int(tensor.elem_count());
            p.op(TUPLE);
            p.op(BINPERSID);
            p.int(0); // storage offset
            let dims = tensor.dims();
            p.tuple_of_ints(dims);
            p.tuple_of_ints(&contiguous_strides(dims));
            p.op(NEWFALSE); // requires_grad
            p.global("collections", "OrderedDict");
            p.op(EMPTY_TUPLE);
            p.op(REDUCE); // backward hooks: OrderedDict()
            p.op(TUPLE);
            p.op(REDUCE);
        }
        p.op(SETITEMS);
    }
    p.op(STOP);
    Ok(p.bytes)
}

fn contiguous_strides(dims: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        strides[i] = strides[i + 1] * dims[i + 1];
    }
    strides
}

const MARK: u8 = b'(';
const STOP: u8 = b'.';
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const BINUNICODE: u8 = b'X';
const GLOBAL: u8 = b'c';
const EMPTY_DICT: u8 = b'}';
const SETITEMS: u8 = b'u';
const TUPLE: u8 = b't';
const EMPTY_TUPLE: u8 = b')';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const REDUCE: u8 = b'R';
const BINPERSID: u8 = b'Q';
const NEWFALSE: u8 = 0x89;
const PROTO: u8 = 0x80;
const LONG1: u8 = 0x8a;

/// A pickle being written.
#[derive(Default)]
struct Pickle {
    bytes: Vec<u8>,
}

impl Pickle {
    fn op(&mut self, op: u8) {
        self.bytes.push(op);
    }

    fn string(&mut self, s: &str) {
        self.op(BINUNICODE);
        self.bytes.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(s.as_bytes());
    }

    fn global(&mut self, module: &str, name: &str) {
        self.op(GLOBAL);
        self.bytes.extend_from_slice(format!("{module}\n{name}\n").as_bytes());
    }

    /// The shortest opcode Python's pickler would choose for a non-negative int.
    fn int(&mut self, v: usize) {
        if v < 0x100 {
            self.op(BININT1);
            self.op(v as u8);
        } else if v < 0x1_0000 {
            self.op(BININT2);
            self.bytes.extend_from_slice(&(v as u16).to_le_bytes());
        } else if v <= i32::MAX as usize {
            self.op(BININT);
            self.bytes.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            // Two's-complement little-endian with a clear sign bit: 8 bytes always suffice.
            self.op(LONG1);
            let bytes = (v as u64).to_le_bytes();
            let mut len = 8;
            while len > 1 && bytes[len - 1] == 0 && bytes[len - 2] & 0x80 == 0 {
                len -= 1;
            }
            let extra = if bytes[len - 1] & 0x80 != 0 { 1 } else { 0 };
            self.op((len + extra) as u8);
            self.bytes.extend_from_slice(&bytes[..len]);
            if extra == 1 {
                self.op(0);
            }
        }
    }

    fn tuple_of_ints(&mut self, values: &[usize]) {
        let short = [EMPTY_TUPLE, TUPLE1, TUPLE2, TUPLE3];
        if values.len() > 3 {
            self.op(MARK);
        }
        for &v in values {
            self.int(v);
        }
        self.op(if values.len() > 3 { TUPLE } else { short[values.len()] });
    }
}

/// Every tensor of a `torch.save` file (under `key`, e.g. `"model"`, when the dict is wrapped),
/// as candle's reader gives them, after checking that each tensor's bytes lie inside its
/// storage entry: the pickle's shapes are the file's word, and candle allocates whatever they
/// say before reading (a 23 kB file once asked for 4 GB).
pub fn read_state_dict(path: &Path, key: Option<&str>) -> candle_core::Result<Vec<(String, Tensor)>> {
    let mut archive = zip::ZipArchive::new(std::io::BufReader::new(std::fs::File::open(path)?)).map_err(candle_core::Error::wrap)?;
    for index in 0..archive.len() {
        let mut entry = archive.by_index(index).map_err(candle_core::Error::wrap)?;
        let name = entry.name().map_err(candle_core::Error::wrap)?.into_owned();
        if name.ends_with("data.pkl") {
            let mut pickle = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut pickle)?;
            if let Some(at) = string_past_end(&pickle) {
                candle_core::bail!("{}: {} declares a string at byte {at} longer than the pickle", path.display(), name);
            }
        }
    }
    let pth = candle_core::pickle::PthTensors::new(path, key)?;
    let mut names: Vec<&String> = pth.tensor_infos().keys().collect();
    names.sort();
    for name in &names {
        let info = &pth.tensor_infos()[*name];
        let stored = archive.by_name(&info.path).map_err(candle_core::Error::wrap)?.size();
        let needed = (info.layout.shape().elem_count() as u64)
            .checked_add(info.layout.start_offset() as u64)
            .and_then(|n| n.checked_mul(info.dtype.size_in_bytes() as u64));
        if needed.is_none_or(|needed| needed > stored) {
            candle_core::bail!(
                "{}: tensor `{name}` ({:?} {:?}) needs more bytes than its storage `{}` holds ({stored})",
                path.display(),
                info.dtype,
                info.layout.dims(),
                info.path
            );
        }
    }
    let mut tensors = Vec::with_capacity(names.len());
    for name in names {
        if let Some(tensor) = pth.get(name)? {
            tensors.push((name.clone(), tensor));
        }
    }
    Ok(tensors)
}

/// The offset of the first `BINUNICODE` whose declared length runs past the pickle's end, over
/// the opcodes candle's unpickler reads (it allocates that length before reading). Walking
/// stops at an opcode outside that set: candle refuses the pickle there itself.
fn string_past_end(pickle: &[u8]) -> Option<usize> {
    let u32_at = |at: usize| pickle.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let mut at = 0;
    while let Some(&op) = pickle.get(at) {
        let argument = match op {
            b'X' => {
                let len = u32_at(at + 1)?;
                if len > pickle.len().saturating_sub(at + 5) {
                    return Some(at);
                }
                4 + len
            }
            // GLOBAL: module and name, each ending in a newline.
            b'c' => {
                let first = pickle[at + 1..].iter().position(|&b| b == b'\n')? + 1;
                first + pickle[at + 1 + first..].iter().position(|&b| b == b'\n')? + 1
            }
            0x80 | b'q' | b'K' | b'h' => 1,
            b'M' => 2,
            b'r' | b'J' | b'j' => 4,
            b'G' => 8,
            0x8a => 1 + *pickle.get(at + 1)? as usize,
            b')' | b'R' | b'(' | b't' | b'Q' | 0x85..=0x89 | b'N' | b's' | b'u' | b'}' | b'd' | b'b' | 0x81 | b']' | b'a' | b'e' => 0,
            _ => return None, // STOP, or an opcode candle refuses
        };
        at += 1 + argument;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Tensors of every rank we write, with values no symmetry could hide a transposition in.
    fn sample() -> Vec<(String, Tensor)> {
        let dev = Device::Cpu;
        let ramp = |n: usize| (0..n).map(|i| (i as f32 * 0.37 - 1.3).sin() * 10.0).collect::<Vec<f32>>();
        vec![
            ("ln.weight".into(), Tensor::from_vec(ramp(5), 5, &dev).unwrap()),
            ("mlp.0.weight".into(), Tensor::from_vec(ramp(12), (3, 4), &dev).unwrap()),
            ("mlp.0.bias".into(), Tensor::from_vec(ramp(3), 3, &dev).unwrap().to_dtype(DType::BF16).unwrap()),
            ("deep".into(), Tensor::from_vec(ramp(12), (2, 3, 1, 2), &dev).unwrap().to_dtype(DType::BF16).unwrap()),
            ("long".into(), Tensor::from_vec(ramp(300), 300, &dev).unwrap()),
            ("half".into(), Tensor::from_vec(ramp(6), (2, 3), &dev).unwrap().to_dtype(DType::F16).unwrap()),
        ]
    }

    #[test]
    fn candle_reads_back_what_we_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("connector_weights.pt");
        let tensors = sample();
        save_state_dict(&path, &tensors).unwrap();
        let read: std::collections::HashMap<String, Tensor> = candle_core::pickle::read_all(&path).unwrap().into_iter().collect();
        assert_eq!(read.len(), tensors.len());
        for (key, tensor) in &tensors {
            let back = &read[key];
            assert_eq!(back.dtype(), tensor.dtype(), "{key}");
            assert_eq!(back.dims(), tensor.dims(), "{key}");
            let flat = |t: &Tensor| t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert_eq!(flat(back), flat(tensor), "{key}");
        }
    }

    #[test]
    fn writes_are_deterministic_and_the_archive_is_named_after_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("x.pt"), dir.path().join("y/x.pt"));
        std::fs::create_dir_all(dir.path().join("y")).unwrap();
        save_state_dict(&a, &sample()).unwrap();
        save_state_dict(&b, &sample()).unwrap();
        let bytes = std::fs::read(&a).unwrap();
        assert_eq!(bytes, std::fs::read(&b).unwrap());
        let names: Vec<String> = {
            let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes)).unwrap();
            (0..archive.len()).map(|i| archive.by_index(i).unwrap().name().unwrap().into_owned()).collect()
        };
        assert_eq!(
            names,
            [
                "x/data.pkl",
                "x/byteorder",
                "x/data/0",
                "x/data/1",
                "x/data/2",
                "x/data/3",
                "x/data/4",
                "x/data/5",
                "x/version",
                "x/.data/serialization_id"
            ]
        );
    }

    #[test]
    fn other_dtypes_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let t = Tensor::zeros(2, DType::U8, &Device::Cpu).unwrap();
        let err = save_state_dict(&dir.path().join("x.pt"), &[("mask".into(), t)]).unwrap_err().to_string();
        assert!(err.contains("`mask`") && err.contains("U8"), "{err}");
    }
}
