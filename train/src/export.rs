//! `train export --format sis-motion`: a run's checkpoint as a package in the released
//! SIS-Motion layout, which the official `motion/src/eval/eval.py` loads unchanged:
//!
//! ```text
//! adapter_config.json         PEFT config, `base_model_name_or_path` set
//! adapter_model.safetensors   the LoRA, PEFT names (`base_model.model.model.language_model.…`)
//! connector_weights.pt        torch.save of the connector under the released names (ln, mlp.0, mlp.2)
//! sis_motion_config.json      connector type, MOFNet iterations, file names (+ "mofnet" widths of a
//!                             reduced test model)
//! MOF_kitti.pth               the MOFNet weights the run was trained with
//! ```
//!
//! A released package is accepted as input too: each part is read back with the readers
//! `evaluate` uses (and MOFNet built from its weights and widths), then written with the same
//! writers, in the package's own dtypes, so the package round-trips unchanged.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Var};
use motionvl_flow::WeightPrecision;
use motionvl_flow::mofnet::{MofConfig, MofNetEstimator};
use motionvl_models::lora::LoraWeights;
use motionvl_models::motion::{CONNECTOR_TENSORS, Connector, MOTION_WEIGHTS_FILE, MotionMeta};
use motionvl_models::sis_package::{ADAPTER_CONFIG_FILE, OFFICIAL_CONNECTOR_HIDDEN, SIS_CONFIG_FILE, SisMotionConfig, SisPackage, write_connector};

use crate::checkpoint as ckpt;
use crate::hf_layout;
use crate::recipe::Recipe;
use crate::sft::TrainError;

/// Export formats (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// The released SIS-Motion package.
    SisMotion,
}

/// Every file an export writes; a folder holding only these is a previous export, which a new
/// one may replace.
const PACKAGE_FILES: [&str; 5] = [ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, CONNECTOR_FILE, SIS_CONFIG_FILE, MOFNET_FILE];
const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";
const CONNECTOR_FILE: &str = "connector_weights.pt";
const MOFNET_FILE: &str = "MOF_kitti.pth";

#[derive(Debug, Clone, PartialEq)]
pub struct ExportSummary {
    /// The checkpoint, or the released package, exported.
    pub checkpoint: PathBuf,
    pub lora_modules: usize,
    pub connector_hidden: usize,
    /// The MOFNet weights bundled as `MOF_kitti.pth`.
    pub mofnet_weights: PathBuf,
    /// They were a safetensors conversion, written back as a `.pth`: the tensors motionvl's
    /// MOFNet does not use (`att.pos_emb.*`, `velocity_update_block.*`), which conversions drop,
    /// are absent, and the official loader (strict=False) warns about them.
    pub mofnet_converted: bool,
    pub base_model: String,
}

/// Exports `input` (a run folder: its newest complete checkpoint; one `checkpoint-N`; or a
/// released-layout package) to `out`. `base_model` overrides the adapter's
/// `base_model_name_or_path` (the official evaluator loads the base from it).
pub fn export(format: ExportFormat, input: &Path, out: &Path, base_model: Option<&str>) -> Result<ExportSummary, TrainError> {
    match format {
        ExportFormat::SisMotion => match SisPackage::detect(input)? {
            Some(package) => reexport_package(&package, out, base_model),
            None => export_sis_motion(input, out, base_model),
        },
    }
}

/// `path` cannot be exported: `problem` says why.
fn unfit(path: &Path, problem: String) -> TrainError {
    TrainError::Export { path: path.to_path_buf(), problem }
}

