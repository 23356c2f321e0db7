//! The trainer's optimiser step against PyTorch's, over every `optim` dump
//! (tools/fixtures/optim.py): the same micro-batch gradients go through the trainer's calls —
//! each micro-batch's `backward` at scale `1 / accum` into [`AdamW::accumulate`], the schedule's
//! [`lr_scale`] with [`warmup_steps`], and [`AdamW::step_with_clip`] at the recipe's
//! `max_grad_norm` — and the weights after every step, the learning rate of every group at every
//! step, the gradient norm before clipping and the final moments must match
//! `torch.optim.AdamW` + `clip_grad_norm_` + transformers' `get_cosine_schedule_with_warmup`.
//! The betas are asymmetric (0.8, 0.95), so swapped or wrong betas change every step after the
//! first; the clip bites on some steps and not others.

use candle_core::{Tensor, Var};
use motionvl_tests::fixtures::{Dump, Tensors, dumps, max_rel_diff};
use motionvl_train::optim::{AdamW, AdamWConfig, LrSchedule, decays, lr_scale, warmup_steps};

/// Weights and moments, relative to the reference's largest magnitude. Measured over the three
/// dumps (2026-12-02): weights 7.8e-8 at worst, moments 3.9e-7 (the tensor path); the
/// clipping factor is made from an f64 sum of squares here and from f32 norms in
/// PyTorch, and torch's `lerp_` rounds `m` differently from `β₁m + (1 − β₁)g`.
const RELATIVE: f32 = 1e-6;
/// Learning rates: the same f64 formula on both sides, bit-equal here; the bound allows another
/// libm's `cos`.
const LR_RELATIVE: f64 = 1e-12;
/// The gradient norm before clipping: measured 9e-8 (an f64 sum here, f32 norms in PyTorch).
const NORM_RELATIVE: f64 = 1e-6;

/// Where the optimiser keeps its state, and whether the run stops and resumes half-way.
#[derive(Debug, Clone, Copy)]
enum Run {
    /// Vectors on the host, as for CPU parameters.
    Host,
    /// Tensors, as for GPU parameters (here on the CPU).
    Tensors,
    /// Host state saved after half the steps and loaded into a fresh optimiser, as a resumed
    /// run does.
    Resumed,
}

struct Fixture {
    dump: Dump,
    meta: serde_json::Value,
    init: Tensors,
    gradients: Tensors,
    expected: Tensors,
}

impl Fixture {
    fn load(dump: Dump) -> Self {
        Self {
            meta: dump.json("meta.json"),
            init: dump.tensors("init.safetensors"),
            gradients: dump.tensors("gradients.safetensors"),
            expected: dump.tensors("expected.safetensors"),
            dump,
        }
    }

    fn usize(&self, key: &str) -> usize {
        self.meta[key].as_u64().unwrap_or_else(|| panic!("{}: meta.json lacks `{key}`", self.dump.label)) as usize
    }

    fn f64(&self, key: &str) -> f64 {
        self.meta[key].as_f64().unwrap_or_else(|| panic!("{}: meta.json lacks `{key}`", self.dump.label))
    }

    /// `(name, motionvl group, decays)` in the dump's order.
    fn params(&self) -> Vec<(String, String, bool)> {
        let params = self.meta["params"].as_array().unwrap_or_else(|| panic!("{}: meta.json lacks `params`", self.dump.label));
        params
            .iter()
            .map(|p| {
                (
                    p["name"].as_str().expect("param name").to_owned(),
                    p["group"].as_str().expect("param group").to_owned(),
                    p["decay"].as_bool().expect("param decay"),
                )
            })
            .collect()
    }

    fn config(&self) -> AdamWConfig {
        let betas = &self.meta["betas"];
        AdamWConfig {
            beta1: betas[0].as_f64().expect("beta1"),
            beta2: betas[1].as_f64().expect("beta2"),
            eps: self.f64("eps"),
            weight_decay: self.f64("weight_decay"),
        }
    }

    /// The trainer's groups, LoRA then connector, each at its own rate; decay goes by name.
    fn optimiser(&self, vars: &[(String, String, Var)], run: Run) -> AdamW {
        let groups = ["lora", "connector"]
            .into_iter()
            .map(|group| {
                let lr = self.meta["group_lr"][group].as_f64().unwrap_or_else(|| panic!("{}: no rate for group {group}", self.dump.label));
                let members = vars.iter().filter(|(_, g, _)| g == group).map(|(n, _, v)| (n.clone(), v.clone())).collect();
                (group.to_owned(), lr, members)
            })
            .collect();
        AdamW::placed(groups, self.config(), |_| matches!(run, Run::Tensors)).expect("optimiser")
    }
}

/// Largest differences seen on one dump.
#[derive(Debug, Default)]
struct Worst {
    weights: f32,
    moments: f32,
    lr: f64,
    norm: f64,
}

