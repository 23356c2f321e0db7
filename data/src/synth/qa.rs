//! Four-option questions about the rendered clips, in the SIS-Bench task taxonomy.
//!
//! | task | video | asks | distractors |
//! |---|---|---|---|
//! | Action Recognition | one clip | the drone's movement | the opposite movement, then others not nested with the answer |
//! | Object Existence | one clip | which landmark appears | landmarks never seen in the clip (the world's own first) |
//! | Action Sequence | 2–4 clips | the movements in order | permutations, one step reversed, one step replaced |
//! | Landmark Order | 2–4 clips | landmarks in order of appearance | permutations, one landmark replaced by an unseen one |
//!
//! Questions are drafted with the answer apart from the distractors; [`balance`] then places
//! answers so that every letter is the answer equally often within each task, which keeps a
//! model from scoring by favouring a letter.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::behaviours::Behaviour;
use super::rng::SynthRng;
use super::scene::{World, all_landmark_names, landmark_name};
use crate::manifest::SisTask;

/// Option letters, in order.
pub const LETTERS: [char; 4] = ['A', 'B', 'C', 'D'];

/// The tasks this world asks about, in the order they are written.
pub const TASKS: [SisTask; 4] =
    [SisTask::ActionRecognition, SisTask::ObjectExistence, SisTask::ActionSequence, SisTask::LandmarkOrder];

/// Short tag of a task in question ids.
pub fn task_tag(task: SisTask) -> &'static str {
    match task {
        SisTask::ActionRecognition => "ar",
        SisTask::ObjectExistence => "oe",
        SisTask::ActionSequence => "as",
        SisTask::LandmarkOrder => "lo",
        _ => "other",
    }
}

/// What the questions need to know about one rendered clip.
#[derive(Debug, Clone, PartialEq)]
pub struct ClipFacts {
    pub behaviour: Behaviour,
    /// Landmarks shown clearly enough to be asked about, most prominent first.
    pub present: Vec<usize>,
    /// Landmarks with no pixel in any frame.
    pub absent: Vec<usize>,
}

/// A question before its answer is placed.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub task: SisTask,
    /// Video path relative to the split folder.
    pub video: String,
    pub concat_num: u32,
    pub question: String,
    pub answer: String,
    pub distractors: [String; 3],
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

    /// The user turn of a training conversation: question, lettered options, instruction.
    pub fn prompt(&self) -> String {
        let options: Vec<String> = self.options.iter().zip(LETTERS).map(|(o, l)| format!("{l}. {o}")).collect();
        format!("{}\n{}\nAnswer with the option's letter.", self.question, options.join("\n"))
    }
}

