//! Checkpoint reading: safetensors or PyTorch `.pth` (Candle's pickle reader), with
//! torchvision's names (`feature_encoder.*`, `context_encoder.*`, `update_block.*`,
//! `mask_predictor.*`) or princeton-vl's (`fnet.*`, `cnet.*`, `update_block.*`, often under
//! `module.` from `DataParallel`), which are renamed to torchvision's here.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use crate::error::{FlowError, Result};

/// All tensors of a RAFT checkpoint, under torchvision's names, as f32 on `device`.
pub fn load_checkpoint(path: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let fail = |reason: String| FlowError::Checkpoint { path: path.to_path_buf(), reason };
    let raw = crate::state_dict::read_checkpoint(path)?;
    let mut out = HashMap::with_capacity(raw.len());
    for (name, tensor) in rename_checkpoint(raw) {
        out.insert(name, tensor.to_dtype(DType::F32)?.to_device(device)?);
    }
    if !out.keys().any(|k| k.starts_with("feature_encoder.")) {
        return Err(fail("not a RAFT checkpoint: no feature_encoder.* / fnet.* tensors".into()));
    }
    Ok(out)
}

/// Strips `module.`, maps princeton-vl names to torchvision's when the checkpoint has them, and
/// drops what inference does not read (`num_batches_tracked`, princeton's duplicate of each
/// downsample norm).
pub fn rename_checkpoint(raw: Vec<(String, Tensor)>) -> Vec<(String, Tensor)> {
    let stripped: Vec<(String, Tensor)> = raw.into_iter().map(|(k, t)| (k.strip_prefix("module.").map(str::to_string).unwrap_or(k), t)).collect();
    let princeton = stripped.iter().any(|(k, _)| k.starts_with("fnet.") || k.starts_with("cnet."));
    let names: std::collections::HashSet<String> = stripped.iter().map(|(k, _)| k.clone()).collect();
    stripped
        .into_iter()
        .filter(|(k, _)| !k.ends_with("num_batches_tracked"))
        .filter_map(|(k, t)| if princeton { princeton_to_torchvision(&k, &names).map(|k| (k, t)) } else { Some((k, t)) })
        .collect()
}

/// One princeton-vl name → torchvision's; `None` for tensors torchvision does not keep.
fn princeton_to_torchvision(name: &str, names: &std::collections::HashSet<String>) -> Option<String> {
    let (module, rest) = name.split_once('.')?;
    match module {
        "fnet" | "cnet" => {
            let prefix = if module == "fnet" { "feature_encoder" } else { "context_encoder" };
            encoder_name(rest, module, names).map(|r| format!("{prefix}.{r}"))
        }
        "update_block" => update_name(rest),
        _ => Some(name.to_string()),
    }
}

/// Inside an encoder: stem `conv1`/`norm1` → `convnormrelu.0/1`, head `conv2` → `conv`,
/// block `convK`/`normK` → `convnormreluK.0/1`, `downsample.*` unchanged. A block's `normK`
/// without a `convK` is the shortcut norm registered twice (`norm3` in residual blocks, `norm4`
/// in bottlenecks); its `downsample.1` copy is the one kept.
fn encoder_name(rest: &str, module: &str, names: &std::collections::HashSet<String>) -> Option<String> {
    let parts: Vec<&str> = rest.split('.').collect();
    match parts.as_slice() {
        ["conv1", p] => Some(format!("convnormrelu.0.{p}")),
        ["norm1", p] => Some(format!("convnormrelu.1.{p}")),
        ["conv2", p] => Some(format!("conv.{p}")),
        [layer, idx, "downsample", k, p] => Some(format!("{layer}.{idx}.downsample.{k}.{p}")),
        [layer, idx, sub, p] if sub.starts_with("conv") => Some(format!("{layer}.{idx}.convnormrelu{}.0.{p}", &sub[4..])),
        [layer, idx, sub, p] if sub.starts_with("norm") => {
            let k = &sub[4..];
            let has_conv = names.iter().any(|n| n.starts_with(&format!("{module}.{layer}.{idx}.conv{k}.")));
            has_conv.then(|| format!("{layer}.{idx}.convnormrelu{k}.1.{p}"))
        }
        _ => Some(rest.to_string()),
    }
}