fn export_sis_motion(run: &Path, out: &Path, base_model: Option<&str>) -> Result<ExportSummary, TrainError> {
    let (checkpoint, run_root) = if run.join(ckpt::COMPLETE_MARKER).is_file() {
        (run.to_path_buf(), run.parent().map(Path::to_path_buf).unwrap_or_default())
    } else {
        let latest = ckpt::latest_complete(run)?
            .ok_or_else(|| unfit(run, "holds no complete checkpoint-N; pass a run folder or one of its checkpoints".into()))?;
        (latest.path, run.to_path_buf())
    };
    let adapter = hf_layout::adapter_dir(&checkpoint).ok_or_else(|| unfit(&checkpoint, format!("holds no {ADAPTER_CONFIG_FILE}")))?;
    let meta = MotionMeta::read(&checkpoint)?.ok_or_else(|| {
        unfit(&checkpoint, "is not motion-aware (no motion.json): a SIS-Motion package needs a run trained with --motion mofnet".into())
    })?;
    if meta.estimator != "mofnet" {
        return Err(unfit(
            &checkpoint,
            format!(
                "was trained with the `{}` flow estimator; a SIS-Motion package carries MOFNet (MOF_kitti.pth), so only a run trained with --motion mofnet can be exported",
                meta.estimator
            ),
        ));
    }

    // The official evaluator feeds the connector the official pseudo-images: a connector that
    // learnt motionvl's would be evaluated on inputs it never saw.
    if meta.pseudo_images.get("pipeline").and_then(|p| p.as_str()) != Some("official") {
        return Err(unfit(
            &checkpoint,
            "was trained on motionvl's pseudo-images; a SIS-Motion package is evaluated through the official motion pipeline, so \
             train with [motion.pseudo_images] pipeline = \"official\" (the default of configs/sft/sis-motion-7b.toml) to export"
                .into(),
        ));
    }

    // The MOFNet weights: the run's recipe names them, motion.json their digest.
    let recipe_path = run_root.join("config.toml");
    let recipe = Recipe::load(&recipe_path, &[])?;
    let weights = recipe.motion.weights.clone().ok_or_else(|| unfit(&recipe_path, "motion.weights is not set".into()))?;
    let digest = motionvl_flow::state_dict::weights_id(&weights)?;
    if meta.estimator_settings["weights"].as_str() != Some(digest.as_str()) {
        return Err(unfit(
            &weights,
            format!(
                "is not the MOFNet the run was trained with: its digest is {digest}, {} records {}",
                checkpoint.join(motionvl_models::motion::MOTION_META_FILE).display(),
                meta.estimator_settings["weights"]
            ),
        ));
    }
    let iters = meta.estimator_settings["iters"].as_u64().ok_or_else(|| unfit(&checkpoint, "the MOFNet settings lack `iters`".into()))? as usize;

    let connector = read_connector_vars(&checkpoint)?;
    let hidden = Connector::from_vars(&connector)?.hidden()?;
    if hidden != OFFICIAL_CONNECTOR_HIDDEN {
        return Err(unfit(
            &checkpoint,
            format!(
                "the connector's hidden width is {hidden}; the official VisualFlowConnector is fixed at {OFFICIAL_CONNECTOR_HIDDEN} (train with [motion] connector_hidden = {OFFICIAL_CONNECTOR_HIDDEN})"
            ),
        ));
    }

    let lora = LoraWeights::load_peft(&adapter, &Device::Cpu)?;
    let base = match base_model {
        Some(name) => name.to_owned(),
        None => recorded_base_model(&adapter)?,
    };

    let tmp = prepare_target(out)?;
    lora.save_peft(&tmp, Some(&base))?;
    write_connector(&tmp.join(CONNECTOR_FILE), &connector, DType::F32)?;
    let mofnet_converted = bundle_mofnet(&weights, &tmp.join(MOFNET_FILE))?;
    let config = SisMotionConfig {
        motion_config: motionvl_models::sis_package::OfficialMotionConfig { decoder_depth: iters, ..Default::default() },
        mofnet: reduced_mofnet_widths(&weights, iters)?,
        ..SisMotionConfig::default()
    };
    config.write(&tmp)?;
    crate::output_dir::replace(&tmp, out)?;
    Ok(ExportSummary {
        checkpoint,
        lora_modules: lora.modules.len(),
        connector_hidden: hidden,
        mofnet_weights: weights,
        mofnet_converted,
        base_model: base,
    })
}

