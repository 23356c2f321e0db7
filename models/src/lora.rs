//! LoRA (Hu et al. 2021) on Qwen2.5-VL's linear layers, with PEFT-compatible files.
//!
//! An adapter adds `scale · B(A(dropout(x)))` to a frozen layer, `scale = alpha / r` (or
//! `alpha / √r` with rsLoRA). A starts Kaiming-uniform and B at zero, so a fresh adapter leaves
//! the model unchanged. Adapters are kept in f32 whatever the base dtype.
//!
//! Files follow PEFT: `adapter_config.json` + `adapter_model.safetensors` with keys
//! `base_model.model.<module>.lora_{A,B}.weight`. We write the transformers-5 module paths
//! (`model.language_model.layers.N…`, `model.visual…`) and read those as well as the
//! transformers-4 ones (`model.layers.N…`, `visual…`).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use candle_core::{DType, Device, Tensor, Var};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::checkpoint::{canonical_name, transformers5_name};
use crate::error::{ModelError, Result};
use crate::ops::Linear;

pub use crate::lora_adapter::{LoraAdapter, LoraRuntime, dropout_keep_mask};

/// The projections LoRA adapts by default: attention and MLP of every decoder layer.
pub const DEFAULT_TARGETS: [&str; 7] = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"];

const CONFIG_FILE: &str = "adapter_config.json";
const WEIGHTS_FILE: &str = "adapter_model.safetensors";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoraConfig {
    pub rank: usize,
    pub alpha: f64,
    pub dropout: f32,
    /// Last path component of the adapted layers (`q_proj`, …).
    pub target_modules: Vec<String>,
    /// The vision tower's MLP shares the names `gate_proj`/`up_proj`/`down_proj`; it is adapted
    /// only when asked.
    pub adapt_vision: bool,
    pub use_rslora: bool,
}

impl Default for LoraConfig {
    /// The SIS-Motion recipe: r 32, α 64, dropout 0.05 on the language model.
    fn default() -> Self {
        Self {
            rank: 32,
            alpha: 64.0,
            dropout: 0.05,
            target_modules: DEFAULT_TARGETS.iter().map(|s| s.to_string()).collect(),
            adapt_vision: false,
            use_rslora: false,
        }
    }
}

impl LoraConfig {
    pub fn scale(&self, rank: usize) -> f64 {
        if self.use_rslora { self.alpha / (rank as f64).sqrt() } else { self.alpha / rank as f64 }
    }

    /// Whether the layer at `module` (a checkpoint path) gets an adapter.
    pub fn selects(&self, module: &str) -> bool {
        let leaf = module.rsplit('.').next().unwrap_or(module);
        let in_scope = module.starts_with("model.layers.") || (self.adapt_vision && module.starts_with("visual."));
        in_scope && self.target_modules.iter().any(|t| t == leaf)
    }
}

/// The A and B matrices of one adapted layer.
#[derive(Debug, Clone)]
pub struct LoraPair {
    pub a: Var,
    pub b: Var,
}

/// All adapters of a model, by checkpoint path of the adapted layer.
#[derive(Debug, Clone)]
pub struct LoraWeights {
    pub config: LoraConfig,
    pub modules: BTreeMap<String, LoraPair>,
    runtime: LoraRuntime,
}

