//! DINOv2 in Candle against transformers' `Dinov2Model` (`tests/fixtures/dinov2/*`), in f32 on
//! CPU. Every dump directory is checked, so a new dump needs no code.

use candle_core::{DType, Device};
use motionvl_models::dinov2::{Dinov2Model, Dinov2Naming, Dinov2Weights, PosInterpolation};
use motionvl_tests::fixtures::{Dump, Tensors, assert_close, dumps};

const TOL: f32 = 1e-4;

struct Fixture {
    dump: Dump,
    name: String,
    inputs: Tensors,
    expected: Tensors,
}

impl Fixture {
    fn all() -> Vec<Fixture> {
        dumps("dinov2")
            .into_iter()
            .map(|dump| {
                dump.path("model.safetensors");
                Fixture { inputs: dump.tensors("inputs.safetensors"), expected: dump.tensors("expected.safetensors"), name: dump.label.clone(), dump }
            })
            .collect()
    }

    fn model(&self) -> Dinov2Model {
        Dinov2Model::load(&self.dump.dir, DType::F32, &Device::Cpu).unwrap_or_else(|e| panic!("loading {}: {e}", self.name))
    }
}

#[test]
fn outputs_match_transformers() {
    for fx in Fixture::all() {
        let model = fx.model();
        let out = model.forward(fx.inputs.get("pixel_values")).unwrap();
        assert_close(&format!("{}: last_hidden_state", fx.name), &out.last_hidden_state, fx.expected.get("last_hidden_state"), TOL);
        assert_close(&format!("{}: pooler_output", fx.name), &out.pooler_output, fx.expected.get("pooler_output"), TOL);
    }
}

#[test]
fn positions_resample_like_each_implementation() {
    for fx in Fixture::all() {
        let grid = fx.inputs.i64_flat("interpolation_grid");
        let (rows, cols) = (grid[0] as usize, grid[1] as usize);
        let mut model = fx.model();
        for (way, interpolation) in
            [("transformers", PosInterpolation::Transformers), ("meta", PosInterpolation::Meta), ("timm", PosInterpolation::Timm)]
        {
            model.set_interpolation(interpolation);
            let positions = model.embeddings().positions(rows, cols).unwrap();
            assert_close(&format!("{}: positions at {rows}×{cols}, {way}", fx.name), &positions, fx.expected.get(&format!("positions.{way}")), 1e-5);
        }
    }
}

#[test]
fn each_naming_is_recognised_with_its_resampling() {
    let mut seen = Vec::new();
    for fx in Fixture::all() {
        let weights = Dinov2Weights::open(&fx.dump.dir, &Device::Cpu).unwrap();
        let expected = match weights.naming {
            Dinov2Naming::Hub | Dinov2Naming::Transformers5 => PosInterpolation::Transformers,
            Dinov2Naming::Meta => PosInterpolation::Meta,
        };
        assert_eq!(weights.interpolation, expected, "{}", fx.name);
        seen.push(weights.naming);
    }
    for naming in [Dinov2Naming::Hub, Dinov2Naming::Transformers5, Dinov2Naming::Meta] {
        assert!(seen.contains(&naming), "no dump with {naming:?} names");
    }
}

#[test]
fn an_input_off_the_patch_grid_is_refused() {
    let fx = Fixture::all().remove(0);
    let model = fx.model();
    let side = model.config().patch_size * 2 + 1;
    let pixels = candle_core::Tensor::zeros((1, 3, side, side), DType::F32, &Device::Cpu).unwrap();
    let err = model.forward(&pixels).unwrap_err().to_string();
    assert!(err.contains("multiples of the patch size"), "{err}");
}
