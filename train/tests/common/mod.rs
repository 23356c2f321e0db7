//! The tiny recipe the training tests share (`configs/sft/tiny.toml`, eight 64×64 clips shipped
//! in `tests/data/tiny-sft`).

use std::path::{Path, PathBuf};

use motionvl_train::recipe::Recipe;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The tiny recipe, run from the repository root into `out`, with `extra` overrides.
pub fn tiny(out: &Path, extra: &[(&str, &str)]) -> Recipe {
    let root = repo_root();
    let mut overrides: Vec<(String, String)> = vec![
        ("output_dir".into(), format!("{:?}", out.display().to_string())),
        ("model.init_config".into(), format!("{:?}", root.join("configs/models/tiny.json").display().to_string())),
        ("data.train".into(), format!("{:?}", root.join("tests/data/tiny-sft/train.jsonl").display().to_string())),
        ("logging.progress_bar".into(), "false".into()),
    ];
    overrides.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    Recipe::load(&root.join("configs/sft/tiny.toml"), &overrides).expect("tiny recipe loads")
}

/// A committed recipe with `overrides` (values in TOML syntax).
#[allow(dead_code)] // each test file compiles this module; not every one uses this
pub fn with_overrides(recipe: &Path, overrides: &[(&str, String)]) -> Recipe {
    let overrides: Vec<(String, String)> = overrides.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    Recipe::load(recipe, &overrides).unwrap_or_else(|e| panic!("{}: {e}", recipe.display()))
}