/// Takes up to three distinct strings from `candidates` (in order) that differ from `answer`.
fn take_three(answer: &str, candidates: impl IntoIterator<Item = String>) -> Option<[String; 3]> {
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

/// "Which movement does the drone make?" for a single clip.
pub fn action_recognition(video: &str, behaviour: Behaviour, rng: &mut SynthRng) -> Option<Draft> {
    let mut others: Vec<Behaviour> = Behaviour::ALL
        .iter()
        .copied()
        .filter(|&b| b != behaviour && Some(b) != behaviour.opposite() && !b.nested_with(behaviour))
        .collect();
    rng.shuffle(&mut others);
    let candidates = behaviour.opposite().into_iter().chain(others).map(|b| b.phrase().to_string());
    Some(Draft {
        task: SisTask::ActionRecognition,
        video: video.to_string(),
        concat_num: 1,
        question: "Which movement does the drone make in this video?".to_string(),
        answer: behaviour.phrase().to_string(),
        distractors: take_three(behaviour.phrase(), candidates)?,
    })
}

/// "Which of these landmarks appears?" for a single clip; `None` when the clip shows no
/// landmark clearly.
pub fn object_existence(video: &str, world: &World, facts: &ClipFacts, rng: &mut SynthRng) -> Option<Draft> {
    let answer = &world.landmarks[*rng.pick(&facts.present)?].name;
    let mut absent_here: Vec<String> = facts.absent.iter().map(|&i| world.landmarks[i].name.clone()).collect();
    rng.shuffle(&mut absent_here);
    let mut elsewhere: Vec<String> = all_landmark_names()
        .into_iter()
        .map(|(k, c)| landmark_name(k, c))
        .filter(|n| world.landmark_by_name(n).is_none())
        .collect();
    rng.shuffle(&mut elsewhere);
    // Up to two of the world's own unseen landmarks: they could have been in view, so only
    // looking tells them apart.
    let candidates = absent_here.into_iter().take(2).chain(elsewhere);
    Some(Draft {
        task: SisTask::ObjectExistence,
        video: video.to_string(),
        concat_num: 1,
        question: "Which of these landmarks appears in the video?".to_string(),
        answer: answer.clone(),
        distractors: take_three(answer, candidates)?,
    })
}

/// Every ordering of `items` except the identity, in a shuffled order.
fn permutations<T: Clone>(items: &[T], rng: &mut SynthRng) -> Vec<Vec<T>> {
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

fn sequence_text(items: &[String]) -> String {
    items.join(", then ")
}

/// "Which sequence of movements?" over concatenated clips; `None` when the behaviours
/// repeat (a permutation would then read like the answer).
pub fn action_sequence(video: &str, behaviours: &[Behaviour], rng: &mut SynthRng) -> Option<Draft> {
    let n = behaviours.len();
    if n < 2 || (0..n).any(|i| behaviours[i + 1..].contains(&behaviours[i])) {
        return None;
    }
    let phrases = |bs: &[Behaviour]| sequence_text(&bs.iter().map(|b| b.phrase().to_string()).collect::<Vec<_>>());
    let answer = phrases(behaviours);
    let perms: Vec<String> = permutations(behaviours, rng).iter().map(|p| phrases(p)).collect();
    let mut reversed_step = Vec::new();
    let mut replaced_step = Vec::new();
    for i in 0..n {
        if let Some(o) = behaviours[i].opposite().filter(|o| !behaviours.contains(o)) {
            let mut s = behaviours.to_vec();
            s[i] = o;
            reversed_step.push(phrases(&s));
        }
        let others: Vec<Behaviour> = Behaviour::ALL
            .iter()
            .copied()
            .filter(|b| !behaviours.contains(b) && !b.nested_with(behaviours[i]))
            .collect();
        if let Some(&b) = rng.pick(&others) {
            let mut s = behaviours.to_vec();
            s[i] = b;
            replaced_step.push(phrases(&s));
        }
    }
    rng.shuffle(&mut reversed_step);
    rng.shuffle(&mut replaced_step);
    let candidates = mixed(vec![perms, reversed_step, replaced_step], rng);
    Some(Draft {
        task: SisTask::ActionSequence,
        video: video.to_string(),
        concat_num: n as u32,
        question: format!("This video joins {n} flight segments. Which sequence of movements does the drone make?"),
        answer: answer.clone(),
        distractors: take_three(&answer, candidates)?,
    })
}

/// "In which order do these landmarks come into view?" over concatenated clips, given one
/// landmark per clip that only that clip shows; `unseen` are landmarks no clip shows.
pub fn landmark_order(
    video: &str,
    world: &World,
    keys: &[usize],
    unseen: &[usize],
    rng: &mut SynthRng,
) -> Option<Draft> {
    let n = keys.len();
    if n < 2 {
        return None;
    }
    let names: Vec<String> = keys.iter().map(|&i| format!("the {}", world.landmarks[i].name)).collect();
    let answer = sequence_text(&names);
    let perms: Vec<String> = permutations(&names, rng).iter().map(|p| sequence_text(p)).collect();
    let mut replaced = Vec::new();
    let mut pool: Vec<usize> = unseen.to_vec();
    rng.shuffle(&mut pool);
    for (slot, &other) in pool.iter().enumerate() {
        let mut s = names.clone();
        s[slot % n] = format!("the {}", world.landmarks[other].name);
        replaced.push(sequence_text(&s));
    }
    let candidates = mixed(vec![perms, replaced], rng);
    Some(Draft {
        task: SisTask::LandmarkOrder,
        video: video.to_string(),
        concat_num: n as u32,
        question: format!("This video joins {n} flight segments. In which order do these landmarks come into view?"),
        answer: answer.clone(),
        distractors: take_three(&answer, candidates)?,
    })
}

/// Interleaves candidate groups in a random group order, one from each in turn, so that
/// every kind of distractor tends to appear.
fn mixed(mut groups: Vec<Vec<String>>, rng: &mut SynthRng) -> Vec<String> {
    rng.shuffle(&mut groups);
    let longest = groups.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest).flat_map(|i| groups.iter().filter_map(move |g| g.get(i).cloned()).collect::<Vec<_>>()).collect()
}

/// Places the answers: within each task, questions beyond a multiple of four are dropped
/// (the last ones) and the answer positions are a shuffled deck holding each letter equally
/// often; distractors fill the other slots in random order. Ids are `{prefix}-{task}-{n}`.
pub fn balance(drafts: Vec<Draft>, prefix: &str, rng: &mut SynthRng) -> Vec<Mcq> {
    let mut by_task: BTreeMap<usize, Vec<Draft>> = BTreeMap::new();
    for d in drafts {
        let order = TASKS.iter().position(|t| *t == d.task).unwrap_or(TASKS.len());
        by_task.entry(order).or_default().push(d);
    }
    let mut out = Vec::new();
    for (_, mut list) in by_task {
        list.truncate(list.len() / 4 * 4);
        let mut deck: Vec<usize> = (0..list.len()).map(|i| i % 4).collect();
        rng.shuffle(&mut deck);
        for (i, (d, answer)) in list.into_iter().zip(deck).enumerate() {
            let mut distractors = d.distractors.to_vec();
            rng.shuffle(&mut distractors);
            let mut rest = distractors.into_iter();
            let options: [String; 4] =
                std::array::from_fn(
                    |slot| if slot == answer { d.answer.clone() } else { rest.next().unwrap_or_default() },
                );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognition_offers_the_opposite_and_no_nested_motion() {
        let mut rng = SynthRng::new(1);
        let d = action_recognition("v.mp4", Behaviour::Forward, &mut rng).expect("draft");
        assert_eq!(d.answer, "fly forward");
        assert!(d.distractors.contains(&"fly backward".to_string()));
        assert!(!d.distractors.iter().any(|x| x.starts_with("fly forward")));
    }

    #[test]
    fn sequences_need_distinct_steps_and_get_distinct_options() {
        let mut rng = SynthRng::new(2);
        assert!(action_sequence("v.mp4", &[Behaviour::Ascend, Behaviour::Ascend], &mut rng).is_none());
        let d = action_sequence("v.mp4", &[Behaviour::Ascend, Behaviour::YawLeft], &mut rng).expect("draft");
        assert_eq!(d.answer, "ascend, then turn left in place");
        let mut all = d.distractors.to_vec();
        all.push(d.answer.clone());
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4);
    }

    #[test]
    fn balance_gives_each_letter_the_same_count() {
        let mut rng = SynthRng::new(3);
        let drafts: Vec<Draft> = (0..10)
            .map(|i| Draft {
                task: SisTask::ActionRecognition,
                video: format!("{i}.mp4"),
                concat_num: 1,
                question: "q".into(),
                answer: "yes".into(),
                distractors: ["a".into(), "b".into(), "c".into()],
            })
            .collect();
        let mcqs = balance(drafts, "t", &mut rng);
        assert_eq!(mcqs.len(), 8);
        for letter in 0..4 {
            assert_eq!(mcqs.iter().filter(|m| m.answer == letter).count(), 2);
        }
        assert!(mcqs.iter().all(|m| m.options[m.answer] == "yes"));
    }
}
