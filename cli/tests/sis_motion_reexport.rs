//! Issue 28: a package written by the official Self-in-Space code
//! (`tests/fixtures/sis_motion/<name>/package`, made by `tools/fixtures/sis_motion.py`)
//! round-trips through
//!
//! ```text
//! train export --format sis-motion PACKAGE --out X
//! ```
//!
//! X holds the same tensors (keys, dtypes, bits) in its LoRA and connector, the same config and
//! the same MOFNet weights, so `evaluate run` reads from X exactly what `sis_motion_official.rs`
//! shows gives the official generations (evaluating X again would take minutes of MOFNet for no
//! new bit; the official loader accepted such an X: `tools/fixtures/check_sis_package.py`).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use common::json;

/// Every tensor by name, as (dtype, shape, f32 bit patterns): bf16 and f16 widen to f32
/// exactly and one-to-one, so equal patterns with equal dtypes are equal stored bits.
type Bits = BTreeMap<String, (DType, Vec<usize>, Vec<u32>)>;

fn bits(tensors: impl IntoIterator<Item = (String, Tensor)>) -> Bits {
    tensors
        .into_iter()
        .map(|(name, t)| {
            let values =
                t.to_dtype(DType::F32).and_then(|t| t.flatten_all()).and_then(|t| t.to_vec1::<f32>()).unwrap_or_else(|e| panic!("{name}: {e}"));
            (name, (t.dtype(), t.dims().to_vec(), values.iter().map(|v| v.to_bits()).collect()))
        })
        .collect()
}

fn adapter_bits(package: &Path) -> Bits {
    let path = package.join("adapter_model.safetensors");
    bits(candle_core::safetensors::load(&path, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn connector_bits(package: &Path) -> Bits {
    let path = package.join("connector_weights.pt");
    bits(candle_core::pickle::read_all(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn an_official_package_round_trips_through_train_export() {
    let train = env!("CARGO_BIN_EXE_train");
    for dump in common::sis_motion_dumps() {
        let name = dump.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
        let input = dump.join("package");
        let tmp = tempfile::tempdir().expect("temp dir");
        let exported = tmp.path().join("package");
        let arg = |p: &Path| p.display().to_string();
        let (_, said) = common::output(train, &["export", "--format", "sis-motion", &arg(&input), "--out", &arg(&exported)], &dump);
        assert!(said.contains("connector hidden 2048"), "{name}: {said}");

        let (ours, theirs) = (adapter_bits(&exported), adapter_bits(&input));
        assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>(), "{name}: the LoRA's keys");
        assert_eq!(ours, theirs, "{name}: the LoRA's dtypes, shapes and bits");
        let (ours, theirs) = (connector_bits(&exported), connector_bits(&input));
        assert_eq!(ours.keys().collect::<Vec<_>>(), theirs.keys().collect::<Vec<_>>(), "{name}: the connector's keys");
        assert_eq!(ours, theirs, "{name}: the connector's dtypes, shapes and bits");
        assert_eq!(json(&exported.join("sis_motion_config.json")), json(&input.join("sis_motion_config.json")), "{name}: sis_motion_config.json");
        assert!(read(&exported.join("MOF_kitti.pth")) == read(&input.join("MOF_kitti.pth")), "{name}: MOF_kitti.pth, byte for byte");

        let (ours, theirs) = (json(&exported.join("adapter_config.json")), json(&input.join("adapter_config.json")));
        assert_eq!(ours["base_model_name_or_path"], theirs["base_model_name_or_path"], "{name}: the base model is kept");
        for key in ["peft_type", "task_type", "r", "use_rslora", "use_dora", "bias"] {
            assert_eq!(ours[key], theirs[key], "{name}: adapter_config.json `{key}`");
        }
        for key in ["lora_alpha", "lora_dropout"] {
            let (a, b) = (ours[key].as_f64().expect(key), theirs[key].as_f64().expect(key));
            assert!((a - b).abs() <= 1e-7 * b.abs(), "{name}: adapter_config.json `{key}`: {a} vs {b}");
        }

        // Over a previous export, with another base; a folder holding anything else is refused.
        common::output(
            train,
            &["export", "--format", "sis-motion", &arg(&input), "--out", &arg(&exported), "--base-model", "Qwen/Qwen2.5-VL-7B-Instruct"],
            &dump,
        );
        assert_eq!(json(&exported.join("adapter_config.json"))["base_model_name_or_path"], "Qwen/Qwen2.5-VL-7B-Instruct", "{name}: --base-model");
        assert_eq!(adapter_bits(&exported), adapter_bits(&input), "{name}: the LoRA, exported over a previous export");
        std::fs::write(exported.join("notes.txt"), "mine").expect("stray file");
        let refused = common::failure(train, &["export", "--format", "sis-motion", &arg(&input), "--out", &arg(&exported)], &dump);
        assert!(refused.contains("not a previous export") && refused.contains("notes.txt"), "{name}: {refused}");
    }
}
