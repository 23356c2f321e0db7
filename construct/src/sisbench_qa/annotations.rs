//! Per-video annotations, the input of `construct sisbench-qa`, and their reader.
//!
//! # Annotations (JSONL, a JSON list, or rows under `samples`/`data`/`items`)
//!
//! One row per video, what a labeller or a simulator knows about it. Times are seconds from
//! the start of the video as it plays; image positions are normalised, `x` right and `y` down
//! in `[0, 1]`.
//!
//! | field | |
//! |---|---|
//! | `video` | the video's path as the manifest will give it (relative to the manifest's folder) |
//! | `duration_s` | length of the video |
//! | `video_type` | `single` (default), `concatenated`, `long`, `shuffled_spatial` or `shuffled_spatiotemporal` |
//! | `clips` | concatenated: `[{"source", "start_s", "end_s"}]` in playing order (`construct sisbench-videos` writes them) |
//! | `segments`, `permutation` | shuffled: source seconds `[start, end]` of each part in playing order, and the original index (0-based) of each |
//! | `objects` | `[{"category", "attribute"?, "intervals": [[s, e]], "positions": [{"t", "x", "y"}]}]` |
//! | `landmarks` | `[{"name", "intervals": [[s, e]]}]` |
//! | `actions` | the camera's flown actions, `[{"action", "start_s", "end_s"}]` in time order |

use std::path::Path;

use motionvl_data::samples::read_records;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ConstructError;

/// How a video was made, as the annotations say.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnnotatedType {
    #[default]
    Single,
    Concatenated,
    Long,
    ShuffledSpatial,
    ShuffledSpatiotemporal,
}

/// A source clip of a concatenated video and where it plays.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClipSpan {
    pub source: String,
    pub start_s: f64,
    pub end_s: f64,
}

/// An image position at a time.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Position {
    pub t: f64,
    pub x: f64,
    pub y: f64,
}

/// A labelled object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnnotatedObject {
    pub category: String,
    /// Colour or another visible attribute.
    #[serde(default)]
    pub attribute: Option<String>,
    #[serde(default)]
    pub intervals: Vec<[f64; 2]>,
    #[serde(default)]
    pub positions: Vec<Position>,
}

impl AnnotatedObject {
    /// "red car", or "car" without an attribute.
    pub fn name(&self) -> String {
        match &self.attribute {
            Some(a) => format!("{a} {}", self.category),
            None => self.category.clone(),
        }
    }
}

/// A named landmark and when it is in view.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnnotatedLandmark {
    pub name: String,
    pub intervals: Vec<[f64; 2]>,
}

impl AnnotatedLandmark {
    pub(super) fn first_seen(&self) -> Option<f64> {
        self.intervals.iter().map(|i| i[0]).min_by(f64::total_cmp)
    }

    /// Whether any interval overlaps `[start, end)`.
    pub(super) fn seen_within(&self, start: f64, end: f64) -> bool {
        self.intervals.iter().any(|i| i[1] > start && i[0] < end)
    }
}

/// A flown action and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnnotatedAction {
    pub action: String,
    pub start_s: f64,
    pub end_s: f64,
}

/// One video's annotations (see the module docs).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct VideoAnnotation {
    pub video: String,
    pub duration_s: f64,
    #[serde(default)]
    pub video_type: AnnotatedType,
    #[serde(default)]
    pub clips: Vec<ClipSpan>,
    #[serde(default)]
    pub segments: Vec<[f64; 2]>,
    #[serde(default)]
    pub permutation: Vec<usize>,
    #[serde(default)]
    pub objects: Vec<AnnotatedObject>,
    #[serde(default)]
    pub landmarks: Vec<AnnotatedLandmark>,
    #[serde(default)]
    pub actions: Vec<AnnotatedAction>,
}

