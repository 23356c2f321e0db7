//! The files inside a checkpoint: named tensors as safetensors, state as JSON, and step logs as
//! JSON lines, each written so that readers see the old content or all of the new.
//!
//! Atomic writes, fsyncs and the temporary siblings are `motionvl_data::files`', shared by every
//! crate; this module adds the checkpoint formats on top.

use std::collections::HashMap;
use std::fs::{self, File};
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use motionvl_data::files;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::{CheckpointError, Result, io_err};

/// Writes `path` so that readers see either the old content or all of the new
/// ([`motionvl_data::files::write_atomic`]).
pub fn write_atomic(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    Ok(files::write_atomic(path.as_ref(), bytes)?)
}

/// Appends `value` as one JSON line to `path` (created if missing): the step logs.
pub fn append_json_line(path: impl AsRef<Path>, value: &impl serde::Serialize) -> Result<()> {
    Ok(files::append_json_line(path.as_ref(), value)?)
}

/// Saves named tensors as safetensors, atomically (see [`write_atomic`]).
///
/// The header carries `{"format": "pt"}`, which transformers and PEFT
/// require of the safetensors files they load. Tensors on an accelerator are
/// copied to the CPU first, so a device error is returned rather than
/// panicking inside the safetensors writer.
pub fn save_tensors(path: impl AsRef<Path>, tensors: &HashMap<String, Tensor>) -> Result<()> {
    let path = path.as_ref();
    let save_err = |source: Box<dyn std::error::Error + Send + Sync>| CheckpointError::SaveTensors { path: path.to_path_buf(), source };
    let mut cpu = Vec::with_capacity(tensors.len());
    for (name, t) in tensors {
        if matches!(t.dtype(), DType::F6E2M3 | DType::F6E3M2 | DType::F4 | DType::F8E8M0) {
            return Err(save_err(format!("tensor {name}: dtype {:?} cannot be saved", t.dtype()).into()));
        }
        let t = t.to_device(&Device::Cpu).and_then(|t| t.contiguous()).map_err(|e| save_err(format!("tensor {name}: {e}").into()))?;
        cpu.push((name.as_str(), t));
    }
    let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
    let tmp = files::temp_sibling(path);
    let result = safetensors::serialize_to_file(cpu, Some(metadata), &tmp)
        .map_err(|e| save_err(Box::new(e)))
        .and_then(|()| files::apply_default_mode(&tmp).map_err(io_err("cannot set the mode of", &tmp)))
        .and_then(|()| File::open(&tmp).and_then(|f| f.sync_all()).map_err(io_err("cannot fsync", &tmp)))
        .and_then(|()| Ok(files::rename_into_place(&tmp, path)?));
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Loads every tensor of a safetensors file onto `device`.
pub fn load_tensors(path: impl AsRef<Path>, device: &Device) -> Result<HashMap<String, Tensor>> {
    let path = path.as_ref();
    let bytes = fs::read(path).map_err(io_err("cannot read", path))?;
    candle_core::safetensors::load_buffer(&bytes, device).map_err(|source| CheckpointError::LoadTensors { path: path.to_path_buf(), source })
}

/// Saves `value` as pretty JSON, atomically (see [`write_atomic`]).
pub fn save_json<T: Serialize + ?Sized>(path: impl AsRef<Path>, value: &T) -> Result<()> {
    let path = path.as_ref();
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|source| CheckpointError::JsonWrite { path: path.to_path_buf(), source })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes)
}

/// Loads a JSON file written by [`save_json`] (or anyone).
pub fn load_json<T: DeserializeOwned>(path: impl AsRef<Path>) -> Result<T> {
    let path = path.as_ref();
    let bytes = fs::read(path).map_err(io_err("cannot read", path))?;
    serde_json::from_slice(&bytes).map_err(|source| CheckpointError::JsonRead { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::super::tests::names;
    use super::*;

    #[test]
    fn tensors_round_trip_with_pt_metadata() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("adapter_model.safetensors");
        let dev = Device::Cpu;
        let a = Tensor::arange(0f32, 6., &dev).unwrap().reshape((2, 3)).unwrap();
        let b = a.t().unwrap().to_dtype(DType::BF16).unwrap(); // non-contiguous
        let c = Tensor::new(&[1i64, -2, 3], &dev).unwrap();
        let map = HashMap::from([("a".to_string(), a.clone()), ("b".to_string(), b.clone()), ("c".to_string(), c.clone())]);
        save_tensors(&path, &map).unwrap();
        assert_eq!(names(out.path()), ["adapter_model.safetensors"]);

        let bytes = fs::read(&path).unwrap();
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
        let info = meta.metadata().as_ref().unwrap();
        assert_eq!(info.get("format").map(String::as_str), Some("pt"));

        let got = load_tensors(&path, &dev).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got["a"].to_vec2::<f32>().unwrap(), a.to_vec2::<f32>().unwrap());
        assert_eq!(got["b"].dtype(), DType::BF16);
        assert_eq!(got["b"].dims(), [3, 2]);
        assert_eq!(got["b"].to_dtype(DType::F32).unwrap().to_vec2::<f32>().unwrap(), [[0., 3.], [1., 4.], [2., 5.]]);
        assert_eq!(got["c"].to_vec1::<i64>().unwrap(), [1, -2, 3]);
    }

    #[test]
    fn load_errors_name_the_file() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("garbage.safetensors");
        fs::write(&path, b"not safetensors").unwrap();
        let err = load_tensors(&path, &Device::Cpu).unwrap_err();
        assert!(matches!(err, CheckpointError::LoadTensors { .. }), "{err}");
        assert!(err.to_string().contains("garbage.safetensors"));

        let err = load_tensors(out.path().join("none.safetensors"), &Device::Cpu).unwrap_err();
        assert!(matches!(err, CheckpointError::Io { .. }), "{err}");
        assert!(err.to_string().contains("none.safetensors"));
    }

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct State {
        step: u64,
        rng: [u64; 2],
        lr: f64,
    }

    #[test]
    fn json_round_trips_and_overwrites_atomically() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("trainer_state.json");
        let s1 = State { step: 1, rng: [u64::MAX, 7], lr: 1e-5 };
        save_json(&path, &s1).unwrap();
        assert_eq!(load_json::<State>(&path).unwrap(), s1);
        let s2 = State { step: 2, rng: [3, 4], lr: 2e-5 };
        save_json(&path, &s2).unwrap();
        assert_eq!(load_json::<State>(&path).unwrap(), s2);
        assert_eq!(names(out.path()), ["trainer_state.json"], "no temp file left");

        fs::write(&path, b"{\"step\": ").unwrap();
        let err = load_json::<State>(&path).unwrap_err();
        assert!(matches!(err, CheckpointError::JsonRead { .. }), "{err}");
        assert!(err.to_string().contains("trainer_state.json"));
    }

    #[test]
    fn failed_atomic_write_leaves_old_file_and_no_temp() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("state.json");
        save_json(&path, &1u32).unwrap();
        // Renaming a file over a non-empty directory fails.
        let blocked = out.path().join("blocked");
        fs::create_dir(&blocked).unwrap();
        fs::write(blocked.join("x"), b"").unwrap();
        let err = save_json(&blocked, &2u32).unwrap_err();
        assert!(matches!(err, CheckpointError::Io { .. }), "{err}");
        assert_eq!(names(out.path()), ["blocked", "state.json"]);
        assert_eq!(load_json::<u32>(&path).unwrap(), 1);
    }
}
