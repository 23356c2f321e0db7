//! Checkpoint reading for the princeton-vl and MemFlow networks: safetensors, or a PyTorch
//! `.pth` through Candle's pickle reader — a bare state dict, or one wrapped in
//! `{'model': …}` / `{'state_dict': …}` — with any `module.` prefix (`DataParallel`) removed.
//! Names are otherwise kept: the model code uses the official ones.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::{FlowError, Result};

/// All tensors of a checkpoint as f32 on `device`, `module.` stripped, batch-norm counters
/// dropped. `required` is a tensor name that proves the file is the right network's (the error
/// names `network`).
pub fn load_state_dict(path: &Path, device: &Device, network: &str, required: &str) -> Result<HashMap<String, Tensor>> {
    let raw = crate::state_dict::read_checkpoint(path)?;
    let mut out = HashMap::with_capacity(raw.len());
    for (name, tensor) in raw {
        if name.ends_with("num_batches_tracked") {
            continue;
        }
        let name = name.strip_prefix("module.").map(str::to_string).unwrap_or(name);
        out.insert(name, tensor.to_dtype(DType::F32)?.to_device(device)?);
    }
    if !out.contains_key(required) {
        return Err(FlowError::Checkpoint { path: path.to_path_buf(), reason: format!("not a {network} checkpoint: it has no `{required}`") });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_and_counters_are_removed_and_wrong_networks_named() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| FlowError::io("tempdir", e))?;
        let path = dir.path().join("w.safetensors");
        let t = Tensor::ones(2, DType::F32, &Device::Cpu)?;
        let c = Tensor::zeros((), DType::I64, &Device::Cpu)?;
        candle_core::safetensors::save(
            &HashMap::from([("module.fnet.conv1.weight".to_string(), t.clone()), ("module.fnet.bn1.num_batches_tracked".to_string(), c)]),
            &path,
        )?;
        let sd = load_state_dict(&path, &Device::Cpu, "SEA-RAFT", "fnet.conv1.weight")?;
        assert_eq!(sd.keys().collect::<Vec<_>>(), vec!["fnet.conv1.weight"]);
        let wrong = load_state_dict(&path, &Device::Cpu, "MemFlow", "update_block.mask.0.weight").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(wrong.contains("not a MemFlow checkpoint"), "{wrong}");
        let missing = load_state_dict(&dir.path().join("none.pth"), &Device::Cpu, "SEA-RAFT", "x").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(missing.contains("no such file"), "{missing}");
        let junk = dir.path().join("junk.pth");
        std::fs::write(&junk, b"not a zip").map_err(|e| FlowError::io(&junk, e))?;
        assert!(load_state_dict(&junk, &Device::Cpu, "SEA-RAFT", "x").is_err());
        Ok(())
    }
}
