//! Descriptions of the world's videos, for pretraining a model from scratch (what a released
//! model's caption pretraining stands for): which landmarks each video shows, their colours,
//! where in the frame each first appears and in which order, clip by clip in a joined video.
//!
//! They come from the same exact annotations the questions are asked from
//! ([`super::annotate`]), but say nothing about how the drone moves: pretraining teaches the
//! world's objects and layout, so that what motion adds on top is measured by the SFT stage
//! alone. The pretraining set ([`write_pretraining_set`]) adds the split's spatial questions —
//! the instruction tuning a released model has had, answering multiple-choice questions about
//! what it sees — and never a question about the drone's own motion.

use std::path::{Path, PathBuf};

use motionvl_data::manifest::{Dimension, SisTask};
use motionvl_data::text::VIDEO_TAG;
use serde::Serialize;

use super::SynthError;
use super::generate::{Split, SynthSummary};
use super::write::Turn;
use crate::sisbench_qa::{AnnotatedObject, AnnotatedType, QUADRANTS, VideoAnnotation};

/// What the description asks for.
pub const PROMPT: &str = "Describe the landmarks in this video, in the order they come into view.";

/// Positions this close to a centre line are described as central rather than in a quadrant.
const CENTRE_MARGIN: f64 = 0.08;

/// A LLaVA-form description row (what `samples::read_training_samples` reads).
#[derive(Debug, Clone, Serialize)]
pub struct DescriptionRow {
    pub id: String,
    pub video: String,
    pub conversations: Vec<Turn>,
    pub task: &'static str,
}

/// One description per single or joined video (shuffled cuts are left out: their order is the
/// question). Videos in which no landmark is seen clearly get none.
pub fn describe(annotations: &[VideoAnnotation], prefix: &str) -> Vec<DescriptionRow> {
    annotations
        .iter()
        .filter(|a| matches!(a.video_type, AnnotatedType::Single | AnnotatedType::Concatenated))
        .filter_map(|a| description(a).map(|text| (a, text)))
        .enumerate()
        .map(|(i, (a, text))| DescriptionRow {
            id: format!("{prefix}-desc-{i:05}"),
            video: a.video.clone(),
            conversations: vec![Turn { from: "human", value: format!("{VIDEO_TAG}\n{PROMPT}") }, Turn { from: "gpt", value: text }],
            task: "Description",
        })
        .collect()
}

/// File name of a split's descriptions, beside its questions.
pub const DESCRIPTIONS_FILE: &str = "descriptions.json";

/// Describes every single and joined video of a split from its `annotations.jsonl` into
/// `<split>/descriptions.json` (written atomically); returns that path.
pub fn write_descriptions(world: &SynthSummary, split: Split) -> Result<PathBuf, SynthError> {
    let dir = world.out_dir.join(split.name());
    let source = dir.join("annotations.jsonl");
    let annotations = read_annotations(&source)?;
    write_atomic(&dir.join(DESCRIPTIONS_FILE), &describe(&annotations, split.name()))
}

/// File name of a split's pretraining set.
pub const PRETRAINING_FILE: &str = "pretraining.json";

/// A split's pretraining set, `<split>/pretraining.json` (written atomically): its descriptions
/// ([`write_descriptions`]) and its questions of the spatial dimension, in LLaVA form. Returns
/// that path.
pub fn write_pretraining_set(world: &SynthSummary, split: Split) -> Result<PathBuf, SynthError> {
    let descriptions = write_descriptions(world, split)?;
    let read = |path: &Path| -> Result<Vec<serde_json::Value>, SynthError> {
        let text = std::fs::read_to_string(path).map_err(SynthError::io(path))?;
        serde_json::from_str(&text)
            .map_err(|e| SynthError::Io { path: path.to_path_buf(), source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()) })
    };
    let mut rows = read(&descriptions)?;
    let spatial = |row: &serde_json::Value| row["task"].as_str().and_then(SisTask::from_name).is_some_and(|t| t.dimension() == Dimension::Spatial);
    rows.extend(read(&world.conversations(split))?.into_iter().filter(spatial));
    write_atomic(&world.out_dir.join(split.name()).join(PRETRAINING_FILE), &rows)
}

/// Writes `value` as pretty JSON to `path` through a temporary file beside it.
fn write_atomic(path: &Path, value: &impl Serialize) -> Result<PathBuf, SynthError> {
    let text = serde_json::to_string_pretty(value).map_err(|source| SynthError::Json { path: path.to_path_buf(), source })?;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    std::fs::write(&tmp, text).map_err(SynthError::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(SynthError::io(path))?;
    Ok(path.to_path_buf())
}

fn read_annotations(path: &Path) -> Result<Vec<VideoAnnotation>, SynthError> {
    let text = std::fs::read_to_string(path).map_err(SynthError::io(path))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| SynthError::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("line {}: {e}", i + 1)),
            })
        })
        .collect()
}

