//! The released SIS-Motion package (`choucsan/SIS-Motion`), as the official
//! `motion/src/eval/eval.py` loads it:
//!
//! ```text
//! adapter_config.json         PEFT LoRA config; `base_model_name_or_path` names the base model
//! adapter_model.safetensors   the LoRA (read by `LoraWeights::load_peft`)
//! connector_weights.pt        torch.save({ln.*, mlp.0.*, mlp.2.*}) of the VisualFlowConnector
//! sis_motion_config.json      optional; connector type, MOFNet settings, the two file names
//! MOF_kitti.pth               MOFNet (VideoFlow) weights, `module.`-prefixed
//! ```
//! The connector's names map onto motionvl's: `ln` → `norm`, `mlp.0` → `fc1`, `mlp.2` → `fc2`.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor, Var};

use crate::error::{ModelError, Result};
use crate::motion::{CONNECTOR_TENSORS, Connector};

pub const SIS_CONFIG_FILE: &str = "sis_motion_config.json";
/// PEFT's adapter config, whose presence makes a folder an adapter at all.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// The connector's hidden width in the official `VisualFlowConnector` (fixed, whatever the
/// model's width).
pub const OFFICIAL_CONNECTOR_HIDDEN: usize = 2048;
/// The only connector the official code builds (`connector/__init__.py`).
pub const VISUAL_FLOW_CONNECTOR: &str = "visual_flow";

/// Released names of the connector's tensors, in [`CONNECTOR_TENSORS`] order.
pub const RELEASED_CONNECTOR_TENSORS: [&str; 6] = ["ln.weight", "ln.bias", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"];

/// `motion_config` of `sis_motion_config.json` (defaults as `eval.py:98-101`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OfficialMotionConfig {
    /// Declared width of MOFNet's motion features; nothing the official forward computes uses it.
    #[serde(default = "default_motion_dim")]
    pub motion_dim: usize,
    /// Resolution of the flow MOFNet returns (1/8: the only one it has).
    #[serde(default = "default_down_ratio")]
    pub down_ratio: usize,
    /// MOFNet's update iterations.
    #[serde(default = "default_decoder_depth")]
    pub decoder_depth: usize,
}

fn default_motion_dim() -> usize {
    128
}
fn default_down_ratio() -> usize {
    8
}
fn default_decoder_depth() -> usize {
    12
}

impl Default for OfficialMotionConfig {
    fn default() -> Self {
        Self { motion_dim: default_motion_dim(), down_ratio: default_down_ratio(), decoder_depth: default_decoder_depth() }
    }
}

/// `sis_motion_config.json`. Every key is optional; absent keys take the values `eval.py:90-101`
/// falls back to.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SisMotionConfig {
    #[serde(default = "default_connector_type")]
    pub connector_type: String,
    #[serde(default)]
    pub motion_config: OfficialMotionConfig,
    /// The connector's file, relative to the package (an absolute path as `os.path.join` keeps it).
    #[serde(default = "default_connector_weights")]
    pub connector_weights: String,
    /// MOFNet's weights, relative to the package.
    #[serde(default = "default_videoflow_checkpoint")]
    pub videoflow_checkpoint: String,
    /// motionvl's own key, which the official code ignores: MOFNet's widths in the schema of a
    /// flow fixture's `config.json` (`tests/fixtures/flow/mofnet/tiny/config.json`), for packages
    /// of reduced test models. Absent: the sintel config, as released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mofnet: Option<serde_json::Value>,
}

fn default_connector_type() -> String {
    VISUAL_FLOW_CONNECTOR.into()
}
fn default_connector_weights() -> String {
    "connector_weights.pt".into()
}
fn default_videoflow_checkpoint() -> String {
    "MOF_kitti.pth".into()
}

impl Default for SisMotionConfig {
    fn default() -> Self {
        Self {
            connector_type: default_connector_type(),
            motion_config: OfficialMotionConfig::default(),
            connector_weights: default_connector_weights(),
            videoflow_checkpoint: default_videoflow_checkpoint(),
            mofnet: None,
        }
    }
}

/// A released-layout package: its folder and its (possibly defaulted) config.
#[derive(Debug, Clone, PartialEq)]
pub struct SisPackage {
    pub dir: PathBuf,
    pub config: SisMotionConfig,
}

