//! `construct sisbench-qa`: SIS-Bench questions for all 13 tasks from per-video annotations.
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
//!
//! # Tasks and their distractor rules
//!
//! Each builder states its rule; the common aim is that the text alone gives nothing away:
//! distractors are drawn from what the videos of the file show (the "pool", with repeats, so
//! distractors follow the distribution of answers; each builder says what of this video it
//! leaves out), or are other arrangements of what this video shows, so a model that never
//! looks at the video scores chance (25%).
//! [`balance`] then places answers so that every letter is the answer equally often within
//! each task (the last questions of a task beyond a multiple of four are dropped).

use std::collections::BTreeMap;
use std::path::Path;

use motionvl_data::manifest::{ChoiceAnswer, SisTask};
use motionvl_data::samples::read_records;
use motionvl_util::rng::{SynthRng, derive_seed};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ConstructError;

/// Option letters, in order.
pub const LETTERS: [char; 4] = ['A', 'B', 'C', 'D'];

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
    fn first_seen(&self) -> Option<f64> {
        self.intervals.iter().map(|i| i[0]).min_by(f64::total_cmp)
    }

    /// Whether any interval overlaps `[start, end)`.
    fn seen_within(&self, start: f64, end: f64) -> bool {
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
    fn action_runs(&self) -> Vec<&AnnotatedAction> {
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

/// A question before its answer is placed.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub task: SisTask,
    /// Video path as the manifest gives it.
    pub video: String,
    pub concat_num: u32,
    pub question: String,
    pub answer: String,
    pub distractors: [String; 3],
    /// Options in a fixed order (the answer among them); `None` lets [`balance`] place them.
    pub fixed_options: Option<[String; 4]>,
}

/// A finished four-option question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mcq {
    pub id: String,
    pub task: SisTask,
    pub video: String,
    pub concat_num: u32,
    pub question: String,
    pub options: [String; 4],
    /// Index of the right option (0 = A).
    pub answer: usize,
}

impl Mcq {
    pub fn answer_letter(&self) -> char {
        LETTERS[self.answer]
    }

    /// The user turn of a training conversation answering in `form`: question, lettered
    /// options, and the instruction asking for that form — worded as the evaluation asks for it
    /// (SPEC §2, `motionvl_eval::bench::default_prompt_asking`), so a model trained on it is
    /// asked what it was trained on.
    pub fn prompt(&self, form: ChoiceAnswer) -> String {
        let options: Vec<String> = self.options.iter().zip(LETTERS).map(|(o, l)| format!("{l}. {o}")).collect();
        format!("{}\nOptions:\n{}\n{}", self.question.trim(), options.join("\n"), form.instruction())
    }
}

/// Short tag of a task in question ids.
pub fn task_tag(task: SisTask) -> &'static str {
    use SisTask::*;
    match task {
        ObjectExistence => "oe",
        ObjectAttribute => "oa",
        RelativeDirection => "rd",
        LandmarkOrder => "lo",
        LandmarkRecall => "lr",
        PositionalRelationship => "pr",
        SpatialConsistency => "sc",
        SpatioTemporalConsistency => "stc",
        ActionRecognition => "ar",
        ActionSequence => "as",
        ActionRecall => "arc",
        ActionPrediction => "ap",
        PathPlanning => "pp",
    }
}

/// Takes up to three distinct strings from `candidates` (in order) that differ from `answer`.
pub fn take_three(answer: &str, candidates: impl IntoIterator<Item = String>) -> Option<[String; 3]> {
    let mut out: Vec<String> = Vec::with_capacity(3);
    for c in candidates {
        if c != answer && !out.contains(&c) {
            out.push(c);
            if out.len() == 3 {
                break;
            }
        }
    }
    out.try_into().ok()
}

