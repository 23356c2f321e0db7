//! The training data of a run: its samples, their digest, the loader over them, and the checks
//! made before the first step (every sample fitted to `max_seq_len`, the flow cache complete).

use std::path::PathBuf;

use motionvl_data::budget::{DataCheck, DataReport, SampleFit};
use motionvl_data::loader::{DataLoader, LoaderConfig, MediaProcessor};
use motionvl_data::processor::ModelProcessor;
use motionvl_data::progress;
use motionvl_data::samples::{ReadOptions, TrainingSample, read_training_rows};
use motionvl_data::text::{QwenTokenizer, TemplateOptions};
use motionvl_flow::key_index::check_cached;
use motionvl_flow::media::MotionMedia;

use super::error::{Result, TrainError, io};
use crate::recipe::Recipe;

/// The training conversations of a recipe (bad rows are errors unless `skip_bad`).
pub(crate) fn read_samples(recipe: &Recipe) -> Result<Vec<TrainingSample>> {
    let read = read_training_rows(
        &recipe.data.train,
        &ReadOptions { media_root: recipe.data.media_root.clone(), check_media: true, skip_bad: recipe.data.skip_bad },
        recipe.data.llava_rows,
    )?;
    if read.items.is_empty() {
        return Err(TrainError::NoUsableSample { file: recipe.data.train.clone() });
    }
    Ok(read.items)
}

pub(crate) fn training_loader<P: MediaProcessor + 'static>(
    recipe: &Recipe,
    samples: Vec<TrainingSample>,
    tokenizer: QwenTokenizer,
    media: P,
    processor: &ModelProcessor,
) -> DataLoader<P> {
    DataLoader::new(samples, tokenizer, media, loader_config(recipe, processor))
}

/// The loader of `recipe` for a model with `processor`: its prompt layout, the recipe's length
/// limit and label mask.
pub(super) fn loader_config(recipe: &Recipe, processor: &ModelProcessor) -> LoaderConfig {
    // Pads per medium follow the processor's merge size, which is also what fitting counts.
    let merge_size = processor.pixels.merge_size;
    let template = processor.template(TemplateOptions {
        max_seq_len: recipe.data.length_limit(),
        merge_size,
        label_mask: recipe.data.label_mask,
        ..TemplateOptions::default()
    });
    LoaderConfig { workers: recipe.data.workers, seed: recipe.seed, template, skip_errors: recipe.data.skip_bad, ..LoaderConfig::default() }
}

/// Fits every sample to `max_seq_len` from its headers, with a progress bar.
pub(crate) fn check_loader<P: MediaProcessor + 'static>(loader: &DataLoader<P>, show: bool) -> Result<DataCheck> {
    let bar = progress::bar(loader.len() as u64, "samples checked", show);
    let check = loader.check_data(&|| bar.inc(1))?;
    bar.finish();
    Ok(check)
}

/// A training set in which nothing fits is an error before the first step.
pub(crate) fn require_usable(report: &DataReport, recipe: &Recipe) -> Result<()> {
    if report.usable() > 0 {
        return Ok(());
    }
    Err(TrainError::NothingFits {
        file: recipe.data.train.clone(),
        max_seq_len: recipe.data.max_seq_len,
        min_pixels: recipe.data.min_pixels,
        min_frames: recipe.data.min_frames,
        too_long: report.dropped,
        failed: report.failed,
        longest: report.longest.clone().map(Box::new),
    })
}

/// Every flow a `--flow-cache-only` run will read is in the cache, checked before the first
/// step: keys of unchanged videos come from the cache's key index (a sample of them decoded to
/// verify it), entries are checked by their header. Returns how many videos were decoded.
pub(super) fn check_flow_cache(media: &MotionMedia, samples: &[TrainingSample], fits: &[Option<SampleFit>], show: bool) -> Result<usize> {
    let jobs: Vec<(PathBuf, MotionMedia)> = samples
        .iter()
        .zip(fits.iter().chain(std::iter::repeat(&None)))
        .filter(|(sample, fit)| sample.with_motion && !matches!(fit, Some(SampleFit::TooLong { .. })))
        .flat_map(|(sample, fit)| {
            let media = match fit {
                Some(SampleFit::Fitted { limits, .. }) => media.limited(*limits),
                _ => media.clone(),
            };
            sample.videos.iter().map(move |v| (v.clone(), media.clone()))
        })
        .collect();
    let bar = progress::bar(jobs.len() as u64, "cached flows checked", show);
    let check = check_cached(&jobs, FLOW_KEYS_VERIFIED, &|| bar.inc(1))?;
    bar.finish();
    let count = check.missing.len();
    match check.missing.into_iter().next() {
        None => Ok(check.decoded),
        Some(first) if count == 1 => Err(first.into()),
        Some(first) => Err(TrainError::FlowsNotCached { missing: count, total: jobs.len(), first: Box::new(first) }),
    }
}

/// Indexed flow keys decoded anyway at a cache-only start, to catch a stale index.
const FLOW_KEYS_VERIFIED: usize = 16;

pub(super) fn data_digest(recipe: &Recipe) -> Result<String> {
    motionvl_data::digest::sha256_file(&recipe.data.train).map_err(io(&recipe.data.train))
}
