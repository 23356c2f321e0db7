//! Finding and reading Qwen2.5-VL checkpoints: a local directory or a hub id, one safetensors
//! file or a sharded set, the hub tensor names (`visual.*`, `model.layers.*`) or the
//! transformers-5 names (`model.visual.*`, `model.language_model.*`).
//!
//! Model code asks for tensors by the hub names; [`CheckpointWeights`] translates, converts the
//! dtype and checks the shape, so a wrong checkpoint fails with the tensor's name and both shapes.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::VarBuilder;
use candle_nn::var_builder::SimpleBackend;

use crate::config::Qwen25VlConfig;
use crate::error::{ModelError, Result};

const SINGLE_FILE: &str = "model.safetensors";
const INDEX_FILE: &str = "model.safetensors.index.json";
/// Files a model directory should hold besides config and weights.
const SIDE_FILES: [&str; 9] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "generation_config.json",
    "chat_template.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
];

/// The files of one checkpoint on local disk.
#[derive(Debug, Clone)]
pub struct CheckpointFiles {
    pub config: PathBuf,
    pub weights: Vec<PathBuf>,
    /// Folder holding the config (tokenizer and processor files sit beside it).
    pub dir: PathBuf,
}

impl CheckpointFiles {
    /// Files of a local checkpoint directory.
    pub fn from_dir(dir: &Path) -> Result<Self> {
        let config = dir.join("config.json");
        if !config.is_file() {
            return Err(ModelError::Io {
                path: config,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no config.json in the checkpoint directory"),
            });
        }
        let index = dir.join(INDEX_FILE);
        let weights = if index.is_file() {
            shard_names(&index)?.into_iter().map(|f| dir.join(f)).collect()
        } else if dir.join(SINGLE_FILE).is_file() {
            vec![dir.join(SINGLE_FILE)]
        } else {
            return Err(ModelError::NoWeights(dir.to_path_buf()));
        };
        Ok(Self { config, weights, dir: dir.to_path_buf() })
    }

    /// A local directory when `id_or_dir` names one, otherwise a hub model id (`org/name`,
    /// optionally `org/name@revision`) resolved through the hf-hub cache.
    pub fn resolve(id_or_dir: &str, hub: &HubOptions) -> Result<Self> {
        let path = Path::new(id_or_dir);
        if path.is_dir() {
            return Self::from_dir(path);
        }
        let (repo, revision) = match id_or_dir.split_once('@') {
            Some((repo, rev)) => (repo, rev),
            None => (id_or_dir, "main"),
        };
        let fetch = |file: &str| hub.fetch(repo, revision, file);
        let config = fetch("config.json")?;
        let weights = match fetch(INDEX_FILE) {
            Ok(index) => shard_names(&index)?.iter().map(|f| fetch(f)).collect::<Result<Vec<_>>>()?,
            Err(_) => vec![fetch(SINGLE_FILE)?],
        };
        // Tokenizer and processor files sit beside the config in the snapshot; not every
        // repository has all of them, so a missing one is not an error here.
        for file in SIDE_FILES {
            let _ = fetch(file);
        }
        let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
        Ok(Self { config, weights, dir })
    }

    pub fn load_config(&self) -> Result<Qwen25VlConfig> {
        Qwen25VlConfig::from_file(&self.config)
    }
}

fn shard_names(index: &Path) -> Result<BTreeSet<String>> {
    let text = std::fs::read_to_string(index).map_err(|source| ModelError::Io { path: index.to_path_buf(), source })?;
    let bad = |reason: String| ModelError::Config { path: index.to_path_buf(), reason };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| bad("no `weight_map` object".into()))?;
    map.values().map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad("`weight_map` values must be file names".into()))).collect()
}

/// How hub ids are resolved: the cache folder and whether the network may be used.
#[derive(Debug, Clone)]
pub struct HubOptions {
    pub cache_dir: PathBuf,
    pub offline: bool,
}

impl HubOptions {
    /// `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`; offline when
    /// `HF_HUB_OFFLINE` is `1`/`true` (hf-hub itself reads neither variable).
    pub fn from_env() -> Self {
        let cache_dir = std::env::var_os("HF_HUB_CACHE").map(PathBuf::from).unwrap_or_else(|| hf_hub::Cache::from_env().path().clone());
        let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| matches!(v.as_str(), "1" | "true" | "TRUE" | "yes"));
        Self { cache_dir, offline }
    }

    pub fn fetch(&self, repo: &str, revision: &str, file: &str) -> Result<PathBuf> {
        let cache = hf_hub::Cache::new(self.cache_dir.clone());
        let cached = cache.repo(hf_hub::Repo::with_revision(repo.into(), hf_hub::RepoType::Model, revision.into())).get(file);
        if let Some(path) = cached {
            return Ok(path);
        }
        if self.offline {
            return Err(ModelError::NotCached { repo: repo.into(), file: file.into(), cache: self.cache_dir.clone() });
        }
        let hub_error = |reason: String| ModelError::Hub { repo: repo.into(), file: file.into(), reason };
        let api = hf_hub::api::sync::ApiBuilder::from_cache(cache).with_progress(true).build().map_err(|e| hub_error(e.to_string()))?;
        api.repo(hf_hub::Repo::with_revision(repo.into(), hf_hub::RepoType::Model, revision.into())).get(file).map_err(|e| hub_error(e.to_string()))
    }
}

