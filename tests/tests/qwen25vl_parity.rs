//! Qwen2.5-VL in Candle against transformers' reference dumps (`tests/fixtures/qwen2_5_vl/*`,
//! made by `tools/fixtures/qwen2_5_vl.py`), in f32 on CPU. Every dump is checked, so a new dump
//! needs no code; every comparison with transformers feeds the positions transformers used, and
//! the legacy positions (motionvl's default) are checked against the dump's `legacy.*`, which
//! transformers 4.57.1 made (`tools/fixtures/qwen2_5_vl_legacy.py`): its `get_rope_index`, and
//! its greedy generation, against which the default generation path runs end to end.

use candle_core::{DType, Device, Tensor};
use motionvl_models::qwen25vl::{GenerateOptions, Qwen25Vl, causal_lm_loss};
use motionvl_models::vision::VisionLayout;
use motionvl_models::{CheckpointWeights, Qwen25VlConfig};
use motionvl_tests::fixtures::{assert_close, max_rel_diff, tolerance};
use motionvl_tests::qwen_dump::QwenDump;

#[test]
fn vision_layout_matches_reference() {
    for fx in QwenDump::all() {
        let cfg = Qwen25VlConfig::from_file(&fx.dump.path("config.json")).unwrap();
        let layout = VisionLayout::new(&fx.grid("video_grid_thw"), &cfg.vision).unwrap();
        let as_usize = |name: &str| -> Vec<usize> { fx.expected.i64_flat(name).into_iter().map(|v| v as usize).collect() };
        assert_eq!(layout.window_index, as_usize("vision.window_index"), "{}: window index", fx.dump.label);
        assert_eq!(layout.cu_window_seqlens, as_usize("vision.cu_window_seqlens"), "{}: window lengths", fx.dump.label);
        assert_eq!(layout.cu_seqlens, as_usize("vision.cu_seqlens"), "{}: frame lengths", fx.dump.label);
        let rot: Vec<[usize; 2]> = fx.expected.i64_rows("vision.rot_pos_ids").into_iter().map(|r| [r[0] as usize, r[1] as usize]).collect();
        assert_eq!(layout.rot_pos_ids, rot, "{}: rotary positions", fx.dump.label);
    }
}

#[test]
fn vision_tower_matches_reference() {
    for fx in QwenDump::all() {
        let model = fx.model();
        let video = fx.video();
        let trace = model.visual().forward_traced(&video.pixel_values, &video.grids).unwrap();
        let what = |part: &str| format!("{}: {part}", fx.dump.label);
        assert_close(&what("patch embedding"), &trace.patch_embed, fx.expected.get("vision.patch_embed"), tolerance::F32_VISION_FEATURES);
        let depth = (0..).take_while(|i| fx.expected.has(&format!("vision.block{i}"))).count();
        assert_eq!(trace.blocks.len(), depth, "{}: the dump traces every vision block", fx.dump.label);
        for (i, block) in trace.blocks.iter().enumerate() {
            assert_close(&what(&format!("vision block {i}")), block, fx.expected.get(&format!("vision.block{i}")), tolerance::F32_VISION_BLOCKS);
        }
        assert_close(&what("video features"), &trace.output, fx.expected.get("vision_out"), tolerance::F32_VISION_FEATURES);
        let image = fx.image();
        let image_out = model.visual().forward(&image.pixel_values, &image.grids).unwrap();
        assert_close(&what("image features"), &image_out, fx.expected.get("image_vision_out"), tolerance::F32_VISION_FEATURES);
    }
}

#[test]
fn positions_follow_the_legacy_algorithm() {
    for fx in QwenDump::all() {
        let model = fx.model();
        for (prefix, inputs) in [("", fx.video_inputs()), ("batch.", fx.batch_inputs())] {
            let batch = fx.prompt(prefix);
            let ours = model.positions(&batch, &inputs).unwrap();
            let reference = fx.expected.i64_3d(&format!("{prefix}legacy.position_ids"));
            for (axis, expected) in reference.iter().enumerate().take(3) {
                for (b, mask) in batch.mask.iter().enumerate() {
                    for (i, &real) in mask.iter().enumerate() {
                        if real {
                            assert_eq!(
                                ours.positions[axis][b][i], expected[b][i],
                                "{}: {prefix}legacy position axis {axis} row {b} col {i}",
                                fx.dump.label
                            );
                        }
                    }
                }
            }
            let deltas = fx.expected.i64_flat(&format!("{prefix}legacy.rope_deltas"));
            assert_eq!(ours.deltas, deltas, "{}: {prefix}legacy deltas", fx.dump.label);
            // transformers 4.57.1 decodes the first new token at its cache position (the padded
            // length) + delta: the position motionvl's default generation continues at.
            let width = batch.len() as i64;
            let decode_start: Vec<i64> = deltas.iter().map(|d| width + d).collect();
            assert_eq!(ours.next, decode_start, "{}: {prefix}first generated position", fx.dump.label);
            // Where transformers' own positions agree, ours equal them too; where they differ the
            // dump proves the difference is real, not a reading mistake.
            let hf = fx.hf_positions(prefix, &batch);
            let agree = hf.positions == ours.positions;
            assert_eq!(agree, fx.positions_agree(prefix), "{}: {prefix}positions agree with transformers'", fx.dump.label);
        }
    }
}

