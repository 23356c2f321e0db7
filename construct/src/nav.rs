//! `construct nav`: the downstream navigation MCQ from flown trajectories.
//!
//! A trajectory is a list of positions in metres relative to the start, z up (TravelUAV /
//! OpenUAV `merged_data.json` episodes, whose per-frame `trajectory` rows start `[x, y, z, …]`,
//! or a CSV of `x,y,z` columns). Each step between consecutive positions is classified:
//! - altitude change above +5 m: **take off**; below −5 m: **landing**;
//! - otherwise, when the turning angle between this step's horizontal displacement and the
//!   previous one's is within 25°–120° (both ends included): **turn left** or **turn right**,
//!   the side from the sign of their cross product (counter-clockwise, seen from above, is
//!   left);
//! - otherwise **cruise** (also the first step, and any step with no horizontal motion).
//!
//! Equal consecutive steps merge into [`Segment`]s carrying their horizontal distance,
//! altitude change and total turning angle. The question offers four descriptions of the
//! path: the true one and three distractors, made by three of these four rules, drawn at random
//! among those that apply: **direction reversal** (left and right turns swapped, or take-off
//! and landing when the path has no turn), **large distance
//! perturbation** (every distance scaled by ×0.4–0.6 or ×1.8–2.5), **an inserted or deleted
//! stage**, and **a wrong altitude change** (the largest climb or descent tripled, reversed or,
//! on a level path, a 10–25 m climb or descent added to a segment). Every distractor differs
//! from the truth in its segments and in its text, so none reads like a rewording of the answer;
//! answer letters are dealt from a shuffled deck, so each letter is the answer equally often
//! (within one). The residual: each distractor is one edit away from the truth, as the source
//! prescribes, so the truth is the option the others have most in common with, and a text-only
//! model that looks for it can beat chance.
//!
//! Output rows (`DIR/nav.json`, a JSON list; schema in `motionvl_data::manifest::nav`) are what
//! `eval`'s `nav` reader reads:
//! `question_id`, `episode`, `video_path`, `task_type`, `question`, `options` {A..D}, `answer`
//! and `segments` — the true path, `[{"kind", "distance_m", "altitude_change_m", "turn_deg"}]`.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use motionvl_util::files::write_json_atomic;
use motionvl_util::rng::{SynthRng, derive_seed};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The row schema, which the `nav` reader reads too, lives in `data`.
pub use motionvl_data::manifest::nav::{NavRow, Segment, SegmentKind, TASK};

use crate::ConstructError;

/// The option letters of a row.
const LETTERS: [char; 4] = ['A', 'B', 'C', 'D'];

/// The step rules' thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StepRules {
    /// A step climbing more than this is a take-off; descending more, a landing (metres).
    pub altitude_m: f64,
    /// Turning angles within `[min_turn_deg, max_turn_deg]` are turns.
    pub min_turn_deg: f64,
    pub max_turn_deg: f64,
}

impl Default for StepRules {
    fn default() -> Self {
        StepRules { altitude_m: 5.0, min_turn_deg: 25.0, max_turn_deg: 120.0 }
    }
}

/// A path as an option reads: its segments joined by "then".
pub fn describe(path: &[Segment]) -> String {
    let parts: Vec<String> = path.iter().map(Segment::to_string).collect();
    let mut text = parts.join(", then ");
    if let Some(first) = text.get(..1) {
        text = first.to_uppercase() + &text[1..];
    }
    text + "."
}