impl SisPackage {
    /// The package in `dir`, if `dir` is one: a PEFT adapter with `sis_motion_config.json` or the
    /// connector file beside it. `None` for any other folder (a motionvl checkpoint, a bare
    /// adapter). A config that names a missing connector, a connector type other than
    /// `visual_flow` or a flow resolution other than 1/8 is an error.
    pub fn detect(dir: &Path) -> Result<Option<Self>> {
        if !dir.join(ADAPTER_CONFIG_FILE).is_file() {
            return Ok(None);
        }
        let config_path = dir.join(SIS_CONFIG_FILE);
        let config = if config_path.is_file() { crate::error::read_validated_json(&config_path, validate)? } else { SisMotionConfig::default() };
        let package = Self { dir: dir.to_path_buf(), config };
        let has_connector = package.connector_path().is_file();
        if !config_path.is_file() && !has_connector {
            return Ok(None);
        }
        if !has_connector {
            return Err(ModelError::Package {
                path: package.connector_path(),
                reason: format!("the connector weights {SIS_CONFIG_FILE} names are missing"),
            });
        }
        Ok(Some(package))
    }

    pub fn connector_path(&self) -> PathBuf {
        self.dir.join(&self.config.connector_weights)
    }

    /// MOFNet's weights as bundled in the package (they may be absent: the official code then
    /// looks under `checkpoints/VideoFlow/`, here `--weights` names them).
    pub fn videoflow_path(&self) -> PathBuf {
        self.dir.join(&self.config.videoflow_checkpoint)
    }

    /// The connector of a model of width `width`, as trainable f32 variables named as motionvl
    /// names them. Strict like `load_state_dict`: a missing, unknown or misshapen tensor is an
    /// error naming the file and the released key.
    pub fn load_connector(&self, width: usize, device: &Device) -> Result<Vec<(String, Var)>> {
        read_connector(&self.connector_path(), width, device)
    }
}

fn validate(config: &SisMotionConfig) -> std::result::Result<(), String> {
    if config.connector_type != VISUAL_FLOW_CONNECTOR {
        return Err(format!("connector_type is `{}`; the official code builds only `{VISUAL_FLOW_CONNECTOR}`", config.connector_type));
    }
    if config.motion_config.down_ratio != 8 {
        return Err(format!("motion_config.down_ratio is {}; MOFNet's flow is at 1/8 resolution only", config.motion_config.down_ratio));
    }
    if config.motion_config.decoder_depth == 0 {
        return Err("motion_config.decoder_depth is 0; MOFNet needs at least one iteration".into());
    }
    Ok(())
}

/// Reads a `connector_weights.pt` (f32, bf16 or f16 tensors) for a model of width `width`.
pub fn read_connector(path: &Path, width: usize, device: &Device) -> Result<Vec<(String, Var)>> {
    let bad = |reason: String| ModelError::Package { path: path.to_path_buf(), reason };
    let tensors = crate::torch_save::read_state_dict(path, None).map_err(|e| bad(format!("not a torch.save state dict: {e}")))?;
    let mut by_name: std::collections::HashMap<String, Tensor> = std::collections::HashMap::new();
    for (key, tensor) in tensors {
        if !RELEASED_CONNECTOR_TENSORS.contains(&key.as_str()) {
            return Err(bad(format!("unexpected key `{key}` (a VisualFlowConnector has {})", RELEASED_CONNECTOR_TENSORS.join(", "))));
        }
        by_name.insert(key, tensor);
    }
    let hidden = by_name.get("mlp.0.weight").ok_or_else(|| bad("missing key `mlp.0.weight`".into()))?.dim(0)?;
    let mut vars = Vec::with_capacity(CONNECTOR_TENSORS.len());
    for ((released, ours), expected) in RELEASED_CONNECTOR_TENSORS.iter().zip(CONNECTOR_TENSORS).zip(Connector::tensor_shapes(width, hidden)) {
        let tensor = by_name.get(*released).ok_or_else(|| bad(format!("missing key `{released}`")))?;
        if tensor.dims() != expected.as_slice() {
            return Err(bad(format!("`{released}` is {:?}, a connector {width} → {hidden} → {width} needs {expected:?}", tensor.dims())));
        }
        vars.push((format!("connector.{ours}"), Var::from_tensor(&tensor.to_dtype(DType::F32)?.to_device(device)?)?));
    }
    Ok(vars)
}

/// Writes the connector variables as the official trainer does (`torch.save` of the state dict,
/// released names), in `dtype` (f32, or bf16 as a DeepSpeed bf16 run leaves them).
pub fn write_connector(path: &Path, vars: &[(String, Var)], dtype: DType) -> Result<()> {
    let mut tensors = Vec::with_capacity(CONNECTOR_TENSORS.len());
    for (released, ours) in RELEASED_CONNECTOR_TENSORS.iter().zip(CONNECTOR_TENSORS) {
        let name = format!("connector.{ours}");
        let var = vars
            .iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| ModelError::MissingTensor { name: name.clone(), files: "the connector weights".into() })?;
        tensors.push(((*released).to_owned(), var.1.as_tensor().to_device(&Device::Cpu)?.to_dtype(dtype)?));
    }
    crate::torch_save::save_state_dict(path, &tensors)
}

