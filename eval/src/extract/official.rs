//! The official SIS-Bench answer extraction: `extract_answer` of the authors' evaluator
//! (`motion/src/eval/eval.py:36-74`, the same as `eval/src/uav/run_uav.py:28-76`), ported rule
//! by rule so that `--protocol official` scores outputs exactly as the paper's numbers were
//! scored. Unlike [`super::extract_choice`] it never abstains on conflicting evidence and reads
//! "A drone …" as the answer A.
//!
//! The cascade, on the stripped output (empty → no answer):
//! 1. `<think>…</think>` blocks are removed (non-greedy, across lines); when that leaves nothing
//!    and the output holds `<think>`, everything from `<think>` on is removed instead; when the
//!    result is still empty the unstripped-of-reasoning text is used;
//! 2. `start`: `^([A-D])\b`, case-sensitive;
//! 3. `pattern`: the first of `(?:the\s+)?answer\s*(?:is|:)\s*([A-D])\b`,
//!    `答案\s*(?:是|为|：|:)\s*([A-D])\b`, `选\s*([A-D])\b` that occurs, ignoring case, upper-cased;
//! 4. `line`: `(?:^|\n)\s*([A-D])\s*[.\):\n]?\s*$` with `^`/`$` at line ends, case-sensitive;
//! 5. `last`: the last `\b([A-D])\b`, case-sensitive.
//!
//! Python's `str` patterns differ from the `regex` crate's in two classes, both reproduced
//! here: `\s` and `str.strip()` also take the separators U+001C–U+001F, which Unicode's
//! White_Space lacks, and `\w` (hence `\b`) is `str.isalnum()` or `_`, which Rust's
//! `char::is_alphanumeric` matches (letters and every numeric category, `²` included), while
//! the `regex` crate's `\b` would also count combining marks and connector punctuation. So
//! `\s` is written as [`PY_SPACE`] and every `\b` after a letter is checked by [`is_py_word`].

use std::sync::LazyLock;

use regex::Regex;

use super::{Extracted, Extraction, Rule, re};

/// Python's `\s` for `str` patterns (`str.isspace()`).
const PY_SPACE: &str = r"[\s\x1C-\x1F]";

/// Python's `\w` for `str` patterns: `str.isalnum()` or `_`.
fn is_py_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1C}'..='\u{1F}').contains(&c)
}

/// `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// Whether a `\b` holds at byte `at` of `text`, given that the character before it is a word
/// character (a captured letter): the next character is not one, or the text ends.
fn boundary_after_word(text: &str, at: usize) -> bool {
    text[at..].chars().next().is_none_or(|c| !is_py_word(c))
}

/// `re.search(pattern, text)` for a pattern ending in a captured letter that Python follows by
/// `\b`: the leftmost match whose letter is followed by a boundary, trying every start.
fn search_letter(pattern: &Regex, text: &str) -> Option<char> {
    let mut from = 0;
    while from <= text.len() {
        let caps = pattern.captures_at(text, from)?;
        let letter = caps.get(1)?;
        if boundary_after_word(text, letter.end()) {
            return letter.as_str().chars().next();
        }
        let start = caps.get(0)?.start();
        from = start + text[start..].chars().next().map_or(1, char::len_utf8);
    }
    None
}