/// The description of one video: for a joined one, a sentence per clip.
pub fn description(a: &VideoAnnotation) -> Option<String> {
    if a.clips.len() < 2 {
        return sentence(&seen_in(a, 0.0, f64::INFINITY));
    }
    let n = a.clips.len();
    let parts: Vec<String> = a
        .clips
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let body = sentence(&seen_in(a, c.start_s, c.end_s)).unwrap_or_else(|| "No landmark is clearly in view.".into());
            format!("Clip {} of {n}: {body}", k + 1)
        })
        .collect();
    Some(parts.join(" "))
}

/// Clearly seen objects whose first clear position falls in `[start, end)`, in order of it.
fn seen_in(a: &VideoAnnotation, start: f64, end: f64) -> Vec<(&AnnotatedObject, f64, f64, f64)> {
    let mut seen: Vec<(&AnnotatedObject, f64, f64, f64)> = a
        .objects
        .iter()
        .filter_map(|o| {
            let p = o.positions.iter().filter(|p| p.t >= start && p.t < end).min_by(|x, y| x.t.total_cmp(&y.t))?;
            Some((o, p.t, p.x, p.y))
        })
        .collect();
    seen.sort_by(|x, y| x.1.total_cmp(&y.1));
    seen
}

/// "The pink silo comes into view in the upper right, then the green tank near the centre."
fn sentence(seen: &[(&AnnotatedObject, f64, f64, f64)]) -> Option<String> {
    let place = |x: f64, y: f64| {
        if (x - 0.5).abs() < CENTRE_MARGIN || (y - 0.5).abs() < CENTRE_MARGIN {
            "near the centre".to_string()
        } else {
            format!("in the {}", QUADRANTS[usize::from(x > 0.5) + 2 * usize::from(y > 0.5)])
        }
    };
    let (first, rest) = seen.split_first()?;
    let mut text = format!("The {} comes into view {}", first.0.name(), place(first.2, first.3));
    for (o, _, x, y) in rest {
        text += &format!(", then the {} {}", o.name(), place(*x, *y));
    }
    text.push('.');
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sisbench_qa::{ClipSpan, Position};

    fn object(category: &str, colour: &str, t: f64, x: f64, y: f64) -> AnnotatedObject {
        AnnotatedObject {
            category: category.into(),
            attribute: Some(colour.into()),
            intervals: vec![[t, t + 1.0]],
            positions: vec![Position { t: t + 0.5, x: 0.5, y: 0.5 }, Position { t, x, y }],
        }
    }

    #[test]
    fn landmarks_are_listed_in_order_of_their_first_clear_position_with_its_quadrant() {
        let a = VideoAnnotation {
            video: "v.mp4".into(),
            duration_s: 3.0,
            objects: vec![object("tank", "green", 1.0, 0.2, 0.9), object("silo", "pink", 0.2, 0.9, 0.1), object("cone", "red", 2.0, 0.52, 0.9)],
            ..VideoAnnotation::default()
        };
        assert_eq!(
            description(&a).as_deref(),
            Some("The pink silo comes into view in the upper right, then the green tank in the lower left, then the red cone near the centre.")
        );
        let unseen = VideoAnnotation { objects: vec![AnnotatedObject { positions: vec![], ..object("tank", "green", 1.0, 0.2, 0.9) }], ..a };
        assert_eq!(description(&unseen), None, "a landmark never seen clearly is not described");
    }

    #[test]
    fn a_joined_video_is_described_clip_by_clip() {
        let clip = |s: f64| ClipSpan { source: "c.mp4".into(), start_s: s, end_s: s + 3.0 };
        let a = VideoAnnotation {
            video: "cat.mp4".into(),
            duration_s: 6.0,
            video_type: AnnotatedType::Concatenated,
            clips: vec![clip(0.0), clip(3.0)],
            objects: vec![object("tower", "black", 4.0, 0.1, 0.1)],
            ..VideoAnnotation::default()
        };
        assert_eq!(
            description(&a).as_deref(),
            Some("Clip 1 of 2: No landmark is clearly in view. Clip 2 of 2: The black tower comes into view in the upper left.")
        );
        let rows = describe(&[a.clone(), VideoAnnotation { video_type: AnnotatedType::ShuffledSpatial, ..a }], "train");
        assert_eq!(rows.len(), 1, "shuffled cuts are not described");
        assert_eq!(rows[0].conversations[0].value, format!("{VIDEO_TAG}\n{PROMPT}"));
    }
}
