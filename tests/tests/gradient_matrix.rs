//! Gradients of every trained tensor in every configuration a recipe can ask for: gradient
//! checkpointing on and off × motion connector absent or present × f32 and bf16 base weights ×
//! LoRA targets (attention only, as the official SIS-Motion recipe; every projection, as the
//! paper's; the MLPs of the decoder and of the vision tower). Each is compared with the same
//! model's un-checkpointed f32 gradients, and every trained tensor must get a non-zero gradient:
//! checkpointing once dropped every LoRA gradient of a visual-only run, which a test where an
//! upstream tensor was trained could not see.
//!
//! The un-checkpointed f32 gradients themselves equal transformers' on these dumps
//! (`qwen25vl_parity.rs`), and the LoRA forward PEFT's (`lora.rs`).

use candle_core::{DType, Device, Tensor, Var};
use motionvl_models::CheckpointFiles;
use motionvl_models::lora::{DEFAULT_TARGETS, LoraConfig, LoraWeights};
use motionvl_models::motion::{Connector, MotionBranch, vision_features};
use motionvl_models::qwen25vl::{PixelInput, Qwen25Vl};
use motionvl_models::seeded;
use motionvl_tests::fixtures::{max_abs, max_rel_diff};
use motionvl_tests::qwen_dump::QwenDump;

/// With checkpointing against without, in the same dtype: measured 0 in f32 and in bf16 (the
/// recomputation repeats the same ops in the same order); the issue asks 1e-5 in f32.
const CHECKPOINTING_RELATIVE: f32 = 1e-5;
/// bf16 base weights against f32, as the cosine of the two gradients: bf16's 8 mantissa bits
/// through every layer move single entries by up to 79% of the tensor's largest (a vision
/// block's LoRA A), so entries are not comparable; directions are. Measured 0.941 at worst over
/// the dumps (0.927 with other values of B, the vision tower's MLP adapters); a dropped or
/// mis-signed path gives about 0 or less.
const BF16_MIN_COSINE: f64 = 0.85;

#[derive(Debug, Clone, Copy)]
enum Targets {
    /// q/k/v/o: the official SIS-Motion recipe.
    Attention,
    /// All seven projections: the paper's recipe and motionvl's default.
    All,
    /// gate/up/down of the decoder and of the vision tower: the vision path trains too.
    MlpWithVision,
}

