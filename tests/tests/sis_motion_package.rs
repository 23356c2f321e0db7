//! The released SIS-Motion package format (issue 28): `torch.save` files read and written as torch
//! does (`tests/fixtures/sis_motion_pickle/`, made by `tools/fixtures/torch_pickle.py`); a run
//! exported as a package and loaded back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use motionvl_eval::config::RunConfig;
use motionvl_eval::infer::load_qwen;
use motionvl_models::lora::LoraWeights;
use motionvl_models::motion::{CONNECTOR_TENSORS, Connector, ConnectorInit, ConnectorSpec, MotionMeta};
use motionvl_models::sis_package::{RELEASED_CONNECTOR_TENSORS, SisPackage, read_connector};
use motionvl_models::torch_save::save_state_dict;
use motionvl_tests::fixtures::fixtures_root;
use motionvl_tests::repo_root;
use motionvl_train::export::{ExportFormat, export};
use motionvl_train::recipe::Recipe;
use motionvl_train::sft::Trainer;

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

/// A tensor exactly: dtype, shape and the bits of its values.
type Bits = (DType, Vec<usize>, Vec<u32>);

fn bits(t: &Tensor) -> Bits {
    let values = t.to_dtype(DType::F32).unwrap().flatten_all().unwrap().to_vec1::<f32>().unwrap();
    (t.dtype(), t.dims().to_vec(), values.iter().map(|v| v.to_bits()).collect())
}

