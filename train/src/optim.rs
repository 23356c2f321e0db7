//! AdamW with decoupled weight decay and parameter groups, a warmup + cosine schedule, and
//! global gradient-norm clipping — fused and in place.
//!
//! Candle's own AdamW runs about a dozen out-of-place tensor ops per parameter per step, which
//! costs more than the forward and backward passes of a LoRA model on a CPU. Here a parameter
//! on the CPU keeps an f32 master copy and its two moments as plain vectors, updated in one
//! pass, and the variable is refreshed once. A parameter on a GPU keeps them as tensors on its
//! device and is updated with those tensor ops (cheap kernels there), so a training step never
//! copies gradients or weights through the host. Both follow `torch.optim.AdamW` with
//! `clip_grad_norm_` and transformers' warmup + cosine schedule step by step, to f32 rounding
//! (tests/tests/optim_parity.rs, on trajectories PyTorch dumped).

use std::collections::HashMap;
use std::sync::OnceLock;

use candle_core::{DType, Device, Tensor, Var};
use rayon::prelude::*;

#[derive(Debug, thiserror::Error)]
pub enum OptimError {
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error("optimiser state: trained tensor {param} must be f32, found {dtype:?}")]
    NotF32 { param: String, dtype: candle_core::DType },
    /// A checkpoint's optimiser state without the step or one parameter's moments.
    #[error("optimiser state: checkpoint lacks {what}")]
    Missing { what: String },
    #[error("optimiser state: saved state of {param} has the wrong size")]
    WrongSize { param: String },
}

/// One trained tensor.
pub struct Param {
    pub name: String,
    pub var: Var,
    /// Biases and norm scales are not decayed.
    pub decay: bool,
    state: State,
    /// Whether a backward pass of the current step produced a gradient for it.
    reached: bool,
}

/// A parameter's f32 master copy, moments and the gradient summed over the micro-batches of
/// the current step, where the parameter lives.
enum State {
    Host { master: Vec<f32>, m: Vec<f32>, v: Vec<f32>, grad: Vec<f32> },
    Device { master: Tensor, m: Tensor, v: Tensor, grad: Tensor },
}

impl State {
    fn new(var: &Var, on_device: bool) -> Result<Self, OptimError> {
        let t = var.as_tensor();
        if on_device {
            let zeros = || Tensor::zeros(t.shape(), DType::F32, t.device());
            return Ok(State::Device { master: t.copy()?, m: zeros()?, v: zeros()?, grad: zeros()? });
        }
        let master: Vec<f32> = t.flatten_all()?.to_vec1()?;
        let n = master.len();
        Ok(State::Host { master, m: vec![0.0; n], v: vec![0.0; n], grad: vec![0.0; n] })
    }
}

/// Σ g² in f64, the same to the last bit on any number of threads: rayon's `sum` splits where
/// threads steal work, so its order of additions — and the clipping factor made from it, and the
/// run — changed from one run to the next. Fixed chunks, each summed in order, then in order.
fn sum_of_squares(values: &[f32]) -> f64 {
    const CHUNK: usize = 1 << 14;
    let chunks: Vec<f64> = values.par_chunks(CHUNK).map(|c| c.iter().map(|&g| f64::from(g) * f64::from(g)).sum::<f64>()).collect();
    chunks.iter().sum()
}

/// What the gradients of one step reached in one parameter group.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupReach {
    pub group: String,
    /// Tensors in the group.
    pub params: usize,
    /// Tensors no backward pass of the step gave a gradient.
    pub unreached: Vec<String>,
    /// L2 norm of the group's accumulated gradient.
    pub norm: f64,
}

/// Parameters sharing a learning rate (e.g. LoRA at 1e-5, the motion connector at 2e-5).
pub struct ParamGroup {
    pub name: String,
    pub lr: f64,
    pub params: Vec<Param>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// The accumulated gradients of an optimiser: CPU parameters' as slices, GPU parameters' as
/// tensors on their device.
pub struct Grads<'a> {
    pub host: Vec<&'a mut [f32]>,
    pub device: Vec<&'a mut Tensor>,
}

/// Trained tensors by name.
pub type NamedVars = Vec<(String, Var)>;