/// Classifies each step between consecutive positions (see the module docs).
pub fn classify_steps(positions: &[[f64; 3]], rules: &StepRules) -> Vec<(SegmentKind, Segment)> {
    let mut steps = Vec::with_capacity(positions.len().saturating_sub(1));
    let mut previous: Option<[f64; 2]> = None;
    for w in positions.windows(2) {
        let (dx, dy, dz) = (w[1][0] - w[0][0], w[1][1] - w[0][1], w[1][2] - w[0][2]);
        let horizontal = dx.hypot(dy);
        let mut turn = 0.0;
        let mut side = 0.0;
        if let Some([px, py]) = previous
            && horizontal > 1e-9
        {
            let cross = px * dy - py * dx;
            let dot = px * dx + py * dy;
            turn = cross.atan2(dot).to_degrees().abs();
            side = cross;
        }
        let kind = if dz > rules.altitude_m {
            SegmentKind::TakeOff
        } else if dz < -rules.altitude_m {
            SegmentKind::Landing
        } else if turn >= rules.min_turn_deg && turn <= rules.max_turn_deg {
            if side > 0.0 { SegmentKind::TurnLeft } else { SegmentKind::TurnRight }
        } else {
            SegmentKind::Cruise
        };
        if horizontal > 1e-9 {
            previous = Some([dx, dy]);
        }
        steps.push((kind, Segment { kind, distance_m: horizontal, altitude_change_m: dz, turn_deg: turn }));
    }
    steps
}

/// Steps classified and merged into segments.
pub fn segments(positions: &[[f64; 3]], rules: &StepRules) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for (kind, step) in classify_steps(positions, rules) {
        match out.last_mut() {
            Some(last) if last.kind == kind => {
                last.distance_m += step.distance_m;
                last.altitude_change_m += step.altitude_change_m;
                last.turn_deg += step.turn_deg;
            }
            _ => out.push(Segment { turn_deg: if kind.is_turn() { step.turn_deg } else { 0.0 }, ..step }),
        }
    }
    for s in &mut out {
        if !s.kind.is_turn() {
            s.turn_deg = 0.0;
        }
    }
    out
}

/// Merges equal neighbours left after an edit.
fn merged(path: Vec<Segment>) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::with_capacity(path.len());
    for s in path {
        match out.last_mut() {
            Some(last) if last.kind == s.kind => {
                last.distance_m += s.distance_m;
                last.altitude_change_m += s.altitude_change_m;
                last.turn_deg += s.turn_deg;
            }
            _ => out.push(s),
        }
    }
    out
}

/// Left and right turns swapped; take-off and landing swapped (altitudes negated) when the
/// path has no turn.
pub fn reverse_directions(path: &[Segment]) -> Option<Vec<Segment>> {
    let has_turn = path.iter().any(|s| s.kind.is_turn());
    let has_altitude = path.iter().any(|s| matches!(s.kind, SegmentKind::TakeOff | SegmentKind::Landing));
    if !has_turn && !has_altitude {
        return None;
    }
    Some(
        path.iter()
            .map(|s| {
                if has_turn && s.kind.is_turn() {
                    Segment { kind: s.kind.reversed(), ..*s }
                } else if !has_turn && !s.kind.is_turn() && s.kind != SegmentKind::Cruise {
                    Segment { kind: s.kind.reversed(), altitude_change_m: -s.altitude_change_m, ..*s }
                } else {
                    *s
                }
            })
            .collect(),
    )
}

/// Every distance scaled by one factor far from 1.
pub fn perturb_distances(path: &[Segment], rng: &mut SynthRng) -> Vec<Segment> {
    let factor = if rng.chance(0.5) { rng.range(0.4, 0.6) } else { rng.range(1.8, 2.5) };
    path.iter().map(|s| Segment { distance_m: s.distance_m * factor, ..*s }).collect()
}

/// One stage deleted (when there are at least two) or one inserted: a cruise, turn or
/// altitude stage unlike its neighbours, with a distance drawn from the path's own.
pub fn restage(path: &[Segment], rng: &mut SynthRng) -> Vec<Segment> {
    if path.len() >= 2 && rng.chance(0.5) {
        let mut out = path.to_vec();
        out.remove(rng.index(path.len()));
        return merged(out);
    }
    let at = rng.index(path.len() + 1);
    let neighbours: Vec<SegmentKind> = [at.checked_sub(1).and_then(|i| path.get(i)), path.get(at)].into_iter().flatten().map(|s| s.kind).collect();
    let kinds: Vec<SegmentKind> = SegmentKind::ALL.iter().copied().filter(|k| !neighbours.contains(k)).collect();
    let kind = *rng.pick(&kinds).unwrap_or(&SegmentKind::Cruise);
    let distances: Vec<f64> = path.iter().map(|s| s.distance_m).filter(|d| *d >= 1.0).collect();
    let distance = rng.pick(&distances).copied().unwrap_or(20.0);
    let altitude = match kind {
        SegmentKind::TakeOff => rng.range(10.0, 25.0),
        SegmentKind::Landing => -rng.range(10.0, 25.0),
        _ => 0.0,
    };
    let turn = if kind.is_turn() { rng.range(45.0, 110.0) } else { 0.0 };
    let mut out = path.to_vec();
    out.insert(at, Segment { kind, distance_m: distance, altitude_change_m: altitude, turn_deg: turn });
    out
}

