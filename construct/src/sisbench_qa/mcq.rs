//! Four-option questions: [`Draft`]s and finished [`Mcq`]s, the distractor helpers the task
//! builders (and `synth::qa`) share, the [`Pool`] distractors are drawn from, and [`balance`],
//! which places the answers.

use std::collections::BTreeMap;

use motionvl_data::manifest::{ChoiceAnswer, SisTask};
use motionvl_util::rng::SynthRng;
use serde::{Deserialize, Serialize};

use super::annotations::VideoAnnotation;

/// Option letters, in order.
pub const LETTERS: [char; 4] = ['A', 'B', 'C', 'D'];

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
    pub(super) fn drawn(items: impl IntoIterator<Item = String>, rng: &mut SynthRng) -> Vec<String> {
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
