//! The released SIS-Motion package format (issue 28): `torch.save` files read and written as torch
//! does (`tests/fixtures/sis_motion_pickle/`, made by `tools/fixtures/torch_pickle.py`).

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::{DType, Device, Tensor};
use motionvl_models::motion::CONNECTOR_TENSORS;
use motionvl_models::sis_package::{RELEASED_CONNECTOR_TENSORS, read_connector};
use motionvl_models::torch_save::save_state_dict;
use motionvl_tests::fixtures::fixtures_root;

fn pickle_dir() -> PathBuf {
    fixtures_root().join("sis_motion_pickle")
}

fn expected() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(pickle_dir().join("expected.safetensors"), &Device::Cpu).expect("expected.safetensors")
}

/// Each dict's keys, in the order torch wrote them.
fn keys(dict: &str) -> Vec<String> {
    let text = std::fs::read_to_string(pickle_dir().join("meta.json")).expect("meta.json");
    let meta: serde_json::Value = serde_json::from_str(&text).expect("meta.json parses");
    serde_json::from_value(meta["keys"][dict].clone()).expect("key list")
}

fn bits(t: &Tensor) -> (DType, Vec<usize>, Vec<u32>) {
    let values = t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    (t.dtype(), t.dims().to_vec(), values.iter().map(|v| v.to_bits()).collect())
}

#[test]
fn torch_pickle_files_written_by_torch_read_exactly() {
    let expected = expected();
    let mixed: HashMap<String, Tensor> = candle_core::pickle::read_all(pickle_dir().join("torch_mixed.pt")).expect("torch_mixed.pt").into_iter().collect();
    let names = keys("mixed");
    assert_eq!(mixed.len(), names.len());
    for key in &names {
        assert_eq!(bits(&mixed[key]), bits(&expected[&format!("mixed/{key}")]), "torch_mixed.pt `{key}`");
    }

    // The official connector, bf16 as DeepSpeed leaves it, under motionvl's names.
    let vars = read_connector(&pickle_dir().join("torch_connector.pt"), 8, &Device::Cpu).expect("torch_connector.pt");
    for ((ours, var), released) in vars.iter().zip(RELEASED_CONNECTOR_TENSORS) {
        let want = expected[&format!("connector/{released}")].to_dtype(DType::F32).unwrap();
        assert_eq!(bits(var.as_tensor()), bits(&want), "{ours} ← {released}");
    }
    assert_eq!(vars.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), CONNECTOR_TENSORS.map(|n| format!("connector.{n}")));
    assert_eq!(vars[2].1.dims(), [2048, 8], "the released hidden width");
}

/// motionvl's writer gives, byte for byte, the files `torch_pickle.py check` loaded in torch
/// (`MOTIONVL_BLESS=1` rewrites them; then run the check again).
#[test]
fn torch_pickle_writer_reproduces_the_files_torch_loads() {
    let expected = expected();
    let dir = tempfile::tempdir().unwrap();
    for dict in ["connector", "mixed"] {
        let tensors: Vec<(String, Tensor)> = keys(dict).into_iter().map(|k| {
            let t = expected[&format!("{dict}/{k}")].clone();
            (k, t)
        }).collect();
        let file = format!("ours_{dict}.pt");
        let written = dir.path().join(&file);
        save_state_dict(&written, &tensors).expect("writes");
        let committed = pickle_dir().join(&file);
        if std::env::var_os("MOTIONVL_BLESS").is_some() {
            std::fs::copy(&written, &committed).expect("bless");
        }
        let ours = std::fs::read(&written).unwrap();
        let checked = std::fs::read(&committed).unwrap_or_else(|e| panic!("{}: {e} (write it with MOTIONVL_BLESS=1)", committed.display()));
        assert!(ours == checked, "{file}: the writer's bytes changed since torch_pickle.py check loaded them");
        // And the reader takes back what the writer wrote.
        let back: HashMap<String, Tensor> = candle_core::pickle::read_all(&written).unwrap().into_iter().collect();
        for (k, t) in &tensors {
            assert_eq!(bits(&back[k]), bits(t), "{file} `{k}`");
        }
    }
}
