//! The trainer's loss (`Qwen25Vl::training_loss`, which differentiates the LM head and a trained
//! embedding outside Candle's autograd) against Candle's autograd through everything, over every
//! Qwen2.5-VL dump's weights: the same variables get a gradient, and the same gradient, for a full
//! model, a frozen one with LoRA on the decoder, and one with an adapter on the LM head too
//! (autograd's path there).

use candle_core::backprop::GradStore;
use candle_core::{DType, Device, Tensor, Var};
use motionvl_models::lora::{LoraConfig, LoraWeights};
use motionvl_models::lora_adapter::{LoraAdapter, LoraRuntime};
use motionvl_models::qwen25vl::Qwen25Vl;
use motionvl_models::seeded;
use motionvl_models::{CheckpointWeights, Qwen25VlConfig};
use motionvl_tests::fixtures::max_rel_diff;
use motionvl_tests::qwen_dump::QwenDump;

/// The trainer's path and autograd agree to summation order.
const RELATIVE: f32 = 1e-5;
/// The micro-batch scale of gradient accumulation (1 / micro-batches per step).
const SCALE: f64 = 0.25;

/// `(trainer's path, autograd)` gradients of `SCALE × loss` for one dump's prompt.
fn both_gradients(fx: &QwenDump, model: &Qwen25Vl) -> (GradStore, GradStore) {
    let batch = fx.prompt("");
    let features = model.encode_vision(&fx.video_inputs()).unwrap();
    let positions = fx.hf_positions("", &batch);
    let labels = fx.inputs.i64_rows("labels");
    let trainer = model.training_loss(&batch, &features, &positions, &labels).unwrap();
    let embeds = model.embed(&batch, &features).unwrap();
    let autograd = model.loss_from_embeds(&embeds, &batch.mask, &positions, &labels).unwrap();
    let diff = (trainer.value().unwrap() - autograd.to_scalar::<f32>().unwrap() as f64).abs();
    assert!(diff < 1e-6, "{}: the two losses differ by {diff:e}", fx.dump.label);
    (trainer.backward(SCALE).unwrap(), (autograd * SCALE).unwrap().backward().unwrap())
}

fn assert_same_gradients(what: &str, vars: &[(String, Tensor)], trainer: &GradStore, autograd: &GradStore) {
    let mut compared = 0;
    for (name, var) in vars {
        match (trainer.get(var), autograd.get(var)) {
            (Some(t), Some(a)) => {
                let rel = max_rel_diff(t, a);
                assert!(rel <= RELATIVE, "{what}: gradient of {name}: relative difference {rel:e}");
                compared += 1;
            }
            (None, None) => {}
            (t, a) => panic!("{what}: {name} has a gradient on the trainer's path: {}, under autograd: {}", t.is_some(), a.is_some()),
        }
    }
    assert!(compared > 0, "{what}: no variable got a gradient");
}

fn weights(fx: &QwenDump) -> CheckpointWeights {
    CheckpointWeights::open(&[fx.dump.path("model.safetensors")]).unwrap()
}

#[test]
fn every_parameter_gets_autograds_gradient() {
    for fx in QwenDump::all() {
        let cfg = Qwen25VlConfig::from_file(&fx.dump.path("config.json")).unwrap();
        let (vb, vars) = weights(&fx).to_vars(DType::F32, &Device::Cpu).unwrap();
        let model = Qwen25Vl::new(&cfg, vb).unwrap();
        let (trainer, autograd) = both_gradients(&fx, &model);
        let vars: Vec<(String, Tensor)> = vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect();
        let embedding = vars.iter().find(|(n, _)| n == "model.embed_tokens.weight").map(|(_, v)| v).unwrap();
        assert!(trainer.get(embedding).is_some(), "{}: the trained embedding gets no gradient", fx.dump.label);
        assert_same_gradients(&fx.dump.label, &vars, &trainer, &autograd);
    }
}

/// A frozen model with LoRA on some decoder layers and, when `adapt_head`, an adapter on the LM
/// head too (LoRA configs never select it; a caller can attach one by hand).
fn lora_on_frozen_model(fx: &QwenDump, adapt_head: bool) -> (Qwen25Vl, Vec<(String, Tensor)>) {
    let cfg = Qwen25VlConfig::from_file(&fx.dump.path("config.json")).unwrap();
    let mut model = Qwen25Vl::new(&cfg, weights(fx).var_builder(DType::F32, &Device::Cpu)).unwrap();
    let targets = ["q_proj", "v_proj", "down_proj"].map(String::from).to_vec();
    let lora = LoraWeights::init(
        &model.linear_shapes(),
        &LoraConfig { rank: 4, alpha: 8.0, dropout: 0.0, target_modules: targets, ..LoraConfig::default() },
        7,
        &Device::Cpu,
    )
    .unwrap();
    // B starts at zero: give it values so that A's gradient is not zero either.
    for (k, pair) in lora.modules.values().enumerate() {
        pair.b.set(&seeded::randn(pair.b.shape(), 0.1, 100 + k as u64, &Device::Cpu).unwrap()).unwrap();
    }
    lora.attach(model.linears_mut()).unwrap();
    let mut vars: Vec<(String, Tensor)> = lora.named_vars().into_iter().map(|(n, v)| (n, v.as_tensor().clone())).collect();
    if adapt_head {
        let mut linears = model.linears_mut();
        let (_, head) = linears.iter_mut().find(|(name, _)| name == "lm_head").unwrap();
        let a = Var::from_tensor(&seeded::randn((4, head.in_dim()), 0.1, 2, &Device::Cpu).unwrap()).unwrap();
        let b = Var::from_tensor(&seeded::randn((head.out_dim(), 4), 0.1, 3, &Device::Cpu).unwrap()).unwrap();
        head.set_adapter(Some(LoraAdapter::new(a.as_tensor().clone(), b.as_tensor().clone(), 2.0, 0.0, 99, LoraRuntime::default())));
        vars.extend([("lm_head.lora_A".to_owned(), a.as_tensor().clone()), ("lm_head.lora_B".to_owned(), b.as_tensor().clone())]);
    }
    (model, vars)
}

#[test]
fn lora_gradients_match_autograd_with_and_without_an_adapted_head() {
    for fx in QwenDump::all() {
        for adapt_head in [false, true] {
            let (model, vars) = lora_on_frozen_model(&fx, adapt_head);
            let (trainer, autograd) = both_gradients(&fx, &model);
            assert_same_gradients(&format!("{} (adapter on the LM head: {adapt_head})", fx.dump.label), &vars, &trainer, &autograd);
        }
    }
}
