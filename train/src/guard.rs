//! The check that a step trains something: every trained tensor of a group the step used got a
//! gradient, and no such group's gradient is zero.
//!
//! A run that logs a loss but whose backward pass never reaches its trained tensors looks like
//! a run that trains: it exits 0, writes checkpoints and an unchanged adapter. Gradient
//! checkpointing once dropped every LoRA gradient of a visual-only run this way (grad_norm 0.0
//! at every step). The trainer runs this check on every step, and once before the first one on
//! the first micro-batch (a preflight), so such a run fails at once and says why.

use crate::optim::GroupReach;

/// The parameter groups of an SFT run, and the recipe keys that decide what they train.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainedGroup {
    /// SFT: the LoRA adapters.
    Lora,
    /// SFT: the motion connector.
    Connector,
    /// Stage-0 pretraining: every tensor of a fresh model.
    Pretrained,
    /// CVAA: GeM, projector, adapters and temperature.
    CvaaHeads,
    /// CVAA: a backbone trained along (`model.freeze_backbone = false`).
    CvaaBackbone,
}

impl TrainedGroup {
    /// The group's name in the optimiser (and `lr_groups` in the logs).
    pub fn name(self) -> &'static str {
        match self {
            TrainedGroup::Lora => "lora",
            TrainedGroup::Connector => "connector",
            TrainedGroup::Pretrained => "all",
            TrainedGroup::CvaaHeads => "heads",
            TrainedGroup::CvaaBackbone => "backbone",
        }
    }

    /// The recipe keys that decide whether and where this group's tensors get gradients.
    pub fn recipe_keys(self) -> &'static str {
        match self {
            TrainedGroup::Lora => "lora.target_modules, lora.rank, model.gradient_checkpointing, data.label_mask",
            TrainedGroup::Connector => "motion.estimator, motion.connector_lr, model.gradient_checkpointing",
            TrainedGroup::Pretrained => "model.init_config, data.train, data.label_mask",
            TrainedGroup::CvaaHeads => "model.embed_dim, model.adapter_hidden, optim.lr, data.train",
            TrainedGroup::CvaaBackbone => "model.train_backbone, optim.backbone_lr",
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum GradientError {
    #[error(
        "{when}: no gradient reached {missing} of the {total} {group} tensors (first: {first}); this run would train nothing there — check {keys}",
        group = .group.name(), keys = .group.recipe_keys()
    )]
    Unreached { when: String, group: TrainedGroup, missing: usize, total: usize, first: String },
    #[error(
        "{when}: the gradient of the {group} tensors is zero (norm {norm}); this run would train nothing there — check {keys}",
        group = .group.name(), keys = .group.recipe_keys()
    )]
    Zero { when: String, group: TrainedGroup, norm: f64 },
}

/// Checks a step's accumulated gradients. `used`: the groups whose inputs the step had (the
/// connector only trains on batches with video); `when` names the step in the error.
pub fn require_gradients(reach: &[GroupReach], used: &[TrainedGroup], when: &str) -> Result<(), GradientError> {
    for &group in used {
        let Some(r) = reach.iter().find(|r| r.group == group.name()) else { continue };
        if let Some(first) = r.unreached.first() {
            return Err(GradientError::Unreached { when: when.to_owned(), group, missing: r.unreached.len(), total: r.params, first: first.clone() });
        }
        if r.norm == 0.0 {
            return Err(GradientError::Zero { when: when.to_owned(), group, norm: r.norm });
        }
    }
    Ok(())
}

/// The values of trained tensors at one moment, to show later that training moved them.
pub struct Snapshot(Vec<(String, Vec<f32>)>);

impl Snapshot {
    pub fn take(vars: &[(String, candle_core::Var)]) -> candle_core::Result<Self> {
        vars.iter()
            .map(|(name, var)| Ok((name.clone(), var.as_tensor().flatten_all()?.to_dtype(candle_core::DType::F32)?.to_vec1()?)))
            .collect::<candle_core::Result<_>>()
            .map(Snapshot)
    }

    /// Names of the tensors among `vars` whose values are exactly what the snapshot holds.
    pub fn unchanged(&self, vars: &[(String, candle_core::Var)]) -> candle_core::Result<Vec<String>> {
        let now = Snapshot::take(vars)?;
        Ok(self.0.iter().zip(now.0).filter(|((_, before), (_, after))| *before == *after).map(|((name, _), _)| name.clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(group: &str, unreached: &[&str], norm: f64) -> GroupReach {
        GroupReach { group: group.into(), params: 4, unreached: unreached.iter().map(|s| s.to_string()).collect(), norm }
    }

    #[test]
    fn a_group_the_step_used_must_be_reached_and_move() {
        let lora_ok = reach("lora", &[], 0.5);
        let lost = reach("connector", &["connector.fc1.weight", "connector.fc2.weight"], 0.0);
        let used = [TrainedGroup::Lora, TrainedGroup::Connector];
        let err = require_gradients(&[lora_ok.clone(), lost.clone()], &used, "step 3").unwrap_err();
        assert_eq!(
            err,
            GradientError::Unreached {
                when: "step 3".into(),
                group: TrainedGroup::Connector,
                missing: 2,
                total: 4,
                first: "connector.fc1.weight".into()
            }
        );
        let text = err.to_string();
        assert!(text.starts_with("step 3: no gradient reached 2 of the 4 connector tensors (first: connector.fc1.weight)"), "{text}");
        assert!(text.contains("motion.estimator") && text.contains("model.gradient_checkpointing"), "{text}");
        // A batch without video leaves the connector alone: not an error.
        assert_eq!(require_gradients(&[lora_ok.clone(), lost], &[TrainedGroup::Lora], "step 3"), Ok(()));
        // Reached everywhere, but nothing moves.
        let zero = require_gradients(&[reach("lora", &[], 0.0)], &[TrainedGroup::Lora], "preflight").unwrap_err();
        assert!(zero.to_string().starts_with("preflight: the gradient of the lora tensors is zero"), "{zero}");
        assert!(zero.to_string().contains("lora.target_modules"), "{zero}");
    }
}
