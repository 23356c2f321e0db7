//! The official SIS-Motion code's bf16 precision (issue 28, B7 and C9), against what the official
//! code computed in bf16 on every dump under `tests/fixtures/sis_precision/<name>/`
//! (`tools/fixtures/sis_precision.py`, on the package and base of `sis_motion/<name>/`).
//!
//! B7: the official bf16 model holds MOFNet's weights in bf16 before casting MOFNet to f32, in
//! training (then DeepSpeed's `module.bfloat16()` and the forward's `.float()`) and in evaluation
//! alike. `WeightPrecision::Bf16Rounded` must hold the same values bit for bit, and MOFNet's
//! flows from them must be the official ones, not those of the exact weights.
//!
//! C9: the official evaluation merges the LoRA adapter into the bf16 weights
//! (`merge_and_unload`); `LoraWeights::merge_into_linears` on the model loaded in bf16 must give
//! the same weights bit for bit.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use motionvl_flow::mofnet::{MofConfig, MofNetEstimator, weights};
use motionvl_flow::{FlowEstimator, WeightPrecision};
use motionvl_models::CheckpointFiles;
use motionvl_models::lora::LoraWeights;
use motionvl_models::qwen25vl::Qwen25Vl;
use motionvl_tests::fixtures::{Dump, dumps, fixtures_root};
use ndarray::{Array4, s};
use sha2::{Digest, Sha256};

/// MOFNet's 1/8-resolution flows, relative to the reference's largest magnitude: the bound of
/// `sis_motion_flow.rs` (f32 summation order through the iterations).
const FLOWS_RELATIVE: f32 = 1e-4;

fn source(dump: &Dump) -> std::path::PathBuf {
    let name = dump.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    fixtures_root().join("sis_motion").join(name)
}

fn f32_values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).and_then(|t| t.flatten_all()?.to_vec1::<f32>()).unwrap_or_else(|e| panic!("reading a tensor: {e}"))
}