/// Hub (legacy) name of a tensor saved under the transformers-5 module paths.
pub fn canonical_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("model.visual.") {
        format!("visual.{rest}")
    } else if let Some(rest) = name.strip_prefix("model.language_model.") {
        format!("model.{rest}")
    } else {
        name.to_owned()
    }
}

/// The transformers-5 module path of a hub (legacy) name: `visual.…` → `model.visual.…`,
/// `model.…` → `model.language_model.…` (the inverse of [`canonical_name`]). Qwen3-VL
/// checkpoints are stored so: transformers has no legacy names for them.
pub fn transformers5_name(name: &str) -> String {
    if let Some(rest) = name.strip_prefix("visual.") {
        format!("model.visual.{rest}")
    } else if let Some(rest) = name.strip_prefix("model.") {
        format!("model.language_model.{rest}")
    } else {
        name.to_owned()
    }
}

/// Memory-mapped checkpoint tensors addressed by their hub names.
pub struct CheckpointWeights {
    tensors: MmapedSafetensors,
    /// hub name → name stored in the files
    stored_names: HashMap<String, String>,
    files: String,
}

impl CheckpointWeights {
    pub fn open(files: &[PathBuf]) -> Result<Self> {
        for file in files {
            if !file.is_file() {
                return Err(ModelError::Io { path: file.clone(), source: std::io::Error::new(std::io::ErrorKind::NotFound, "weights file missing") });
            }
        }
        // SAFETY: the files are opened read-only; mutating them while mapped is outside our contract,
        // as for every mmap-based loader (candle's own VarBuilder does the same).
        let tensors = unsafe { MmapedSafetensors::multi(files) }?;
        let stored_names = tensors.tensors().into_iter().map(|(name, _)| (canonical_name(&name), name)).collect();
        let files = files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ");
        Ok(Self { tensors, stored_names, files })
    }

    pub fn contains(&self, name: &str) -> bool {
        self.stored_names.contains_key(name)
    }

    /// Hub names of every tensor in the checkpoint.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.stored_names.keys().map(String::as_str)
    }

    pub fn load(&self, name: &str, dtype: DType, device: &Device) -> Result<Tensor> {
        let stored = self.stored_names.get(name).ok_or_else(|| ModelError::MissingTensor { name: name.into(), files: self.files.clone() })?;
        Ok(self.tensors.load(stored, device)?.to_dtype(dtype)?)
    }

    /// A tensor in the dtype it is stored in.
    pub fn load_stored(&self, name: &str, device: &Device) -> Result<Tensor> {
        let stored = self.stored_names.get(name).ok_or_else(|| ModelError::MissingTensor { name: name.into(), files: self.files.clone() })?;
        Ok(self.tensors.load(stored, device)?)
    }

    /// A VarBuilder reading straight from the mapped files (inference and frozen weights).
    pub fn var_builder(self, dtype: DType, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self), dtype, device.clone())
    }

    /// Every tensor as a [`Var`], so gradients flow to the base weights (gradient checks,
    /// full fine-tuning). Returns the builder and the variables by hub name.
    pub fn to_vars(&self, dtype: DType, device: &Device) -> Result<(VarBuilder<'static>, HashMap<String, Var>)> {
        let mut vars = HashMap::new();
        for name in self.stored_names.keys() {
            vars.insert(name.clone(), Var::from_tensor(&self.load(name, dtype, device)?)?);
        }
        let tensors = vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect();
        Ok((VarBuilder::from_tensors(tensors, dtype, device), vars))
    }
}

impl SimpleBackend for CheckpointWeights {
    fn get(&self, shape: Shape, name: &str, _: candle_nn::Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let tensor = self.get_unchecked(name, dtype, dev)?;
        if tensor.shape() != &shape {
            return Err(candle_core::Error::wrap(ModelError::TensorShape {
                name: name.into(),
                expected: shape.dims().to_vec(),
                found: tensor.dims().to_vec(),
            }));
        }
        Ok(tensor)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        self.load(name, dtype, dev).map_err(candle_core::Error::wrap)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.contains(name)
    }
}