/// Re-exports a released-layout package: the LoRA through `LoraWeights::load_peft` and
/// `save_peft`, the connector through `read_connector` and `write_connector`, both in the
/// package's own dtype (bf16 ↔ f32 is exact both ways), MOFNet's weights (proven to build MOFNet
/// at the config's widths) and the config with its `mofnet` widths; the files under their
/// released names.
fn reexport_package(package: &SisPackage, out: &Path, base_model: Option<&str>) -> Result<ExportSummary, TrainError> {
    let dir = &package.dir;
    let mut lora = LoraWeights::load_peft(dir, &Device::Cpu)?;
    let lora_dtype =
        uniform_dtype(&dir.join(ADAPTER_WEIGHTS_FILE), candle_core::safetensors::load(dir.join(ADAPTER_WEIGHTS_FILE), &Device::Cpu)?.values())?;
    for pair in lora.modules.values_mut() {
        pair.a = Var::from_tensor(&pair.a.as_tensor().to_dtype(lora_dtype)?)?;
        pair.b = Var::from_tensor(&pair.b.as_tensor().to_dtype(lora_dtype)?)?;
    }
    let base = match base_model {
        Some(name) => name.to_owned(),
        None => recorded_base_model(dir)?,
    };

    let connector_path = package.connector_path();
    let released = motionvl_models::torch_save::read_state_dict(&connector_path, None)
        .map_err(|e| unfit(&connector_path, format!("not a torch.save state dict: {e}")))?;
    let connector_dtype = uniform_dtype(&connector_path, released.iter().map(|(_, t)| t))?;
    let width = released
        .iter()
        .find(|(name, _)| name == "ln.weight")
        .map(|(_, t)| t.dim(0))
        .transpose()?
        .ok_or_else(|| unfit(&connector_path, "missing key `ln.weight`".into()))?;
    let connector = package.load_connector(width, &Device::Cpu)?;
    let hidden = Connector::from_vars(&connector)?.hidden()?;
    if hidden != OFFICIAL_CONNECTOR_HIDDEN {
        return Err(unfit(
            &connector_path,
            format!("the connector's hidden width is {hidden}; the official VisualFlowConnector is fixed at {OFFICIAL_CONNECTOR_HIDDEN}"),
        ));
    }

    let config_path = dir.join(SIS_CONFIG_FILE);
    let mofnet_config = match &package.config.mofnet {
        Some(widths) => serde_json::from_value::<MofConfig>(widths.clone()).map_err(|e| unfit(&config_path, format!("mofnet: {e}")))?,
        None => MofConfig::default(),
    };
    let weights = package.videoflow_path();
    if !weights.is_file() {
        return Err(unfit(dir, format!("does not bundle MOFNet's weights ({} does not exist); a package export carries them", weights.display())));
    }
    // Reading them as `evaluate` does proves they are MOFNet's at the config's widths.
    MofNetEstimator::from_checkpoint(&weights, mofnet_config, package.config.motion_config.decoder_depth, WeightPrecision::F32, &Device::Cpu)?;

    let tmp = prepare_target(out)?;
    lora.save_peft(&tmp, Some(&base))?;
    write_connector(&tmp.join(CONNECTOR_FILE), &connector, connector_dtype)?;
    let mofnet_converted = bundle_mofnet(&weights, &tmp.join(MOFNET_FILE))?;
    // The files now go by their released names, whatever the input's config called them.
    let config = SisMotionConfig { connector_weights: CONNECTOR_FILE.into(), videoflow_checkpoint: MOFNET_FILE.into(), ..package.config.clone() };
    config.write(&tmp)?;
    crate::output_dir::replace(&tmp, out)?;
    Ok(ExportSummary {
        checkpoint: dir.clone(),
        lora_modules: lora.modules.len(),
        connector_hidden: hidden,
        mofnet_weights: weights,
        mofnet_converted,
        base_model: base,
    })
}

/// The one dtype of a file's tensors (a package's parts are saved in one).
fn uniform_dtype<'a>(path: &Path, tensors: impl IntoIterator<Item = &'a candle_core::Tensor>) -> Result<DType, TrainError> {
    let mut dtypes: Vec<DType> = Vec::new();
    for tensor in tensors {
        if !dtypes.contains(&tensor.dtype()) {
            dtypes.push(tensor.dtype());
        }
    }
    match dtypes.as_slice() {
        [dtype] => Ok(*dtype),
        [] => Err(unfit(path, "holds no tensors".into())),
        _ => Err(unfit(path, format!("mixes dtypes ({dtypes:?}); a package's parts are saved in one"))),
    }
}

/// The connector variables of a checkpoint's `motion.safetensors`.
fn read_connector_vars(checkpoint: &Path) -> Result<Vec<(String, Var)>, TrainError> {
    let path = checkpoint.join(MOTION_WEIGHTS_FILE);
    let tensors = ckpt::load_tensors(&path, &Device::Cpu)?;
    CONNECTOR_TENSORS
        .iter()
        .map(|n| {
            let name = format!("connector.{n}");
            let t = tensors.get(&name).ok_or_else(|| unfit(&path, format!("has no `{name}`")))?;
            Ok((name, Var::from_tensor(&t.to_dtype(DType::F32)?)?))
        })
        .collect()
}

/// `base_model_name_or_path` of the checkpoint's adapter config; the official evaluator cannot
/// do without it.
fn recorded_base_model(adapter: &Path) -> Result<String, TrainError> {
    let path = adapter.join(ADAPTER_CONFIG_FILE);
    let config: serde_json::Value = ckpt::load_json(&path)?;
    config["base_model_name_or_path"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| unfit(&path, "records no base_model_name_or_path; pass --base-model".into()))
}