/// Runs the dump's steps through motionvl's optimiser as the trainer does, asserting each step.
fn replay(fx: &Fixture, run: Run) -> Worst {
    let label = format!("{} ({run:?})", fx.dump.label);
    let (steps, accum, total) = (fx.usize("steps"), fx.usize("accum"), fx.usize("total_steps"));
    let max_norm = fx.f64("max_grad_norm");
    let schedule: LrSchedule = serde_json::from_value(fx.meta["schedule"].clone()).expect("a schedule motionvl knows");
    let warmup = warmup_steps(fx.f64("warmup_ratio"), total);
    assert_eq!(warmup, fx.usize("warmup_steps"), "{label}: transformers' get_warmup_steps rounds the ratio differently");

    let mut vars: Vec<(String, String, Var)> = Vec::new();
    for (name, group, decay) in fx.params() {
        // Which tensors decay: motionvl decides by name, the dump by transformers' rule.
        assert_eq!(decays(&name), decay, "{label}: {name} decays in one and not the other");
        vars.push((name.clone(), group, Var::from_tensor(fx.init.get(&name)).expect("var")));
    }
    let mut optim = fx.optimiser(&vars, run);
    let torch_lr = fx.expected.f64_flat("lr");
    let torch_groups = fx.meta["torch_groups"].as_array().expect("torch_groups");
    let torch_norms = fx.expected.f64_flat("grad_norm");
    let mut worst = Worst::default();
    for step in 0..steps {
        if matches!(run, Run::Resumed) && step == steps / 2 {
            let saved = optim.state_tensors().expect("state");
            optim = fx.optimiser(&vars, run);
            optim.load_state(&saved).expect("resume");
            assert_eq!(optim.step_count(), step);
        }
        for micro in 0..accum {
            // The micro-batch loss Σ ⟨w, g⟩ has gradient g; the trainer back-propagates it at
            // scale 1 / accum (`TrainingLoss::backward`).
            let terms: Vec<Tensor> = vars
                .iter()
                .map(|(name, _, var)| (var.as_tensor() * fx.gradients.get(&format!("step{step}.micro{micro}.{name}"))).and_then(|t| t.sum_all()))
                .collect::<candle_core::Result<_>>()
                .expect("micro-batch loss");
            let loss = Tensor::stack(&terms, 0).and_then(|t| t.sum_all()).expect("loss");
            optim.accumulate(&(loss * (1.0 / accum as f64)).and_then(|l| l.backward()).expect("backward")).expect("accumulate");
        }
        assert!(optim.non_finite_grads().expect("grads").is_empty());
        let scale = lr_scale(schedule, step, warmup, total);
        for (g, group) in torch_groups.iter().enumerate() {
            let ours = optim.groups.iter().find(|o| o.name == group["motionvl_group"].as_str().expect("group")).expect("group").lr * scale;
            let theirs = torch_lr[step * torch_groups.len() + g];
            let diff = (ours - theirs).abs() / theirs.abs().max(1e-300);
            assert!(ours == theirs || diff <= LR_RELATIVE, "{label}: step {step}, group {}: lr {ours} vs torch {theirs}", group["name"]);
            worst.lr = worst.lr.max(if ours == theirs { 0.0 } else { diff });
        }
        let norm = optim.step_with_clip(scale, max_norm).expect("step");
        let norm_diff = (norm - torch_norms[step]).abs() / torch_norms[step];
        assert!(norm_diff <= NORM_RELATIVE, "{label}: step {step}: grad norm {norm} vs torch {}", torch_norms[step]);
        worst.norm = worst.norm.max(norm_diff);
        for (name, _, var) in &vars {
            let want = fx.expected.get(&format!("step{step}.{name}"));
            let diff = max_rel_diff(var.as_tensor(), want);
            assert!(diff <= RELATIVE, "{label}: {name} after step {step}: relative difference {diff:e} > {RELATIVE:e}");
            worst.weights = worst.weights.max(diff);
        }
    }
    assert_eq!(optim.step_count(), steps);
    let state = optim.state_tensors().expect("state");
    for (name, _, _) in &vars {
        for (ours, theirs) in [("m", "exp_avg"), ("v", "exp_avg_sq")] {
            let got = &state[&format!("{name}.{ours}")];
            let want = fx.expected.get(&format!("final.{name}.{theirs}"));
            let diff = max_rel_diff(&got.reshape(want.shape()).expect("shape"), want);
            assert!(diff <= RELATIVE, "{label}: {name}'s {theirs} after the last step: relative difference {diff:e}");
            worst.moments = worst.moments.max(diff);
        }
    }
    worst
}

#[test]
fn adamw_clipping_schedule_and_accumulation_follow_pytorch_step_by_step() {
    for dump in dumps("optim") {
        let fx = Fixture::load(dump);
        // The dump's own claims, which make the comparison bite: clipping on some steps only.
        let clipped: Vec<bool> = fx.meta["clipped"].as_array().expect("clipped").iter().map(|c| c.as_bool().expect("bool")).collect();
        assert!(clipped.contains(&true) && clipped.contains(&false), "{}: {clipped:?}", fx.dump.label);
        for run in [Run::Host, Run::Tensors, Run::Resumed] {
            // `--nocapture` shows what each run measured against the bounds above.
            let worst = replay(&fx, run);
            println!("{} {run:?}: {worst:?}", fx.dump.label);
        }
    }
}