pub struct AdamW {
    pub groups: Vec<ParamGroup>,
    config: AdamWConfig,
    /// Optimiser steps taken.
    step: usize,
    /// Σ g² per parameter of the gradients as they stand, once computed: the reach check, the
    /// non-finite check and the clipping norm of a step read them, and on a GPU each computation
    /// ends in a transfer that waits for the device.
    squares: OnceLock<Vec<f64>>,
}

/// Whether a parameter gets weight decay, from its name (transformers' rule: not biases and
/// not normalisation weights; nor CVAA's learned temperature and GeM exponent).
pub fn decays(name: &str) -> bool {
    !(name.ends_with(".bias") || name.contains("norm") || name.contains(".ln") || name == "logit_scale" || name.ends_with("gem.p"))
}

impl AdamW {
    /// State on the host for CPU parameters, on their device for the others.
    pub fn new(groups: Vec<(String, f64, NamedVars)>, config: AdamWConfig) -> Result<Self, OptimError> {
        Self::placed(groups, config, |var| !var.device().is_cpu())
    }

    /// `on_device` says which parameters keep their state as tensors: [`new`](Self::new)'s rule
    /// is "not on the CPU"; the tests put CPU parameters there too, to run the tensor path GPU
    /// parameters take against PyTorch on a machine without a GPU.
    pub fn placed(groups: Vec<(String, f64, NamedVars)>, config: AdamWConfig, on_device: impl Fn(&Var) -> bool) -> Result<Self, OptimError> {
        let groups = groups
            .into_iter()
            .map(|(name, lr, vars)| {
                let params = vars
                    .into_iter()
                    .map(|(pname, var)| {
                        if var.dtype() != DType::F32 {
                            return Err(OptimError::NotF32 { param: pname.clone(), dtype: var.dtype() });
                        }
                        let state = State::new(&var, on_device(&var))?;
                        Ok(Param { decay: decays(&pname), name: pname, var, state, reached: false })
                    })
                    .collect::<Result<Vec<_>, OptimError>>()?;
                Ok(ParamGroup { name, lr, params })
            })
            .collect::<Result<Vec<_>, OptimError>>()?;
        Ok(Self { groups, config, step: 0, squares: OnceLock::new() })
    }

    pub fn step_count(&self) -> usize {
        self.step
    }

    fn params(&self) -> impl Iterator<Item = &Param> {
        self.groups.iter().flat_map(|g| g.params.iter())
    }

    /// The parameters, to change: what was computed of their gradients is forgotten.
    fn params_mut(&mut self) -> impl Iterator<Item = &mut Param> {
        self.squares.take();
        self.groups.iter_mut().flat_map(|g| g.params.iter_mut())
    }

    /// Adds one micro-batch's gradients. Parameters the loss did not reach get none.
    pub fn accumulate(&mut self, grads: &candle_core::backprop::GradStore) -> Result<(), OptimError> {
        for param in self.params_mut() {
            if let Some(g) = grads.get(param.var.as_tensor()) {
                param.reached = true;
                match &mut param.state {
                    State::Host { grad, .. } => {
                        let g: Vec<f32> = g.to_dtype(DType::F32)?.flatten_all()?.to_vec1()?;
                        grad.par_iter_mut().zip(g.par_iter()).for_each(|(acc, x)| *acc += x);
                    }
                    State::Device { grad, .. } => *grad = (&*grad + g.to_dtype(DType::F32)?)?,
                }
            }
        }
        Ok(())
    }

