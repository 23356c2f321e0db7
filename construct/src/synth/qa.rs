//! Four-option questions about the rendered clips, in the SIS-Bench task taxonomy. The four
//! below have rules of their own, which use what only the renderer knows (the option set a
//! clip was flown for, pixel-exact absence); the other nine tasks are asked from the world's
//! annotations ([`super::annotate`]) by the builders real footage goes through
//! ([`crate::sisbench_qa`]).
//!
//! | task | video | asks | options |
//! |---|---|---|---|
//! | Action Recognition | one clip | the drone's movement | a random set of four movements, no two nested (forward / forward-while-ascending) |
//! | Object Existence | one clip | which landmark appears | a 2×2 grid of two kinds × two colours, the other three unseen in the clip |
//! | Action Sequence | 2–4 clips | the movements in order | other orders of the same movements; for two clips, both orders of another pair |
//! | Landmark Order | 2–4 clips | landmarks in order of appearance | other orders; for two clips, both orders of two unseen landmarks |
//!
//! The option sets are built so that the text alone does not give the answer away: a model
//! that never looks at the video should score chance (25%). Hence no "always include the
//! opposite" (the answer would be one of the opposite pair), no distractor that differs from
//! the answer in one step (the answer would be the option most like the others), and:
//! - Action Recognition draws the option set first, uniformly among sets of four pairwise
//!   non-nested movements, and then the answer uniformly within it; the clip then flies that
//!   answer. So every option of a set is equally likely to be the answer, at the price of
//!   movements that fit fewer sets (plain forward flight) being flown less often.
//! - Object Existence's grid makes each option share its kind with one option and its colour
//!   with another; the second kind and colour come from landmarks other clips of the world
//!   show, so they follow the same distribution as answers (big landmarks are seen more).
//! - The two-clip Landmark Order is the one residual: its unseen landmarks are not drawn from
//!   the distribution of seen ones.
//!
//! Questions are drafted with the answer apart from the distractors; [`balance`] then places
//! answers so that every letter is the answer equally often within each task, which keeps a
//! model from scoring by favouring a letter.

use motionvl_data::manifest::SisTask;

use super::behaviours::Behaviour;
use super::rng::SynthRng;
use super::scene::{Colour, LandmarkKind, World, all_landmark_names, landmark_name};
pub use crate::sisbench_qa::{Draft, Mcq};
use crate::sisbench_qa::{order_distractors, sequence_text, take_three};

/// The tasks this world asks about, in the order they are written: the four asked here, then
/// the nine asked from the world's annotations by `construct::sisbench_qa` (see `annotate`).
pub const TASKS: [SisTask; 13] = [
    SisTask::ActionRecognition,
    SisTask::ObjectExistence,
    SisTask::ActionSequence,
    SisTask::LandmarkOrder,
    SisTask::ObjectAttribute,
    SisTask::RelativeDirection,
    SisTask::LandmarkRecall,
    SisTask::PositionalRelationship,
    SisTask::SpatialConsistency,
    SisTask::SpatioTemporalConsistency,
    SisTask::ActionRecall,
    SisTask::ActionPrediction,
    SisTask::PathPlanning,
];

/// What the questions need to know about one rendered clip.
#[derive(Debug, Clone, PartialEq)]
pub struct ClipFacts {
    pub behaviour: Behaviour,
    /// Landmarks shown clearly enough to be asked about, most prominent first.
    pub present: Vec<usize>,
    /// Landmarks with no pixel in any frame.
    pub absent: Vec<usize>,
}

/// An Action Recognition option set and its answer: four movements, no two nested, drawn
/// uniformly among such sets, and the answer uniformly among the four (see the module docs).
pub fn recognition_set(rng: &mut SynthRng) -> (Behaviour, [Behaviour; 3]) {
    loop {
        let mut all = Behaviour::ALL.to_vec();
        rng.shuffle(&mut all);
        let set = [all[0], all[1], all[2], all[3]];
        if (0..4).all(|i| (i + 1..4).all(|j| !set[i].nested_with(set[j]))) {
            let answer = rng.index(4);
            let others: Vec<Behaviour> = (0..4).filter(|&i| i != answer).map(|i| set[i]).collect();
            return (set[answer], [others[0], others[1], others[2]]);
        }
    }
}

/// Action Recognition over a fixed list of four movements, always offered in that order: clip
/// `i` of a split flies movement `i mod 4` (then the plans are shuffled), so every letter is
/// the answer equally often. It turns the task into four-way classification, which a tiny
/// model trained from scratch can learn in minutes (the demo's world); drawn option sets
/// ([`recognition_set`]) need a model that reads the options.
pub fn fixed_recognition_plans(movements: &[Behaviour; 4], clips: usize, rng: &mut SynthRng) -> Vec<(Behaviour, [Behaviour; 3])> {
    let mut plans: Vec<(Behaviour, [Behaviour; 3])> = (0..clips)
        .map(|i| {
            let answer = movements[i % 4];
            let others: Vec<Behaviour> = movements.iter().copied().filter(|&b| b != answer).collect();
            (answer, [others[0], others[1], others[2]])
        })
        .collect();
    rng.shuffle(&mut plans);
    plans
}