impl LoraWeights {
    /// Fresh adapters for every layer the config selects among `linears` (checkpoint path, in,
    /// out — a model's `linear_shapes()`): A Kaiming-uniform (as `nn.Linear` initialises, bound
    /// 1/√in), B zero.
    pub fn init(linears: &[(String, usize, usize)], config: &LoraConfig, seed: u64, device: &Device) -> Result<Self> {
        if config.rank == 0 {
            return Err(ModelError::Lora { problem: "rank must be positive".into() });
        }
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut modules = BTreeMap::new();
        for (name, in_dim, out_dim) in linears {
            let (in_dim, out_dim) = (*in_dim, *out_dim);
            if !config.selects(name) {
                continue;
            }
            let bound = 1.0 / (in_dim as f32).sqrt();
            let a: Vec<f32> = (0..config.rank * in_dim).map(|_| rng.random_range(-bound..bound)).collect();
            let a = Var::from_tensor(&Tensor::from_vec(a, (config.rank, in_dim), device)?)?;
            let b = Var::zeros((out_dim, config.rank), DType::F32, device)?;
            modules.insert(name.clone(), LoraPair { a, b });
        }
        if modules.is_empty() {
            return Err(ModelError::Lora { problem: format!("targets {:?} match no layer of the model", config.target_modules) });
        }
        Ok(Self { config: config.clone(), modules, runtime: LoraRuntime::default() })
    }

    pub fn runtime(&self) -> &LoraRuntime {
        &self.runtime
    }

    /// Puts the adapters on a model's layers (`linears`: its `linears_mut()`), replacing any
    /// attached before.
    pub fn attach(&self, linears: Vec<(String, &mut Linear)>) -> Result<()> {
        let mut remaining: BTreeMap<&str, &LoraPair> = self.modules.iter().map(|(k, v)| (k.as_str(), v)).collect();
        for (module_id, (name, linear)) in linears.into_iter().enumerate() {
            let Some(pair) = remaining.remove(name.as_str()) else {
                linear.set_adapter(None);
                continue;
            };
            let (a, b) = (pair.a.as_tensor(), pair.b.as_tensor());
            let rank = a.dim(0)?;
            if a.dims() != [rank, linear.in_dim()] || b.dims() != [linear.out_dim(), rank] {
                return Err(ModelError::TensorShape {
                    name: format!("{name} LoRA A·B"),
                    expected: vec![linear.out_dim(), linear.in_dim()],
                    found: vec![b.dim(0)?, a.dim(1)?],
                });
            }
            let adapter =
                LoraAdapter::new(a.clone(), b.clone(), self.config.scale(rank), self.config.dropout, module_id as u64, self.runtime.clone());
            linear.set_adapter(Some(adapter));
        }
        if let Some(name) = remaining.keys().next() {
            return Err(ModelError::AdapterExtraModule { module: name.to_string() });
        }
        Ok(())
    }

    /// Trainable variables with their PEFT-style names (`<module>.lora_A.weight`).
    pub fn named_vars(&self) -> Vec<(String, Var)> {
        self.modules.iter().flat_map(|(m, p)| [(format!("{m}.lora_A.weight"), p.a.clone()), (format!("{m}.lora_B.weight"), p.b.clone())]).collect()
    }

    /// Folds every adapter into `tensors` (stored under hub or transformers-5 names):
    /// `W ← W + scale · B A`.
    pub fn merge_into(&self, tensors: &mut HashMap<String, Tensor>) -> Result<()> {
        // Modules are named by hub (legacy) paths; a checkpoint may store transformers 5's
        // (`model.language_model.…`, every Qwen3-VL checkpoint).
        let stored: HashMap<String, String> = tensors.keys().map(|name| (canonical_name(name), name.clone())).collect();
        for (module, pair) in &self.modules {
            let name = stored.get(&format!("{module}.weight")).ok_or_else(|| ModelError::AdapterExtraModule { module: module.clone() })?;
            let weight = &tensors[name];
            let merged = self.merged_weight(module, pair, weight)?;
            tensors.insert(name.clone(), merged);
        }
        Ok(())
    }

    /// Folds every adapter into the weights of a model's layers (`linears`: its
    /// `linears_mut()`), as [`LoraWeights::merge_into`] does into a checkpoint's tensors; the
    /// layers then run without an adapter.
    pub fn merge_into_linears(&self, linears: Vec<(String, &mut Linear)>) -> Result<()> {
        let mut remaining: BTreeMap<&str, &LoraPair> = self.modules.iter().map(|(k, v)| (k.as_str(), v)).collect();
        for (name, linear) in linears {
            linear.set_adapter(None);
            let Some(pair) = remaining.remove(name.as_str()) else { continue };
            let merged = self.merged_weight(&name, pair, linear.weight())?;
            linear.set_weight(merged);
        }
        if let Some(name) = remaining.keys().next() {
            return Err(ModelError::AdapterExtraModule { module: name.to_string() });
        }
        Ok(())
    }

