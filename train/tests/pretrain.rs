//! Stage 0 trains what its scope says: every weight, or every weight but the vision tower's
//! (the random-tower baseline of the demo), where the merger and the language model still learn.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Device, Tensor};
use motionvl_models::config::Qwen25VlConfig;
use motionvl_train::pretrain::{Scope, pretrain};

mod common;
use common::tiny;

fn weights(model_dir: &Path) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(model_dir.join("model.safetensors"), &Device::Cpu).expect("the pretrained weights load")
}

fn same(a: &Tensor, b: &Tensor) -> bool {
    let flat = |t: &Tensor| t.flatten_all().and_then(|f| f.to_vec1::<f32>()).expect("an f32 weight");
    flat(a) == flat(b)
}

/// Pretrains two steps in `scope`; returns the initial and the final weights by hub name.
fn two_steps(scope: Scope, out: &Path) -> (HashMap<String, Tensor>, HashMap<String, Tensor>) {
    let recipe = tiny(out, &[("optim.max_steps", "2"), ("optim.grad_accum", "1")]);
    let done = pretrain(&recipe, &[], scope).expect("pretraining runs");
    assert_eq!(done.logs.len(), 2);
    assert!(done.logs.iter().all(|l| l.loss.is_finite() && l.grad_norm > 0.0), "{:?}", done.logs);
    let cfg = Qwen25VlConfig::from_file(&done.model_dir.join("config.json")).expect("the saved config reads");
    let (_, init) = motionvl_models::init::random_model(&cfg, recipe.model.init_std, recipe.seed, &Device::Cpu).expect("the same init");
    (init, weights(&done.model_dir))
}

#[test]
fn the_random_tower_stays_as_initialised_while_the_merger_and_language_model_learn() {
    let dir = tempfile::tempdir().unwrap();
    let (init, trained) = two_steps(Scope::RandomTower, dir.path());
    assert_eq!(init.keys().collect::<std::collections::BTreeSet<_>>(), trained.keys().collect(), "every weight is saved");
    let (mut fixed, mut moved) = (Vec::new(), Vec::new());
    for (name, start) in &init {
        if same(start, &trained[name]) { fixed.push(name.as_str()) } else { moved.push(name.as_str()) }
    }
    let tower = |n: &str| n.starts_with("visual.") && !n.starts_with("visual.merger.");
    assert!(fixed.iter().any(|n| tower(n)) && fixed.iter().all(|n| tower(n)), "only the tower stays fixed: {fixed:?}");
    assert!(init.keys().filter(|n| tower(n)).all(|n| fixed.contains(&n.as_str())), "a tower weight moved: {moved:?}");
    // The merger is not part of the tower: its gradient flows from the language model.
    for merger in ["visual.merger.mlp.0.weight", "visual.merger.mlp.2.weight", "visual.merger.ln_q.weight"] {
        assert!(moved.contains(&merger), "{merger} did not learn");
    }
    assert!(moved.contains(&"model.embed_tokens.weight") || moved.contains(&"model.language_model.embed_tokens.weight"), "{moved:?}");
}

#[test]
fn full_pretraining_moves_the_tower_too() {
    let dir = tempfile::tempdir().unwrap();
    let (init, trained) = two_steps(Scope::All, dir.path());
    for name in ["visual.patch_embed.proj.weight", "visual.blocks.0.attn.qkv.weight", "visual.merger.mlp.0.weight"] {
        assert!(init.contains_key(name), "no {name} in the fresh model");
        assert!(!same(&init[name], &trained[name]), "{name} did not learn");
    }
}
