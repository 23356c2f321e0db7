//! Qwen3-VL in Candle against transformers' reference dumps (`tests/fixtures/qwen3_vl/*`, made by
//! `tools/fixtures/qwen3_vl.py`), in f32 on CPU: the vision tower with its interpolated position
//! table and every DeepStack level, M-RoPE positions with a video split by frame, logits, hidden
//! states, loss, gradients with and without checkpointing, greedy generation, a PEFT LoRA
//! adapter, both config layouts and both weight-name schemes. Every dump is checked.

use std::collections::HashMap;

use candle_core::{DType, Device, Tensor};
use motionvl_models::CheckpointWeights;
use motionvl_models::generate::GenerateOptions;
use motionvl_models::lora::LoraWeights;
use motionvl_models::qwen3vl::{Qwen3Vl, Qwen3VlConfig};
use motionvl_tests::fixtures::{Tensors, assert_close, max_rel_diff, tolerance};
use motionvl_tests::qwen_dump::QwenDump;

fn dumps() -> Vec<QwenDump> {
    let dumps = QwenDump::all_qwen3();
    assert!(dumps.len() >= 2, "expected the Qwen3-VL dumps under tests/fixtures/qwen3_vl");
    dumps
}

fn config(fx: &QwenDump) -> Qwen3VlConfig {
    Qwen3VlConfig::from_file(&fx.dump.path("config.json")).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label))
}

#[test]
fn vision_tower_and_deepstack_match_reference() {
    for fx in dumps() {
        let model = fx.qwen3_model();
        for (prefix, input) in [("vision.", fx.video()), ("image_vision.", fx.image())] {
            let trace = model.visual().forward_traced(&input.pixel_values, &input.grids).unwrap();
            let what = |part: &str| format!("{}: {prefix}{part}", fx.dump.label);
            let want = |part: &str| fx.expected.get(&format!("{prefix}{part}"));
            assert_close(&what("patch embedding"), &trace.patch_embed, want("patch_embed"), tolerance::F32_VISION_FEATURES);
            assert_close(&what("interpolated position embedding"), &trace.pos_embed, want("pos_embed"), tolerance::F32_VISION_FEATURES);
            let depth = (0..).take_while(|i| fx.expected.has(&format!("{prefix}block{i}"))).count();
            assert_eq!(trace.blocks.len(), depth, "{}: the dump traces every vision block", fx.dump.label);
            for (i, block) in trace.blocks.iter().enumerate() {
                assert_close(&what(&format!("block {i}")), block, want(&format!("block{i}")), tolerance::F32_VISION_BLOCKS);
            }
            assert_close(&what("merged features"), &trace.output.features, want("out"), tolerance::F32_VISION_FEATURES);
            let levels = (0..).take_while(|k| fx.expected.has(&format!("{prefix}deepstack.{k}"))).count();
            assert_eq!(trace.output.deepstack.len(), levels, "{}: DeepStack levels", fx.dump.label);
            assert_eq!(levels, model.config().vision.deepstack_visual_indexes.len(), "{}", fx.dump.label);
            for (k, level) in trace.output.deepstack.iter().enumerate() {
                assert_close(&what(&format!("DeepStack level {k}")), level, want(&format!("deepstack.{k}")), tolerance::F32_VISION_FEATURES);
            }
        }
    }
}

#[test]
fn positions_split_the_video_by_frame_as_transformers_does() {
    for fx in dumps() {
        let model = fx.qwen3_model();
        for (prefix, inputs) in [("", fx.video_inputs()), ("batch.", fx.batch_inputs())] {
            let batch = fx.prompt(prefix);
            let ours = model.positions(&batch, &inputs).unwrap();
            let reference = fx.expected.i64_3d(&format!("{prefix}position_ids"));
            for (axis, expected) in reference.iter().enumerate() {
                for (b, mask) in batch.mask.iter().enumerate() {
                    for (i, _) in mask.iter().enumerate().filter(|(_, real)| **real) {
                        assert_eq!(ours.positions[axis][b][i], expected[b][i], "{}: {prefix}position axis {axis} row {b} col {i}", fx.dump.label);
                    }
                }
            }
            // The first generated token of each prompt continues where transformers decoded it.
            let prompt = fx.prompt(&format!("{prefix}prompt_"));
            let next = model.positions(&prompt, &inputs).unwrap().next;
            assert_eq!(next, fx.expected.i64_flat(&format!("{prefix}decode_start")), "{}: {prefix}first generated position", fx.dump.label);
        }
    }
}