/// "Which movement does the drone make?" for a single clip, with the option set drawn by
/// [`recognition_set`], or listed in `fixed` order.
pub fn action_recognition(video: &str, behaviour: Behaviour, distractors: [Behaviour; 3], fixed: Option<&[Behaviour; 4]>) -> Option<Draft> {
    Some(Draft {
        task: SisTask::ActionRecognition,
        video: video.to_string(),
        concat_num: 1,
        question: "Which movement does the drone make in this video?".to_string(),
        answer: behaviour.phrase().to_string(),
        distractors: take_three(behaviour.phrase(), distractors.iter().map(|b| b.phrase().to_string()))?,
        fixed_options: fixed.map(|m| m.map(|b| b.phrase().to_string())),
    })
}

/// "Which of these landmarks appears?" for a single clip; `None` when the clip shows no
/// landmark clearly or no grid of unseen names fits. `elsewhere` lists the kinds and colours
/// that the world's other clips show clearly (with repeats), the source of the grid's second
/// kind and colour.
pub fn object_existence(video: &str, world: &World, facts: &ClipFacts, elsewhere: &[(LandmarkKind, Colour)], rng: &mut SynthRng) -> Option<Draft> {
    let answer = &world.landmarks[*rng.pick(&facts.present)?];
    let (kind, colour) = (answer.kind, answer.colour);
    // A name is usable as a distractor when nothing by that name is in view.
    let unseen = |k: LandmarkKind, c: Colour| world.landmarks.iter().all(|l| (l.kind, l.colour) != (k, c) || facts.absent.contains(&l.index));
    let mut kinds: Vec<LandmarkKind> = elsewhere.iter().map(|e| e.0).filter(|&k| k != kind).collect();
    rng.shuffle(&mut kinds);
    let mut any_kind: Vec<LandmarkKind> = LandmarkKind::ALL.iter().copied().filter(|&k| k != kind).collect();
    rng.shuffle(&mut any_kind);
    kinds.extend(any_kind);
    let mut colours: Vec<Colour> = elsewhere.iter().map(|e| e.1).filter(|&c| c != colour).collect();
    rng.shuffle(&mut colours);
    let mut any_colour: Vec<Colour> = Colour::ALL.iter().copied().filter(|&c| c != colour).collect();
    rng.shuffle(&mut any_colour);
    colours.extend(any_colour);
    let (other_kind, other_colour) =
        kinds.iter().find_map(|&k2| colours.iter().find(|&&c2| unseen(kind, c2) && unseen(k2, colour) && unseen(k2, c2)).map(|&c2| (k2, c2)))?;
    let names = [(kind, other_colour), (other_kind, colour), (other_kind, other_colour)];
    Some(Draft {
        task: SisTask::ObjectExistence,
        video: video.to_string(),
        concat_num: 1,
        question: "Which of these landmarks appears in the video?".to_string(),
        answer: answer.name.clone(),
        distractors: names.map(|(k, c)| landmark_name(k, c)),
        fixed_options: None,
    })
}

/// "Which sequence of movements?" over concatenated clips; `None` when the behaviours
/// repeat (an option would then read like the answer). Two-clip questions add both orders of
/// another pair of movements, drawn as clips' movements are (see [`recognition_set`]) and
/// not nested with the clips' own.
pub fn action_sequence(video: &str, behaviours: &[Behaviour], rng: &mut SynthRng) -> Option<Draft> {
    let n = behaviours.len();
    if n < 2 || (0..n).any(|i| behaviours[i + 1..].contains(&behaviours[i])) {
        return None;
    }
    let phrases: Vec<String> = behaviours.iter().map(|b| b.phrase().to_string()).collect();
    let spare = (n == 2).then(|| {
        let mut pair: Vec<Behaviour> = Vec::with_capacity(2);
        while pair.len() < 2 {
            let (b, _) = recognition_set(rng);
            if behaviours.iter().chain(&pair).all(|o| !o.nested_with(b)) {
                pair.push(b);
            }
        }
        [pair[0].phrase().to_string(), pair[1].phrase().to_string()]
    });
    Some(Draft {
        task: SisTask::ActionSequence,
        video: video.to_string(),
        concat_num: n as u32,
        question: format!("This video joins {n} flight segments. Which sequence of movements does the drone make?"),
        answer: sequence_text(&phrases),
        distractors: order_distractors(&phrases, spare, rng)?,
        fixed_options: None,
    })
}