    /// The accumulated gradients, parameter by parameter in group order, where they live: what
    /// data-parallel ranks sum before clipping and the step.
    pub fn grads_mut(&mut self) -> Grads<'_> {
        let mut grads = Grads { host: Vec::new(), device: Vec::new() };
        for p in self.params_mut() {
            match &mut p.state {
                State::Host { grad, .. } => grads.host.push(grad.as_mut_slice()),
                State::Device { grad, .. } => grads.device.push(grad),
            }
        }
        grads
    }

    /// Σ g² per parameter, in parameter order: the sums of parameters on a device stay there
    /// until one transfer per device.
    fn grad_squares(&self) -> Result<Vec<f64>, OptimError> {
        if let Some(squares) = self.squares.get() {
            return Ok(squares.clone());
        }
        let mut squares = Vec::new();
        let mut on_devices: Vec<(Device, Vec<(usize, Tensor)>)> = Vec::new();
        for (i, p) in self.params().enumerate() {
            squares.push(match &p.state {
                State::Host { grad, .. } => sum_of_squares(grad),
                State::Device { grad, .. } => {
                    let sum = grad.sqr()?.sum_all()?.to_dtype(DType::F64)?.reshape(1)?;
                    match on_devices.iter_mut().find(|(device, _)| device.same_device(grad.device())) {
                        Some((_, sums)) => sums.push((i, sum)),
                        None => on_devices.push((grad.device().clone(), vec![(i, sum)])),
                    }
                    f64::NAN
                }
            });
        }
        for (_, sums) in on_devices {
            let (places, sums): (Vec<usize>, Vec<Tensor>) = sums.into_iter().unzip();
            for (place, value) in places.into_iter().zip(Tensor::cat(&sums, 0)?.to_vec1::<f64>()?) {
                squares[place] = value;
            }
        }
        Ok(self.squares.get_or_init(|| squares).clone())
    }

    /// Global L2 norm of the accumulated gradient.
    pub fn grad_norm(&self) -> Result<f64, OptimError> {
        Ok(self.grad_squares()?.iter().sum::<f64>().sqrt())
    }

    /// Drops the accumulated gradients without a step.
    pub fn clear_grads(&mut self) -> Result<(), OptimError> {
        for p in self.params_mut() {
            p.reached = false;
            match &mut p.state {
                State::Host { grad, .. } => grad.fill(0.0),
                State::Device { grad, .. } => *grad = grad.zeros_like()?,
            }
        }
        Ok(())
    }

    /// Per group, which parameters no backward pass of the current step reached, and the norm of
    /// the group's accumulated gradient: what tells a step that trains from one that cannot.
    pub fn reach(&self) -> Result<Vec<GroupReach>, OptimError> {
        let mut squares = self.grad_squares()?.into_iter();
        Ok(self
            .groups
            .iter()
            .map(|g| {
                let norm = g.params.iter().zip(squares.by_ref()).map(|(_, sq)| sq).sum::<f64>().sqrt();
                let unreached = g.params.iter().filter(|p| !p.reached).map(|p| p.name.clone()).collect();
                GroupReach { group: g.name.clone(), params: g.params.len(), unreached, norm }
            })
            .collect())
    }

    /// Names of parameters whose accumulated gradient holds NaN or ±inf (its Σ g² is then not
    /// finite either).
    pub fn non_finite_grads(&self) -> Result<Vec<&str>, OptimError> {
        let squares = self.grad_squares()?;
        Ok(self.params().zip(squares).filter(|(_, sq)| !sq.is_finite()).map(|(p, _)| p.name.as_str()).collect())
    }

    /// Clips to `max_norm` (when positive), applies one AdamW update with each group's learning
    /// rate times `lr_scale`, refreshes the variables and clears the gradients. Returns the
    /// gradient norm before clipping.
    pub fn step_with_clip(&mut self, lr_scale: f64, max_norm: f64) -> Result<f64, OptimError> {
        let norm = self.grad_norm()?;
        for p in self.params_mut() {
            p.reached = false;
        }
        // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
        let clip = if max_norm > 0.0 { (max_norm / (norm + 1e-6)).min(1.0) } else { 1.0 } as f32;
        self.step += 1;
        let AdamWConfig { beta1, beta2, eps, weight_decay } = self.config;
        let bias1 = 1.0 - beta1.powi(self.step as i32);
        let bias2_sqrt = (1.0 - beta2.powi(self.step as i32)).sqrt();
        for group in &mut self.groups {
            let lr = group.lr * lr_scale;
            let step_size = (lr / bias1) as f32;
            // Each constant rounded to f32 once from its f64 value, as PyTorch hands Python floats
            // to its f32 kernels: `1 − β` taken in f32 of an already rounded β is 2.4e-7 off
            // (1 − 0.95f32 = 0.050000012), and against torch.optim.AdamW's trajectory
            // (tests/tests/optim_parity.rs) the weights drifted twice as far as they do now.
            let (b1, b2, eps) = (beta1 as f32, beta2 as f32, eps as f32);
            let (c1, c2) = ((1.0 - beta1) as f32, (1.0 - beta2) as f32);
            for p in &mut group.params {
                let decay = if p.decay { (1.0 - lr * weight_decay) as f32 } else { 1.0 };
                let bias2_sqrt = bias2_sqrt as f32;
                match &mut p.state {
                    State::Host { master, m, v, grad } => {
                        master.par_iter_mut().zip(m.par_iter_mut()).zip(v.par_iter_mut()).zip(grad.par_iter_mut()).for_each(|(((w, m), v), g)| {
                            let g_clipped = *g * clip;
                            *w *= decay;
                            *m = b1 * *m + c1 * g_clipped;
                            *v = b2 * *v + c2 * g_clipped * g_clipped;
                            *w -= step_size * *m / ((*v).sqrt() / bias2_sqrt + eps);
                            *g = 0.0;
                        });
                        let shape = p.var.shape().clone();
                        p.var.set(&Tensor::from_slice(master, shape, p.var.device())?)?;
                    }
                    State::Device { master, m, v, grad } => {
                        // The host loop's arithmetic, one tensor op at a time.
                        let g = (&*grad * f64::from(clip))?;
                        *m = ((&*m * f64::from(b1))? + (&g * f64::from(c1))?)?;
                        *v = ((&*v * f64::from(b2))? + (g.sqr()? * f64::from(c2))?)?;
                        let denom = ((v.sqrt()? / f64::from(bias2_sqrt))? + f64::from(eps))?;
                        *master = ((&*master * f64::from(decay))? - ((&*m * f64::from(step_size))? / denom)?)?;
                        *grad = grad.zeros_like()?;
                        p.var.set(master)?;
                    }
                }
            }
        }
        Ok(norm)
    }

    /// Moments and master weights by `<param>.{m,v,w}`, plus the step, for checkpoints.
    pub fn state_tensors(&self) -> Result<HashMap<String, Tensor>, OptimError> {
        let mut out = HashMap::new();
        for p in self.params() {
            let shape = p.var.shape().clone();
            let (m, v, w) = match &p.state {
                State::Host { master, m, v, .. } => {
                    let host = |x: &[f32]| Tensor::from_slice(x, shape.clone(), &Device::Cpu);
                    (host(m)?, host(v)?, host(master)?)
                }
                State::Device { master, m, v, .. } => (m.to_device(&Device::Cpu)?, v.to_device(&Device::Cpu)?, master.to_device(&Device::Cpu)?),
            };
            out.insert(format!("{}.m", p.name), m);
            out.insert(format!("{}.v", p.name), v);
            out.insert(format!("{}.w", p.name), w);
        }
        out.insert("__step__".into(), Tensor::new(&[self.step as u32], &candle_core::Device::Cpu)?);
        Ok(out)
    }

    /// Restores what [`state_tensors`](Self::state_tensors) saved, weights included.
    pub fn load_state(&mut self, state: &HashMap<String, Tensor>) -> Result<(), OptimError> {
        let step = state.get("__step__").ok_or_else(|| OptimError::Missing { what: "the optimiser step".into() })?;
        self.step = step.to_vec1::<u32>()?.first().copied().unwrap_or(0) as usize;
        for p in self.params_mut() {
            let get = |which: &str| -> Result<Tensor, OptimError> {
                let key = format!("{}.{which}", p.name);
                let t = state.get(&key).ok_or_else(|| OptimError::Missing { what: format!("`{key}`") })?;
                if t.elem_count() != p.var.elem_count() {
                    return Err(OptimError::WrongSize { param: p.name.clone() });
                }
                Ok(t.to_dtype(DType::F32)?.reshape(p.var.shape())?.to_device(p.var.device())?)
            };
            let (m, v, w) = (get("m")?, get("v")?, get("w")?);
            p.var.set(&w)?;
            p.state = match &p.state {
                State::Host { grad, .. } => {
                    let host = |t: &Tensor| t.flatten_all().and_then(|f| f.to_vec1::<f32>());
                    State::Host { master: host(&w)?, m: host(&m)?, v: host(&v)?, grad: vec![0.0; grad.len()] }
                }
                State::Device { grad, .. } => State::Device { master: w, m, v, grad: grad.zeros_like()? },
            };
        }
        Ok(())
    }
}

