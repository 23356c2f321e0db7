//! Times in seconds ([`extract_timestamp`]).

use std::sync::LazyLock;

use regex::Regex;

use super::number::{Found, declared_number, leading_value, numbers, unique_value};
use super::{Extracted, Extraction, Rule, prepare, re};

/// Explicit time expressions: clock forms and numbers with a seconds/minutes unit.
fn times(text: &str) -> Vec<Found> {
    static CLOCK: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|[^\w.:])(\d{1,2}):([0-5]\d)(?::([0-5]\d))?(\.\d+)?(?:[^\w:]|$)"));
    static MIN_SEC: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?i)\b(\d+)\s*(?:m|min|mins|minutes?)\s*(?:and\s+)?(\d+(?:\.\d+)?)\s*(?:s|sec|secs|seconds?)\b"));
    static SECONDS: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)(?:^|[^\w.])(\d+(?:\.\d+)?)\s*(?:s|sec|secs|seconds?)\b"));
    let mut out: Vec<Found> = Vec::new();
    let overlaps = |out: &[Found], s: usize, e: usize| out.iter().any(|f| s < f.end && f.start < e);
    for c in CLOCK.captures_iter(text) {
        let (Some(a), Some(b)) = (c.get(1), c.get(2)) else {
            continue;
        };
        let parse = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<f64>().ok());
        let (Some(x), Some(y)) = (parse(Some(a)), parse(Some(b))) else {
            continue;
        };
        let frac = c.get(4).and_then(|m| format!("0{}", m.as_str()).parse::<f64>().ok()).unwrap_or(0.0);
        let end = c.get(4).or(c.get(3)).unwrap_or(b).end();
        let value = match parse(c.get(3)) {
            Some(z) => x * 3600.0 + y * 60.0 + z + frac,
            None => x * 60.0 + y + frac,
        };
        out.push(Found { value, start: a.start(), end });
    }
    for c in MIN_SEC.captures_iter(text) {
        let (Some(m), Some(s)) = (c.get(1), c.get(2)) else {
            continue;
        };
        let (Ok(min), Ok(sec)) = (m.as_str().parse::<f64>(), s.as_str().parse::<f64>()) else {
            continue;
        };
        if !overlaps(&out, m.start(), s.end()) {
            out.push(Found { value: min * 60.0 + sec, start: m.start(), end: s.end() });
        }
    }
    for c in SECONDS.captures_iter(text) {
        let Some(m) = c.get(1) else { continue };
        if let Ok(v) = m.as_str().parse::<f64>()
            && !overlaps(&out, m.start(), m.end())
        {
            out.push(Found { value: v, start: m.start(), end: m.end() });
        }
    }
    out.sort_by_key(|f| f.start);
    out
}

/// Extracts a time in seconds (the module docs list the rules).
pub fn extract_timestamp(raw: &str) -> Extraction {
    let (text, from_json) = prepare(raw);
    let result = timestamp_from_clean(&text);
    if from_json { result.or_json() } else { result }
}

fn timestamp_from_clean(text: &str) -> Extraction {
    static DECLARATION: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"(?i)\b(?:(?:the\s+)?(?:final\s+)?answer\s*(?:is|:|：|=)|timestamp\s*(?:is|:|=)?|time\s*(?:is|:|=)|(?:occurs?|happens?|appears?|starts?|begins?)\s+(?:at|around|near)|\bat)(?:\s+(?:about|approximately|around|roughly|exactly))?",
        )
    });
    let explicit = times(text);
    let plain: Vec<Found> = numbers(text).into_iter().filter(|n| !explicit.iter().any(|t| n.start < t.end && t.start < n.end)).collect();
    let mut all: Vec<Found> = explicit.iter().chain(plain.iter()).copied().collect();
    all.sort_by_key(|f| f.start);
    if let Some(v) = declared_number(text, &all, &DECLARATION) {
        return Extraction::found(Extracted::Timestamp(v), Rule::Declared);
    }
    if let Some(v) = unique_value(&explicit) {
        return Extraction::found(Extracted::Timestamp(v), Rule::Unique);
    }
    if !explicit.is_empty() {
        return Extraction::unanswered(Rule::Ambiguous);
    }
    if let Some(v) = leading_value(text, &plain) {
        return Extraction::found(Extracted::Timestamp(v), Rule::Leading);
    }
    match unique_value(&plain) {
        Some(v) => Extraction::found(Extracted::Timestamp(v), Rule::Unique),
        None if plain.is_empty() => Extraction::unanswered(Rule::None),
        None => Extraction::unanswered(Rule::Ambiguous),
    }
}
