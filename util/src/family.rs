//! The model families motionvl runs, as a checkpoint's `config.json` names them: what the model
//! crate builds and what the data crate's processor writes for each.

use std::path::Path;

/// A family, by the `model_type` transformers writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelFamily {
    Qwen25Vl,
    Qwen3Vl,
}

impl ModelFamily {
    pub fn model_type(self) -> &'static str {
        match self {
            Self::Qwen25Vl => "qwen2_5_vl",
            Self::Qwen3Vl => "qwen3_vl",
        }
    }

    /// The family a config's `model_type` names; one without it (motionvl's older configs) is
    /// Qwen2.5-VL. `Err` holds a `model_type` motionvl does not run.
    pub fn from_model_type(model_type: Option<&str>) -> Result<Self, String> {
        match model_type {
            None | Some("qwen2_5_vl") => Ok(Self::Qwen25Vl),
            Some("qwen3_vl") => Ok(Self::Qwen3Vl),
            Some(other) => Err(format!("`model_type` is `{other}`; motionvl runs `qwen2_5_vl` and `qwen3_vl` checkpoints")),
        }
    }

    /// The family of a `config.json` file; `Err` says what is wrong with it.
    pub fn of_config(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_model_type(json.get("model_type").and_then(|t| t.as_str())).map_err(|e| format!("{}: {e}", path.display()))
    }
}