#[test]
fn logits_hidden_states_and_loss_match_reference() {
    for fx in dumps() {
        let model = fx.qwen3_model();
        let batch = fx.prompt("");
        let inputs = fx.video_inputs();
        let what = |part: &str| format!("{}: {part}", fx.dump.label);
        let logits = model.forward(&batch, &inputs, None).unwrap();
        assert_close(&what("logits"), &logits, fx.expected.get("logits"), tolerance::F32_ACTIVATIONS);
        let positions = model.positions(&batch, &inputs).unwrap();
        let loss = model.loss(&batch, &inputs, &positions, &fx.inputs.i64_rows("labels")).unwrap();
        assert_close(&what("loss"), &loss, fx.expected.get("loss"), tolerance::LOSS);
        let states = model.hidden_states(&batch, &inputs, &positions).unwrap();
        assert_eq!(states.len(), model.config().text.num_hidden_layers + 1, "{}", fx.dump.label);
        for (k, state) in states.iter().enumerate() {
            assert_close(&what(&format!("hidden_states.{k}")), state, fx.expected.get(&format!("hidden_states.{k}")), tolerance::F32_ACTIVATIONS);
        }

        let batch = fx.prompt("batch.");
        let logits = model.forward(&batch, &fx.batch_inputs(), None).unwrap();
        // Logits at padding are undefined; the reference zeroes them.
        let keep: Vec<f32> = batch.mask.iter().flatten().map(|&m| if m { 1.0 } else { 0.0 }).collect();
        let keep = Tensor::from_vec(keep, (batch.rows(), batch.len(), 1), &Device::Cpu).unwrap();
        assert_close(
            &what("padded batch logits (image and video rows)"),
            &logits.broadcast_mul(&keep).unwrap(),
            fx.expected.get("batch.logits"),
            tolerance::F32_ACTIVATIONS,
        );
    }
}

#[test]
fn gradients_match_reference_with_and_without_checkpointing() {
    for fx in dumps() {
        let cfg = config(&fx);
        for checkpointing in [false, true] {
            let weights = CheckpointWeights::open(&[fx.dump.path("model.safetensors")]).unwrap();
            let (vb, vars) = weights.to_vars(DType::F32, &Device::Cpu).unwrap();
            let mut model = Qwen3Vl::new(&cfg, vb).unwrap();
            let recomputed = checkpointing.then(|| model.enable_gradient_checkpointing());
            let batch = fx.prompt("");
            let inputs = fx.video_inputs();
            let positions = model.positions(&batch, &inputs).unwrap();
            let loss = model.loss(&batch, &inputs, &positions, &fx.inputs.i64_rows("labels")).unwrap();
            let mut grads = loss.backward().unwrap();
            if let Some(recomputed) = recomputed {
                recomputed.merge_into(&mut grads).unwrap();
            }
            let names: Vec<&String> = fx.expected.names().into_iter().filter(|n| n.starts_with("grads.")).collect();
            assert!(names.iter().any(|n| n.contains("deepstack_merger_list")), "{}: no reference gradient of a DeepStack merger", fx.dump.label);
            for name in names {
                let param = motionvl_models::checkpoint::canonical_name(&name["grads.".len()..]);
                let var = vars.get(&param).unwrap_or_else(|| panic!("{}: no parameter {param}", fx.dump.label));
                let grad = grads.get(var).unwrap_or_else(|| panic!("{}: no gradient reached {param}", fx.dump.label));
                let rel = max_rel_diff(grad, fx.expected.get(name));
                assert!(
                    rel <= tolerance::GRADIENT_RELATIVE,
                    "{} (checkpointing {checkpointing}): gradient of {param}: relative error {rel:e}",
                    fx.dump.label
                );
            }
        }
    }
}

#[test]
fn greedy_generation_matches_reference() {
    for fx in dumps() {
        let model = fx.qwen3_model();
        let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: true };
        for (prefix, inputs) in [("", fx.video_inputs()), ("batch.", fx.batch_inputs())] {
            let batch = fx.prompt(&format!("{prefix}prompt_"));
            let out = model.generate(&batch, &inputs, None, &options, None).unwrap();
            for (b, row) in fx.expected.i64_rows(&format!("{prefix}generated_ids")).iter().enumerate() {
                let new: Vec<u32> = row[batch.len()..].iter().map(|&t| t as u32).collect();
                assert_eq!(out.tokens[b], new, "{}: {prefix}generated ids row {b}", fx.dump.label);
            }
            let steps = Tensor::stack(&out.step_logits, 1).unwrap();
            let what = format!("{}: {prefix}generated logits", fx.dump.label);
            assert_close(&what, &steps, fx.expected.get(&format!("{prefix}generated_logits")), tolerance::F32_ACTIVATIONS);
        }
    }
}

