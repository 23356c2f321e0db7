//! Yes/no answers ([`extract_yes_no`]).

use std::sync::LazyLock;

use regex::Regex;

use super::{Extracted, Extraction, Rule, prepare, re, words};

const YES_WORDS: [&str; 4] = ["yes", "true", "yeah", "yep"];
const NO_WORDS: [&str; 3] = ["no", "false", "nope"];

fn yes_no_word(w: &str) -> Option<bool> {
    let w = w.to_lowercase();
    if YES_WORDS.contains(&w.as_str()) {
        Some(true)
    } else if NO_WORDS.contains(&w.as_str()) {
        Some(false)
    } else {
        None
    }
}

/// Extracts yes or no (the module docs list the rules).
pub fn extract_yes_no(raw: &str) -> Extraction {
    let (text, from_json) = prepare(raw);
    let result = yes_no_from_clean(&text);
    if from_json { result.or_json() } else { result }
}

fn yes_no_from_clean(text: &str) -> Extraction {
    static DECLARED: LazyLock<Regex> = LazyLock::new(|| re(r#"(?i)\banswer\s*(?:is|would\s+be|:|：|=)\s*["'(\[]?\s*(yes|no|true|false)\b"#));
    if let Some(c) = DECLARED.captures_iter(text).last()
        && let Some(b) = yes_no_word(&c[1])
    {
        return Extraction::found(Extracted::YesNo(b), Rule::Declared);
    }
    let all = words(text);
    if let Some(b) = all.first().and_then(|w| yes_no_word(w)) {
        return Extraction::found(Extracted::YesNo(b), Rule::Word);
    }
    let yes = all.iter().any(|w| yes_no_word(w) == Some(true));
    let no = all.iter().any(|w| yes_no_word(w) == Some(false));
    match (yes, no) {
        (true, false) => Extraction::found(Extracted::YesNo(true), Rule::Word),
        (false, true) => Extraction::found(Extracted::YesNo(false), Rule::Word),
        (true, true) => Extraction::unanswered(Rule::Ambiguous),
        (false, false) => Extraction::unanswered(Rule::None),
    }
}