/// MOFNet's weights as the official loader takes them: a `torch.save` state dict whose keys carry
/// DataParallel's `module.` prefix. A `.pth` is copied as it is; a safetensors conversion is
/// written back in that form (`true`).
fn bundle_mofnet(weights: &Path, dest: &Path) -> Result<bool, TrainError> {
    if weights.extension().is_some_and(|e| e == "safetensors") {
        let mut tensors: Vec<(String, candle_core::Tensor)> = ckpt::load_tensors(weights, &Device::Cpu)?
            .into_iter()
            .map(|(name, t)| (if name.starts_with("module.") { name } else { format!("module.{name}") }, t))
            .collect();
        tensors.sort_by(|a, b| a.0.cmp(&b.0));
        motionvl_models::torch_save::save_state_dict(dest, &tensors)?;
        return Ok(true);
    }
    std::fs::copy(weights, dest).map_err(|source| TrainError::Io { path: weights.to_path_buf(), source })?;
    Ok(false)
}

/// A reduced test model's widths (the `config.json` with `"arch": "mofnet"` MOFNet reads beside
/// its weights), for the package's `"mofnet"` key, its `iters` set to the run's; `None` for the
/// released sintel widths.
fn reduced_mofnet_widths(weights: &Path, iters: usize) -> Result<Option<serde_json::Value>, TrainError> {
    let path = weights.with_file_name("config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let mut value: serde_json::Value = ckpt::load_json(&path)?;
    if value.get("arch").and_then(|a| a.as_str()) != Some("mofnet") {
        return Ok(None);
    }
    serde_json::from_value::<MofConfig>(value.clone()).map_err(|e| unfit(&path, e.to_string()))?;
    // The fixture's `iters` is the count its dump ran; the run's own is `decoder_depth`.
    value["iters"] = iters.into();
    Ok(Some(value))
}

/// A fresh temporary folder beside `out`, which must be absent, empty or a previous export.
fn prepare_target(out: &Path) -> Result<PathBuf, TrainError> {
    crate::output_dir::prepare(out, "export", |name| PACKAGE_FILES.contains(&name))
}

#[cfg(test)]
mod tests {
    use candle_core::Tensor;
    use motionvl_models::lora::LoraConfig;
    use motionvl_models::motion::{ConnectorInit, ConnectorSpec};
    use motionvl_models::sis_package::RELEASED_CONNECTOR_TENSORS;

    use super::*;

    /// A package of a width-4 model with everything but MOFNet's weights: a LoRA on one layer
    /// and the connector as `tensors` makes them of `Connector::init_vars_with`.
    fn package_without_mofnet(dir: &Path, tensors: impl Fn(Vec<(String, Var)>) -> Vec<(String, Tensor)>) {
        let config = LoraConfig { rank: 2, ..LoraConfig::default() };
        let lora = LoraWeights::init(&[("model.layers.0.self_attn.q_proj".into(), 4, 4)], &config, 5, &Device::Cpu).unwrap();
        lora.save_peft(dir, Some("base")).unwrap();
        let spec = ConnectorSpec { hidden: OFFICIAL_CONNECTOR_HIDDEN, init: ConnectorInit::TruncatedNormal };
        let vars = Connector::init_vars_with(4, spec, 3, &Device::Cpu).unwrap();
        motionvl_models::torch_save::save_state_dict(&dir.join(CONNECTOR_FILE), &tensors(vars)).unwrap();
    }

    fn released(vars: Vec<(String, Var)>, dtype_of: impl Fn(usize) -> DType) -> Vec<(String, Tensor)> {
        RELEASED_CONNECTOR_TENSORS
            .iter()
            .zip(vars)
            .enumerate()
            .map(|(k, (name, (_, var)))| ((*name).to_owned(), var.as_tensor().to_dtype(dtype_of(k)).unwrap()))
            .collect()
    }

    #[test]
    fn a_connector_of_mixed_dtypes_is_refused_naming_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("package");
        package_without_mofnet(&package, |vars| released(vars, |k| if k == 0 { DType::BF16 } else { DType::F32 }));
        let out = dir.path().join("out");
        let err = export(ExportFormat::SisMotion, &package, &out, None).unwrap_err().to_string();
        assert!(err.contains(CONNECTOR_FILE) && err.contains("mixes dtypes"), "{err}");
        assert!(!out.exists(), "nothing written");
    }

    #[test]
    fn a_package_without_mofnet_weights_is_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let package = dir.path().join("package");
        package_without_mofnet(&package, |vars| released(vars, |_| DType::BF16));
        let out = dir.path().join("out");
        let err = export(ExportFormat::SisMotion, &package, &out, None).unwrap_err().to_string();
        assert!(err.contains(MOFNET_FILE) && err.contains("does not bundle"), "{err}");
        assert!(!out.exists(), "nothing written");
    }
}