    /// `W + scale · B A` with the update in f32, rounded once to W's dtype: PEFT's
    /// `merge_and_unload` after `PeftModel.from_pretrained`, whose adapters are f32, adds the
    /// f32 delta to a bf16 weight in place (the sum computed in f32, then stored in bf16).
    fn merged_weight(&self, module: &str, pair: &LoraPair, weight: &Tensor) -> Result<Tensor> {
        let rank = pair.a.dim(0)?;
        let (a, b) = (pair.a.dims().to_vec(), pair.b.dims().to_vec());
        let fits = a.len() == 2 && b.len() == 2 && b[1] == a[0] && [b[0], a[1]] == weight.dims();
        if !fits {
            let found = [b.first().copied().unwrap_or(0), a.last().copied().unwrap_or(0)];
            return Err(ModelError::AdapterMismatch {
                module: module.to_owned(),
                update: format!("lora_B {b:?} × lora_A {a:?} = {found:?}"),
                base: format!("{:?}", weight.dims()),
            });
        }
        let delta = (pair.b.as_tensor().matmul(pair.a.as_tensor())? * self.config.scale(rank))?;
        Ok((weight.to_dtype(DType::F32)? + delta)?.to_dtype(weight.dtype())?)
    }

    /// Writes `adapter_config.json` and `adapter_model.safetensors` as PEFT does.
    pub fn save_peft(&self, dir: &Path, base_model: Option<&str>) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|source| ModelError::Io { path: dir.to_path_buf(), source })?;
        let mut tensors = HashMap::new();
        for (module, pair) in &self.modules {
            let key = format!("base_model.model.{}", transformers5_name(module));
            tensors.insert(format!("{key}.lora_A.weight"), pair.a.as_tensor().clone());
            tensors.insert(format!("{key}.lora_B.weight"), pair.b.as_tensor().clone());
        }
        candle_core::safetensors::save(&tensors, dir.join(WEIGHTS_FILE))?;
        motionvl_util::files::apply_default_mode(&dir.join(WEIGHTS_FILE))
            .map_err(|source| ModelError::Io { path: dir.join(WEIGHTS_FILE), source })?;
        let alternatives = self.config.target_modules.join("|");
        // PEFT full-matches a string against module paths; this keeps the vision tower's
        // identically named MLP out unless it is adapted too.
        let target_modules = if self.config.adapt_vision {
            serde_json::json!(self.config.target_modules)
        } else {
            serde_json::json!(format!(r"^(?!.*visual).*\.({alternatives})$"))
        };
        let config = serde_json::json!({
            "peft_type": "LORA",
            "task_type": "CAUSAL_LM",
            "base_model_name_or_path": base_model,
            "r": self.config.rank,
            "lora_alpha": self.config.alpha,
            "lora_dropout": self.config.dropout,
            "target_modules": target_modules,
            "bias": "none",
            "fan_in_fan_out": false,
            "use_rslora": self.config.use_rslora,
            "use_dora": false,
            "init_lora_weights": true,
            "inference_mode": true,
            "modules_to_save": null,
            "layers_to_transform": null,
            "rank_pattern": {},
            "alpha_pattern": {},
        });
        Ok(motionvl_util::files::write_json_atomic(&dir.join(CONFIG_FILE), &config)?)
    }

    /// Reads a PEFT LoRA adapter directory (weights kept as trainable f32 variables).
    pub fn load_peft(dir: &Path, device: &Device) -> Result<Self> {
        let config_path = dir.join(CONFIG_FILE);
        let text = std::fs::read_to_string(&config_path).map_err(|source| ModelError::Io { path: config_path.clone(), source })?;
        let bad = |reason: String| ModelError::Config { path: config_path.clone(), reason };
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if json["peft_type"].as_str().is_some_and(|t| t != "LORA") {
            return Err(bad(format!("peft_type is {}, only LORA adapters are supported", json["peft_type"])));
        }
        if json["use_dora"].as_bool() == Some(true) {
            return Err(bad("DoRA adapters are not supported".into()));
        }
        for key in ["rank_pattern", "alpha_pattern"] {
            if json[key].as_object().is_some_and(|m| !m.is_empty()) {
                return Err(bad(format!("`{key}` (per-module ranks or alphas) is not supported")));
            }
        }
        let rank = json["r"].as_u64().ok_or_else(|| bad("missing `r`".into()))? as usize;
        let alpha = json["lora_alpha"].as_f64().ok_or_else(|| bad("missing `lora_alpha`".into()))?;
        let weights_path = dir.join(WEIGHTS_FILE);
        let tensors = candle_core::safetensors::load(&weights_path, device)?;
        let mut halves: BTreeMap<String, [Option<Tensor>; 2]> = BTreeMap::new();
        for (key, tensor) in tensors {
            let (module, half) = peft_module(&key)
                .ok_or_else(|| ModelError::Config { path: weights_path.clone(), reason: format!("`{key}` is not a LoRA A/B weight") })?;
            halves.entry(module).or_default()[half] = Some(tensor.to_dtype(DType::F32)?);
        }
        let mut modules = BTreeMap::new();
        let mut adapts_vision = false;
        let mut leaves = Vec::new();
        for (module, [a, b]) in halves {
            let (Some(a), Some(b)) = (a, b) else {
                return Err(ModelError::Config { path: weights_path.clone(), reason: format!("`{module}` lacks its lora_A or lora_B") });
            };
            adapts_vision |= module.starts_with("visual.");
            let leaf = module.rsplit('.').next().unwrap_or_default().to_owned();
            if !leaves.contains(&leaf) {
                leaves.push(leaf);
            }
            modules.insert(module, LoraPair { a: Var::from_tensor(&a)?, b: Var::from_tensor(&b)? });
        }
        let config = LoraConfig {
            rank,
            alpha,
            dropout: json["lora_dropout"].as_f64().unwrap_or(0.0) as f32,
            target_modules: leaves,
            adapt_vision: adapts_vision,
            use_rslora: json["use_rslora"].as_bool().unwrap_or(false),
        };
        Ok(Self { config, modules, runtime: LoraRuntime::default() })
    }
}