#[test]
fn logits_hidden_states_and_loss_match_reference() {
    for fx in QwenDump::all() {
        let model = fx.model();
        let batch = fx.prompt("");
        let inputs = fx.video_inputs();
        let what = |part: &str| format!("{}: {part}", fx.dump.label);
        let logits = model.forward(&batch, &inputs, None).unwrap();
        assert_close(&what("logits with legacy positions"), &logits, fx.expected.get("legacy.logits"), tolerance::F32_ACTIVATIONS);

        let hf = fx.hf_positions("", &batch);
        let logits = model.forward(&batch, &inputs, Some(&hf)).unwrap();
        assert_close(&what("logits"), &logits, fx.expected.get("logits"), tolerance::F32_ACTIVATIONS);
        let labels = fx.inputs.i64_rows("labels");
        let loss = causal_lm_loss(&logits, &labels).unwrap();
        assert_close(&what("loss"), &loss, fx.expected.get("loss"), tolerance::LOSS);
        let embeds = model.embed(&batch, &model.encode_vision(&inputs).unwrap()).unwrap();
        let loss = model.loss_from_embeds(&embeds, &batch.mask, &hf, &labels).unwrap();
        assert_close(&what("loss with the LM head on labelled rows only"), &loss, fx.expected.get("loss"), tolerance::LOSS);

        let states = model.hidden_states(&batch, &inputs, &hf).unwrap();
        assert_eq!(states.len(), model.config().text.num_hidden_layers + 1, "{}", fx.dump.label);
        for (k, state) in states.iter().enumerate() {
            assert_close(&what(&format!("hidden_states.{k}")), state, fx.expected.get(&format!("hidden_states.{k}")), tolerance::F32_ACTIVATIONS);
        }
    }
}

#[test]
fn both_config_layouts_give_the_same_model() {
    for fx in QwenDump::all() {
        let nested = Qwen25VlConfig::from_file(&fx.dump.path("config.json")).unwrap();
        let hub = Qwen25VlConfig::from_file(&fx.dump.path("config.hub_style.json")).unwrap();
        assert_eq!(hub, nested, "{}: hub-style and nested configs", fx.dump.label);
        let vb = CheckpointWeights::open(&[fx.dump.path("model.safetensors")]).unwrap().var_builder(DType::F32, &Device::Cpu);
        let model = Qwen25Vl::new(&hub, vb).unwrap();
        let batch = fx.prompt("");
        let logits = model.forward(&batch, &fx.video_inputs(), Some(&fx.hf_positions("", &batch))).unwrap();
        assert_close(&format!("{}: logits from the hub-style config", fx.dump.label), &logits, fx.expected.get("logits"), tolerance::F32_ACTIVATIONS);
    }
}

#[test]
fn gradients_match_reference_with_and_without_checkpointing() {
    for fx in QwenDump::all() {
        let cfg = Qwen25VlConfig::from_file(&fx.dump.path("config.json")).unwrap();
        // Candle's autograd through everything, and the trainer's path (the LM head's and the
        // embedding's gradients made directly, `motionvl_models::training_loss`).
        for (checkpointing, trainer_path) in [(false, false), (true, false), (false, true), (true, true)] {
            let weights = CheckpointWeights::open(&[fx.dump.path("model.safetensors")]).unwrap();
            let (vb, vars) = weights.to_vars(DType::F32, &Device::Cpu).unwrap();
            let mut model = Qwen25Vl::new(&cfg, vb).unwrap();
            let recomputed = checkpointing.then(|| model.enable_gradient_checkpointing());
            // Both with the LM head only on the labelled rows.
            let batch = fx.prompt("");
            let features = model.encode_vision(&fx.video_inputs()).unwrap();
            let positions = fx.hf_positions("", &batch);
            let labels = fx.inputs.i64_rows("labels");
            let mut grads = if trainer_path {
                let loss = model.training_loss(&batch, &features, &positions, &labels).unwrap();
                assert_close(&format!("{}: the trainer's loss", fx.dump.label), loss.loss(), fx.expected.get("loss"), tolerance::LOSS);
                loss.backward(1.0).unwrap()
            } else {
                let embeds = model.embed(&batch, &features).unwrap();
                model.loss_from_embeds(&embeds, &batch.mask, &positions, &labels).unwrap().backward().unwrap()
            };
            if let Some(recomputed) = recomputed {
                recomputed.merge_into(&mut grads).unwrap();
            }
            let names: Vec<&String> = fx.expected.names().into_iter().filter(|n| n.starts_with("grads.")).collect();
            assert!(names.iter().any(|n| n.ends_with("embed_tokens.weight")), "{}: no reference gradient of the embedding", fx.dump.label);
            for name in names {
                let param = &name["grads.".len()..];
                let var = vars.get(param).unwrap_or_else(|| panic!("{}: no parameter {param}", fx.dump.label));
                let grad = grads.get(var).unwrap_or_else(|| panic!("{}: no gradient reached {param}", fx.dump.label));
                let rel = max_rel_diff(grad, fx.expected.get(name));
                assert!(
                    rel <= tolerance::GRADIENT_RELATIVE,
                    "{} (checkpointing {checkpointing}, trainer's path {trainer_path}): gradient of {param}: relative error {rel:e}",
                    fx.dump.label
                );
            }
        }
    }
}

