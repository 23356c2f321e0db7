//! MOFNet parity with VideoFlow: every dump under `tests/fixtures/flow/mofnet/<name>/` (made by
//! `tools/fixtures/mofnet.py` from the official code) must reproduce the official
//! whole-clip forward flows and the first window's forward and backward flows within `tolerance::flow_px`.
//! A new dump needs no code here.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::VarBuilder;
use motionvl_flow::mofnet::{MofConfig, MofNet, MofNetEstimator, weights, window_plan};
use motionvl_flow::{EstimatorSpec, FlowEstimator, estimator_by_name};
use motionvl_tests::fixtures::{dumps, fixtures_root};
use motionvl_tests::flow_dump::{FlowDump, to_array4};
use ndarray::{Array4, Axis};

#[test]
fn mofnet_matches_videoflow_on_every_dump() {
    for fx in dumps("flow/mofnet").into_iter().map(FlowDump::open) {
        let (cfg, iters) = MofConfig::from_json(&fx.config_json()).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        let iters = iters.unwrap_or_else(|| panic!("{}: config.json names no iterations", fx.dump.label));
        let est = MofNetEstimator::from_checkpoint(&fx.dump.path("model.safetensors"), cfg, iters, motionvl_flow::WeightPrecision::F32, &Device::Cpu)
            .unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        let flows = fx.expected("flows");
        let window = fx.expected("window");

        // One window, both directions: the network itself.
        let first = window_plan(fx.frames.dim().0).remove(0);
        let (fwd, bwd) = est.window_flows(fx.frames.select(Axis(0), &first.frames).view()).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        let ours: Array4<f32> = to_array4(&Tensor::cat(&[&fwd, &bwd], 0).unwrap_or_else(|e| panic!("{e}")));
        fx.assert_flow("first window, forward and backward", ours.view(), window.view());

        // The whole clip: duplicated first frame, stride-3 windows, the end-aligned last one.
        let ours = est.estimate(fx.frames.view()).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
        fx.assert_flow("whole clip", ours.view(), flows.view());
    }
}

/// The `.pth` reader (Candle's pickle) gives the same tensors as the safetensors dump, strips
/// `module.` and skips the keys MOFNet never reads.
#[test]
fn pth_checkpoint_reads_like_the_safetensors() {
    let dir = fixtures_root().join("flow/mofnet/tiny");
    let from_pth =
        motionvl_flow::mofnet::weights::load_checkpoint(&dir.join("checkpoint_sample.pth"), motionvl_flow::WeightPrecision::F32, &Device::Cpu)
            .expect("pth");
    let reference = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).expect("model.safetensors");
    let mut names: Vec<&String> = from_pth.keys().collect();
    names.sort();
    assert_eq!(names, vec!["fnet.svt.patch_embeds.0.norm.weight", "update_block.aggregator.gamma", "update_block.encoder.init_hidden_state"]);
    for (name, t) in &from_pth {
        let want = reference[&format!("module.{name}")].to_dtype(DType::F32).expect("f32");
        let diff = (t - want).and_then(|d| d.abs()?.max_all()?.to_scalar::<f32>()).expect("diff");
        assert_eq!(diff, 0.0, "{name}");
    }
}

/// `--motion mofnet`: missing weights name the official checkpoint; with the dump's weights
/// (config.json beside them) a clip of odd size and only 2 frames is padded, completed to a
/// window, and cropped back.
#[test]
fn registry_builds_mofnet_and_handles_short_odd_clips() {
    let err = estimator_by_name("mofnet", None, &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("MOF_sintel.pth") && err.contains("--weights"), "{err}");

    let dir = fixtures_root().join("flow/mofnet/tiny");
    let weights = dir.join("model.safetensors");
    let spec = EstimatorSpec { name: motionvl_flow::EstimatorName::MofNet, weights: Some(&weights), iters: Some(2), ..EstimatorSpec::default() };
    let est = motionvl_flow::estimator_from_spec(&spec, &Device::Cpu).expect("mofnet from the registry");
    assert_eq!(est.name(), "mofnet");
    let frames = Array4::from_shape_fn((2, 61, 90, 3), |(t, y, x, c)| ((x * 7 + y * 3 + t * 5 + c * 11) % 256) as u8);
    let flows = est.estimate(frames.view()).expect("flows");
    assert_eq!(flows.dim(), (1, 2, 61, 90));
    assert!(flows.iter().all(|v| v.is_finite()));
}

/// A checkpoint of known names and shapes (zeros) that records what the model reads.
struct RecordingCheckpoint {
    shapes: HashMap<String, Vec<usize>>,
    read: Arc<Mutex<BTreeSet<String>>>,
}

impl candle_nn::var_builder::SimpleBackend for RecordingCheckpoint {
    fn get(&self, s: Shape, name: &str, _: candle_nn::Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let Some(shape) = self.shapes.get(name) else { candle_core::bail!("the official checkpoint has no `{name}`") };
        if shape.as_slice() != s.dims() {
            candle_core::bail!("`{name}`: checkpoint {shape:?}, model {:?}", s.dims());
        }
        self.read.lock().map_err(|_| candle_core::Error::Msg("poisoned record".into()))?.insert(name.to_string());
        Tensor::zeros(s, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let Some(shape) = self.shapes.get(name) else { candle_core::bail!("the official checkpoint has no `{name}`") };
        Tensor::zeros(shape.as_slice(), dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.shapes.contains_key(name)
    }
}

/// The sintel-config model reads exactly the official checkpoint's tensors (names and shapes
/// of `MOF_sintel.pth`'s state dict, dumped from VideoFlow's own model by the generator's
/// `--keys-out`): every one except those the loader skips knowingly (`*.svt.norm.*`,
/// `att.pos_emb.*`, the never-called `velocity_update_block`).
#[test]
fn sintel_model_reads_every_used_tensor_of_the_official_checkpoint() {
    let path = fixtures_root().join("flow/mofnet/sintel_keys.json");
    let shapes: HashMap<String, Vec<usize>> = serde_json::from_str(&std::fs::read_to_string(&path).expect("sintel_keys.json")).expect("name → shape");
    let shapes: HashMap<String, Vec<usize>> =
        shapes.into_iter().map(|(k, v)| (k.strip_prefix("module.").map(str::to_string).unwrap_or(k), v)).collect();
    let used: BTreeSet<String> = shapes.keys().filter(|k| !weights::is_unused(k)).cloned().collect();
    let skipped: BTreeSet<String> = shapes.keys().filter(|k| weights::is_unused(k)).cloned().collect();
    assert!(skipped.iter().all(|k| k.contains(".svt.norm.") || k.starts_with("att.pos_emb.") || k.contains("velocity_update_block")), "{skipped:?}");
    assert_eq!(skipped.len(), 4 + 3 + 6, "svt.norm ×2 encoders, pos_emb (2 tables + index), velocity block (3 convs)");

    let read = Arc::new(Mutex::new(BTreeSet::new()));
    let backend = RecordingCheckpoint { shapes, read: Arc::clone(&read) };
    let vb = VarBuilder::from_backend(Box::new(backend), DType::F32, Device::Cpu);
    MofNet::new(vb, &MofConfig::default()).unwrap_or_else(|e| panic!("sintel config against the official names: {e}"));
    let read = read.lock().expect("record").clone();
    let never_read: Vec<&String> = used.difference(&read).collect();
    assert!(never_read.is_empty(), "official tensors the model ignores: {never_read:?}");
    assert_eq!(read, used);
}
