//! The SIS-Motion branch on Qwen3-VL against `tools/fixtures/qwen3_vl_motion.py`'s dumps
//! (`tests/fixtures/qwen3_vl_motion/*`): transformers 4.57.1's Qwen3-VL (the base of
//! `qwen3_vl/<same name>`) with the official `VisualFlowConnector` fusing the frozen tower's
//! tokens of pseudo-images into the merged video tokens, the frames' DeepStack levels kept. The
//! connector is read from the official `torch.save` file; motion tokens, fused tokens,
//! positions, logits, loss, the connector's gradients and greedy generation all match, and
//! without the branch the logits differ. Every dump is checked.

use candle_core::{DType, Device, Module, Tensor};
use motionvl_models::generate::GenerateOptions;
use motionvl_models::motion::{MotionBranch, MotionTower, qwen3_features};
use motionvl_models::prompt::PixelInput;
use motionvl_models::sis_package::read_connector;
use motionvl_tests::fixtures::{Dump, Tensors, assert_close, dumps, max_rel_diff, tolerance};
use motionvl_tests::qwen_dump::QwenDump;

/// A motion dump, its base Qwen3-VL dump, the connector's variables and the pseudo-image pixels.
struct MotionDump {
    motion: Dump,
    base: QwenDump,
    expected: Tensors,
    connector: Vec<(String, candle_core::Var)>,
    flow: PixelInput,
}

fn motion_dumps() -> Vec<MotionDump> {
    let found: Vec<MotionDump> = dumps("qwen3_vl_motion")
        .into_iter()
        .map(|motion| {
            let name = motion.dir.file_name().expect("a dump folder").to_string_lossy().into_owned();
            let base = QwenDump::all_qwen3()
                .into_iter()
                .find(|b| b.dump.dir.file_name().is_some_and(|n| n.to_string_lossy() == name))
                .unwrap_or_else(|| panic!("{}: no Qwen3-VL dump of the same name", motion.label));
            let width = base.qwen3_model().config().text.hidden_size;
            let connector =
                read_connector(&motion.path("connector_weights.pt"), width, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", motion.label));
            let flow = PixelInput { pixel_values: motion.tensors("inputs.safetensors").get("pixel_values_flow").clone(), grids: base.video().grids };
            MotionDump { expected: motion.tensors("expected.safetensors"), motion, base, connector, flow }
        })
        .collect();
    assert!(found.len() >= 2, "expected the Qwen3-VL motion dumps under tests/fixtures/qwen3_vl_motion");
    found
}

#[test]
fn fused_tokens_positions_logits_and_generation_match_reference() {
    for fx in motion_dumps() {
        let label = &fx.motion.label;
        let model = fx.base.qwen3_model();
        let branch = MotionBranch::from_visual(MotionTower::qwen3(model.visual()), &fx.connector).unwrap();
        let inputs = fx.base.video_inputs();
        let motion_tokens = branch.encoder.forward(&fx.flow.pixel_values, &fx.flow.grids).unwrap();
        assert_close(&format!("{label}: motion tokens"), &motion_tokens, fx.expected.get("motion_tokens"), tolerance::F32_ACTIVATIONS);
        let features = qwen3_features(&model, Some(&branch), &inputs, Some(&fx.flow)).unwrap();
        let fused = &features.videos.as_ref().expect("video features").features;
        assert_close(&format!("{label}: fused video tokens"), fused, fx.expected.get("fused"), tolerance::F32_ACTIVATIONS);

        let batch = fx.base.prompt("");
        let positions = model.positions(&batch, &inputs).unwrap();
        let expected = fx.expected.i64_3d("positions");
        for (axis, rows) in expected.iter().enumerate() {
            assert_eq!(positions.positions[axis][0], rows[0], "{label}: position axis {axis}");
        }
        let logits = model.lm_head().forward(&model.hidden(&batch, &features, &positions).unwrap()).unwrap().squeeze(0).unwrap();
        assert_close(&format!("{label}: logits"), &logits, fx.expected.get("logits"), tolerance::F32_ACTIVATIONS);
        let plain = model.forward(&batch, &inputs, None).unwrap().squeeze(0).unwrap();
        let moved = (plain - &logits).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(moved > 1e-2, "{label}: without the motion branch the logits move by only {moved}");

        let prompt = fx.base.prompt("prompt_");
        let prompt_positions = model.positions(&prompt, &inputs).unwrap();
        let prompt_features = qwen3_features(&model, Some(&branch), &inputs, Some(&fx.flow)).unwrap();
        let new_tokens = fx.expected.i64_rows("generated")[0].len();
        let options = GenerateOptions { max_new_tokens: new_tokens, stop_ids: Vec::new(), keep_logits: false };
        let generation = model.generate_from(&prompt, &prompt_features, &prompt_positions, &options, None).unwrap();
        let ours: Vec<i64> = generation.tokens[0].iter().map(|&t| t as i64).collect();
        assert_eq!(ours, fx.expected.i64_rows("generated")[0], "{label}: greedy generation");
    }
}

#[test]
fn loss_and_connector_gradients_match_reference() {
    for fx in motion_dumps() {
        let label = &fx.motion.label;
        let model = motionvl_models::backbone::Backbone::Qwen3(fx.base.qwen3_model());
        let branch = MotionBranch::from_visual(model.motion_tower(), &fx.connector).unwrap();
        let batch = fx.base.prompt("");
        let loss = model.training_loss(&batch, &fx.base.video_inputs(), Some((&branch, Some(&fx.flow))), &fx.base.inputs.i64_rows("labels")).unwrap();
        let value = Tensor::new(&[loss.value().unwrap() as f32], &Device::Cpu).unwrap();
        assert_close(&format!("{label}: loss"), &value, fx.expected.get("loss"), tolerance::LOSS);
        let grads = loss.backward(1.0).unwrap();
        // The official module's names → motionvl's (`sis_package` maps the released file).
        let ours = [("ln.weight", "norm.weight"), ("ln.bias", "norm.bias"), ("mlp.0.weight", "fc1.weight"), ("mlp.0.bias", "fc1.bias")]
            .into_iter()
            .chain([("mlp.2.weight", "fc2.weight"), ("mlp.2.bias", "fc2.bias")]);
        for (official, name) in ours {
            let var = &fx.connector.iter().find(|(n, _)| *n == format!("connector.{name}")).expect("connector variable").1;
            let grad = grads.get(var).unwrap_or_else(|| panic!("{label}: no gradient reached connector.{name}"));
            let rel = max_rel_diff(&grad.to_dtype(DType::F32).unwrap(), fx.expected.get(&format!("grads.{official}")));
            assert!(rel <= tolerance::GRADIENT_RELATIVE, "{label}: gradient of connector.{name}: relative error {rel:e}");
        }
    }
}
