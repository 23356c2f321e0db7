//! The CVAA box in the prompt: before a LinkS²Bench question is asked, the satellite window most
//! similar to the UAV view is found ([`crate::retrieve`]) and its box is appended to the
//! question as an explicit alignment prior, with the template of the run's `[cvaa]` section.
//!
//! The UAV view of a question is the middle frame of its video (or its first image when the
//! question has no video but two images); the satellite image is its last image. Questions
//! without both views are asked unchanged and counted.

use std::io::Write;
use std::path::{Path, PathBuf};

use candle_core::Device;
use motionvl_data::cvaa::UavView;
use motionvl_data::samples::ReadOptions;
use motionvl_data::video::probe_video;
use serde::{Deserialize, Serialize};

use crate::bench::Bench;
use crate::error::{EvalError, Result};
use crate::item::Item;
use crate::retrieve::{Retriever, WindowConfig, serialise_box};

/// `[cvaa]` of a run config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CvaaPriorConfig {
    /// A `train cvaa` checkpoint folder; none asks the questions as they are.
    pub checkpoint: Option<PathBuf>,
    /// Appended to the question on a new line; `{box}` becomes `[x1, y1, x2, y2]`.
    pub template: String,
    pub windows: WindowConfig,
}

pub const DEFAULT_TEMPLATE: &str = "Alignment prior: the UAV view most likely corresponds to the satellite-image region {box} (normalised [x1, y1, x2, y2], origin at the top-left).";

impl Default for CvaaPriorConfig {
    fn default() -> Self {
        Self { checkpoint: None, template: DEFAULT_TEMPLATE.into(), windows: WindowConfig::default() }
    }
}

impl CvaaPriorConfig {
    pub fn validate(&self) -> Result<()> {
        if self.checkpoint.is_some() && !self.template.contains("{box}") {
            return Err(EvalError::BadValue { key: "cvaa.template", value: format!("{:?}", self.template), problem: "must contain {box}".into() });
        }
        Ok(())
    }
}

/// The views CVAA compares for a question, when it has both.
pub fn views_of(item: &Item) -> Result<Option<(UavView, PathBuf)>> {
    let Some(satellite) = item.images.last() else { return Ok(None) };
    if let Some(video) = item.videos.first() {
        let info = probe_video(video).map_err(|e| EvalError::Retrieval { whose: item.location(), source: Box::new(e.into()) })?;
        return Ok(Some((UavView::VideoAt { path: video.clone(), seconds: info.duration_s / 2.0 }, satellite.clone())));
    }
    if item.images.len() >= 2 {
        return Ok(Some((UavView::Image(item.images[0].clone()), satellite.clone())));
    }
    Ok(None)
}

/// Where the prior went for one question.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prior {
    pub question_id: String,
    #[serde(rename = "box")]
    pub bbox: Option<[f64; 4]>,
    pub score: Option<f32>,
}

/// Appends the prior to every question that has both views; returns what each question got.
pub fn add_priors(items: &mut [Item], cfg: &CvaaPriorConfig, device: &Device, on_item: &dyn Fn()) -> Result<Vec<Prior>> {
    let Some(checkpoint) = &cfg.checkpoint else { return Ok(Vec::new()) };
    cfg.validate()?;
    let retriever = Retriever::load(checkpoint, cfg.windows.clone(), device)?;
    let mut priors = Vec::with_capacity(items.len());
    for item in items.iter_mut() {
        let prior = match views_of(item)? {
            Some((uav, satellite)) => {
                let best =
                    retriever.retrieve(&uav, &satellite, 1).map_err(|e| EvalError::Retrieval { whose: item.location(), source: Box::new(e) })?;
                let b = best[0].bbox;
                item.question = format!("{}\n{}", item.question, cfg.template.replace("{box}", &serialise_box(b)));
                Prior { question_id: item.id.clone(), bbox: Some(b), score: Some(best[0].score) }
            }
            None => Prior { question_id: item.id.clone(), bbox: None, score: None },
        };
        priors.push(prior);
        on_item();
    }
    Ok(priors)
}

/// One line of `evaluate prompts`: what an external model needs to answer the question.
#[derive(Debug, Clone, Serialize)]
pub struct PromptRow {
    pub question_id: String,
    pub task: String,
    /// The user turn as the evaluator would send it, one `<video>`/`<image>` tag per medium.
    pub prompt: String,
    pub videos: Vec<PathBuf>,
    pub images: Vec<PathBuf>,
    #[serde(rename = "box")]
    pub bbox: Option<[f64; 4]>,
}

/// Writes the (augmented) prompts of a manifest as JSONL, atomically; returns the row count
/// and how many questions got a box.
pub fn write_prompts(
    bench: &dyn Bench,
    manifest: &Path,
    opts: &ReadOptions,
    cfg: &CvaaPriorConfig,
    device: &Device,
    out: &Path,
    on_item: &dyn Fn(),
) -> Result<(usize, usize)> {
    let mut items = bench.read(manifest, opts)?.items;
    let priors = add_priors(&mut items, cfg, device, on_item)?;
    let tmp = out.with_extension("jsonl.tmp");
    let mut file = std::fs::File::create(&tmp).map_err(EvalError::io("create", &tmp))?;
    let mut boxed = 0;
    for (i, item) in items.iter().enumerate() {
        let bbox = priors.get(i).and_then(|p| p.bbox);
        boxed += usize::from(bbox.is_some());
        let row = PromptRow {
            question_id: item.id.clone(),
            task: item.task.clone(),
            prompt: bench.prompt(item),
            videos: item.videos.clone(),
            images: item.images.clone(),
            bbox,
        };
        let line = serde_json::to_string(&row)?;
        writeln!(file, "{line}").map_err(EvalError::io("write", &tmp))?;
    }
    file.sync_all().map_err(EvalError::io("write", &tmp))?;
    std::fs::rename(&tmp, out).map_err(EvalError::io("rename", out))?;
    Ok((items.len(), boxed))
}