/// `base_model.model.<path>.lora_A[.default].weight` → (hub module path, 0 for A / 1 for B).
fn peft_module(key: &str) -> Option<(String, usize)> {
    let path = key.strip_prefix("base_model.model.")?;
    let path = path.strip_suffix(".weight")?;
    let path = path.strip_suffix(".default").unwrap_or(path);
    let (module, half) = if let Some(m) = path.strip_suffix(".lora_A") { (m, 0) } else { (path.strip_suffix(".lora_B")?, 1) };
    Some((canonical_name(module), half))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropout_mask_is_a_function_of_seed_and_index() {
        let shape = candle_core::Shape::from((64, 257));
        let draw = |seed| dropout_keep_mask(&shape, &Device::Cpu, seed, 0.25).and_then(|t| t.flatten_all()?.to_vec1::<f32>()).unwrap_or_default();
        let (a, again, other) = (draw(7), draw(7), draw(8));
        assert_eq!(a, again);
        assert_ne!(a, other);
        assert!(a.iter().all(|v| *v == 0.0 || (*v - 4.0 / 3.0).abs() < 1e-6));
        let dropped = a.iter().filter(|v| **v == 0.0).count() as f64 / a.len() as f64;
        assert!((dropped - 0.25).abs() < 0.02, "dropped fraction {dropped}");
    }
}
