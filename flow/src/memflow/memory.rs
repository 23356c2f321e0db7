//! MemFlow's working memory (`inference/memory_manager_skflow.py`, `kv_memory_store.py`) and its
//! read-out.
//!
//! The memory holds, per remembered frame, the context *keys* of that frame and the motion
//! *values* of its last refinement, flattened over the 1/8-scale grid (`[B, C, N]`). At each
//! refinement the current frame's queries attend over the remembered keys plus the current
//! frame's own, with logits `q·k · d^(−½) · log_L(N)`: the `log_L N` factor (L = the training
//! crop's token count × 1.5) keeps the softmax about as sharp at inference as in training when
//! the number of keys N differs. When the memory reaches `max_mid_term_frames` frames it keeps
//! only the newest `min_mid_term_frames` (with the released 2/1 settings: the previous frame).

use candle_core::{D, Tensor};

use super::config::MemFlowConfig;
use crate::error::Result;

pub struct WorkingMemory {
    /// `[B, Ck, N]` and `[B, Cv, N]`, oldest first; `None` until the first frame is added.
    keys: Option<Tensor>,
    values: Option<Tensor>,
    max_frames: usize,
    min_frames: usize,
    train_avg_length: f64,
}

impl WorkingMemory {
    pub fn new(cfg: &MemFlowConfig) -> Self {
        WorkingMemory {
            keys: None,
            values: None,
            max_frames: cfg.max_mid_term_frames,
            min_frames: cfg.min_mid_term_frames,
            train_avg_length: cfg.train_avg_length,
        }
    }

    /// Remembered elements (frames × h·w).
    pub fn len(&self) -> usize {
        self.keys.as_ref().and_then(|k| k.dim(2).ok()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The attention of one step: the current frame's `query` `[B,Ck,h,w]` over the remembered
    /// keys plus the frame's own `key` `[B,Ck,h,w]`. `scale` is the attention's `dim_head^(−½)`.
    /// It depends on the context only, not on the refinement, so a step computes it once and
    /// reads all its refinements' values with it (the reference recomputes the same numbers
    /// at every refinement).
    pub fn attend(&self, query: &Tensor, key: &Tensor, scale: f64) -> Result<Readout> {
        let (b, ck, h, w) = query.dims4()?;
        let q = query.reshape((b, ck, h * w))?;
        let k = key.reshape((b, ck, h * w))?;
        let keys = match &self.keys {
            Some(mk) => Tensor::cat(&[mk, &k], 2)?,
            None => k,
        };
        let n = keys.dim(2)?;
        let scale = scale * (n as f64).ln() / self.train_avg_length.ln();
        let logits = (q.transpose(1, 2)?.contiguous()?.matmul(&keys)? * scale)?; // [B, hw, N]
        let affinity = candle_nn::ops::softmax_last_dim(&logits)?; // over the keys
        Ok(Readout { affinity, remembered: self.values.clone(), h, w })
    }

    /// Remembers a frame's `key` `[B,Ck,h,w]` and `value` `[B,Cv,h,w]`, then cuts the memory back
    /// to the newest `min_mid_term_frames` frames once it holds `max_mid_term_frames`.
    pub fn add(&mut self, key: &Tensor, value: &Tensor) -> Result<()> {
        let (b, ck, h, w) = key.dims4()?;
        let hw = h * w;
        let k = key.reshape((b, ck, hw))?;
        let v = value.reshape((b, value.dim(1)?, hw))?;
        let (keys, values) = match (self.keys.take(), self.values.take()) {
            (Some(mk), Some(mv)) => (Tensor::cat(&[&mk, &k], 2)?, Tensor::cat(&[&mv, &v], 2)?),
            _ => (k, v),
        };
        let n = keys.dim(D::Minus1)?;
        let (keys, values) = if n >= self.max_frames * hw {
            let keep = self.min_frames * hw;
            (keys.narrow(2, n - keep, keep)?, values.narrow(2, n - keep, keep)?)
        } else {
            (keys, values)
        };
        self.keys = Some(keys.contiguous()?);
        self.values = Some(values.contiguous()?);
        Ok(())
    }
}

/// One step's attention weights and the remembered values they mix with the current ones.
pub struct Readout {
    /// `[B, h·w, N]`, rows summing to 1; the last `h·w` columns are the current frame's.
    affinity: Tensor,
    /// `[B, Cv, N − h·w]`.
    remembered: Option<Tensor>,
    h: usize,
    w: usize,
}

impl Readout {
    /// Memory read-out `[B,Cv,h,w]` given the current refinement's `value` `[B,Cv,h,w]`.
    pub fn read(&self, value: &Tensor) -> Result<Tensor> {
        let (b, cv, h, w) = value.dims4()?;
        if (h, w) != (self.h, self.w) {
            return Err(crate::error::FlowError::Clip {
                what: "MemFlow's memory read-out",
                needs: format!("values of the attention's {}x{}", self.h, self.w),
                got: format!("{h}x{w}"),
            });
        }
        let v = value.reshape((b, cv, h * w))?;
        let values = match &self.remembered {
            Some(mv) => Tensor::cat(&[mv, &v], 2)?,
            None => v,
        };
        let out = self.affinity.matmul(&values.transpose(1, 2)?.contiguous()?)?; // [B, hw, Cv]
        Ok(out.transpose(1, 2)?.reshape((b, cv, h, w))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};

    #[test]
    fn memory_keeps_the_newest_frames_and_reads_a_convex_mix() -> Result<()> {
        let dev = Device::Cpu;
        let cfg = MemFlowConfig::default();
        let mut mem = WorkingMemory::new(&cfg);
        let frame = |v: f32| Tensor::full(v, (1, 3, 2, 2), &dev);
        for t in 0..3 {
            mem.add(&frame(t as f32)?, &frame(10.0 + t as f32)?)?;
            // 1 frame, then 2 → cut back to 1, then 2 → cut back to 1.
            assert_eq!(mem.len(), 4, "after frame {t}");
        }
        let values = mem.values.as_ref().map(|v| v.flatten_all().and_then(|f| f.to_vec1::<f32>())).transpose()?.unwrap_or_default();
        assert!(values.iter().all(|&v| v == 12.0), "the newest frame is kept: {values:?}");
        // Equal keys → uniform attention → the mean of remembered (12) and current (20) values.
        let zeros = Tensor::zeros((1, 3, 2, 2), DType::F32, &dev)?;
        let out = mem.attend(&zeros, &zeros, 0.1)?.read(&frame(20.0)?)?;
        let got = out.flatten_all()?.to_vec1::<f32>()?;
        assert!(got.iter().all(|&v| (v - 16.0).abs() < 1e-5), "{got:?}");
        Ok(())
    }
}
