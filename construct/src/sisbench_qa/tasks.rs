//! The 13 task builders: each drafts one question of its task about a video, or none when the
//! annotations cannot support one, following the distractor rule its doc states (the common
//! aim is in the module docs of `sisbench_qa`).

use motionvl_data::manifest::SisTask;
use motionvl_util::rng::SynthRng;

use super::annotations::{AnnotatedAction, AnnotatedLandmark, AnnotatedObject, AnnotatedType, Position, VideoAnnotation};
use super::mcq::{Draft, Pool, order_distractors, permutations, sequence_text, take_three};

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
    }
}
