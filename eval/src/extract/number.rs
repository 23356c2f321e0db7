//! Counts and other numbers ([`extract_number`]), and the number scanning timestamps share.

use std::sync::LazyLock;

use regex::Regex;

use super::{Extracted, Extraction, Rule, prepare, re};

/// A number with the byte span it occupies.
#[derive(Debug, Clone, Copy)]
pub(super) struct Found {
    pub(super) value: f64,
    pub(super) start: usize,
    pub(super) end: usize,
}

fn small_number(word: &str) -> Option<u32> {
    const UNITS: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 8] = ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];
    let w = word.to_lowercase();
    if let Some(i) = UNITS.iter().position(|u| *u == w) {
        return Some(i as u32);
    }
    if w == "none" {
        return Some(0);
    }
    TENS.iter().position(|t| *t == w).map(|i| 20 + 10 * i as u32)
}

/// Every number in the text: digits (with thousands commas) and English number words.
pub(super) fn numbers(text: &str) -> Vec<Found> {
    static DIGITS: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|[^\w.])(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)"));
    static WORDS: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"(?i)\b(?:(one|a)\s+hundred|(zero|none|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety)(?:[\s-]+(one|two|three|four|five|six|seven|eight|nine))?)\b",
        )
    });
    let mut out: Vec<Found> = Vec::new();
    for c in DIGITS.captures_iter(text) {
        let Some(m) = c.get(1) else { continue };
        if let Ok(value) = m.as_str().replace(',', "").parse::<f64>()
            && value.is_finite()
        {
            out.push(Found { value, start: m.start(), end: m.end() });
        }
    }
    for c in WORDS.captures_iter(text) {
        let Some(m) = c.get(0) else { continue };
        let value = if c.get(1).is_some() {
            100
        } else {
            let Some(head) = c.get(2).and_then(|h| small_number(h.as_str())) else {
                continue;
            };
            match c.get(3).and_then(|u| small_number(u.as_str())) {
                Some(unit) if head >= 20 => head + unit,
                // "one two" is two numbers, not one; keep the first.
                _ => head,
            }
        };
        out.push(Found { value: f64::from(value), start: m.start(), end: m.end() });
    }
    out.sort_by_key(|f| f.start);
    out
}

pub(super) fn unique_value(found: &[Found]) -> Option<f64> {
    let first = found.first()?.value;
    found.iter().all(|f| f.value == first).then_some(first)
}

/// The number that a declaration introduces, or that starts the text.
pub(super) fn declared_number(text: &str, found: &[Found], declaration: &Regex) -> Option<f64> {
    declaration
        .find_iter(text)
        .filter_map(|m| {
            let next = found.iter().find(|f| f.start >= m.end())?;
            // Only a few filler characters may stand between the declaration and its number.
            let between = &text[m.end()..next.start];
            (between.len() <= 24 && !between.contains(['\n', '.'])).then_some(next.value)
        })
        .last()
}

pub(super) fn leading_value(text: &str, found: &[Found]) -> Option<f64> {
    let first = found.first()?;
    text[..first.start].trim_matches(|c: char| c.is_whitespace() || matches!(c, '(' | '[' | '"' | '\'')).is_empty().then_some(first.value)
}

/// Extracts a number (the module docs list the rules).
pub fn extract_number(raw: &str) -> Extraction {
    let (text, from_json) = prepare(raw);
    let result = number_from_clean(&text);
    if from_json { result.or_json() } else { result }
}

fn number_from_clean(text: &str) -> Extraction {
    static DECLARATION: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"(?i)\b(?:(?:the\s+)?(?:final\s+|correct\s+)?answer|count|total|number|result)\s*(?:is|would\s+be|should\s+be|=|:|：)(?:\s+(?:about|approximately|around|roughly|exactly))?",
        )
    });
    let found = numbers(text);
    if let Some(v) = declared_number(text, &found, &DECLARATION) {
        return Extraction::found(Extracted::Number(v), Rule::Declared);
    }
    if let Some(v) = leading_value(text, &found) {
        return Extraction::found(Extracted::Number(v), Rule::Leading);
    }
    match unique_value(&found) {
        Some(v) => Extraction::found(Extracted::Number(v), Rule::Unique),
        None if found.is_empty() => Extraction::unanswered(Rule::None),
        None => Extraction::unanswered(Rule::Ambiguous),
    }
}
