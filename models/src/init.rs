//! Fresh Qwen2.5-VL- and Qwen3-VL-shaped models: seeded random weights laid out like a hub
//! checkpoint, for small models trained from scratch (the demo, tests) and for benchmarks.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::VarBuilder;
use candle_nn::var_builder::SimpleBackend;
use rand::{Rng, SeedableRng};

use crate::config::Qwen25VlConfig;
use crate::error::{ModelError, Result};
use crate::qwen3vl::{Qwen3Vl, Qwen3VlConfig};
use crate::qwen25vl::Qwen25Vl;

/// Hands out weights as transformers initialises them: N(0, std²) for matrices and
/// embeddings, ones for norm scales, zeros for biases. Every tensor it made is kept, so the
/// model can be written out as a checkpoint.
struct SeededInit {
    std: f32,
    seed: u64,
    made: Arc<Mutex<HashMap<String, Tensor>>>,
}

impl SimpleBackend for SeededInit {
    fn get(&self, shape: Shape, name: &str, _: candle_nn::Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let n = shape.elem_count();
        let is_norm = name.ends_with("norm.weight") || name.contains("norm1.") || name.contains("norm2.") || name.contains("ln_q.");
        let values: Vec<f32> = if name.ends_with(".bias") {
            vec![0.0; n]
        } else if is_norm {
            vec![1.0; n]
        } else {
            // The name picks the stream, so the weights do not depend on construction order.
            let stream = name.bytes().fold(self.seed ^ 0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
            let mut rng = rand::rngs::StdRng::seed_from_u64(stream);
            (0..n)
                .map(|_| {
                    // Box–Muller: two uniforms to one standard normal.
                    let (u1, u2): (f32, f32) = (rng.random::<f32>().max(f32::MIN_POSITIVE), rng.random());
                    self.std * (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
                })
                .collect()
        };
        let tensor = Tensor::from_vec(values, shape, dev)?.to_dtype(dtype)?;
        if let Ok(mut made) = self.made.lock() {
            made.insert(name.to_owned(), tensor.clone());
        }
        Ok(tensor)
    }

    fn get_unchecked(&self, name: &str, _: DType, _: &Device) -> candle_core::Result<Tensor> {
        candle_core::bail!("a random initialisation needs the shape of {name}")
    }

    fn contains_tensor(&self, name: &str) -> bool {
        // A tied head is taken from the embedding, an untied one made fresh.
        name != "lm_head.weight"
    }
}

/// A randomly initialised model and its weights by hub name.
pub fn random_model(cfg: &Qwen25VlConfig, std: f32, seed: u64, device: &Device) -> Result<(Qwen25Vl, HashMap<String, Tensor>)> {
    seeded(|vb| Qwen25Vl::new(cfg, vb), std, seed, device)
}

/// A randomly initialised Qwen3-VL and its weights by hub name.
pub fn random_qwen3(cfg: &Qwen3VlConfig, std: f32, seed: u64, device: &Device) -> Result<(Qwen3Vl, HashMap<String, Tensor>)> {
    seeded(|vb| Qwen3Vl::new(cfg, vb), std, seed, device)
}

/// The model `build` makes from seeded weights, and those weights.
fn seeded<M>(build: impl FnOnce(VarBuilder) -> candle_core::Result<M>, std: f32, seed: u64, device: &Device) -> Result<(M, HashMap<String, Tensor>)> {
    let made = Arc::new(Mutex::new(HashMap::new()));
    let backend = SeededInit { std, seed, made: made.clone() };
    let model = build(VarBuilder::from_backend(Box::new(backend), DType::F32, device.clone()))?;
    let tensors = made.lock().map(|m| m.clone()).unwrap_or_default();
    Ok((model, tensors))
}

/// Writes `config.json` (`config`, a hub layout) and `model.safetensors` so the loader reads
/// them back.
pub fn save_checkpoint(dir: &Path, config: &serde_json::Value, tensors: &HashMap<String, Tensor>) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| ModelError::Io { path: dir.to_path_buf(), source })?;
    motionvl_util::files::write_json_atomic(&dir.join("config.json"), config)?;
    candle_core::safetensors::save(tensors, dir.join("model.safetensors"))?;
    motionvl_util::files::apply_default_mode(&dir.join("model.safetensors"))
        .map_err(|source| ModelError::Io { path: dir.join("model.safetensors"), source })?;
    Ok(())
}