/// The largest climb or descent tripled or reversed; on a level path, a 10–25 m climb or
/// descent given to one segment.
pub fn wrong_altitude(path: &[Segment], rng: &mut SynthRng) -> Vec<Segment> {
    let mut out = path.to_vec();
    let Some((i, _)) = out.iter().enumerate().max_by(|a, b| a.1.altitude_change_m.abs().total_cmp(&b.1.altitude_change_m.abs())) else {
        return out;
    };
    let s = &mut out[i];
    if s.altitude_change_m.abs() >= 2.0 {
        if rng.chance(0.5) || !matches!(s.kind, SegmentKind::Cruise) {
            s.altitude_change_m *= 3.0;
        } else {
            s.altitude_change_m = -s.altitude_change_m;
        }
    } else {
        let j = rng.index(out.len());
        out[j].altitude_change_m = rng.sign() * rng.range(10.0, 25.0);
    }
    out
}

/// A trajectory to ask about.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    pub id: String,
    /// The episode's video or frame folder, as the row will name it.
    pub video: String,
    pub positions: Vec<[f64; 3]>,
}

/// The question stem of every row.
pub const QUESTION: &str = "The video shows a drone's flight from its starting point. Which description matches the path it flew?";

/// A distractor rule: a path edited with the given randomness.
type Rule<'a> = Box<dyn Fn(&mut SynthRng) -> Vec<Segment> + 'a>;

/// Three distractors for a path from three of the four rules, drawn at random among those
/// that apply (direction reversal needs a turn or an altitude stage), each differing from the
/// truth and from each other in text; `None` when no such set is found.
pub fn distractors(path: &[Segment], rng: &mut SynthRng) -> Option<[Vec<Segment>; 3]> {
    let reversed = reverse_directions(path);
    let mut rules: Vec<Rule<'_>> =
        vec![Box::new(|r| perturb_distances(path, r)), Box::new(|r| restage(path, r)), Box::new(|r| wrong_altitude(path, r))];
    if let Some(reversed) = reversed {
        rules.push(Box::new(move |_| reversed.clone()));
    }
    rng.shuffle(&mut rules);
    let mut texts = vec![describe(path)];
    let mut chosen: Vec<Vec<Segment>> = Vec::with_capacity(3);
    for rule in &rules {
        if chosen.len() == 3 {
            break;
        }
        for _ in 0..16 {
            let candidate = rule(rng);
            let text = describe(&candidate);
            if !candidate.is_empty() && !texts.contains(&text) {
                texts.push(text);
                chosen.push(candidate);
                break;
            }
        }
    }
    let mut it = chosen.into_iter();
    Some([it.next()?, it.next()?, it.next()?])
}