/// "In which order do these landmarks come into view?" over concatenated clips, given one
/// landmark per clip that only that clip shows; `unseen` are the world's landmarks no clip of
/// the video shows, preferred for the two-clip question's spare pair over names from outside
/// the world.
pub fn landmark_order(video: &str, world: &World, keys: &[usize], unseen: &[usize], rng: &mut SynthRng) -> Option<Draft> {
    let n = keys.len();
    if n < 2 {
        return None;
    }
    let names: Vec<String> = keys.iter().map(|&i| format!("the {}", world.landmarks[i].name)).collect();
    let spare = (n == 2).then(|| {
        let mut pool: Vec<String> = unseen.iter().map(|&i| world.landmarks[i].name.clone()).collect();
        rng.shuffle(&mut pool);
        let mut outside: Vec<String> =
            all_landmark_names().into_iter().map(|(k, c)| landmark_name(k, c)).filter(|n| world.landmark_by_name(n).is_none()).collect();
        rng.shuffle(&mut outside);
        pool.extend(outside);
        [format!("the {}", pool[0]), format!("the {}", pool[1])]
    });
    Some(Draft {
        task: SisTask::LandmarkOrder,
        video: video.to_string(),
        concat_num: n as u32,
        question: format!("This video joins {n} flight segments. In which order do these landmarks come into view?"),
        answer: sequence_text(&names),
        distractors: order_distractors(&names, spare, rng)?,
        fixed_options: None,
    })
}

/// Places the answers, task by task in [`TASKS`] order (see [`sisbench_qa::balance`]).
///
/// [`sisbench_qa::balance`]: crate::sisbench_qa::balance
pub fn balance(drafts: Vec<Draft>, prefix: &str, rng: &mut SynthRng) -> Vec<Mcq> {
    crate::sisbench_qa::balance(drafts, prefix, &TASKS, rng)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognition_sets_hold_four_unnested_movements_and_any_can_be_the_answer() {
        let mut rng = SynthRng::new(1);
        let mut answered = std::collections::BTreeSet::new();
        for _ in 0..400 {
            let (answer, others) = recognition_set(&mut rng);
            let set = [answer, others[0], others[1], others[2]];
            for i in 0..4 {
                for j in i + 1..4 {
                    assert!(!set[i].nested_with(set[j]), "{set:?}");
                }
            }
            answered.insert(answer);
        }
        assert_eq!(answered.len(), Behaviour::ALL.len());
    }

    #[test]
    fn sequences_need_distinct_steps_and_get_distinct_options() {
        let mut rng = SynthRng::new(2);
        assert!(action_sequence("v.mp4", &[Behaviour::Ascend, Behaviour::Ascend], &mut rng).is_none());
        let d = action_sequence("v.mp4", &[Behaviour::Ascend, Behaviour::YawLeft], &mut rng).expect("draft");
        assert_eq!(d.answer, "ascend, then turn left in place");
        assert!(d.distractors.contains(&"turn left in place, then ascend".to_string()));
        let mut all = d.distractors.to_vec();
        all.push(d.answer.clone());
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4);
        let three = [Behaviour::Ascend, Behaviour::YawLeft, Behaviour::Hover];
        let d = action_sequence("v.mp4", &three, &mut rng).expect("draft");
        for option in &d.distractors {
            let mut steps: Vec<&str> = option.split(", then ").collect();
            steps.sort();
            assert_eq!(steps, ["ascend", "hover in place", "turn left in place"], "only reorderings");
        }
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
                fixed_options: None,
            })
            .collect();
        let mcqs = balance(drafts, "t", &mut rng);
        assert_eq!(mcqs.len(), 8);
        for letter in 0..4 {
            assert_eq!(mcqs.iter().filter(|m| m.answer == letter).count(), 2);
        }
        assert!(mcqs.iter().all(|m| m.options[m.answer] == "yes"));
    }

    #[test]
    fn fixed_recognition_lists_the_movements_in_order_with_balanced_answers() {
        let mut rng = SynthRng::new(4);
        let movements = [Behaviour::Forward, Behaviour::Backward, Behaviour::YawLeft, Behaviour::YawRight];
        let plans = fixed_recognition_plans(&movements, 12, &mut rng);
        let drafts: Vec<Draft> =
            plans.iter().enumerate().filter_map(|(i, (b, d))| action_recognition(&format!("{i}.mp4"), *b, *d, Some(&movements))).collect();
        let mcqs = balance(drafts, "t", &mut rng);
        assert_eq!(mcqs.len(), 12);
        let listed = movements.map(|b| b.phrase().to_string());
        for m in &mcqs {
            assert_eq!(m.options, listed, "options keep the fixed order");
        }
        for (letter, movement) in movements.iter().enumerate() {
            let flown = plans.iter().filter(|(b, _)| b == movement).count();
            assert_eq!(flown, 3);
            assert_eq!(mcqs.iter().filter(|m| m.answer == letter).count(), 3);
        }
    }
}