#[test]
fn peft_adapter_reproduces_peft_logits_and_generation() {
    let with_lora: Vec<QwenDump> = dumps().into_iter().filter(|fx| fx.dump.has("lora")).collect();
    assert!(!with_lora.is_empty(), "no Qwen3-VL dump carries a PEFT adapter");
    for fx in with_lora {
        let expected = fx.dump.tensors("lora/lora_expected.safetensors");
        let lora = LoraWeights::load_peft(&fx.dump.path("lora"), &Device::Cpu).unwrap();
        let mut model = fx.qwen3_model();
        lora.attach(model.linears_mut()).unwrap();
        let logits = model.forward(&fx.prompt(""), &fx.video_inputs(), None).unwrap();
        assert_close(&format!("{}: LoRA logits", fx.dump.label), &logits, expected.get("lora.logits"), tolerance::F32_ACTIVATIONS);
        let prompt = fx.prompt("prompt_");
        let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: true };
        let generated = model.generate(&prompt, &fx.video_inputs(), None, &options, None).unwrap();
        let want: Vec<u32> = expected.i64_flat("lora.generated_ids")[prompt.len()..].iter().map(|&t| t as u32).collect();
        assert_eq!(generated.tokens[0], want, "{}: LoRA generation", fx.dump.label);
    }
}

/// The hub's config layout and transformers 5's, and the hub's weight names next to the
/// pre-4.52 ones (`visual.*`, `model.layers.*`), all give the same model.
#[test]
fn both_config_layouts_and_weight_namings_give_the_same_model() {
    for fx in dumps() {
        let nested = config(&fx);
        let hub = Qwen3VlConfig::from_file(&fx.dump.path("config.hub_style.json")).unwrap();
        assert_eq!(hub, nested, "{}: hub-style and transformers-5 configs", fx.dump.label);
        let written = Qwen3VlConfig::from_json(&nested.to_hub_json().to_string()).unwrap();
        assert_eq!(written, nested, "{}: the config motionvl writes reads back the same", fx.dump.label);

        let old_names = tempfile::tempdir().unwrap();
        let tensors = Tensors::load(&fx.dump.path("model.safetensors"));
        let renamed: HashMap<String, Tensor> =
            tensors.names().into_iter().map(|k| (motionvl_models::checkpoint::canonical_name(k), tensors.get(k).clone())).collect();
        assert!(renamed.keys().all(|k| !k.contains("language_model")), "{}: the renamed copy uses the old names", fx.dump.label);
        let file = old_names.path().join("model.safetensors");
        candle_core::safetensors::save(&renamed, &file).unwrap();
        let vb = CheckpointWeights::open(&[file]).unwrap().var_builder(DType::F32, &Device::Cpu);
        let model = Qwen3Vl::new(&hub, vb).unwrap();
        let logits = model.forward(&fx.prompt(""), &fx.video_inputs(), None).unwrap();
        assert_close(&format!("{}: logits under the old names", fx.dump.label), &logits, fx.expected.get("logits"), tolerance::F32_ACTIVATIONS);
    }
}

#[test]
fn a_config_that_cannot_build_its_model_is_refused_with_the_key() {
    let fx = &dumps()[0];
    let text = fx.dump.text("config.json");
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["vision_config"]["num_position_embeddings"] = serde_json::json!(15);
    let err = Qwen3VlConfig::from_json(&json.to_string()).unwrap_err();
    assert!(err.contains("num_position_embeddings") && err.contains("15"), "{err}");
    json["vision_config"]["num_position_embeddings"] = serde_json::json!(16);
    json["vision_config"]["deepstack_visual_indexes"] = serde_json::json!([0, 99]);
    let err = Qwen3VlConfig::from_json(&json.to_string()).unwrap_err();
    assert!(err.contains("deepstack_visual_indexes") && err.contains("99"), "{err}");
    json["model_type"] = serde_json::json!("qwen2_5_vl");
    let err = Qwen3VlConfig::from_json(&json.to_string()).unwrap_err();
    assert!(err.contains("qwen2_5_vl"), "{err}");
}
