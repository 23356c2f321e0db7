//! Reading the checkpoints of the flow networks: safetensors, or PyTorch state dicts through
//! Candle's pickle reader, as the official flow repositories save them: bare, or wrapped in
//! `{"state_dict": …}` / `{"model": …}`. Each network renames and checks the tensors itself
//! (`raft::weights`, `mofnet::weights`, `sea_raft::weights`).

use std::path::Path;

use candle_core::Tensor;

use crate::error::{FlowError, Result};

/// How cache keys name a checkpoint: the SHA-256 of its bytes, so that two files with the same
/// name and size (fine-tunes of one architecture) never share cached flows.
pub fn weights_id(path: &Path) -> Result<String> {
    motionvl_data::digest::sha256_file(path).map(|d| format!("sha256:{d}")).map_err(|e| FlowError::io(path, e))
}

/// Every tensor of a checkpoint as stored, on the CPU: `.safetensors`, else a PyTorch `.pth`.
/// The error names the file: missing, unreadable, or holding no tensor.
pub fn read_checkpoint(path: &Path) -> Result<Vec<(String, Tensor)>> {
    let fail = |reason: String| FlowError::Checkpoint { path: path.to_path_buf(), reason };
    if !path.is_file() {
        return Err(fail("no such file".into()));
    }
    let raw: Vec<(String, Tensor)> = match path.extension().and_then(|e| e.to_str()) {
        Some("safetensors") => {
            candle_core::safetensors::load(path, &candle_core::Device::Cpu).map_err(|e| fail(e.to_string()))?.into_iter().collect()
        }
        _ => read_pth(path).map_err(|e| fail(format!("not a readable PyTorch checkpoint ({e})")))?,
    };
    if raw.is_empty() {
        return Err(fail("no tensors found (expected a state dict, bare or under `model` / `state_dict`)".into()));
    }
    Ok(raw)
}

/// The tensors of a `.pth` checkpoint; empty when the file holds no state dict we recognise.
pub fn read_pth(path: &Path) -> candle_core::Result<Vec<(String, Tensor)>> {
    let bare = motionvl_models::torch_save::read_state_dict(path, None)?;
    if !bare.is_empty() {
        return Ok(bare);
    }
    // The reader fails on a key the file lacks, so each wrapper is simply tried in turn.
    for key in ["model", "state_dict"] {
        if let Ok(wrapped) = motionvl_models::torch_save::read_state_dict(path, Some(key))
            && !wrapped.is_empty()
        {
            return Ok(wrapped);
        }
    }
    Ok(Vec::new())
}
