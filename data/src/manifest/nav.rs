//! The navigation MCQ's row schema: what `construct nav` writes and `eval`'s `nav` reader
//! reads, so that neither depends on the other.
//!
//! A row (`DIR/nav.json` holds a JSON list of them) is `question_id`, `episode`, `video_path`,
//! `task_type`, `question`, `options` {A..D}, `answer` and `segments`: the true path, as
//! [`Segment`]s `[{"kind", "distance_m", "altitude_change_m", "turn_deg"}]`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Task name of the rows (the `nav` reader's default task).
pub const TASK: &str = "Navigation MCQ";

/// What a step or a segment of a flight does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    TakeOff,
    Landing,
    TurnLeft,
    TurnRight,
    Cruise,
}

impl SegmentKind {
    pub const ALL: [SegmentKind; 5] =
        [SegmentKind::TakeOff, SegmentKind::Landing, SegmentKind::TurnLeft, SegmentKind::TurnRight, SegmentKind::Cruise];

    /// The kind with left and right, or up and down, swapped.
    pub fn reversed(self) -> SegmentKind {
        match self {
            SegmentKind::TakeOff => SegmentKind::Landing,
            SegmentKind::Landing => SegmentKind::TakeOff,
            SegmentKind::TurnLeft => SegmentKind::TurnRight,
            SegmentKind::TurnRight => SegmentKind::TurnLeft,
            SegmentKind::Cruise => SegmentKind::Cruise,
        }
    }

    /// Whether the kind turns left or right.
    pub fn is_turn(self) -> bool {
        matches!(self, SegmentKind::TurnLeft | SegmentKind::TurnRight)
    }
}

/// A run of equal steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    pub kind: SegmentKind,
    /// Horizontal distance flown, metres.
    pub distance_m: f64,
    /// Net altitude change, metres (up positive).
    pub altitude_change_m: f64,
    /// Sum of the steps' turning angles, degrees (unsigned; the kind gives the side).
    pub turn_deg: f64,
}

impl fmt::Display for Segment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.distance_m.round();
        let h = self.altitude_change_m.round();
        // A stage flown on the spot (a vertical climb, a turn in place) has no distance to give.
        let over = if d >= 1.0 { format!(" over {d} m") } else { String::new() };
        match self.kind {
            SegmentKind::TakeOff => write!(f, "take off, climbing {h} m{over}"),
            SegmentKind::Landing => write!(f, "descend to land, dropping {} m{over}", -h),
            SegmentKind::TurnLeft | SegmentKind::TurnRight => {
                let side = if self.kind == SegmentKind::TurnLeft { "left" } else { "right" };
                write!(f, "turn {side} by {}°{over}", (self.turn_deg / 5.0).round() * 5.0)
            }
            SegmentKind::Cruise if h.abs() >= 1.0 => {
                write!(f, "cruise {d} m, {} {} m", if h > 0.0 { "climbing" } else { "dropping" }, h.abs())
            }
            SegmentKind::Cruise => write!(f, "cruise {d} m"),
        }
    }
}

/// A finished row (the `nav` reader's schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NavRow {
    pub question_id: String,
    pub episode: String,
    pub video_path: String,
    pub task_type: String,
    pub question: String,
    pub options: BTreeMap<String, String>,
    pub answer: String,
    pub segments: Vec<Segment>,
}