impl Targets {
    fn config(self) -> LoraConfig {
        let names: &[&str] = match self {
            Targets::Attention => &["q_proj", "k_proj", "v_proj", "o_proj"],
            Targets::All => &DEFAULT_TARGETS,
            Targets::MlpWithVision => &["gate_proj", "up_proj", "down_proj"],
        };
        LoraConfig {
            rank: 4,
            alpha: 8.0,
            // Dropout on: a recomputed layer must draw the masks of its first pass.
            dropout: 0.1,
            target_modules: names.iter().map(|s| s.to_string()).collect(),
            adapt_vision: matches!(self, Targets::MlpWithVision),
            use_rslora: false,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Setting {
    dtype: DType,
    checkpointing: bool,
}

/// Trained tensors by name, and their gradients after one training-loss backward pass.
fn gradients(fx: &QwenDump, targets: Targets, motion: bool, setting: Setting) -> Vec<(String, Tensor)> {
    let files = CheckpointFiles::from_dir(&fx.dump.dir).unwrap();
    let mut model = Qwen25Vl::load(&files, setting.dtype, &Device::Cpu).unwrap();
    let recomputed = setting.checkpointing.then(|| model.enable_gradient_checkpointing());
    let lora = LoraWeights::init(&model.linear_shapes(), &targets.config(), 7, &Device::Cpu).unwrap();
    for (k, pair) in lora.modules.values().enumerate() {
        // B starts at zero, which would leave A's gradient exactly zero and hide whether it flows.
        pair.b.set(&seeded::randn(pair.b.dims(), 0.05, k as u64, &Device::Cpu).unwrap()).unwrap();
    }
    lora.attach(model.linears_mut()).unwrap();
    lora.runtime().set_training(true);
    lora.runtime().set_dropout_seed(11);
    let mut trained = lora.named_vars();

    let inputs = fx.video_inputs();
    let (branch, pseudo) = if motion {
        let vars = Connector::init_vars(model.config().text.hidden_size, 3, &Device::Cpu).unwrap();
        for (k, (name, var)) in vars.iter().enumerate() {
            if name.starts_with("connector.fc2.") {
                // W₂ starts at zero too, and would hide W₁'s gradient.
                var.set(&seeded::randn(var.dims(), 0.05, 100 + k as u64, &Device::Cpu).unwrap()).unwrap();
            }
        }
        let branch = MotionBranch::from_visual(model.visual(), &vars).unwrap();
        trained.extend(vars);
        // Pseudo-images laid out like the video's pixels, with other values than the frames.
        let video = fx.video();
        let pixels = seeded::randn(video.pixel_values.dims(), 1.0, 999, &Device::Cpu).unwrap();
        (Some(branch), Some(PixelInput { pixel_values: pixels, grids: video.grids }))
    } else {
        (None, None)
    };
    let batch = fx.prompt("");
    let features = vision_features(&model, branch.as_ref(), &inputs, pseudo.as_ref()).unwrap();
    let positions = model.positions(&batch, &inputs).unwrap();
    let labels = fx.inputs.i64_rows("labels");
    let loss = model.training_loss(&batch, &features, &positions, &labels).unwrap();
    let mut grads = loss.backward(1.0).unwrap();
    if let Some(recomputed) = recomputed {
        recomputed.merge_into(&mut grads).unwrap();
    }
    let what = |name: &str| format!("{} {targets:?} motion {motion} {setting:?}: {name}", fx.dump.label);
    trained
        .into_iter()
        .map(|(name, var): (String, Var)| {
            let grad = grads.get(var.as_tensor()).unwrap_or_else(|| panic!("{}: no gradient reached it", what(&name)));
            assert!(max_abs(grad) > 0.0, "{}: zero gradient", what(&name));
            (name, grad.to_dtype(DType::F32).unwrap())
        })
        .collect()
}

fn cosine(a: &Tensor, b: &Tensor) -> f64 {
    let dot = (a * b).unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() as f64;
    let norm = |t: &Tensor| (t.sqr().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() as f64).sqrt();
    dot / (norm(a) * norm(b)).max(1e-30)
}

#[test]
fn every_trained_tensor_gets_the_reference_gradient_in_every_configuration() {
    let (mut worst_f32, mut worst_bf16, mut least_cosine) = (0f32, 0f32, 1f64);
    for fx in QwenDump::all() {
        for targets in [Targets::Attention, Targets::All, Targets::MlpWithVision] {
            for motion in [false, true] {
                let run = |dtype, checkpointing| gradients(&fx, targets, motion, Setting { dtype, checkpointing });
                let reference = run(DType::F32, false);
                let (f32_ckpt, bf16_plain, bf16_ckpt) = (run(DType::F32, true), run(DType::BF16, false), run(DType::BF16, true));
                for (k, (name, want)) in reference.iter().enumerate() {
                    let what = format!("{} {targets:?} motion {motion}: gradient of {name}", fx.dump.label);
                    let rel = max_rel_diff(&f32_ckpt[k].1, want);
                    assert!(rel <= CHECKPOINTING_RELATIVE, "{what}: f32 with checkpointing, relative error {rel:e}");
                    let rel_bf16 = max_rel_diff(&bf16_ckpt[k].1, &bf16_plain[k].1);
                    assert!(rel_bf16 <= CHECKPOINTING_RELATIVE, "{what}: bf16 with checkpointing against without, relative error {rel_bf16:e}");
                    let cos = cosine(&bf16_plain[k].1, want);
                    assert!(cos >= BF16_MIN_COSINE, "{what}: bf16 against f32, cosine {cos}");
                    (worst_f32, worst_bf16, least_cosine) = (worst_f32.max(rel), worst_bf16.max(rel_bf16), least_cosine.min(cos));
                }
            }
        }
    }
    eprintln!(
        "checkpointing against not: worst relative error {worst_f32:e} (f32), {worst_bf16:e} (bf16); bf16 against f32: least cosine {least_cosine:.4}"
    );
}
