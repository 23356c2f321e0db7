//! Rank 0's preparation of the run directory: its lock, what the start does with a previous
//! run found there (resume it, clear it, refuse), and the recipe written beside it.

use std::path::{Path, PathBuf};

use motionvl_data::run_dir::RunLock;
use motionvl_data::samples::TrainingSample;
use motionvl_models::CheckpointFiles;

use super::data::read_samples;
use super::error::{Result, TrainError, io};
use super::model::base_model_files;
use super::{Start, Trainer};
use crate::checkpoint as ckpt;
use crate::hf_layout;
use crate::recipe::Recipe;

/// What rank 0's preparation of the run directory yields ([`Trainer::prepare`]).
pub(super) struct Prepared<'a> {
    pub(super) lock: RunLock,
    /// The checkpoint to resume (`auto` or a folder), if any.
    pub(super) resume: Option<&'a str>,
    pub(super) note: Option<String>,
    pub(super) samples: Vec<TrainingSample>,
    pub(super) files: CheckpointFiles,
}

impl Trainer {
    /// Rank 0's preparation of the run directory: its lock, the start's decision (resume,
    /// clear, refuse), the recipe beside it, the data and the base model.
    pub(super) fn prepare<'a>(recipe: &Recipe, start: Start<'a>) -> Result<Prepared<'a>> {
        let out = recipe.output_dir.clone();
        let lock = RunLock::acquire(&out)?;
        let mut note = None;
        let resume = match start {
            Start::Fresh => {
                if let Some(found) = run_artefacts(&out).iter().find(|p| is_progress(p)) {
                    return Err(TrainError::RunExists { dir: out.clone(), found: found.clone() });
                }
                clear_run(&out)?;
                None
            }
            Start::Overwrite => {
                let removed = clear_run(&out)?;
                if !removed.is_empty() {
                    note = Some(format!("--overwrite removed the previous run's {} from {}", removed.join(", "), out.display()));
                }
                None
            }
            Start::Resume("auto") if ckpt::latest_complete(&out)?.is_none() => {
                clear_run(&out)?;
                note = Some(format!("--resume auto: {} holds no complete checkpoint; started a fresh run", out.display()));
                None
            }
            Start::Resume(arg) => Some(arg),
        };
        ckpt::write_atomic(out.join("config.toml"), recipe.to_toml().as_bytes())?;
        let samples = read_samples(recipe)?;
        let files = base_model_files(recipe, &samples)?;
        Ok(Prepared { lock, resume, note, samples, files })
    }
}

/// The files and folders of a previous run in `out` (the flow cache and the lock are not the
/// run's: flows are extracted into `<out>/flow-cache` before a first run).
fn run_artefacts(out: &Path) -> Vec<PathBuf> {
    const FILES: [&str; 5] = ["config.toml", "train.log", "trainer_log.jsonl", "tensorboard", "base-model"];
    let Ok(entries) = std::fs::read_dir(out) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            FILES.contains(&name.as_str())
                || hf_layout::published_files().contains(&name.as_str())
                || name.starts_with("checkpoint-")
                || name.starts_with(".tmp-")
        })
        .collect();
    found.sort();
    found
}

/// Whether `path` records training progress (steps logged, checkpoints), which a fresh start
/// must not silently discard; the rest is set-up that a failed start may leave behind.
fn is_progress(path: &Path) -> bool {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name == "trainer_log.jsonl" || name == hf_layout::ADAPTER_FILES[0] || name.starts_with("checkpoint-")
}

/// Removes a previous run's files from `out`, nothing else; returns their names.
fn clear_run(out: &Path) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for path in run_artefacts(out) {
        let removed = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        removed.map_err(io(&path))?;
        names.push(path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    }
    Ok(names)
}