/// Builds one row per episode whose path has at least one segment and admits three
/// distractors; returns the rows and the ids of the episodes left out, with why.
pub fn build_rows(episodes: &[Episode], rules: &StepRules, seed: u64) -> (Vec<NavRow>, Vec<(String, String)>) {
    let mut drafts = Vec::new();
    let mut skipped = Vec::new();
    for (i, e) in episodes.iter().enumerate() {
        let path = segments(&e.positions, rules);
        if path.is_empty() {
            skipped.push((e.id.clone(), "fewer than two positions".to_string()));
            continue;
        }
        let mut rng = SynthRng::new(derive_seed(seed, i as u64));
        match distractors(&path, &mut rng) {
            Some(d) => drafts.push((e, path, d)),
            None => skipped.push((e.id.clone(), "no three distinct distractors".to_string())),
        }
    }
    let mut deck: Vec<usize> = (0..drafts.len()).map(|i| i % 4).collect();
    let mut rng = SynthRng::new(derive_seed(seed, 0xdec4));
    rng.shuffle(&mut deck);
    let rows = drafts
        .into_iter()
        .zip(deck)
        .map(|((e, path, distractors), slot)| {
            let mut others = distractors.to_vec();
            rng.shuffle(&mut others);
            let mut others = others.into_iter();
            let options = LETTERS
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    let text = if i == slot { describe(&path) } else { others.next().map(|o| describe(&o)).unwrap_or_default() };
                    (l.to_string(), text)
                })
                .collect();
            NavRow {
                question_id: format!("nav-{}", e.id),
                episode: e.id.clone(),
                video_path: e.video.clone(),
                task_type: TASK.to_string(),
                question: QUESTION.to_string(),
                options,
                answer: LETTERS[slot].to_string(),
                segments: path,
            }
        })
        .collect();
    (rows, skipped)
}

/// Writes the rows as `DIR/nav.json` (a JSON list) and returns its path.
pub fn write_rows(out_dir: &Path, rows: &[NavRow]) -> Result<std::path::PathBuf, ConstructError> {
    let path = out_dir.join("nav.json");
    write_json_atomic(&path, &rows)?;
    Ok(path)
}

/// Reads episodes from a TravelUAV `merged_data.json` (a list of episodes, or an object with
/// them under `episodes`/`data`/`samples`) or from a CSV (`x,y,z` columns, plus an optional
/// `episode` column grouping rows; without it the file is one episode named by its stem).
/// `video_pattern` names each episode's medium, `{id}` standing for the episode id; an
/// episode's own `video_path`/`video` field wins over it.
pub fn read_episodes(input: &Path, video_pattern: &str) -> Result<Vec<Episode>, ConstructError> {
    let is_csv = input.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    let episodes = if is_csv { read_csv(input, video_pattern)? } else { read_json(input, video_pattern)? };
    if episodes.is_empty() {
        return Err(ConstructError::input(input, "no episodes found"));
    }
    let mut ids: Vec<&str> = episodes.iter().map(|e| e.id.as_str()).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(ConstructError::input(input, format!("episode id `{}` appears twice", w[0])));
    }
    Ok(episodes)
}