#[test]
fn torch_pickle_files_written_by_torch_read_exactly() {
    let expected = expected();
    let mixed: HashMap<String, Tensor> =
        candle_core::pickle::read_all(pickle_dir().join("torch_mixed.pt")).expect("torch_mixed.pt").into_iter().collect();
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
        let tensors: Vec<(String, Tensor)> = keys(dict)
            .into_iter()
            .map(|k| {
                let t = expected[&format!("{dict}/{k}")].clone();
                (k, t)
            })
            .collect();
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

/// A one-step tiny run with MOFNet (the reduced fixture model), the official pseudo-images and the
/// released connector shape: what `train export` accepts.
fn tiny_mofnet_run(out: &Path) -> PathBuf {
    let root = repo_root();
    let quoted = |p: PathBuf| format!("{:?}", p.display().to_string());
    let overrides: Vec<(String, String)> = [
        ("output_dir", quoted(out.to_path_buf())),
        ("model.init_config", quoted(root.join("configs/models/tiny.json"))),
        ("data.train", quoted(root.join("tests/data/tiny-sft/train.jsonl"))),
        ("logging.progress_bar", "false".into()),
        ("motion.estimator", "\"mofnet\"".into()),
        ("motion.weights", quoted(root.join("tests/fixtures/flow/mofnet/tiny/model.safetensors"))),
        ("motion.connector_hidden", "2048".into()),
        ("motion.connector_init", "\"truncated-normal\"".into()),
        ("motion.pseudo_images.pipeline", "\"official\"".into()),
        ("optim.max_steps", "1".into()),
        ("checkpoint.every", "1".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let recipe = Recipe::load(&root.join("configs/sft/tiny.toml"), &overrides).expect("tiny recipe");
    Trainer::new(&recipe, None).expect("trainer").run().expect("one step");
    out.join("checkpoint-1")
}

fn lora_bits(lora: &LoraWeights) -> Vec<(String, Bits, Bits)> {
    lora.modules.iter().map(|(m, p)| (m.clone(), bits(p.a.as_tensor()), bits(p.b.as_tensor()))).collect()
}

/// `train export --format sis-motion` → motionvl's package loader: the same LoRA, connector
/// and MOFNet tensors; evaluation builds the branch from the package; refusals name the problem.
#[test]
fn exported_package_loads_back_with_the_trained_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoint = tiny_mofnet_run(&dir.path().join("run"));
    let meta = MotionMeta::read(&checkpoint).unwrap().expect("motion.json");
    assert_eq!(meta.connector, Some(ConnectorSpec { hidden: 2048, init: ConnectorInit::TruncatedNormal }));

    let out = dir.path().join("package");
    let summary = export(ExportFormat::SisMotion, &dir.path().join("run"), &out, None).expect("exports");
    assert_eq!(summary.checkpoint, checkpoint);
    assert_eq!(summary.connector_hidden, 2048);

    let package = SisPackage::detect(&out).unwrap().expect("the export is a package");
    assert_eq!(package.config.motion_config.decoder_depth, meta.estimator_settings["iters"].as_u64().unwrap() as usize);
    let mut fixture_config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(repo_root().join("tests/fixtures/flow/mofnet/tiny/config.json")).unwrap()).unwrap();
    fixture_config["iters"] = package.config.motion_config.decoder_depth.into();
    assert_eq!(package.config.mofnet.as_ref(), Some(&fixture_config));
    assert!(summary.mofnet_converted);

    // Connector and LoRA: bit for bit what the checkpoint holds.
    let trained: HashMap<String, Tensor> = candle_core::safetensors::load(checkpoint.join("motion.safetensors"), &Device::Cpu).unwrap();
    let loaded = package.load_connector(trained["connector.norm.weight"].dim(0).unwrap(), &Device::Cpu).unwrap();
    for (name, var) in &loaded {
        assert_eq!(bits(var.as_tensor()), bits(&trained[name]), "{name}");
    }
    assert_eq!(
        lora_bits(&LoraWeights::load_peft(&out, &Device::Cpu).unwrap()),
        lora_bits(&LoraWeights::load_peft(&checkpoint, &Device::Cpu).unwrap())
    );
    let adapter_config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("adapter_config.json")).unwrap()).unwrap();
    assert_eq!(adapter_config["base_model_name_or_path"].as_str(), Some(summary.base_model.as_str()));

    // MOFNet: the `module.`-prefixed state dict of the weights the run was trained with.
    let mof: HashMap<String, Tensor> = candle_core::pickle::read_all(out.join("MOF_kitti.pth")).unwrap().into_iter().collect();
    let source = candle_core::safetensors::load(repo_root().join("tests/fixtures/flow/mofnet/tiny/model.safetensors"), &Device::Cpu).unwrap();
    assert_eq!(mof.len(), source.len());
    for (name, t) in &source {
        let key = if name.starts_with("module.") { name.clone() } else { format!("module.{name}") };
        assert_eq!(bits(&mof[&key]), bits(t), "{key}");
    }

    // Evaluation loads the package as the adapter: LoRA and motion branch.
    let mut config = RunConfig { out: dir.path().join("eval"), ..RunConfig::default() };
    config.model.checkpoint = dir.path().join("run/base-model").display().to_string();
    config.model.adapter = Some(out.clone());
    let bench = motionvl_eval::bench::find("sisbench").unwrap();
    let (_, generator) = load_qwen(&config, bench).expect("the package loads");
    let branch = generator.motion.as_ref().expect("the package's motion branch");
    let live = Connector::from_vars(&loaded).unwrap();
    let probe = motionvl_models::seeded::randn((3, trained["connector.norm.weight"].dim(0).unwrap()), 1.0, 5, &Device::Cpu).unwrap();
    assert_eq!(bits(&branch.connector.forward(&probe).unwrap()), bits(&live.forward(&probe).unwrap()));

    // The same adapter without its connector is refused, unless --no-motion.
    let bare = dir.path().join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(out.join(file), bare.join(file)).unwrap();
    }
    config.model.adapter = Some(bare);
    let err = load_qwen(&config, bench).err().expect("no motion branch").to_string();
    assert!(err.contains("no motion branch") && err.contains("--no-motion"), "{err}");
    config.motion.no_motion = true;
    assert!(load_qwen(&config, bench).expect("visual-only on request").1.motion.is_none());

    // A second export replaces the first; a folder with anything else is refused.
    export(ExportFormat::SisMotion, &checkpoint, &out, Some("Qwen/Qwen2.5-VL-7B-Instruct")).expect("re-exports");
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let err = export(ExportFormat::SisMotion, &checkpoint, &out, None).unwrap_err().to_string();
    assert!(err.contains("not a previous export") && err.contains("notes.txt"), "{err}");

    // A connector of motionvl's original d → d → d width is not one the official code can build.
    let width = trained["connector.norm.weight"].dim(0).unwrap();
    let square: HashMap<String, Tensor> =
        Connector::init_vars(width, 3, &Device::Cpu).unwrap().into_iter().map(|(n, v)| (n, v.as_tensor().clone())).collect();
    candle_core::safetensors::save(&square, checkpoint.join("motion.safetensors")).unwrap();
    let err = export(ExportFormat::SisMotion, &checkpoint, &dir.path().join("other"), None).unwrap_err().to_string();
    assert!(err.contains(&format!("hidden width is {width}")) && err.contains("connector_hidden = 2048"), "{err}");

    // A run whose flows came from another estimator cannot be a SIS-Motion package.
    let mut dis = meta.clone();
    dis.estimator = "dis".into();
    dis.write(&checkpoint).unwrap();
    let err = export(ExportFormat::SisMotion, &checkpoint, &dir.path().join("other"), None).unwrap_err().to_string();
    assert!(err.contains("`dis`") && err.contains("mofnet"), "{err}");
}

