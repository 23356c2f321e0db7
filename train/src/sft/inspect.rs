//! Looking at the training data without training or loading model weights: `train sft
//! --check-data` and `--show-samples`.

use std::io::Write;
use std::path::{Path, PathBuf};

use motionvl_data::budget::{DataReport, SampleFit};
use motionvl_data::loader::{DataLoader, LoaderConfig};
use motionvl_data::processor::{ModelFamily, ModelProcessor};
use motionvl_data::samples::{TrainingSample, tokenizer_for_fresh_model};
use motionvl_data::text::QwenTokenizer;
use motionvl_models::{CheckpointFiles, HubOptions};
use serde::{Deserialize, Serialize};

use super::data::{check_loader, loader_config, read_samples, training_loader};
use super::error::{Result, TrainError};
use super::media::{Media, RunMedia};
use crate::recipe::Recipe;

/// `train sft --check-data`: how the training set meets `max_seq_len`, from media headers and
/// the tokenizer alone (no model weights are loaded).
pub fn check_data(recipe: &Recipe) -> Result<DataReport> {
    let samples = read_samples(recipe)?;
    let tokenizer = data_tokenizer(recipe, &samples)?;
    let processor = data_processor(recipe)?;
    let media = Media::new(recipe, RunMedia::Visual(recipe.data.media_for(&processor)), &processor);
    let loader = training_loader(recipe, samples, tokenizer, media, &processor);
    Ok(check_loader(&loader, recipe.logging.progress_bar)?.report)
}

/// The tokenizer training would use, without loading model weights: a local checkpoint
/// folder's `tokenizer.json` (weights need not be there), a hub checkpoint's, or the one a
/// fresh model gets.
fn data_tokenizer(recipe: &Recipe, samples: &[TrainingSample]) -> Result<QwenTokenizer> {
    match (&recipe.model.init_config, &recipe.model.checkpoint) {
        (Some(_), _) => {
            let built = recipe.output_dir.join("base-model").join("tokenizer.json");
            if built.is_file() { QwenTokenizer::from_file(&built) } else { tokenizer_for_fresh_model(samples, recipe.model.init_vocab_size) }
        }
        (None, Some(dir)) if Path::new(dir).is_dir() => QwenTokenizer::from_model_dir(dir),
        (None, Some(id)) => QwenTokenizer::from_model_dir(&CheckpointFiles::resolve(id, &HubOptions::from_env())?.dir),
        (None, None) => return Err(TrainError::NoModel),
    }
    .map_err(TrainError::from)
}

/// The processor training would use, without loading model weights: that of the family the
/// fresh model's config or the checkpoint's `config.json` names, with a checkpoint folder's
/// `preprocessor_config.json`.
fn data_processor(recipe: &Recipe) -> Result<ModelProcessor> {
    let family_of = |config: &Path| ModelFamily::of_config(config).map_err(|reason| TrainError::InitConfig { path: config.to_path_buf(), reason });
    match (&recipe.model.init_config, &recipe.model.checkpoint) {
        (Some(init), _) => Ok(ModelProcessor::of_family(family_of(init)?)),
        (None, Some(id)) => {
            let dir = if Path::new(id).is_dir() { PathBuf::from(id) } else { CheckpointFiles::resolve(id, &HubOptions::from_env())?.dir };
            // A folder of processor files alone (no weights, no config) is read as Qwen2.5-VL's,
            // as a config without `model_type` is.
            let config = dir.join("config.json");
            let family = if config.is_file() { family_of(&config)? } else { ModelFamily::Qwen25Vl };
            Ok(ModelProcessor::of_checkpoint(family, &dir)?)
        }
        (None, None) => Err(TrainError::NoModel),
    }
}