fn read_json(input: &Path, video_pattern: &str) -> Result<Vec<Episode>, ConstructError> {
    let text = fs::read_to_string(input).map_err(ConstructError::io(input))?;
    let value: Value = serde_json::from_str(&text).map_err(|e| ConstructError::input(input, format!("not JSON: {e}")))?;
    let list = match &value {
        Value::Array(items) => items,
        Value::Object(map) => ["episodes", "data", "samples"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_array))
            .ok_or_else(|| ConstructError::input(input, "expected a list of episodes (or one under `episodes`)"))?,
        _ => return Err(ConstructError::input(input, "expected a list of episodes")),
    };
    list.iter()
        .enumerate()
        .map(|(i, item)| {
            let at = |detail: String| ConstructError::input(input, format!("episode {i}: {detail}"));
            let obj = item.as_object().ok_or_else(|| at("not an object".into()))?;
            let id = ["episode_id", "id", "name", "index"]
                .iter()
                .find_map(|k| match obj.get(*k) {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Number(n)) => Some(n.to_string()),
                    _ => None,
                })
                .unwrap_or_else(|| i.to_string());
            let at = |detail: String| ConstructError::input(input, format!("episode {i} (`{id}`): {detail}"));
            let rows = obj.get("trajectory").and_then(Value::as_array).ok_or_else(|| at("missing list `trajectory`".into()))?;
            let positions = rows
                .iter()
                .enumerate()
                .map(|(j, r)| {
                    let xs = r.as_array().filter(|a| a.len() >= 3);
                    let p = xs.and_then(|a| Some([a[0].as_f64()?, a[1].as_f64()?, a[2].as_f64()?]));
                    p.filter(|p| p.iter().all(|v| v.is_finite())).ok_or_else(|| at(format!("trajectory[{j}] is not [x, y, z, ...] numbers")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            let video = ["video_path", "video"]
                .iter()
                .find_map(|k| obj.get(*k).and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| video_pattern.replace("{id}", &id));
            Ok(Episode { id, video, positions })
        })
        .collect()
}

fn read_csv(input: &Path, video_pattern: &str) -> Result<Vec<Episode>, ConstructError> {
    let mut reader = csv::Reader::from_path(input).map_err(|e| ConstructError::input(input, e.to_string()))?;
    let headers = reader.headers().map_err(|e| ConstructError::input(input, e.to_string()))?.clone();
    let column = |name: &str| headers.iter().position(|h| h.trim().eq_ignore_ascii_case(name));
    let (x, y, z) = match (column("x"), column("y"), column("z")) {
        (Some(x), Some(y), Some(z)) => (x, y, z),
        _ => return Err(ConstructError::input(input, "the header must name columns `x`, `y` and `z`")),
    };
    let episode_col = column("episode").or_else(|| column("episode_id"));
    let stem = input.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "0".into());
    let mut order: Vec<String> = Vec::new();
    let mut by_id: BTreeMap<String, Vec<[f64; 3]>> = BTreeMap::new();
    for (i, record) in reader.records().enumerate() {
        let line = i + 2;
        let record = record.map_err(|e| ConstructError::input(input, format!("line {line}: {e}")))?;
        let number = |c: usize, name: &str| {
            record
                .get(c)
                .and_then(|v| v.trim().parse::<f64>().ok())
                .filter(|v| v.is_finite())
                .ok_or_else(|| ConstructError::input(input, format!("line {line}: `{name}` is not a number")))
        };
        let p = [number(x, "x")?, number(y, "y")?, number(z, "z")?];
        let id = episode_col.and_then(|c| record.get(c)).map(|s| s.trim().to_string()).unwrap_or_else(|| stem.clone());
        if !by_id.contains_key(&id) {
            order.push(id.clone());
        }
        by_id.entry(id).or_default().push(p);
    }
    Ok(order
        .into_iter()
        .map(|id| {
            let positions = by_id.remove(&id).unwrap_or_default();
            Episode { video: video_pattern.replace("{id}", &id), id, positions }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(positions: &[[f64; 3]]) -> Vec<SegmentKind> {
        classify_steps(positions, &StepRules::default()).into_iter().map(|s| s.0).collect()
    }

    /// A step east, then a step at `deg` counter-clockwise from east, climbing `dz` on it.
    fn turn(deg: f64, dz: f64) -> Vec<[f64; 3]> {
        let r = deg.to_radians();
        vec![[0.0, 0.0, 0.0], [10.0, 0.0, 0.0], [10.0 + 10.0 * r.cos(), 10.0 * r.sin(), dz]]
    }

    #[test]
    fn step_rules_at_each_threshold() {
        use SegmentKind::*;
        assert_eq!(kinds(&turn(0.0, 5.0)), [Cruise, Cruise], "+5 m is not above +5 m");
        assert_eq!(kinds(&turn(0.0, 5.01)), [Cruise, TakeOff]);
        assert_eq!(kinds(&turn(0.0, -5.0)), [Cruise, Cruise]);
        assert_eq!(kinds(&turn(0.0, -5.01)), [Cruise, Landing]);
        assert_eq!(kinds(&turn(24.9, 0.0)), [Cruise, Cruise]);
        assert_eq!(kinds(&turn(25.0, 0.0)), [Cruise, TurnLeft]);
        assert_eq!(kinds(&turn(120.0, 0.0)), [Cruise, TurnLeft]);
        assert_eq!(kinds(&turn(120.1, 0.0)), [Cruise, Cruise]);
        assert_eq!(kinds(&turn(-25.0, 0.0)), [Cruise, TurnRight]);
        assert_eq!(kinds(&turn(-120.0, 0.0)), [Cruise, TurnRight]);
        assert_eq!(kinds(&turn(-121.0, 0.0)), [Cruise, Cruise]);
        // Altitude wins over turning; a vertical step keeps the previous heading.
        assert_eq!(kinds(&turn(90.0, 6.0)), [Cruise, TakeOff]);
        let up_then_left = [[0.0, 0.0, 0.0], [10.0, 0.0, 0.0], [10.0, 0.0, 8.0], [10.0, 10.0, 8.0]];
        assert_eq!(kinds(&up_then_left), [Cruise, TakeOff, TurnLeft]);
    }

    #[test]
    fn equal_steps_merge_into_segments() {
        let p = [[0.0, 0.0, 0.0], [0.0, 0.0, 6.0], [0.0, 0.0, 12.0], [10.0, 0.0, 12.0], [20.0, 0.0, 13.0], [20.0, 10.0, 13.0], [10.0, 10.0, 13.0]];
        let s = segments(&p, &StepRules::default());
        let got: Vec<SegmentKind> = s.iter().map(|s| s.kind).collect();
        assert_eq!(got, [SegmentKind::TakeOff, SegmentKind::Cruise, SegmentKind::TurnLeft]);
        assert_eq!((s[0].altitude_change_m, s[0].distance_m), (12.0, 0.0));
        assert_eq!((s[1].distance_m, s[1].altitude_change_m, s[1].turn_deg), (20.0, 1.0, 0.0));
        assert!((s[2].distance_m - 20.0).abs() < 1e-9 && (s[2].turn_deg - 180.0).abs() < 1e-9);
    }

    #[test]
    fn every_distractor_differs_from_the_truth_in_its_segments() {
        let shapes: Vec<Vec<[f64; 3]>> = vec![
            vec![[0.0, 0.0, 0.0], [30.0, 0.0, 0.0], [60.0, 0.0, 0.0]],
            vec![[0.0, 0.0, 0.0], [0.0, 0.0, 10.0], [40.0, 0.0, 10.0], [40.0, 40.0, 10.0], [40.0, 40.0, 2.0]],
            vec![[0.0, 0.0, 0.0], [20.0, 0.0, 0.0], [20.0, -20.0, 0.0], [40.0, -20.0, 0.0]],
        ];
        let rules = StepRules::default();
        for (i, p) in shapes.iter().enumerate() {
            let truth = segments(p, &rules);
            for seed in 0..20 {
                let mut rng = SynthRng::new(seed);
                let d = distractors(&truth, &mut rng).unwrap_or_else(|| panic!("shape {i} seed {seed}: no distractors"));
                let mut texts: Vec<String> = d.iter().map(|x| describe(x)).collect();
                for x in &d {
                    assert_ne!(x, &truth, "shape {i}");
                }
                texts.push(describe(&truth));
                texts.sort();
                texts.dedup();
                assert_eq!(texts.len(), 4, "shape {i} seed {seed}: {texts:?}");
            }
            if let Some(r) = reverse_directions(&truth) {
                assert_ne!(r, truth);
            }
        }
    }

    #[test]
    fn rows_carry_the_true_segments_and_balanced_letters() {
        let episodes: Vec<Episode> = (0..12)
            .map(|i| Episode {
                id: format!("e{i}"),
                video: format!("videos/e{i}.mp4"),
                positions: vec![[0.0, 0.0, 0.0], [0.0, 0.0, 8.0], [25.0 + i as f64, 0.0, 8.0], [25.0 + i as f64, 30.0, 8.0]],
            })
            .collect();
        let (rows, skipped) = build_rows(&episodes, &StepRules::default(), 7);
        assert!(skipped.is_empty());
        assert_eq!(rows.len(), 12);
        for letter in LETTERS {
            assert_eq!(rows.iter().filter(|r| r.answer == letter.to_string()).count(), 3);
        }
        for r in &rows {
            assert_eq!(r.options[&r.answer], describe(&r.segments));
        }
    }
}