/// The official extractor (module docs); `None` when no letter is found.
pub fn extract_official(response: &str) -> Extraction {
    static THINK: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)<think>.*?</think>"));
    static THINK_TO_END: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)<think>.*"));
    static PATTERNS: LazyLock<[Regex; 3]> = LazyLock::new(|| {
        [
            re(&format!(r"(?i)(?:the{PY_SPACE}+)?answer{PY_SPACE}*(?:is|:){PY_SPACE}*([A-D])")),
            re(&format!(r"(?i)答案{PY_SPACE}*(?:是|为|：|:){PY_SPACE}*([A-D])")),
            re(&format!(r"(?i)选{PY_SPACE}*([A-D])")),
        ]
    });
    static LINE: LazyLock<Regex> = LazyLock::new(|| re(&format!(r"(?m)(?:^|\n){PY_SPACE}*([A-D]){PY_SPACE}*[.\):\n]?{PY_SPACE}*$")));

    let text = py_strip(response);
    if text.is_empty() {
        return Extraction::unanswered(Rule::None);
    }
    let mut cleaned = py_strip(&THINK.replace_all(text, "")).to_string();
    if cleaned.is_empty() && text.contains("<think>") {
        cleaned = py_strip(&THINK_TO_END.replace_all(text, "")).to_string();
    }
    let check = if cleaned.is_empty() { text } else { cleaned.as_str() };

    let found = |c: char, rule: Rule| Extraction::found(Extracted::Choice(c), rule);
    let mut chars = check.chars();
    if let Some(first @ 'A'..='D') = chars.next()
        && chars.next().is_none_or(|c| !is_py_word(c))
    {
        return found(first, Rule::OfficialStart);
    }
    for pattern in PATTERNS.iter() {
        if let Some(letter) = search_letter(pattern, check) {
            return found(letter.to_ascii_uppercase(), Rule::OfficialPattern);
        }
    }
    if let Some(letter) = LINE.captures(check).and_then(|c| c.get(1)).and_then(|m| m.as_str().chars().next()) {
        return found(letter, Rule::OfficialLine);
    }
    // `re.findall(r'\b([A-D])\b', check)[-1]`: a one-letter word A–D.
    let mut last = None;
    let mut before: Option<char> = None;
    let mut rest = check.chars().peekable();
    while let Some(c) = rest.next() {
        if matches!(c, 'A'..='D') && before.is_none_or(|b| !is_py_word(b)) && rest.peek().is_none_or(|n| !is_py_word(*n)) {
            last = Some(c);
        }
        before = Some(c);
    }
    match last {
        Some(letter) => found(letter, Rule::OfficialLast),
        None => Extraction::unanswered(Rule::None),
    }
}

/// The official correctness test: an extracted letter equal, ignoring case, to the row's
/// `answer` as written (`extracted.upper() == expected.upper()`; an answer written "B." never
/// matches).
pub fn official_correct(extraction: &Extraction, expected: &str) -> bool {
    match &extraction.answer {
        Some(Extracted::Choice(c)) => c.to_uppercase().collect::<String>() == expected.to_uppercase(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(output: &str) -> (Option<char>, Rule) {
        let e = extract_official(output);
        let c = match e.answer {
            Some(Extracted::Choice(c)) => Some(c),
            _ => None,
        };
        (c, e.rule)
    }

    /// Expected values follow `extract_answer` of the official `eval.py` rule by rule.
    #[test]
    fn the_cascade_reads_outputs_as_the_official_evaluator_does() {
        use Rule::{None as Nothing, OfficialLast as Last, OfficialLine as Line, OfficialPattern as Pattern, OfficialStart as Start};
        let table: &[(&str, Option<char>, Rule)] = &[
            ("B", Some('B'), Start),
            ("  C.\n", Some('C'), Start),
            ("A drone flies over the river.", Some('A'), Start),
            ("Answer: b", Some('B'), Pattern),
            // "(C)" is no `answer is X` match: the last lone capital decides.
            ("I think the answer is (C)", Some('C'), Last),
            ("The ANSWER IS d, not A", Some('D'), Pattern),
            ("答案是C", Some('C'), Pattern),
            ("答案：B。", Some('B'), Pattern),
            ("我选 D", Some('D'), Pattern),
            ("选A项", None, Nothing),
            ("Option\nB\n", Some('B'), Line),
            ("The drone turns left, so it is B", Some('B'), Last),
            ("Both A and C are possible", Some('C'), Last),
            ("<think>A or B?</think>C", Some('C'), Start),
            ("<think>only reasoning about A", Some('A'), Last),
            ("ABCD", None, Nothing),
            ("E", None, Nothing),
            ("", None, Nothing),
            ("   ", None, Nothing),
            ("a", None, Nothing),
            ("A²", None, Nothing),
            ("answer is Ab, answer is B.", Some('B'), Pattern),
            ("The answer is a drone.", Some('A'), Pattern),
        ];
        for (output, want, rule) in table {
            assert_eq!(letter(output), (*want, *rule), "{output:?}");
        }
    }

    #[test]
    fn python_only_whitespace_separates_like_python() {
        // U+001F is whitespace to Python's `str.strip()` and `\s`, not to Unicode.
        assert_eq!(letter("\u{1F}B"), (Some('B'), Rule::OfficialStart));
        assert_eq!(letter("answer:\u{1F}c"), (Some('C'), Rule::OfficialPattern));
    }

    #[test]
    fn correctness_compares_with_the_answer_as_written() {
        let e = extract_official("b) left");
        assert!(!official_correct(&e, "B"), "lower-case b at the start is no start rule: {e:?}");
        let e = extract_official("B) left");
        assert!(official_correct(&e, "B") && official_correct(&e, "b") && !official_correct(&e, "B."));
    }
}