impl VideoAnnotation {
    /// Checks times, positions and the per-type fields; the message names the field.
    pub fn validate(&self) -> Result<(), String> {
        let d = self.duration_s;
        if !(d.is_finite() && d > 0.0) {
            return Err(format!("`duration_s` {d} must be positive"));
        }
        let interval_ok = |i: &[f64; 2]| i[0].is_finite() && i[1].is_finite() && 0.0 <= i[0] && i[0] <= i[1];
        for (k, o) in self.objects.iter().enumerate() {
            if let Some(i) = o.intervals.iter().find(|i| !interval_ok(i)) {
                return Err(format!("objects[{k}].intervals: {i:?} is not 0 <= start <= end"));
            }
            if let Some(p) = o.positions.iter().find(|p| !(0.0..=1.0).contains(&p.x) || !(0.0..=1.0).contains(&p.y)) {
                return Err(format!("objects[{k}].positions: ({}, {}) is outside [0, 1]", p.x, p.y));
            }
        }
        for (k, l) in self.landmarks.iter().enumerate() {
            if let Some(i) = l.intervals.iter().find(|i| !interval_ok(i)) {
                return Err(format!("landmarks[{k}].intervals: {i:?} is not 0 <= start <= end"));
            }
        }
        for (k, w) in self.actions.windows(2).enumerate() {
            if w[1].start_s < w[0].start_s {
                return Err(format!("actions[{}] starts before actions[{k}]; list them in time order", k + 1));
            }
        }
        if let Some((k, a)) = self.actions.iter().enumerate().find(|(_, a)| !interval_ok(&[a.start_s, a.end_s])) {
            return Err(format!("actions[{k}] ({}) has start {} after end {}", a.action, a.start_s, a.end_s));
        }
        match self.video_type {
            AnnotatedType::Concatenated if self.clips.len() < 2 => Err("a concatenated video needs `clips` (at least two)".into()),
            AnnotatedType::ShuffledSpatial | AnnotatedType::ShuffledSpatiotemporal => {
                let n = self.segments.len();
                let mut sorted = self.permutation.clone();
                sorted.sort_unstable();
                if n < 2 || self.permutation.len() != n || sorted != (0..n).collect::<Vec<_>>() {
                    return Err(format!("a shuffled video needs `segments` and a `permutation` of 0..{n} of the same length"));
                }
                let mut by_start: Vec<usize> = (0..n).collect();
                by_start.sort_by(|&a, &b| self.segments[a][0].total_cmp(&self.segments[b][0]));
                if by_start.iter().enumerate().any(|(rank, &k)| self.permutation[k] != rank) {
                    return Err("`permutation` must give each part's rank by its source start in `segments`".into());
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// Clips stitched into the video: the listed clips, except that a shuffled video is one
    /// source however many pieces it plays.
    pub fn concat_num(&self) -> u32 {
        match self.video_type {
            AnnotatedType::ShuffledSpatial | AnnotatedType::ShuffledSpatiotemporal => 1,
            _ => self.clips.len().max(1) as u32,
        }
    }

    /// Actions in time order with equal neighbours merged.
    pub(super) fn action_runs(&self) -> Vec<&AnnotatedAction> {
        let mut runs: Vec<&AnnotatedAction> = Vec::new();
        for a in &self.actions {
            if runs.last().is_none_or(|l| l.action != a.action) {
                runs.push(a);
            }
        }
        runs
    }
}

/// Reads an annotations file; a bad row is an error naming file, line and field.
pub fn read_annotations(path: &Path) -> Result<Vec<VideoAnnotation>, ConstructError> {
    let records = read_records(path).map_err(|e| ConstructError::input(path, e.to_string()))?;
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let value: Value = r.value.map_err(|m| ConstructError::input(path, format!("line {}: {m}", r.line)))?;
        let annotation: VideoAnnotation = serde_json::from_value(value).map_err(|e| ConstructError::input(path, format!("line {}: {e}", r.line)))?;
        annotation.validate().map_err(|e| ConstructError::input(path, format!("line {} (`{}`): {e}", r.line, annotation.video)))?;
        out.push(annotation);
    }
    if out.is_empty() {
        return Err(ConstructError::input(path, "no annotated videos"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffled_permutation_must_rank_the_parts_by_source_start() {
        let v = VideoAnnotation {
            video: "s.mp4".into(),
            duration_s: 8.0,
            video_type: AnnotatedType::ShuffledSpatial,
            segments: vec![[4.0, 6.0], [0.0, 1.0], [6.0, 8.0], [1.0, 4.0]],
            permutation: vec![2, 0, 3, 1],
            ..VideoAnnotation::default()
        };
        assert_eq!(v.validate(), Ok(()));
        let bad = VideoAnnotation { permutation: vec![0, 0, 1, 2], ..v };
        assert!(bad.validate().unwrap_err().contains("permutation"));
    }
}