/// Every official dump's package (`tests/fixtures/sis_motion/<name>/package/`, written by the
/// official training code's own save functions, `tools/fixtures/sis_motion.py`) loads as the
/// `--adapter` of its base, and its connector maps each question's `motion_tokens` to the
/// `connector_out` the official evaluation computed.
#[test]
fn official_packages_give_the_dumps_connector_out() {
    for dump in motionvl_tests::fixtures::dumps("sis_motion") {
        let mut config = RunConfig::default();
        config.model.checkpoint = dump.path("base").display().to_string();
        config.model.adapter = Some(dump.path("package"));
        let bench = motionvl_eval::bench::find("sisbench").unwrap();
        let (_, generator) = load_qwen(&config, bench).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let branch = generator.motion.as_ref().unwrap_or_else(|| panic!("{}: no motion branch", dump.label));
        assert_eq!(branch.connector.hidden().unwrap(), 2048, "{}", dump.label);

        let mut questions = 0;
        for entry in std::fs::read_dir(dump.path("expected")).unwrap() {
            let path = entry.unwrap().path();
            let tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap();
            // Large tensors are stored as their first rows (`.head`, FORMAT.md); the connector
            // works row by row, so the heads compare as well as the whole.
            let stored = |name: &str| -> Tensor {
                let t = tensors.get(name).or_else(|| tensors.get(&format!("{name}.head"))).unwrap_or_else(|| panic!("{}: no {name}", path.display()));
                t.to_dtype(DType::F32).unwrap()
            };
            let (motion, expected, visual) = (stored("motion_tokens"), stored("connector_out"), stored("visual_tokens"));
            let rows = motion.dim(0).unwrap().min(expected.dim(0).unwrap()).min(visual.dim(0).unwrap());
            let (motion, expected, visual) =
                (motion.narrow(0, 0, rows).unwrap(), expected.narrow(0, 0, rows).unwrap(), visual.narrow(0, 0, rows).unwrap());
            let ours = branch.connector.forward(&motion).unwrap();
            let max_abs = |t: &Tensor| t.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
            let err = max_abs(&(&ours - &expected).unwrap());
            let size = max_abs(&expected);
            // connector_out was recorded as (visual + mlp) − visual: f32 roundings of that size.
            let bound = 4.0 * f32::EPSILON * (max_abs(&visual) + size) + 1e-6 * size;
            eprintln!(
                "{} {}: {rows} rows, max |connector_out − ours| = {err:e} (bound {bound:e}, max |connector_out| {size:e})",
                dump.label,
                path.display()
            );
            assert!(size > 1e-3, "{}: a connector output this small could not fail the test", path.display());
            assert!(err <= bound, "{}: max difference {err:e} > {bound:e}", path.display());
            questions += 1;
        }
        assert!(questions > 0, "{}: no question under expected/", dump.label);
    }
}

/// The paper recipe asks for the released connector; the tiny recipe keeps motionvl's original.
#[test]
fn recipes_name_the_connector_shape_and_init() {
    let root = repo_root();
    let paper = Recipe::load(&root.join("configs/sft/sis-motion-3b.toml"), &[]).expect("paper recipe");
    assert_eq!(paper.motion.connector(2048), ConnectorSpec { hidden: 2048, init: ConnectorInit::TruncatedNormal });
    assert_eq!(paper.motion.connector(3584).hidden, 2048, "2048 whatever the model's width");
    let tiny = Recipe::load(&root.join("configs/sft/tiny.toml"), &[]).expect("tiny recipe");
    assert_eq!(tiny.motion.connector(96), ConnectorSpec { hidden: 96, init: ConnectorInit::Zero });
    let bad = Recipe::load(&root.join("configs/sft/tiny.toml"), &[("motion.connector_init".into(), "\"xavier\"".into())]).unwrap_err().to_string();
    assert!(bad.contains("xavier") && bad.contains("truncated-normal"), "{bad}");
    let zero = Recipe::load(&root.join("configs/sft/tiny.toml"), &[("motion.connector_hidden".into(), "0".into())]).unwrap_err().to_string();
    assert!(zero.contains("motion.connector_hidden"), "{zero}");
}