/// Every ordering of `items` except the identity, in a shuffled order.
pub fn permutations<T: Clone>(items: &[T], rng: &mut SynthRng) -> Vec<Vec<T>> {
    fn rec<T: Clone>(rest: &[T], prefix: &mut Vec<T>, out: &mut Vec<Vec<T>>) {
        if rest.is_empty() {
            out.push(prefix.clone());
            return;
        }
        for i in 0..rest.len() {
            let mut next = rest.to_vec();
            let item = next.remove(i);
            prefix.push(item);
            rec(&next, prefix, out);
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    rec(items, &mut Vec::new(), &mut out);
    out.remove(0);
    rng.shuffle(&mut out);
    out
}

pub fn sequence_text(items: &[String]) -> String {
    items.join(", then ")
}

/// Three distractor sequences: other orders of `items` when there are at least three (five or
/// more to choose from), else the reverse of `items` plus both orders of `spare`.
pub fn order_distractors(items: &[String], spare: Option<[String; 2]>, rng: &mut SynthRng) -> Option<[String; 3]> {
    let answer = sequence_text(items);
    let candidates: Vec<String> = if items.len() >= 3 {
        permutations(items, rng).iter().map(|p| sequence_text(p)).collect()
    } else {
        let [a, b] = spare?;
        let swapped: Vec<String> = items.iter().rev().cloned().collect();
        vec![sequence_text(&swapped), format!("{a}, then {b}"), format!("{b}, then {a}")]
    };
    take_three(&answer, candidates)
}

/// Places the answers: within each task (grouped in the order of `tasks`, then any other),
/// questions beyond a multiple of four are dropped (the last ones) and the answer positions are
/// a shuffled deck holding each letter equally often; distractors fill the other slots in
/// random order. Fixed option lists keep their order. Ids are `{prefix}-{task}-{n}`.
pub fn balance(drafts: Vec<Draft>, prefix: &str, tasks: &[SisTask], rng: &mut SynthRng) -> Vec<Mcq> {
    let mut by_task: BTreeMap<usize, Vec<Draft>> = BTreeMap::new();
    for d in drafts {
        let order = tasks.iter().position(|t| *t == d.task).unwrap_or(tasks.len() + d.task as usize);
        by_task.entry(order).or_default().push(d);
    }
    let mut out = Vec::new();
    for (_, mut list) in by_task {
        list.truncate(list.len() / 4 * 4);
        let mut deck: Vec<usize> = (0..list.len()).map(|i| i % 4).collect();
        rng.shuffle(&mut deck);
        for (i, (d, slot_of_answer)) in list.into_iter().zip(deck).enumerate() {
            let fixed_answer = d.fixed_options.as_ref().and_then(|o| o.iter().position(|x| *x == d.answer));
            let (options, answer) = match (d.fixed_options.clone(), fixed_answer) {
                (Some(options), Some(answer)) => (options, answer),
                _ => {
                    let mut distractors = d.distractors.to_vec();
                    rng.shuffle(&mut distractors);
                    let mut rest = distractors.into_iter();
                    let options: [String; 4] =
                        std::array::from_fn(|slot| if slot == slot_of_answer { d.answer.clone() } else { rest.next().unwrap_or_default() });
                    (options, slot_of_answer)
                }
            };
            out.push(Mcq {
                id: format!("{prefix}-{}-{i:05}", task_tag(d.task)),
                task: d.task,
                video: d.video,
                concat_num: d.concat_num,
                question: d.question,
                options,
                answer,
            });
        }
    }
    out
}

/// What the videos of a file show, with repeats: the source of distractors.
#[derive(Debug, Clone, Default)]
pub struct Pool {
    /// (category, attribute) of every object of every video.
    pub objects: Vec<(String, Option<String>)>,
    pub landmarks: Vec<String>,
    pub actions: Vec<String>,
}

impl Pool {
    pub fn new(videos: &[VideoAnnotation]) -> Pool {
        let mut pool = Pool::default();
        for v in videos {
            pool.objects.extend(v.objects.iter().map(|o| (o.category.clone(), o.attribute.clone())));
            pool.landmarks.extend(v.landmarks.iter().map(|l| l.name.clone()));
            pool.actions.extend(v.action_runs().iter().map(|a| a.action.clone()));
        }
        pool
    }

    /// `items` shuffled (repeats kept, so frequent ones tend to come first), then deduplicated.
    fn drawn(items: impl IntoIterator<Item = String>, rng: &mut SynthRng) -> Vec<String> {
        let mut all: Vec<String> = items.into_iter().collect();
        rng.shuffle(&mut all);
        let mut out: Vec<String> = Vec::with_capacity(all.len());
        for s in all {
            if !out.contains(&s) {
                out.push(s);
            }
        }
        out
    }
}

fn draft(task: SisTask, v: &VideoAnnotation, question: String, answer: String, distractors: [String; 3]) -> Draft {
    Draft { task, video: v.video.clone(), concat_num: v.concat_num(), question, answer, distractors, fixed_options: None }
}

/// **Object Existence** (single). The answer is an object the video shows; the options are a
/// 2×2 grid of two categories × two attributes (the answer's and one more of each, drawn
/// from the pool), the other three absent from this video, so each option shares its
/// category with one option and its attribute with another. Objects without an attribute get
/// three pool categories absent from the video instead.
pub fn object_existence(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let answer = rng.pick(&v.objects)?;
    let shown = |c: &str, a: Option<&str>| v.objects.iter().any(|o| o.category == c && (a.is_none() || o.attribute.as_deref() == a));
    let question = "Which of these objects appears in the video?".to_string();
    let Some(attribute) = &answer.attribute else {
        let others = Pool::drawn(pool.objects.iter().map(|o| o.0.clone()), rng);
        let d = take_three(&answer.category, others.into_iter().filter(|c| !shown(c, None)))?;
        return Some(draft(SisTask::ObjectExistence, v, question, answer.category.clone(), d));
    };
    let categories = Pool::drawn(pool.objects.iter().map(|o| o.0.clone()), rng);
    let attributes = Pool::drawn(pool.objects.iter().filter_map(|o| o.1.clone()), rng);
    let (k, a) = (&answer.category, attribute);
    let (k2, a2) = categories.iter().filter(|c| *c != k).find_map(|k2| {
        attributes.iter().filter(|c| *c != a).find(|a2| !shown(k, Some(a2)) && !shown(k2, Some(a)) && !shown(k2, Some(a2))).map(|a2| (k2, a2))
    })?;
    let d = [format!("{a2} {k}"), format!("{a} {k2}"), format!("{a2} {k2}")];
    Some(draft(SisTask::ObjectExistence, v, question, answer.name(), d))
}

/// **Object Attribute** (single). Asks the attribute of a category the video shows with one
/// attribute only; distractors are other attributes the pool gives that category (the
/// answer's own distribution), then any pool attribute, none worn by that category here.
pub fn object_attribute(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let mut candidates: Vec<&AnnotatedObject> = v
        .objects
        .iter()
        .filter(|o| o.attribute.is_some() && v.objects.iter().filter(|p| p.category == o.category).all(|p| p.attribute == o.attribute))
        .collect();
    rng.shuffle(&mut candidates);
    let o = candidates.first()?;
    let attribute = o.attribute.clone()?;
    let worn: Vec<&String> = v.objects.iter().filter(|p| p.category == o.category).filter_map(|p| p.attribute.as_ref()).collect();
    let mut others = Pool::drawn(pool.objects.iter().filter(|p| p.0 == o.category).filter_map(|p| p.1.clone()), rng);
    others.extend(Pool::drawn(pool.objects.iter().filter_map(|p| p.1.clone()), rng));
    let d = take_three(&attribute, others.into_iter().filter(|a| !worn.contains(&a)))?;
    let question = format!("What colour or attribute does the {} in the video have?", o.category);
    Some(draft(SisTask::ObjectAttribute, v, question, attribute, d))
}

/// The four quadrants of the frame, the options of Relative Direction.
pub const QUADRANTS: [&str; 4] = ["upper left", "upper right", "lower left", "lower right"];

/// Image positions this close to a centre line are too ambiguous to ask about.
const CENTRE_MARGIN: f64 = 0.08;

/// **Relative Direction** (single). Where in the frame an object is when it first comes into
/// view: the options are always the four quadrants, so only the video tells which; objects
/// near a centre line, or whose name is not unique in the video, are not asked about.
pub fn relative_direction(v: &VideoAnnotation, rng: &mut SynthRng) -> Option<Draft> {
    let mut candidates: Vec<(&AnnotatedObject, Position)> = v
        .objects
        .iter()
        .filter(|o| v.objects.iter().filter(|p| p.name() == o.name()).count() == 1)
        .filter_map(|o| o.positions.iter().min_by(|a, b| a.t.total_cmp(&b.t)).map(|p| (o, *p)))
        .filter(|(_, p)| (p.x - 0.5).abs() >= CENTRE_MARGIN && (p.y - 0.5).abs() >= CENTRE_MARGIN)
        .collect();
    rng.shuffle(&mut candidates);
    let (o, p) = candidates.first()?;
    let quadrant = QUADRANTS[usize::from(p.x > 0.5) + 2 * usize::from(p.y > 0.5)];
    let question = format!("When the {} first comes into view, in which part of the frame is it?", o.name());
    let d = take_three(quadrant, QUADRANTS.iter().map(|q| q.to_string()))?;
    Some(draft(SisTask::RelativeDirection, v, question, quadrant.to_string(), d))
}

/// Pool landmarks this video never shows, drawn in pool order.
fn unseen_landmarks(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Vec<String> {
    Pool::drawn(pool.landmarks.iter().cloned(), rng).into_iter().filter(|n| v.landmarks.iter().all(|l| &l.name != n)).collect()
}

/// **Landmark Order** (concatenated). Up to four landmarks whose first sightings are at least
/// half a second apart, in order of appearance; distractors are other orders of the same
/// landmarks, or for two, their reverse and both orders of two pool landmarks the video never
/// shows.
pub fn landmark_order(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let mut seen: Vec<(f64, &str)> = v.landmarks.iter().filter_map(|l| l.first_seen().map(|t| (t, l.name.as_str()))).collect();
    rng.shuffle(&mut seen);
    let mut chosen: Vec<(f64, &str)> = Vec::new();
    for (t, name) in seen {
        if chosen.len() < 4 && chosen.iter().all(|(u, n)| (t - u).abs() >= 0.5 && *n != name) {
            chosen.push((t, name));
        }
    }
    if chosen.len() < 2 {
        return None;
    }
    chosen.sort_by(|a, b| a.0.total_cmp(&b.0));
    let names: Vec<String> = chosen.iter().map(|(_, n)| format!("the {n}")).collect();
    let unseen = unseen_landmarks(v, pool, rng);
    let spare = (names.len() == 2 && unseen.len() >= 2).then(|| [format!("the {}", unseen[0]), format!("the {}", unseen[1])]);
    let d = order_distractors(&names, spare, rng)?;
    let question = "In which order do these landmarks first come into view?".to_string();
    Some(draft(SisTask::LandmarkOrder, v, question, sequence_text(&names), d))
}

/// **Landmark Recall** (concatenated). Which landmark is seen in the k-th joined clip (and in
/// no other); distractors are landmarks seen in the other clips of the same video, then pool
/// landmarks the video never shows, so every option is plausible for the video as a whole.
pub fn landmark_recall(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let n = v.clips.len();
    if n < 2 {
        return None;
    }
    let k = rng.index(n);
    let clip = &v.clips[k];
    let only_here: Vec<&AnnotatedLandmark> = v
        .landmarks
        .iter()
        .filter(|l| l.seen_within(clip.start_s, clip.end_s))
        .filter(|l| v.clips.iter().enumerate().all(|(j, c)| j == k || !l.seen_within(c.start_s, c.end_s)))
        .collect();
    let answer = rng.pick(&only_here)?;
    let mut elsewhere: Vec<String> = v.landmarks.iter().filter(|l| !l.seen_within(clip.start_s, clip.end_s)).map(|l| l.name.clone()).collect();
    rng.shuffle(&mut elsewhere);
    elsewhere.extend(unseen_landmarks(v, pool, rng));
    let d = take_three(&answer.name, elsewhere)?;
    let question = format!("This video joins {n} clips. Which landmark appears in clip {} of {n}?", k + 1);
    Some(draft(SisTask::LandmarkRecall, v, question, answer.name.clone(), d))
}

/// The four relations of Positional Relationship.
pub const RELATIONS: [&str; 4] = ["to the left of", "to the right of", "above", "below"];

/// **Positional Relationship** (concatenated). Where one object is relative to another in the
/// frame at a moment both are in view (within 0.25 s), by the larger of the horizontal and
/// vertical offsets, which must exceed the other by 0.1; the options are always the four
/// relations.
pub fn positional_relationship(v: &VideoAnnotation, rng: &mut SynthRng) -> Option<Draft> {
    let unique: Vec<&AnnotatedObject> = v.objects.iter().filter(|o| v.objects.iter().filter(|p| p.name() == o.name()).count() == 1).collect();
    let mut pairs = Vec::new();
    for (i, a) in unique.iter().enumerate() {
        for b in unique.iter().skip(i + 1) {
            for pa in &a.positions {
                if let Some(pb) = b.positions.iter().find(|pb| (pb.t - pa.t).abs() <= 0.25) {
                    let (dx, dy) = (pa.x - pb.x, pa.y - pb.y);
                    if (dx.abs() - dy.abs()).abs() >= 0.1 {
                        pairs.push((*a, *b, dx, dy));
                        break;
                    }
                }
            }
        }
    }
    let &(a, b, dx, dy) = rng.pick(&pairs)?;
    let (a, b, dx, dy) = if rng.chance(0.5) { (a, b, dx, dy) } else { (b, a, -dx, -dy) };
    let relation = if dx.abs() > dy.abs() {
        if dx < 0.0 { RELATIONS[0] } else { RELATIONS[1] }
    } else if dy < 0.0 {
        RELATIONS[2]
    } else {
        RELATIONS[3]
    };
    let question = format!("When both are in view, where is the {} relative to the {}?", a.name(), b.name());
    let d = take_three(relation, RELATIONS.iter().map(|r| r.to_string()))?;
    Some(draft(SisTask::PositionalRelationship, v, question, relation.to_string(), d))
}

/// "3, 1, 4, 2": the original position (1-based) of each part in playing order.
fn order_text(order: &[usize]) -> String {
    order.iter().map(|i| (i + 1).to_string()).collect::<Vec<_>>().join(", ")
}

/// **Spatial Consistency** and **Spatio-temporal Consistency** (shuffled). The parts of a
/// shuffled video play out of order; which order of original positions do they play in?
/// Distractors are other shuffles of the same parts drawn uniformly, never the unshuffled
/// order (no video is offered unshuffled, so that option would be a giveaway to exclude).
pub fn consistency(v: &VideoAnnotation, rng: &mut SynthRng) -> Option<Draft> {
    let (task, how) = match v.video_type {
        AnnotatedType::ShuffledSpatial => (SisTask::SpatialConsistency, "cut into"),
        AnnotatedType::ShuffledSpatiotemporal => (SisTask::SpatioTemporalConsistency, "cut into overlapping"),
        _ => return None,
    };
    let n = v.permutation.len();
    let identity: Vec<usize> = (0..n).collect();
    if v.permutation == identity {
        return None;
    }
    let others = permutations(&identity, rng).into_iter().filter(|p| p != &v.permutation).map(|p| order_text(&p));
    let d = take_three(&order_text(&v.permutation), others)?;
    let question = format!(
        "This flight was {how} {n} parts that now play out of order. Numbering the parts 1 to {n} in the \
         order they were flown, in which order does the video play them?"
    );
    Some(draft(task, v, question, order_text(&v.permutation), d))
}

/// **Action Recognition** (single). The one action the video's camera makes; distractors are
/// pool actions the video does not show (frequent actions come up more, as answers do).
pub fn action_recognition(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let runs = v.action_runs();
    let [only] = runs.as_slice() else { return None };
    let others = Pool::drawn(pool.actions.iter().cloned(), rng);
    let d = take_three(&only.action, others.into_iter().filter(|a| v.actions.iter().all(|b| &b.action != a)))?;
    let question = "Which movement does the drone make in this video?".to_string();
    Some(draft(SisTask::ActionRecognition, v, question, only.action.clone(), d))
}

/// Two pool actions, distinct and absent from `v`, as the spare pair of two-step orders.
fn spare_actions(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<[String; 2]> {
    let others: Vec<String> =
        Pool::drawn(pool.actions.iter().cloned(), rng).into_iter().filter(|a| v.actions.iter().all(|b| &b.action != a)).collect();
    (others.len() >= 2).then(|| [others[0].clone(), others[1].clone()])
}

/// `runs` as action names when none repeats (an option would then read like the answer).
fn distinct_actions(runs: &[&AnnotatedAction]) -> Option<Vec<String>> {
    let names: Vec<String> = runs.iter().map(|a| a.action.clone()).collect();
    (0..names.len()).all(|i| !names[i + 1..].contains(&names[i])).then_some(names)
}

/// **Action Sequence** (concatenated). The video's actions in order (two to four, none
/// repeated); distractors are other orders of the same actions, or for two, their reverse and
/// both orders of two pool actions the video does not show.
pub fn action_sequence(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let runs = v.action_runs();
    if !(2..=4).contains(&runs.len()) {
        return None;
    }
    let names = distinct_actions(&runs)?;
    let spare = if names.len() == 2 { spare_actions(v, pool, rng) } else { None };
    let d = order_distractors(&names, spare, rng)?;
    let question = "Which sequence of movements does the drone make?".to_string();
    Some(draft(SisTask::ActionSequence, v, question, sequence_text(&names), d))
}

/// **Action Recall** (concatenated). What the drone does right after a named action (one the
/// video shows once); distractors are the video's other actions, then pool actions, never the
/// named one.
pub fn action_recall(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let runs = v.action_runs();
    let names = distinct_actions(&runs)?;
    if names.len() < 2 {
        return None;
    }
    let k = rng.index(names.len() - 1);
    let (named, answer) = (&names[k], &names[k + 1]);
    let mut others: Vec<String> = names.iter().filter(|a| *a != named && *a != answer).cloned().collect();
    rng.shuffle(&mut others);
    others.extend(Pool::drawn(pool.actions.iter().cloned(), rng).into_iter().filter(|a| a != named));
    let d = take_three(answer, others)?;
    let question = format!("What does the drone do right after it performs \"{named}\"?");
    Some(draft(SisTask::ActionRecall, v, question, answer.clone(), d))
}

/// **Action Prediction** (long). Watching up to the end of one action, which movement comes
/// next; distractors are pool actions drawn as answers are (the action just ended among them
/// when drawn: it is always wrong, but only the video says which option it is).
pub fn action_prediction(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let runs = v.action_runs();
    if runs.len() < 2 {
        return None;
    }
    let k = rng.index(runs.len() - 1);
    let (until, answer) = (runs[k].end_s, &runs[k + 1].action);
    let d = take_three(answer, Pool::drawn(pool.actions.iter().cloned(), rng))?;
    let question = format!("Watch the flight up to {until:.1} s. Which movement does the drone make next?");
    Some(draft(SisTask::ActionPrediction, v, question, answer.clone(), d))
}

/// **Path Planning** (long). The movements that take the drone from where it is at one time to
/// where it is at a later one (two to four consecutive actions, none repeated); distractors
/// are other orders of the same movements, or for two, their reverse and both orders of two
/// pool actions.
pub fn path_planning(v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    let runs = v.action_runs();
    if runs.len() < 2 {
        return None;
    }
    let len = 2 + rng.index(runs.len().min(4) - 1);
    let start = rng.index(runs.len() - len + 1);
    let window = &runs[start..start + len];
    let names = distinct_actions(window)?;
    let spare = if names.len() == 2 { spare_actions(v, pool, rng) } else { None };
    let d = order_distractors(&names, spare, rng)?;
    let (from, to) = (window[0].start_s, window[len - 1].end_s);
    let question = format!("Which sequence of movements takes the drone from where it is at {from:.1} s to where it is at {to:.1} s?");
    Some(draft(SisTask::PathPlanning, v, question, sequence_text(&names), d))
}

/// The tasks asked of a video of each type (SPEC §2's video type per task).
pub fn tasks_for(video_type: AnnotatedType) -> &'static [SisTask] {
    use SisTask::*;
    match video_type {
        AnnotatedType::Single => &[ObjectExistence, ObjectAttribute, RelativeDirection, ActionRecognition],
        AnnotatedType::Concatenated => &[LandmarkOrder, LandmarkRecall, PositionalRelationship, ActionSequence, ActionRecall],
        AnnotatedType::Long => &[ActionPrediction, PathPlanning],
        AnnotatedType::ShuffledSpatial => &[SpatialConsistency],
        AnnotatedType::ShuffledSpatiotemporal => &[SpatioTemporalConsistency],
    }
}

/// Drafts one question of `task` about `v`, or `None` when the annotations cannot support one.
pub fn draft_task(task: SisTask, v: &VideoAnnotation, pool: &Pool, rng: &mut SynthRng) -> Option<Draft> {
    use SisTask::*;
    match task {
        ObjectExistence => object_existence(v, pool, rng),
        ObjectAttribute => object_attribute(v, pool, rng),
        RelativeDirection => relative_direction(v, rng),
        LandmarkOrder => landmark_order(v, pool, rng),
        LandmarkRecall => landmark_recall(v, pool, rng),
        PositionalRelationship => positional_relationship(v, rng),
        SpatialConsistency | SpatioTemporalConsistency => consistency(v, rng),
        ActionRecognition => action_recognition(v, pool, rng),
        ActionSequence => action_sequence(v, pool, rng),
        ActionRecall => action_recall(v, pool, rng),
        ActionPrediction => action_prediction(v, pool, rng),
        PathPlanning => path_planning(v, pool, rng),
    }
}

/// Every question the annotations support: each video is asked each task of its type once,
/// with its own seed stream, and the answers are balanced per task. The pool is the whole
/// file's; ids start with `prefix`.
pub fn build_questions(videos: &[VideoAnnotation], prefix: &str, seed: u64) -> Vec<Mcq> {
    let pool = Pool::new(videos);
    let mut drafts = Vec::new();
    for (i, v) in videos.iter().enumerate() {
        for (t, &task) in tasks_for(v.video_type).iter().enumerate() {
            let mut rng = SynthRng::new(derive_seed(derive_seed(seed, i as u64), t as u64));
            drafts.extend(draft_task(task, v, &pool, &mut rng));
        }
    }
    balance(drafts, prefix, &SisTask::ALL, &mut SynthRng::new(derive_seed(seed, 0xba1a)))
}

/// Writes the questions as a SIS-Bench manifest (a JSON list of [`SisRow`]s).
pub fn write_manifest(path: &Path, questions: &[Mcq]) -> Result<(), ConstructError> {
    Ok(motionvl_util::files::write_json_atomic(path, &questions.iter().map(SisRow::new).collect::<Vec<_>>())?)
}

/// Questions per task, in the taxonomy's order (tasks with none included).
pub fn count_by_task(questions: &[Mcq]) -> Vec<(SisTask, usize)> {
    SisTask::ALL.iter().map(|&t| (t, questions.iter().filter(|q| q.task == t).count())).collect()
}

/// A SIS-Bench manifest row (the HF `choucsan/SIS-Bench` fields `manifest::read_sisbench` reads).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SisRow {
    pub question_id: String,
    pub video_name: String,
    pub video_path: String,
    pub concat_num: u32,
    pub task_type: String,
    pub question: String,
    pub options: BTreeMap<String, String>,
    pub answer: String,
}

impl SisRow {
    pub fn new(q: &Mcq) -> Self {
        let video_name = Path::new(&q.video).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        SisRow {
            question_id: q.id.clone(),
            video_name,
            video_path: q.video.clone(),
            concat_num: q.concat_num,
            task_type: q.task.name().to_string(),
            question: q.question.clone(),
            options: LETTERS.iter().zip(&q.options).map(|(l, o)| (l.to_string(), o.clone())).collect(),
            answer: q.answer_letter().to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(category: &str, attribute: &str, t: f64, x: f64, y: f64) -> AnnotatedObject {
        AnnotatedObject {
            category: category.into(),
            attribute: Some(attribute.into()),
            intervals: vec![[t, t + 1.0]],
            positions: vec![Position { t, x, y }],
        }
    }

    #[test]
    fn relative_direction_reads_the_first_position() {
        let v = VideoAnnotation {
            video: "v.mp4".into(),
            duration_s: 5.0,
            objects: vec![AnnotatedObject {
                positions: vec![Position { t: 2.0, x: 0.9, y: 0.9 }, Position { t: 1.0, x: 0.2, y: 0.8 }],
                ..object("car", "red", 1.0, 0.2, 0.8)
            }],
            ..VideoAnnotation::default()
        };
        let d = relative_direction(&v, &mut SynthRng::new(1)).unwrap_or_else(|| panic!("a draft"));
        assert_eq!(d.answer, "lower left");
        let centred = VideoAnnotation { objects: vec![object("car", "red", 1.0, 0.55, 0.9)], ..v };
        assert!(relative_direction(&centred, &mut SynthRng::new(1)).is_none());
    }

    #[test]
    fn existence_grid_options_are_absent_from_the_video() {
        let here = VideoAnnotation {
            video: "a.mp4".into(),
            duration_s: 3.0,
            objects: vec![object("car", "red", 0.0, 0.2, 0.2)],
            ..VideoAnnotation::default()
        };
        let elsewhere = VideoAnnotation {
            video: "b.mp4".into(),
            duration_s: 3.0,
            objects: vec![object("truck", "blue", 0.0, 0.2, 0.2), object("car", "blue", 0.0, 0.7, 0.7)],
            ..VideoAnnotation::default()
        };
        let pool = Pool::new(&[here.clone(), elsewhere]);
        let d = object_existence(&here, &pool, &mut SynthRng::new(3)).unwrap_or_else(|| panic!("a draft"));
        assert_eq!(d.answer, "red car");
        let mut got = d.distractors.to_vec();
        got.sort();
        assert_eq!(got, ["blue car", "blue truck", "red truck"]);
    }

    #[test]
    fn shuffled_videos_never_offer_the_unshuffled_order() {
        let v = VideoAnnotation {
            video: "s.mp4".into(),
            duration_s: 8.0,
            video_type: AnnotatedType::ShuffledSpatial,
            segments: vec![[4.0, 6.0], [0.0, 1.0], [6.0, 8.0], [1.0, 4.0]],
            permutation: vec![2, 0, 3, 1],
            ..VideoAnnotation::default()
        };
        assert_eq!(v.validate(), Ok(()));
        for seed in 0..20 {
            let d = consistency(&v, &mut SynthRng::new(seed)).unwrap_or_else(|| panic!("a draft"));
            assert_eq!(d.answer, "3, 1, 4, 2");
            assert!(d.distractors.iter().all(|o| o != "1, 2, 3, 4" && o != &d.answer));
        }
        let bad = VideoAnnotation { permutation: vec![0, 0, 1, 2], ..v };
        assert!(bad.validate().unwrap_err().contains("permutation"));
    }
}