fn f32_sha256(t: &Tensor) -> String {
    let bytes: Vec<u8> = f32_values(t).iter().flat_map(|v| v.to_le_bytes()).collect();
    Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn mofnet(dump: &Dump, precision: WeightPrecision) -> MofNetEstimator {
    let meta = dump.json("meta.json");
    let widths = meta.get("mofnet").unwrap_or_else(|| panic!("{}: meta.json has no `mofnet`", dump.label));
    let (cfg, iters) = MofConfig::from_json(&widths.to_string()).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
    let iters = iters.unwrap_or_else(|| panic!("{}: the `mofnet` widths name no iterations", dump.label));
    MofNetEstimator::from_checkpoint(&source(dump).join("package/MOF_kitti.pth"), cfg, iters, precision, &Device::Cpu)
        .unwrap_or_else(|e| panic!("{}: {e}", dump.label))
}

/// Every tensor MOFNet reads, rounded as the official bf16 model holds it, bit for bit; the
/// exact values differ from them (the dump tells rounding apart).
#[test]
fn mofnet_weights_bf16_rounded_as_the_official_bf16_model_holds_them() {
    for dump in dumps("sis_precision") {
        let expected = dump.json("mofnet.json");
        let hashes = expected["f32_sha256"].as_object().unwrap_or_else(|| panic!("{}: no f32_sha256", dump.label));
        let pth = source(&dump).join("package/MOF_kitti.pth");
        let rounded = weights::load_checkpoint(&pth, WeightPrecision::Bf16Rounded, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let exact = weights::load_checkpoint(&pth, WeightPrecision::F32, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let mut differ = 0;
        for (name, tensor) in &rounded {
            let want = hashes.get(name).and_then(|h| h.as_str()).unwrap_or_else(|| panic!("{}: the official MOFNet has no `{name}`", dump.label));
            assert_eq!(f32_sha256(tensor), want, "{}: `{name}` is not the official bf16-rounded tensor", dump.label);
            differ += usize::from(f32_sha256(&exact[name]) != want);
        }
        assert!(differ * 2 > rounded.len(), "{}: only {differ} of {} tensors change when rounded", dump.label, rounded.len());
        eprintln!("{}: {} tensors bit-identical to the official bf16 model's, {differ} differ from the checkpoint's", dump.label, rounded.len());
    }
}

/// MOFNet's whole-clip flows from bf16-rounded weights are the official training's; from exact
/// weights they are the f32 ones; and the two differ far beyond the tolerance.
#[test]
fn mofnet_flows_follow_the_weight_precision() {
    for dump in dumps("sis_precision") {
        let t = dump.tensors("flows.safetensors");
        let frames = t.get("frames");
        let (n, h, w, _) = frames.dims4().unwrap_or_else(|e| panic!("{}: frames: {e}", dump.label));
        let values: Vec<f32> = f32_values(frames);
        let images = Array4::from_shape_vec((n, h, w, 3), values)
            .unwrap_or_else(|e| panic!("{e}"))
            .permuted_axes([0, 3, 1, 2])
            .as_standard_layout()
            .to_owned();
        let reference = |name: &str| -> Array4<f32> {
            let r = t.get(name);
            let d = r.dims4().unwrap_or_else(|e| panic!("{}: {name}: {e}", dump.label));
            // The forward half ([:, :2]) is what MOFNet's coarse flows are.
            Array4::from_shape_vec(d, f32_values(r)).unwrap_or_else(|e| panic!("{e}")).slice(s![.., 0..2, .., ..]).to_owned()
        };
        let (want_rounded, want_exact) = (reference("flows_bf16_rounded"), reference("flows_f32"));
        let scale = want_exact.iter().fold(0f32, |m, v| m.max(v.abs()));
        let bound = FLOWS_RELATIVE * scale;
        let max_diff = |a: &Array4<f32>, b: &Array4<f32>| {
            assert_eq!(a.dim(), b.dim(), "{}", dump.label);
            a.iter().zip(b.iter()).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
        };
        let between = max_diff(&want_rounded, &want_exact);
        assert!(between > 20.0 * bound, "{}: the reference flows differ by only {between:e} (bound {bound:e})", dump.label);
        for (precision, want) in [(WeightPrecision::Bf16Rounded, &want_rounded), (WeightPrecision::F32, &want_exact)] {
            let ours = mofnet(&dump, precision).coarse_clip_flows(images.view()).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
            let diff = max_diff(&ours, want);
            assert!(diff <= bound, "{}: {} flows differ from the official ones by {diff:e} (bound {bound:e})", dump.label, precision.as_str());
            eprintln!("{}: {} flows within {diff:e} of the official ones (the two precisions differ by {between:e})", dump.label, precision.as_str());
        }
    }
}

/// The settings name the precision only when rounded, so flows of the two never share a cache
/// entry and runs made before the choice keep their keys.
#[test]
fn mofnet_settings_tell_the_precisions_apart() {
    let dump = dumps("sis_precision").into_iter().next().unwrap_or_else(|| panic!("no sis_precision dump"));
    let (exact, rounded) = (mofnet(&dump, WeightPrecision::F32).settings(), mofnet(&dump, WeightPrecision::Bf16Rounded).settings());
    assert_ne!(exact, rounded);
    assert!(exact.get(motionvl_flow::estimator::WEIGHT_PRECISION_KEY).is_none(), "{exact}");
    assert_eq!(rounded[motionvl_flow::estimator::WEIGHT_PRECISION_KEY], "bf16-rounded");
    assert_eq!(motionvl_flow::settings_without_precision(&rounded), exact);
}

/// The adapter merged into the bf16 model's layers is the official `merge_and_unload` bit for
/// bit; rounding the delta to bf16 before adding it (the other plausible reading of PEFT) is not.
#[test]
fn adapter_merged_into_bf16_weights_as_peft_merges() {
    let mut double_rounding_differs = 0;
    for dump in dumps("sis_precision") {
        let src = source(&dump);
        let expected = dump.tensors("merged.safetensors");
        let files = CheckpointFiles::from_dir(&src.join("base")).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let mut model = Qwen25Vl::load(&files, DType::BF16, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let base: HashMap<String, Tensor> = model.linears_mut().into_iter().map(|(n, l)| (format!("{n}.weight"), l.weight().clone())).collect();
        let lora = LoraWeights::load_peft(&src.join("package"), &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        lora.merge_into_linears(model.linears_mut()).unwrap_or_else(|e| panic!("{}: {e}", dump.label));
        let merged: HashMap<String, Tensor> = model
            .linears_mut()
            .into_iter()
            .map(|(n, l)| {
                assert!(l.adapter().is_none(), "{n} still has an adapter");
                (format!("{n}.weight"), l.weight().clone())
            })
            .collect();
        let names = expected.names();
        assert!(names.len() >= 8, "{}: only {} merged tensors", dump.label, names.len());
        for name in names {
            let ours = merged.get(name.as_str()).unwrap_or_else(|| panic!("{}: the model has no `{name}`", dump.label));
            assert_eq!(ours.dtype(), DType::BF16, "{}: {name}", dump.label);
            let (a, b) = (f32_values(ours), f32_values(expected.get(name)));
            let mismatched = a.iter().zip(&b).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
            assert_eq!(mismatched, 0, "{}: {mismatched} of {} values of `{name}` differ from PEFT's merge", dump.label, a.len());
            assert_ne!(f32_values(&base[name.as_str()]), b, "{}: the adapter leaves `{name}` unchanged", dump.label);
            let module = name.trim_end_matches(".weight");
            let pair = &lora.modules[module];
            let scale = lora.config.scale(pair.a.dim(0).unwrap_or(0));
            let delta = (pair.b.as_tensor().matmul(pair.a.as_tensor()).and_then(|d| d * scale)).unwrap_or_else(|e| panic!("{e}"));
            let twice = (&base[name.as_str()] + delta.to_dtype(DType::BF16).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
            double_rounding_differs += usize::from(f32_values(&twice) != b);
        }
        eprintln!("{}: {} merged weights bit-identical to PEFT's", dump.label, expected.names().len());
    }
    assert!(double_rounding_differs > 0, "no dump tells a single rounding from a double one");
}

/// An evaluation rounds MOFNet by its own dtype and protocol, whatever the run was trained with
/// (the official training and evaluation each round by the dtype they run in), and the rounding
/// is no settings mismatch; other settings still are.
#[test]
fn evaluation_rounds_mofnet_by_its_own_dtype_not_the_trainings() {
    use motionvl_eval::config::{ProtocolKind, RunConfig};
    use motionvl_eval::infer::evaluation_inputs;
    use motionvl_flow::{EstimatorSpec, PseudoImageConfig, estimator_from_spec};
    use motionvl_models::motion::MotionMeta;

    let weights = fixtures_root().join("flow/mofnet/tiny/model.safetensors");
    let sis = fixtures_root().join("sis_motion/tiny-b");
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let run = tmp.path().join("checkpoint-1");
    std::fs::create_dir_all(&run).unwrap_or_else(|e| panic!("{e}"));
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        std::fs::copy(sis.join("package").join(file), run.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
    let key = motionvl_flow::estimator::WEIGHT_PRECISION_KEY;
    let write_meta = |settings: serde_json::Value| {
        let meta = MotionMeta {
            estimator: "mofnet".into(),
            estimator_settings: settings,
            pseudo_images: serde_json::to_value(PseudoImageConfig::official()).unwrap_or_else(|e| panic!("{e}")),
            own_encoder: false,
            connector: None,
        };
        meta.write(&run).unwrap_or_else(|e| panic!("{e}"));
    };
    let config = |protocol: ProtocolKind, dtype: &str| {
        let mut c = RunConfig { out: tmp.path().join("out"), protocol_kind: Some(protocol), ..RunConfig::default() };
        c.model.checkpoint = sis.join("base").display().to_string();
        c.model.adapter = Some(run.clone());
        c.model.dtype = Some(dtype.parse().expect("a dtype"));
        c.motion.weights = Some(weights.clone());
        c
    };
    let evaluated = |c: &RunConfig| {
        let inputs = evaluation_inputs(c, &Device::Cpu).unwrap_or_else(|e| panic!("{e}"));
        inputs.motion.unwrap_or_else(|| panic!("no motion branch")).media.estimator.settings()
    };
    for trained in [WeightPrecision::F32, WeightPrecision::Bf16Rounded] {
        let spec = EstimatorSpec {
            name: motionvl_flow::EstimatorName::MofNet,
            weights: Some(&weights),
            weight_precision: trained,
            ..EstimatorSpec::default()
        };
        write_meta(estimator_from_spec(&spec, &Device::Cpu).unwrap_or_else(|e| panic!("{e}")).settings());
        for (protocol, dtype, expected) in
            [(ProtocolKind::Official, "bf16", Some("bf16-rounded")), (ProtocolKind::Official, "f32", None), (ProtocolKind::Paper, "bf16", None)]
        {
            let settings = evaluated(&config(protocol, dtype));
            assert_eq!(settings.get(key).and_then(|v| v.as_str()), expected, "trained {}, {protocol:?} {dtype}: {settings}", trained.as_str());
        }
    }
    let mut other = estimator_from_spec(
        &EstimatorSpec { name: motionvl_flow::EstimatorName::MofNet, weights: Some(&weights), ..EstimatorSpec::default() },
        &Device::Cpu,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .settings();
    other["iters"] = 5.into();
    write_meta(other);
    let err = evaluation_inputs(&config(ProtocolKind::Official, "bf16"), &Device::Cpu).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("differ from those it was trained with"), "{err}");
}
