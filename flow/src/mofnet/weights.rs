//! Checkpoint reading: VideoFlow's `MOF_*.pth` (Candle's pickle reader) or the same state dict
//! as safetensors, with or without the `module.` prefix `DataParallel` adds.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::{FlowError, Result};
use crate::estimator::WeightPrecision;

/// Tensors the official checkpoints carry but MOFNet's forward never reads: the Twins final
/// norm (its stages 3–4 are cut), GMA's relative position embedding (VideoFlow uses content
/// attention only) and the motion encoder's `velocity_update_block`, built but never called.
const UNUSED: &[&str] = &[".svt.norm.", "att.pos_emb.", "encoder.velocity_update_block.", ".svt.head."];

/// Whether a checkpoint tensor (name without `module.`) is one MOFNet never reads.
pub fn is_unused(name: &str) -> bool {
    let dotted = format!(".{name}");
    UNUSED.iter().any(|u| dotted.contains(u))
}

/// All tensors MOFNet reads, as f32 on `device` at `precision`, names without `module.`.
pub fn load_checkpoint(path: &Path, precision: WeightPrecision, device: &Device) -> Result<HashMap<String, Tensor>> {
    let fail = |reason: String| FlowError::Checkpoint { path: path.to_path_buf(), reason };
    let raw = crate::state_dict::read_checkpoint(path)?;
    let mut out = HashMap::with_capacity(raw.len());
    for (name, tensor) in raw {
        let name = name.strip_prefix("module.").map(str::to_string).unwrap_or(name);
        if is_unused(&name) {
            continue;
        }
        out.insert(name, precision.apply(tensor)?.to_dtype(DType::F32)?.to_device(device)?);
    }
    if !out.keys().any(|k| k.starts_with("fnet.svt.")) || !out.keys().any(|k| k.starts_with("update_block.encoder.")) {
        return Err(fail("not a MOFNet checkpoint: no fnet.svt.* / update_block.encoder.* tensors".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_stripped_unused_skipped_and_foreign_checkpoints_rejected() -> Result<()> {
        let dir = tempfile::tempdir().map_err(|e| FlowError::io("tempdir", e))?;
        let t = |n: usize| Tensor::zeros(n, DType::F16, &Device::Cpu);
        let names = [
            "module.fnet.svt.patch_embeds.0.norm.weight",
            "module.fnet.svt.norm.weight",
            "module.att.pos_emb.rel_height.weight",
            "module.update_block.encoder.velocity_update_block.mlp.0.bias",
            "module.update_block.encoder.init_hidden_state",
        ];
        let tensors: HashMap<String, Tensor> = names.iter().map(|n| Ok((n.to_string(), t(4)?))).collect::<Result<_>>()?;
        let path = dir.path().join("mof.safetensors");
        candle_core::safetensors::save(&tensors, &path)?;
        let loaded = load_checkpoint(&path, WeightPrecision::F32, &Device::Cpu)?;
        let mut keys: Vec<&str> = loaded.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, vec!["fnet.svt.patch_embeds.0.norm.weight", "update_block.encoder.init_hidden_state"]);
        assert!(loaded.values().all(|t| t.dtype() == DType::F32));

        let raft: HashMap<String, Tensor> = [("feature_encoder.conv.weight".to_string(), t(2)?)].into_iter().collect();
        let other = dir.path().join("raft.safetensors");
        candle_core::safetensors::save(&raft, &other)?;
        let err = load_checkpoint(&other, WeightPrecision::F32, &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.contains("not a MOFNet checkpoint"), "{err}");
        Ok(())
    }
}
