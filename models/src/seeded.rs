//! Trainable variables initialised from a seed, for models trained from scratch.
//!
//! candle's `VarMap` draws fresh variables from the CPU's unseeded generator, so two runs of
//! the same recipe would start apart. Here every variable is drawn as its initialisation hint
//! asks, from a stream picked by its name and the seed: the same seed gives the same weights
//! whatever order the model asks for them in.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor, Var};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::{Init, VarBuilder};
use rand::{Rng, SeedableRng};

/// `N(0, std²)` values of `shape` drawn from `seed`: random tensors that are the same on every
/// run (tests, benchmarks), where Candle's CPU `randn` cannot be seeded.
pub fn randn(shape: impl Into<Shape>, std: f64, seed: u64, device: &Device) -> candle_core::Result<Tensor> {
    let shape = shape.into();
    let values = SeededVars::new(seed).draw(&shape, "", Init::Randn { mean: 0.0, stdev: std });
    Tensor::from_vec(values, shape, device)
}

/// The variables made so far, by name; clones share them.
#[derive(Clone, Default)]
pub struct SeededVars {
    seed: u64,
    vars: Arc<Mutex<HashMap<String, Var>>>,
}

impl SeededVars {
    pub fn new(seed: u64) -> Self {
        Self { seed, vars: Arc::default() }
    }

    /// Variables holding `tensors` (e.g. pretrained weights to fine-tune); names not among
    /// them are still drawn from the seed.
    pub fn from_tensors(seed: u64, tensors: &HashMap<String, Tensor>) -> candle_core::Result<Self> {
        let vars = tensors.iter().map(|(n, t)| Ok((n.clone(), Var::from_tensor(&t.to_dtype(DType::F32)?)?))).collect::<candle_core::Result<_>>()?;
        Ok(Self { seed, vars: Arc::new(Mutex::new(vars)) })
    }

    pub fn var_builder(&self, device: &Device) -> VarBuilder<'static> {
        VarBuilder::from_backend(Box::new(self.clone()), DType::F32, device.clone())
    }

    /// Every variable, sorted by name.
    pub fn named(&self) -> Vec<(String, Var)> {
        let mut out: Vec<(String, Var)> = self.vars.lock().map(|m| m.iter().map(|(n, v)| (n.clone(), v.clone())).collect()).unwrap_or_default();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    fn draw(&self, shape: &Shape, name: &str, init: Init) -> Vec<f32> {
        let n = shape.elem_count();
        let stream = name.bytes().fold(self.seed ^ 0xcbf2_9ce4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        let mut rng = rand::rngs::StdRng::seed_from_u64(stream);
        let mut normal = |mean: f64, std: f64| -> f32 {
            // Box–Muller: two uniforms to one standard normal.
            let (u1, u2): (f64, f64) = (rng.random::<f64>().max(f64::MIN_POSITIVE), rng.random());
            (mean + std * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
        };
        match init {
            Init::Const(c) => vec![c as f32; n],
            Init::Randn { mean, stdev } => (0..n).map(|_| normal(mean, stdev)).collect(),
            Init::Uniform { lo, up } => {
                let mut rng = rand::rngs::StdRng::seed_from_u64(stream);
                (0..n).map(|_| rng.random_range(lo..up) as f32).collect()
            }
            Init::Kaiming { .. } => {
                // Fan-in scaling, as `nn.Linear` draws its weights.
                let fan_in: usize = shape.dims().iter().skip(1).product::<usize>().max(1);
                let std = (1.0 / fan_in as f64).sqrt();
                (0..n).map(|_| normal(0.0, std)).collect()
            }
        }
    }
}

impl SimpleBackend for SeededVars {
    fn get(&self, shape: Shape, name: &str, init: Init, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        let mut vars = self.vars.lock().map_err(|_| candle_core::Error::Msg("variable map poisoned".into()))?;
        if let Some(var) = vars.get(name) {
            if var.shape() != &shape {
                candle_core::bail!("variable `{name}` has shape {:?}, the model asks for {:?}", var.dims(), shape.dims());
            }
            return var.as_tensor().to_dtype(dtype);
        }
        let var = Var::from_tensor(&Tensor::from_vec(self.draw(&shape, name, init), shape, dev)?)?;
        vars.insert(name.to_owned(), var.clone());
        var.as_tensor().to_dtype(dtype)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, _: &Device) -> candle_core::Result<Tensor> {
        let vars = self.vars.lock().map_err(|_| candle_core::Error::Msg("variable map poisoned".into()))?;
        match vars.get(name) {
            Some(var) => var.as_tensor().to_dtype(dtype),
            None => candle_core::bail!("a fresh variable needs the shape of {name}"),
        }
    }

    fn contains_tensor(&self, _: &str) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_variables_in_any_order() {
        let a = SeededVars::new(7);
        let b = SeededVars::new(7);
        let va = a.var_builder(&Device::Cpu);
        let vb = b.var_builder(&Device::Cpu);
        let normal = Init::Randn { mean: 0.0, stdev: 1.0 };
        let x1 = va.get_with_hints((3, 4), "x", normal).unwrap();
        let _ = va.get_with_hints(5, "y", Init::Const(2.0)).unwrap();
        let _ = vb.get_with_hints(5, "y", Init::Const(2.0)).unwrap();
        let x2 = vb.get_with_hints((3, 4), "x", normal).unwrap();
        assert_eq!(x1.to_vec2::<f32>().unwrap(), x2.to_vec2::<f32>().unwrap());
        let other = SeededVars::new(8).var_builder(&Device::Cpu).get_with_hints((3, 4), "x", normal).unwrap();
        assert_ne!(x1.to_vec2::<f32>().unwrap(), other.to_vec2::<f32>().unwrap());
        assert_eq!(a.named().len(), 2);
        // Asking again returns the same variable.
        let again = va.get_with_hints((3, 4), "x", normal).unwrap();
        assert_eq!(x1.to_vec2::<f32>().unwrap(), again.to_vec2::<f32>().unwrap());
    }
}
