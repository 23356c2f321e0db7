//! MOFNet parity with VideoFlow: every dump under `tests/fixtures/flow/mofnet/<name>/` (made by
//! `tools/fixtures/make_mofnet_fixture.py` from the official code) must reproduce the official
//! whole-clip forward flows and the first window's forward and backward flows within 1e-3 px.
//! A new dump needs no code here.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Tensor};
use candle_core::Shape;
use candle_nn::VarBuilder;
use motionvl_flow::mofnet::{weights, window_plan, MofConfig, MofNet, MofNetEstimator};
use motionvl_flow::{estimator_by_name, EstimatorSpec, FlowEstimator};
use ndarray::{Array4, ArrayView4, Axis};

const TOLERANCE: f32 = 1e-3;

fn fixture_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/mofnet");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root).expect("tests/fixtures/flow/mofnet exists").flatten().map(|e| e.path()).filter(|p| p.join("config.json").is_file()).collect();
    dirs.sort();
    dirs
}

fn tensors(path: &Path) -> std::collections::HashMap<String, Tensor> {
    candle_core::safetensors::load(path, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn to_array4<T: candle_core::WithDType>(t: &Tensor) -> Array4<T> {
    let d = t.dims4().expect("4-D");
    Array4::from_shape_vec(d, t.flatten_all().and_then(|f| f.to_vec1::<T>()).expect("values")).expect("shape")
}

fn max_diff(a: ArrayView4<f32>, b: ArrayView4<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.iter().zip(b.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

fn load(dir: &Path) -> (MofNetEstimator, Array4<u8>) {
    let (cfg, iters) = MofConfig::from_json(&std::fs::read_to_string(dir.join("config.json")).expect("config")).expect("valid config");
    let est = MofNetEstimator::from_checkpoint(&dir.join("model.safetensors"), cfg, iters.expect("config.json names the iterations"), &Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let frames = to_array4(&tensors(&dir.join("inputs.safetensors"))["frames"].to_dtype(DType::U8).expect("u8"));
    (est, frames)
}

#[test]
fn mofnet_matches_videoflow_on_every_dump() {
    let dirs = fixture_dirs();
    assert!(!dirs.is_empty(), "no MOFNet dumps found");
    for dir in dirs {
        let (est, frames) = load(&dir);
        let expected = tensors(&dir.join("expected.safetensors"));
        let flows: Array4<f32> = to_array4(&expected["flows"]);
        let window: Array4<f32> = to_array4(&expected["window"]);
        let scale = flows.iter().map(|v| v.abs()).fold(0.0, f32::max);
        assert!(scale > 0.5, "{}: the reference flow is too small to test anything ({scale})", dir.display());

        // One window, both directions: the network itself.
        let first = window_plan(frames.dim().0).remove(0);
        let (fwd, bwd) = est.window_flows(frames.select(Axis(0), &first.frames).view()).expect("window flows");
        let ours: Array4<f32> = to_array4(&Tensor::cat(&[&fwd, &bwd], 0).expect("cat"));
        let diff = max_diff(ours.view(), window.view());
        eprintln!("{}: window max |Δflow| = {diff:.2e} px (flow up to {scale:.2} px)", dir.display());
        assert!(diff < TOLERANCE, "{}: window max |Δflow| {diff} px ≥ {TOLERANCE}", dir.display());

        // The whole clip: duplicated first frame, stride-3 windows, the end-aligned last one.
        let ours = est.estimate(frames.view()).expect("flows");
        let diff = max_diff(ours.view(), flows.view());
        eprintln!("{}: clip max |Δflow| = {diff:.2e} px", dir.display());
        assert!(diff < TOLERANCE, "{}: clip max |Δflow| {diff} px ≥ {TOLERANCE}", dir.display());
    }
}

/// The `.pth` reader (Candle's pickle) gives the same tensors as the safetensors dump, strips
/// `module.` and skips the keys MOFNet never reads.
#[test]
fn pth_checkpoint_reads_like_the_safetensors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/mofnet/tiny");
    let from_pth = motionvl_flow::mofnet::weights::load_checkpoint(&dir.join("checkpoint_sample.pth"), &Device::Cpu).expect("pth");
    let reference = tensors(&dir.join("model.safetensors"));
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

    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/mofnet/tiny");
    let weights = dir.join("model.safetensors");
    let spec = EstimatorSpec { name: "mofnet", weights: Some(&weights), iters: Some(2) };
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
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flow/mofnet/sintel_keys.json");
    let shapes: HashMap<String, Vec<usize>> = serde_json::from_str(&std::fs::read_to_string(&path).expect("sintel_keys.json")).expect("name → shape");
    let shapes: HashMap<String, Vec<usize>> = shapes.into_iter().map(|(k, v)| (k.strip_prefix("module.").map(str::to_string).unwrap_or(k), v)).collect();
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
