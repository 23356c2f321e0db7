//! The retriever's weights as a run holds them: the trained variables of each group (heads,
//! and the backbone when it trains) and the frozen backbone, by checkpoint name.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{Tensor, Var};
use motionvl_models::seeded::SeededVars;

use super::Result;
use crate::sft::TrainError;

/// The trained variables of each group and the frozen tensors, by checkpoint name.
pub(super) struct Weights {
    pub(super) backbone: Option<SeededVars>,
    pub(super) frozen_backbone: HashMap<String, Tensor>,
    pub(super) heads: SeededVars,
}

impl Weights {
    pub(super) fn named(vars: &SeededVars, prefix: &str) -> Vec<(String, Var)> {
        vars.named().into_iter().map(|(n, v)| (format!("{prefix}{n}"), v)).collect()
    }

    pub(super) fn tensors(&self) -> HashMap<String, Tensor> {
        let mut out: HashMap<String, Tensor> = self.frozen_backbone.iter().map(|(n, t)| (format!("backbone.{n}"), t.clone())).collect();
        for map in self.backbone.iter() {
            out.extend(Self::named(map, "backbone.").into_iter().map(|(n, v)| (n, v.as_tensor().clone())));
        }
        out.extend(Self::named(&self.heads, "").into_iter().map(|(n, v)| (n, v.as_tensor().clone())));
        out
    }

    /// Overwrites every trained variable with the checkpoint's value.
    pub(super) fn restore(&self, saved: &HashMap<String, Tensor>, origin: &Path) -> Result<()> {
        let mut trained = Self::named(&self.heads, "");
        for map in self.backbone.iter() {
            trained.extend(Self::named(map, "backbone."));
        }
        for (name, var) in trained {
            let value = saved
                .get(&name)
                .ok_or_else(|| TrainError::CheckpointMismatch { checkpoint: origin.to_path_buf(), problem: format!("lacks `{name}`") })?;
            var.set(value)?;
        }
        Ok(())
    }
}
