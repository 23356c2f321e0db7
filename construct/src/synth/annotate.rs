//! The rendered world's exact ground truth as `construct sisbench-qa` annotations, so the
//! synthetic world is asked the tasks beyond [`super::qa`]'s four by the very builders that
//! ask them of real footage ([`crate::sisbench_qa`]).
//!
//! Every landmark with a pixel in some frame is an object (category = its kind, attribute = its
//! colour) and a landmark, in view over the frames that show it; its image positions are the
//! centroids of its pixels in the frames that show it clearly. A clip's one action is its
//! flown behaviour. Joined videos shift their clips' times by the clips before them.
//!
//! The world flies one behaviour per clip and has no longer continuous flights, so the
//! long-video tasks (Action Prediction, Path Planning) are asked of the concatenated videos,
//! whose clips play in their original order; the shuffled videos of the consistency tasks are
//! cut from concatenated videos of three or more clips. Like SIS-Motion-54K, the training split
//! asks no reasoning-level task (those four are held-out only).

use super::render::RenderedClip;
use super::scene::World;
use crate::sisbench_qa::{AnnotatedAction, AnnotatedLandmark, AnnotatedObject, AnnotatedType, ClipSpan, Position, VideoAnnotation};

/// Runs of frames in `shown` as `[start, end]` seconds.
fn intervals(shown: impl Iterator<Item = bool>, fps: f64) -> Vec<[f64; 2]> {
    let mut out = Vec::new();
    let mut start: Option<usize> = None;
    let mut n = 0;
    for (f, on) in shown.enumerate() {
        match (on, start) {
            (true, None) => start = Some(f),
            (false, Some(s)) => {
                out.push([s as f64 / fps, f as f64 / fps]);
                start = None;
            }
            _ => {}
        }
        n = f + 1;
    }
    if let Some(s) = start {
        out.push([s as f64 / fps, n as f64 / fps]);
    }
    out
}

/// One clip's annotations: its landmarks, where they are and its behaviour. A landmark is
/// placed (given positions) in frames where it covers at least `clear_pixels`.
pub fn clip_annotation(video: &str, world: &World, clip: &RenderedClip, action: &str, fps: u32, clear_pixels: u32) -> VideoAnnotation {
    let fps_f = fps as f64;
    let n = world.landmarks.len();
    let (w, h) = clip.frames.first().map(|f| (f.width, f.height)).unwrap_or((1, 1));
    // Per landmark and frame: pixel count and summed coordinates.
    let mut sums = vec![vec![(0u32, 0.0f64, 0.0f64); clip.frames.len()]; n];
    for (f, frame) in clip.frames.iter().enumerate() {
        for (p, &id) in frame.ids.iter().enumerate() {
            if id > 0 && usize::from(id) <= n {
                let s = &mut sums[usize::from(id) - 1][f];
                s.0 += 1;
                s.1 += (p % w) as f64;
                s.2 += (p / w) as f64;
            }
        }
    }
    let mut objects = Vec::new();
    let mut landmarks = Vec::new();
    for (l, per_frame) in sums.iter().enumerate() {
        if per_frame.iter().all(|s| s.0 == 0) {
            continue;
        }
        let landmark = &world.landmarks[l];
        let shown = intervals(per_frame.iter().map(|s| s.0 > 0), fps_f);
        let positions = per_frame
            .iter()
            .enumerate()
            .filter(|(_, s)| s.0 >= clear_pixels)
            .map(|(f, s)| Position {
                t: f as f64 / fps_f,
                x: ((s.1 / s.0 as f64 + 0.5) / w as f64).clamp(0.0, 1.0),
                y: ((s.2 / s.0 as f64 + 0.5) / h as f64).clamp(0.0, 1.0),
            })
            .collect();
        objects.push(AnnotatedObject {
            category: landmark.kind.noun().to_string(),
            attribute: Some(landmark.colour.name().to_string()),
            intervals: shown.clone(),
            positions,
        });
        landmarks.push(AnnotatedLandmark { name: landmark.name.clone(), intervals: shown });
    }
    let duration_s = clip.frames.len() as f64 / fps_f;
    VideoAnnotation {
        video: video.to_string(),
        duration_s,
        video_type: AnnotatedType::Single,
        clips: vec![ClipSpan { source: video.to_string(), start_s: 0.0, end_s: duration_s }],
        objects,
        landmarks,
        actions: vec![AnnotatedAction { action: action.to_string(), start_s: 0.0, end_s: duration_s }],
        ..VideoAnnotation::default()
    }
}