impl SisMotionConfig {
    pub fn write(&self, dir: &Path) -> Result<()> {
        Ok(motionvl_util::files::write_json_atomic(&dir.join(SIS_CONFIG_FILE), self)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connector(width: usize, hidden: usize) -> Vec<(String, Var)> {
        let spec = crate::motion::ConnectorSpec { hidden, init: crate::motion::ConnectorInit::TruncatedNormal };
        let vars = Connector::init_vars_with(width, spec, 7, &Device::Cpu).unwrap();
        // Non-trivial LN and biases, so a swapped name could not go unnoticed.
        for (k, (_, var)) in vars.iter().enumerate() {
            if var.dims().len() == 1 {
                var.set(&crate::seeded::randn(var.shape(), 0.3, 40 + k as u64, &Device::Cpu).unwrap()).unwrap();
            }
        }
        vars
    }

    fn values(vars: &[(String, Var)]) -> Vec<(String, Vec<f32>)> {
        vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap())).collect()
    }

    fn package(dir: &Path) {
        std::fs::write(dir.join(ADAPTER_CONFIG_FILE), "{}").unwrap();
    }

    #[test]
    fn connector_round_trips_through_the_released_names_in_f32_and_bf16() {
        let dir = tempfile::tempdir().unwrap();
        package(dir.path());
        let vars = connector(6, 10);
        write_connector(&dir.path().join("connector_weights.pt"), &vars, DType::F32).unwrap();
        let found = SisPackage::detect(dir.path()).unwrap().expect("a package");
        assert_eq!(found.config, SisMotionConfig::default());
        assert_eq!(values(&found.load_connector(6, &Device::Cpu).unwrap()), values(&vars));

        let mut names: Vec<String> = candle_core::pickle::read_all(found.connector_path()).unwrap().into_iter().map(|(n, _)| n).collect();
        names.sort();
        let mut released = RELEASED_CONNECTOR_TENSORS.to_vec();
        released.sort();
        assert_eq!(names, released, "the released names, and nothing else");

        write_connector(&dir.path().join("connector_weights.pt"), &vars, DType::BF16).unwrap();
        let rounded: Vec<(String, Vec<f32>)> = vars
            .iter()
            .map(|(n, v)| {
                (n.clone(), v.as_tensor().to_dtype(DType::BF16).unwrap().to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1().unwrap())
            })
            .collect();
        assert_eq!(values(&found.load_connector(6, &Device::Cpu).unwrap()), rounded);
    }

    #[test]
    fn missing_extra_and_misshapen_tensors_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pt");
        let vars = connector(6, 10);
        let tensors: Vec<(String, Tensor)> =
            RELEASED_CONNECTOR_TENSORS.iter().zip(&vars).map(|(r, (_, v))| ((*r).to_owned(), v.as_tensor().clone())).collect();

        crate::torch_save::save_state_dict(&path, &tensors[..5]).unwrap();
        let err = read_connector(&path, 6, &Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("c.pt") && err.contains("missing key `mlp.2.bias`"), "{err}");

        let mut extra = tensors.clone();
        extra.push(("mlp.3.weight".into(), tensors[0].1.clone()));
        crate::torch_save::save_state_dict(&path, &extra).unwrap();
        let err = read_connector(&path, 6, &Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("unexpected key `mlp.3.weight`"), "{err}");

        crate::torch_save::save_state_dict(&path, &tensors).unwrap();
        let err = read_connector(&path, 8, &Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("`ln.weight` is [6]") && err.contains("8 → 10 → 8"), "{err}");
    }

    #[test]
    fn config_defaults_validation_and_detection() {
        let dir = tempfile::tempdir().unwrap();
        // A bare adapter is no package.
        package(dir.path());
        assert_eq!(SisPackage::detect(dir.path()).unwrap(), None);

        let config_path = dir.path().join(SIS_CONFIG_FILE);
        std::fs::write(&config_path, r#"{"motion_config": {"decoder_depth": 3}, "connector_weights": "conn.pt"}"#).unwrap();
        let err = SisPackage::detect(dir.path()).unwrap_err().to_string();
        assert!(err.contains("conn.pt"), "a named but missing connector: {err}");
        write_connector(&dir.path().join("conn.pt"), &connector(4, 5), DType::F32).unwrap();
        let found = SisPackage::detect(dir.path()).unwrap().expect("package");
        assert_eq!(found.config.motion_config, OfficialMotionConfig { motion_dim: 128, down_ratio: 8, decoder_depth: 3 });
        assert_eq!(found.videoflow_path(), dir.path().join("MOF_kitti.pth"));

        std::fs::write(&config_path, r#"{"connector_type": "cross_attn", "connector_weights": "conn.pt"}"#).unwrap();
        let err = SisPackage::detect(dir.path()).unwrap_err().to_string();
        assert!(err.contains(SIS_CONFIG_FILE) && err.contains("cross_attn"), "{err}");
    }
}