/// One training sample as the model receives it: what `train sft --show-samples` prints, one
/// JSON object a line, in the keys of the official collator's batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShownSample {
    /// Index of the row among the file's samples (0-based, bad rows left out under `skip_bad`).
    pub row: usize,
    pub id: String,
    /// `file:line` of the row.
    pub location: String,
    /// Whether a motion-aware run fuses motion into its videos (`video_tchw` officially).
    pub with_motion: bool,
    pub input_ids: Vec<u32>,
    /// −100 where untrained; not shifted.
    pub labels: Vec<i64>,
    /// Per video `[t, h, w]` in patches.
    pub video_grid_thw: Vec<[usize; 3]>,
    pub second_per_grid_ts: Vec<f64>,
    /// Per video, the indices of the decoded frames it keeps (positions in the ordered frame
    /// list for a frame folder); a last frame repeated to fill a temporal pair is not listed
    /// again unless the plan itself repeats it.
    pub frame_indices: Vec<Vec<usize>>,
    /// Shape of the videos' `pixel_values_videos`, concatenated as the collator does.
    pub pixel_values_shape: Option<[usize; 2]>,
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub image_grid_thw: Vec<[usize; 3]>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub image_pixel_values_shape: Option<[usize; 2]>,
}

/// `train sft --show-samples N`: the first `n` samples of the training file, in file order, as
/// the loader makes them for the model (fitted to `max_seq_len` when the recipe fits), one
/// [`ShownSample`] per line on `out`. No model weights are loaded and no run folder is touched;
/// a sample the loader leaves out is named on `notes` instead.
pub fn show_samples(recipe: &Recipe, n: usize, out: &mut dyn Write, notes: &mut dyn Write) -> Result<()> {
    let mut samples = read_samples(recipe)?;
    let tokenizer = data_tokenizer(recipe, &samples)?;
    samples.truncate(n);
    let processor = data_processor(recipe)?;
    let media = Media::new(recipe, RunMedia::Visual(recipe.data.media_for(&processor)), &processor);
    let without_motion = media.without_motion.clone();
    let plain = |sample: &TrainingSample| if sample.with_motion { recipe.data.media_for(&processor) } else { without_motion.clone() };
    let loader = DataLoader::new(samples, tokenizer, media, LoaderConfig { shuffle: false, ..loader_config(recipe, &processor) });
    let stdout_err = |e: std::io::Error| TrainError::Io { path: PathBuf::from("<stdout>"), source: e };
    let mut iter = loader.epoch(0);
    for loaded in iter.by_ref() {
        let loaded = loaded?;
        let sample = &loader.samples()[loaded.dataset_index];
        let limited = match loader.sample_fit(loaded.dataset_index)? {
            Some(SampleFit::Fitted { limits, .. }) => plain(sample).limited(limits),
            _ => plain(sample),
        };
        let frame_indices = sample
            .videos
            .iter()
            .map(|video| limited.load_video_frames(video).map(|(plan, _)| plan.indices))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|source| TrainError::SampleMedia { location: sample.location(), source })?;
        let shape = |items: &[motionvl_data::loader::PixelInput]| {
            let rows: usize = items.iter().map(|p| p.pixel_values.nrows()).sum();
            items.first().map(|p| [rows, p.pixel_values.ncols()])
        };
        let shown = ShownSample {
            row: loaded.dataset_index,
            id: sample.id.clone(),
            location: sample.location(),
            with_motion: sample.with_motion,
            input_ids: loaded.encoded.input_ids.clone(),
            labels: loaded.encoded.labels.clone(),
            video_grid_thw: loaded.videos.iter().map(|v| v.grid_thw).collect(),
            second_per_grid_ts: loaded.videos.iter().map(|v| v.second_per_grid.unwrap_or(1.0)).collect(),
            frame_indices,
            pixel_values_shape: shape(&loaded.videos),
            image_grid_thw: loaded.images.iter().map(|i| i.grid_thw).collect(),
            image_pixel_values_shape: shape(&loaded.images),
        };
        let line = serde_json::to_string(&shown)?;
        writeln!(out, "{line}").map_err(stdout_err)?;
    }
    for skipped in iter.skipped() {
        writeln!(notes, "left out sample {} ({}): {}", skipped.sample_id, skipped.location, skipped.reason).map_err(stdout_err)?;
    }
    Ok(())
}
