//! Reading PyTorch state dicts with Candle's pickle reader, as the official flow repositories
//! save them: bare, or wrapped in `{"state_dict": …}` / `{"model": …}`.

use std::path::Path;

use candle_core::Tensor;

use crate::error::{FlowError, Result};

/// How cache keys name a checkpoint: the SHA-256 of its bytes, so that two files with the same
/// name and size (fine-tunes of one architecture) never share cached flows.
pub fn weights_id(path: &Path) -> Result<String> {
    motionvl_data::digest::sha256_file(path).map(|d| format!("sha256:{d}")).map_err(|e| FlowError::io(path, e))
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