/// The learning-rate schedule after warm-up (`[optim] schedule`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LrSchedule {
    /// Half a cosine from the peak to 0 over the steps after warm-up.
    #[default]
    Cosine,
    /// The peak, held.
    Constant,
}

/// Learning-rate multiplier at optimiser step `step` (0-based, the step about to be taken), as
/// transformers' `get_cosine_schedule_with_warmup` / `get_constant_schedule_with_warmup`.
pub fn lr_scale(schedule: LrSchedule, step: usize, warmup: usize, total: usize) -> f64 {
    if step < warmup {
        return step as f64 / warmup.max(1) as f64;
    }
    match schedule {
        LrSchedule::Constant => 1.0,
        LrSchedule::Cosine => {
            // Clamped: a run longer than its schedule stays at the floor instead of re-warming.
            let progress = ((step - warmup) as f64 / (total.saturating_sub(warmup)).max(1) as f64).min(1.0);
            (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0)
        }
    }
}

/// transformers rounds warmup steps up: `ceil(ratio · total)`.
pub fn warmup_steps(ratio: f64, total: usize) -> usize {
    (ratio * total as f64).ceil() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn sum_of_squares_is_the_same_on_any_number_of_threads() {
        // Magnitudes over many orders, so that the order of additions shows in the last bits.
        let values: Vec<f32> = (0..300_001).map(|i| (i as f32 * 0.618).sin() * 10f32.powi(i % 7 - 3)).collect();
        let on = |threads: usize| rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap().install(|| sum_of_squares(&values));
        let reference = on(1);
        for threads in [2, 3, 4, 8] {
            assert_eq!(on(threads).to_bits(), reference.to_bits(), "{threads} threads");
        }
        let direct: f64 = values.iter().map(|&g| f64::from(g) * f64::from(g)).sum();
        assert!((reference - direct).abs() <= 1e-12 * direct, "{reference} vs {direct}");
    }

    #[test]
    fn cosine_never_rises_after_warmup_even_past_its_end() {
        let (warmup, total) = (3, 10);
        let scales: Vec<f64> = (0..25).map(|s| lr_scale(LrSchedule::Cosine, s, warmup, total)).collect();
        assert!(scales[..=warmup].windows(2).all(|w| w[1] > w[0]), "{scales:?}");
        assert!(scales[warmup..].windows(2).all(|w| w[1] <= w[0]), "{scales:?}");
        assert!(scales[total..].iter().all(|s| *s == 0.0), "{scales:?}");
    }

    /// The tensor-op update GPU parameters get matches the fused vector loop, with decay,
    /// clipping, several steps and a checkpoint round trip of the tensor state (both paths are
    /// compared with PyTorch in tests/tests/optim_parity.rs).
    #[test]
    fn device_state_follows_the_host_loop() {
        let cfg = AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.1 };
        let init = Tensor::new(&[[0.3f32, -1.2, 2.0], [0.7, 0.05, -0.4]], &Device::Cpu).unwrap();
        let run = |on_device: bool| {
            let w = Var::from_tensor(&init).unwrap();
            let b = Var::from_tensor(&Tensor::new(&[0.5f32, -0.25], &Device::Cpu).unwrap()).unwrap();
            let groups = vec![("g".to_string(), 0.05, vec![("x.weight".to_string(), w.clone()), ("x.bias".to_string(), b.clone())])];
            let mut opt = AdamW::placed(groups, cfg, |_| on_device).unwrap();
            let mut norms = Vec::new();
            for step in 0..4 {
                if step == 2 {
                    // Resume from the saved state into a fresh optimiser of the same placement.
                    let saved = opt.state_tensors().unwrap();
                    let groups = vec![("g".to_string(), 0.05, vec![("x.weight".to_string(), w.clone()), ("x.bias".to_string(), b.clone())])];
                    opt = AdamW::placed(groups, cfg, |_| on_device).unwrap();
                    opt.load_state(&saved).unwrap();
                }
                let loss = (w.as_tensor().powf(3.0).unwrap().sum_all().unwrap() + b.as_tensor().sqr().unwrap().sum_all().unwrap()).unwrap();
                opt.accumulate(&loss.backward().unwrap()).unwrap();
                norms.push(opt.step_with_clip(0.5 + 0.1 * step as f64, 1.0).unwrap());
            }
            (w.as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(), b.as_tensor().to_vec1::<f32>().unwrap(), norms)
        };
        let (host, device) = (run(false), run(true));
        for (h, d) in host.0.iter().chain(&host.1).zip(device.0.iter().chain(&device.1)) {
            assert!((h - d).abs() <= 1e-6, "host {host:?}\ndevice {device:?}");
        }
        for (h, d) in host.2.iter().zip(&device.2) {
            assert!((h - d).abs() <= 1e-6 * h.max(1.0), "grad norms {:?} vs {:?}", host.2, device.2);
        }
        assert_ne!(host.0, init.flatten_all().unwrap().to_vec1::<f32>().unwrap(), "the steps moved the weights");
    }

    /// The per-parameter sums are computed once per set of gradients and forgotten whenever the
    /// gradients change: a second micro-batch, a cleared step, an optimiser step.
    #[test]
    fn gradient_sums_follow_every_change_of_the_gradients() {
        let cfg = AdamWConfig { beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 };
        for on_device in [false, true] {
            let w = Var::from_tensor(&Tensor::new(&[1.5f32, -2.0], &Device::Cpu).unwrap()).unwrap();
            let b = Var::from_tensor(&Tensor::new(&[0.5f32], &Device::Cpu).unwrap()).unwrap();
            let groups = vec![("g".to_string(), 0.01, vec![("x.weight".to_string(), w.clone()), ("x.bias".to_string(), b.clone())])];
            let mut opt = AdamW::placed(groups, cfg, |_| on_device).unwrap();
            // d/dw Σ w² = 2w, d/db 3b = 3.
            let loss = || (w.as_tensor().sqr().unwrap().sum_all().unwrap() + (b.as_tensor() * 3.0).unwrap().sum_all().unwrap()).unwrap();
            opt.accumulate(&loss().backward().unwrap()).unwrap();
            assert_eq!(opt.grad_squares().unwrap(), [3f64 * 3.0 + 4.0 * 4.0, 9.0], "on_device {on_device}");
            assert!(opt.reach().unwrap()[0].unreached.is_empty());
            opt.accumulate(&loss().backward().unwrap()).unwrap();
            assert_eq!(opt.grad_squares().unwrap(), [6f64 * 6.0 + 8.0 * 8.0, 36.0], "on_device {on_device}: a second micro-batch");
            assert!(opt.non_finite_grads().unwrap().is_empty());
            opt.clear_grads().unwrap();
            assert_eq!(opt.grad_squares().unwrap(), [0.0, 0.0], "on_device {on_device}: cleared");
            opt.accumulate(&loss().backward().unwrap()).unwrap();
            assert_eq!(opt.step_with_clip(1.0, 0.0).unwrap(), 34f64.sqrt(), "on_device {on_device}");
            assert_eq!(opt.grad_squares().unwrap(), [0.0, 0.0], "on_device {on_device}: after the step");
        }
    }

    #[test]
    fn schedule_warms_up_then_decays_to_zero() {
        let total = 100;
        let warmup = warmup_steps(0.03, total);
        assert_eq!(warmup, 3);
        assert_eq!(lr_scale(LrSchedule::Cosine, 0, warmup, total), 0.0);
        assert!((lr_scale(LrSchedule::Cosine, 1, warmup, total) - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(lr_scale(LrSchedule::Cosine, 3, warmup, total), 1.0);
        assert!((lr_scale(LrSchedule::Cosine, 3 + 97 / 2, warmup, total) - 0.5).abs() < 0.02);
        assert!(lr_scale(LrSchedule::Cosine, total, warmup, total).abs() < 1e-12);
        assert_eq!(lr_scale(LrSchedule::Constant, 50, warmup, total), 1.0);
    }
}