/// The annotations of `clips` played one after another as `video`.
pub fn joined(video: &str, clips: &[&VideoAnnotation]) -> VideoAnnotation {
    let mut out = VideoAnnotation { video: video.to_string(), video_type: AnnotatedType::Concatenated, ..VideoAnnotation::default() };
    let mut at = 0.0;
    for c in clips {
        let shift = |i: &[f64; 2]| [i[0] + at, i[1] + at];
        out.clips.push(ClipSpan { source: c.video.clone(), start_s: at, end_s: at + c.duration_s });
        out.objects.extend(c.objects.iter().map(|o| AnnotatedObject {
            intervals: o.intervals.iter().map(shift).collect(),
            positions: o.positions.iter().map(|p| Position { t: p.t + at, ..*p }).collect(),
            ..o.clone()
        }));
        out.landmarks
            .extend(c.landmarks.iter().map(|l| AnnotatedLandmark { name: l.name.clone(), intervals: l.intervals.iter().map(shift).collect() }));
        out.actions.extend(c.actions.iter().map(|a| AnnotatedAction { action: a.action.clone(), start_s: a.start_s + at, end_s: a.end_s + at }));
        at += c.duration_s;
    }
    out.duration_s = at;
    out
}

/// A shuffled cut of `source` (its frames' parts `[start, end)` in playing order, with each
/// part's original index), as the consistency tasks read it.
pub fn shuffled(video: &str, source: &VideoAnnotation, kind: AnnotatedType, parts: &[[usize; 2]], order: &[usize], fps: u32) -> VideoAnnotation {
    let fps = fps as f64;
    let mut at = 0.0;
    let mut clips = Vec::with_capacity(order.len());
    for &o in order {
        let length = (parts[o][1] - parts[o][0]) as f64 / fps;
        clips.push(ClipSpan { source: source.video.clone(), start_s: at, end_s: at + length });
        at += length;
    }
    VideoAnnotation {
        video: video.to_string(),
        duration_s: at,
        video_type: kind,
        clips,
        segments: order.iter().map(|&o| [parts[o][0] as f64 / fps, parts[o][1] as f64 / fps]).collect(),
        permutation: order.to_vec(),
        ..VideoAnnotation::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_runs_of_frames_in_seconds() {
        let shown = [false, true, true, false, true];
        assert_eq!(intervals(shown.into_iter(), 10.0), vec![[0.1, 0.3], [0.4, 0.5]]);
        assert!(intervals([false; 3].into_iter(), 10.0).is_empty());
    }

    #[test]
    fn joined_clips_shift_their_times() {
        let a = VideoAnnotation {
            video: "a.mp4".into(),
            duration_s: 3.0,
            actions: vec![AnnotatedAction { action: "ascend".into(), start_s: 0.0, end_s: 3.0 }],
            landmarks: vec![AnnotatedLandmark { name: "red tower".into(), intervals: vec![[1.0, 2.0]] }],
            ..VideoAnnotation::default()
        };
        let b = VideoAnnotation { video: "b.mp4".into(), ..a.clone() };
        let j = joined("ab.mp4", &[&a, &b]);
        assert_eq!(j.duration_s, 6.0);
        assert_eq!(j.landmarks[1].intervals, vec![[4.0, 5.0]]);
        assert_eq!((j.actions[1].start_s, j.clips[1].start_s), (3.0, 3.0));
        assert_eq!(j.validate(), Ok(()));
    }
}