#[test]
fn greedy_generation_matches_reference() {
    for fx in QwenDump::all() {
        let model = fx.model();
        let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: true };
        for (prefix, inputs) in [("", fx.video_inputs()), ("batch.", fx.batch_inputs())] {
            let batch = fx.prompt(&format!("{prefix}prompt_"));
            let positions = fx.hf_generation_positions(prefix, &batch, fx.expected.i64_flat(&format!("{prefix}decode_start")));
            let out = model.generate(&batch, &inputs, Some(&positions), &options).unwrap();
            let expected_ids = fx.expected.i64_rows(&format!("{prefix}generated_ids"));
            for (b, row) in expected_ids.iter().enumerate() {
                let new: Vec<u32> = row[batch.len()..].iter().map(|&t| t as u32).collect();
                assert_eq!(out.tokens[b], new, "{}: {prefix}generated ids row {b}", fx.dump.label);
            }
            let steps = Tensor::stack(&out.step_logits, 1).unwrap();
            let what = format!("{}: {prefix}generated logits", fx.dump.label);
            assert_close(&what, &steps, fx.expected.get(&format!("{prefix}generated_logits")), tolerance::F32_ACTIVATIONS);
        }
    }
}

/// motionvl's default path end to end — its own positions for the prompt and for every decode
/// step — against transformers 4.57.1's own greedy generation from the same checkpoint
/// (`legacy.generated_*`), single and left-padded batch.
#[test]
fn default_generation_matches_transformers_4_57() {
    for fx in QwenDump::all() {
        let model = fx.model();
        let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: true };
        for (prefix, inputs) in [("", fx.video_inputs()), ("batch.", fx.batch_inputs())] {
            let batch = fx.prompt(&format!("{prefix}prompt_"));
            let ours = model.positions(&batch, &inputs).unwrap();
            assert_eq!(
                ours.next,
                fx.expected.i64_flat(&format!("{prefix}legacy.decode_start")),
                "{}: {prefix}first generated position",
                fx.dump.label
            );
            let out = model.generate(&batch, &inputs, None, &options).unwrap();
            for (b, row) in fx.expected.i64_rows(&format!("{prefix}legacy.generated_ids")).iter().enumerate() {
                let new: Vec<u32> = row[batch.len()..].iter().map(|&t| t as u32).collect();
                assert_eq!(out.tokens[b], new, "{}: {prefix}generated ids row {b}", fx.dump.label);
            }
            let steps = Tensor::stack(&out.step_logits, 1).unwrap();
            let what = format!("{}: {prefix}generated logits with the default positions", fx.dump.label);
            assert_close(&what, &steps, fx.expected.get(&format!("{prefix}legacy.generated_logits")), tolerance::F32_ACTIVATIONS);
        }
    }
}

#[test]
fn padded_batch_logits_match_reference() {
    for fx in QwenDump::all() {
        let model = fx.model();
        let batch = fx.prompt("batch.");
        let logits = model.forward(&batch, &fx.batch_inputs(), Some(&fx.hf_positions("batch.", &batch))).unwrap();
        // Logits at padding are undefined; the reference zeroes them.
        let keep: Vec<f32> = batch.mask.iter().flatten().map(|&m| if m { 1.0 } else { 0.0 }).collect();
        let keep = Tensor::from_vec(keep, (batch.rows(), batch.len(), 1), &Device::Cpu).unwrap();
        let logits = logits.broadcast_mul(&keep).unwrap();
        assert_close(&format!("{}: batch logits", fx.dump.label), &logits, fx.expected.get("batch.logits"), tolerance::F32_ACTIVATIONS);
    }
}

/// The held-out dumps exist to catch tests that only pass when both position algorithms agree.
#[test]
fn the_dumps_include_one_whose_positions_differ() {
    let dumps = QwenDump::all();
    assert!(dumps.iter().any(|fx| !fx.positions_agree("")), "no Qwen2.5-VL dump has transformers-5 positions that differ from the legacy ones");
    assert!(dumps.iter().any(|fx| !fx.positions_agree("") && fx.dump.has("lora")), "no LoRA dump has positions that differ");
}
