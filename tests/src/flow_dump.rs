//! An optical-flow reference dump (`tests/fixtures/flow/<arch>/<name>/`): the clip, the official
//! implementation's flows, and the comparison every flow parity test makes.

use candle_core::DType;
use ndarray::{Array4, ArrayView4};

use crate::fixtures::{Dump, Tensors, tolerance};

pub struct FlowDump {
    pub dump: Dump,
    /// `[N, H, W, 3]` uint8.
    pub frames: Array4<u8>,
    expected: Tensors,
}

impl FlowDump {
    pub fn open(dump: Dump) -> Self {
        let inputs = dump.tensors("inputs.safetensors");
        let frames = to_array4(&inputs.get("frames").to_dtype(DType::U8).unwrap_or_else(|e| panic!("{}: frames: {e}", dump.label)));
        Self { expected: dump.tensors("expected.safetensors"), frames, dump }
    }

    /// `config.json`, the widths and iterations the reference ran with.
    pub fn config_json(&self) -> String {
        self.dump.text("config.json")
    }

    /// A reference flow tensor `[N, 2, H, W]`, which must move enough to test anything.
    pub fn expected(&self, name: &str) -> Array4<f32> {
        let flows: Array4<f32> = to_array4(self.expected.get(name));
        let scale = max_abs(flows.view());
        assert!(scale > 0.05, "{}: reference `{name}` is too small to test anything ({scale} px)", self.dump.label);
        flows
    }

    /// Asserts `ours` is within [`tolerance::flow_px`] of `reference`; returns the difference.
    pub fn assert_flow(&self, what: &str, ours: ArrayView4<f32>, reference: ArrayView4<f32>) -> f32 {
        assert_eq!(ours.shape(), reference.shape(), "{}: {what}: shapes", self.dump.label);
        let scale = max_abs(reference);
        let bound = tolerance::flow_px(scale);
        let diff = ours.iter().zip(reference.iter()).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        eprintln!("{}: {what}: max |Δflow| = {diff:.2e} px (flow up to {scale:.2} px, bound {bound:.2e})", self.dump.label);
        assert!(diff <= bound, "{}: {what}: max |Δflow| {diff} px > {bound}", self.dump.label);
        diff
    }
}

pub fn max_abs(a: ArrayView4<f32>) -> f32 {
    a.iter().map(|v| v.abs()).fold(0.0, f32::max)
}

pub fn to_array4<T: candle_core::WithDType>(t: &candle_core::Tensor) -> Array4<T> {
    let dims = t.dims4().unwrap_or_else(|e| panic!("expected a 4-D tensor: {e}"));
    let values = t.flatten_all().and_then(|f| f.to_vec1::<T>()).unwrap_or_else(|e| panic!("reading a tensor: {e}"));
    Array4::from_shape_vec(dims, values).unwrap_or_else(|e| panic!("tensor shape: {e}"))
}