/// Update block: `encoder.convc1/convc2/convf1/convf2/conv` → `motion_encoder.convcorr1.0/...`,
/// `gru.convz1` (large) or `gru.convz` (small) → `recurrent_block.convgru1.convz`, `mask.0/2`
/// → top-level `mask_predictor.convrelu.0` / `mask_predictor.conv`.
fn update_name(rest: &str) -> Option<String> {
    let (sub, tail) = rest.split_once('.')?;
    let (layer, param) = tail.split_once('.')?;
    Some(match sub {
        "encoder" => {
            let to = match layer {
                "convc1" => "convcorr1",
                "convc2" => "convcorr2",
                "convf1" => "convflow1",
                "convf2" => "convflow2",
                "conv" => "conv",
                other => other,
            };
            format!("update_block.motion_encoder.{to}.0.{param}")
        }
        "gru" => {
            let (gate, unit) = match layer.strip_suffix('2') {
                Some(g) => (g, 2),
                None => (layer.strip_suffix('1').unwrap_or(layer), 1),
            };
            format!("update_block.recurrent_block.convgru{unit}.{gate}.{param}")
        }
        "mask" => match layer {
            "0" => format!("mask_predictor.convrelu.0.{param}"),
            _ => format!("mask_predictor.conv.{param}"),
        },
        _ => format!("update_block.{rest}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn princeton_names_map_to_torchvision() {
        let t = Tensor::zeros(1, DType::F32, &Device::Cpu).expect("tensor");
        let raw: Vec<(String, Tensor)> = [
            "module.fnet.conv1.weight",
            "module.cnet.norm1.running_var",
            "module.cnet.norm1.num_batches_tracked",
            "module.fnet.layer2.0.conv1.bias",
            "module.cnet.layer2.0.conv2.weight",
            "module.cnet.layer2.0.norm2.weight",
            "module.cnet.layer2.0.norm3.weight",
            "module.cnet.layer2.0.downsample.1.weight",
            "module.fnet.conv2.weight",
            "module.update_block.encoder.convc2.weight",
            "module.update_block.gru.convq2.bias",
            "module.update_block.mask.2.weight",
            "module.update_block.flow_head.conv1.weight",
        ]
        .iter()
        .map(|k| (k.to_string(), t.clone()))
        .collect();
        let mut got: Vec<String> = rename_checkpoint(raw).into_iter().map(|(k, _)| k).collect();
        got.sort();
        let mut want = vec![
            "feature_encoder.convnormrelu.0.weight",
            "context_encoder.convnormrelu.1.running_var",
            "feature_encoder.layer2.0.convnormrelu1.0.bias",
            "context_encoder.layer2.0.convnormrelu2.0.weight",
            "context_encoder.layer2.0.convnormrelu2.1.weight",
            "context_encoder.layer2.0.downsample.1.weight",
            "feature_encoder.conv.weight",
            "update_block.motion_encoder.convcorr2.0.weight",
            "update_block.recurrent_block.convgru2.convq.bias",
            "mask_predictor.conv.weight",
            "update_block.flow_head.conv1.weight",
        ];
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn small_model_names_and_bottleneck_norms() {
        let t = Tensor::zeros(1, DType::F32, &Device::Cpu).expect("tensor");
        let raw: Vec<(String, Tensor)> = [
            "fnet.layer1.0.conv3.weight",
            "fnet.layer1.0.norm3.weight",
            "fnet.layer2.0.norm4.weight",
            "update_block.gru.convz.weight",
            "update_block.encoder.convf1.bias",
        ]
        .iter()
        .map(|k| (k.to_string(), t.clone()))
        .collect();
        let got: Vec<String> = rename_checkpoint(raw).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            got,
            vec![
                "feature_encoder.layer1.0.convnormrelu3.0.weight",
                "feature_encoder.layer1.0.convnormrelu3.1.weight",
                "update_block.recurrent_block.convgru1.convz.weight",
                "update_block.motion_encoder.convflow1.0.bias",
            ]
        );
    }

    #[test]
    fn torchvision_names_pass_through_and_bad_files_are_errors() {
        let t = Tensor::zeros(1, DType::F32, &Device::Cpu).expect("tensor");
        let got = rename_checkpoint(vec![("mask_predictor.conv.bias".to_string(), t)]);
        assert_eq!(got[0].0, "mask_predictor.conv.bias");
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = load_checkpoint(&dir.path().join("nope.pth"), &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(missing.contains("no such file"), "{missing}");
        let junk = dir.path().join("junk.pth");
        std::fs::write(&junk, b"not a zip").expect("write");
        assert!(load_checkpoint(&junk, &Device::Cpu).is_err());
    }
}
