//! Answer extraction: from a model's free text to an answer of the question's form.
//!
//! A model may answer "B", "The answer is (B).", "B. move backward", "Option: \[C\]" (the
//! UrbanVideo-Bench prompt's format), the option's text alone, or a refusal. Scoring must read
//! all of these the same way for every model — ours and an API model's outputs alike — and must
//! never guess: an output that does not clearly name one answer is *unanswered*, which is
//! counted and scored wrong (VLMEvalKit's exact-matching mode does the same; its judge mode
//! instead picks a random option, which hides failures).
//!
//! Every extractor first cleans the text ([`clean`]): reasoning blocks (`<think>…</think>`) are
//! dropped, the last `<answer>…</answer>` or `\boxed{…}` container (when there is one) becomes
//! the whole text, and Markdown emphasis (`**`, `__`, backticks) is removed. A JSON object with
//! an `answer` field (lenient JSON, see [`parse_json_lenient`]) is then unwrapped to that field.
//!
//! **Option letters** ([`extract_choice`]) — the first rule that fires decides, in this order
//! (modelled on lmms-eval's `mcq_extract.py`: explicit answers before implicit labels, and
//! conflicting evidence abstains rather than picking one):
//! 1. `declared`: the *last* explicit declaration — "the (correct/final/best) answer is",
//!    "answer:", "option: \[C\]", "I choose", "答案是" — followed by a letter (optionally wrapped
//!    in `()`, `[]`, quotes or `**`); only without any of those, the last weaker one ("option
//!    C", "it is C", not negated as in "option C is wrong"). A lower-case letter counts only when
//!    a label mark or the end follows it ("answer is b." yes, "answer is a left turn" no). A
//!    declared letter that is not an option ("Answer: E." with four options) or that is
//!    followed by an alternative ("A or B") makes the output unanswered.
//! 2. `bare`: the whole output is one letter, however wrapped ("b", "(B)", "\[C\].").
//! 3. `leading`: the output starts with a labelled letter — "B. move backward", "(B) ...",
//!    "B) ...", "B: ...", "B - ...", "B\nbecause ...", "B is correct" — or with the letter
//!    followed by that option's own text ("B move backward"). "A drone ..." is not a label.
//! 4. Alternatives anywhere ("A or B", "B, C", "A and C") without an earlier rule firing make
//!    the output unanswered.
//! 5. `wrapped`: letters in parentheses or brackets anywhere ("... so (C)"); two different
//!    ones (an echoed option list) make it unanswered.
//! 6. `trailing`: the output ends with a standalone capital letter ("I think it's B.").
//! 7. `label`: capital letters marked as labels anywhere ("C." / "C)" / "C:" then a space);
//!    two different ones make it unanswered.
//! 8. `option_text`: exactly one option's text occurs in the output as a run of whole words
//!    (case and punctuation ignored; an option whose text lies inside a longer matching
//!    option's text does not count), e.g. "Move backward." for "B. move backward".
//! 9. Otherwise unanswered (`none`), refusals included.
//!
//! **Several letters** ([`extract_choices`], UAV-DualCog multi-select): a declared list, or an
//! output that is only a list ("A, C", "[A, C]", "A and C"); else one letter by the rules
//! above; else every option whose text occurs.
//!
//! **Yes/no** ([`extract_yes_no`]): a declared "answer: yes"; else the first word (yes, no,
//! true, false, yeah, yep, nope); else the one family of those words that occurs; else
//! unanswered.
//!
//! **Numbers** ([`extract_number`]; digits, `1,200`, or English number words up to ninety-nine
//! and "one hundred"): a declared number ("the answer is 4", "count: 4"); else a number that
//! starts the output ("3 vehicles (2 cars and 1 truck)"); else the only distinct number in the
//! output; else unanswered.
//!
//! **Timestamps** ([`extract_timestamp`], seconds): `mm:ss(.f)`, `hh:mm:ss`, "12.5 s", "12.5
//! seconds", "1 min 5 s", or a plain number. A declared time ("answer: 12 s", "at 00:12") wins;
//! else the only distinct explicit time expression; else a number that starts the output; else
//! the only distinct number; else unanswered.

mod choice;
mod json;
mod number;
mod official;
mod timestamp;
mod yes_no;

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use choice::{extract_choice, extract_choices};
pub use json::parse_json_lenient;
pub use number::extract_number;
pub use official::{extract_official, official_correct};
pub use timestamp::extract_timestamp;
pub use yes_no::extract_yes_no;

/// An answer read from a model's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Extracted {
    Choice(char),
    Choices(Vec<char>),
    YesNo(bool),
    Number(f64),
    /// Seconds.
    Timestamp(f64),
}

impl std::fmt::Display for Extracted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Extracted::Choice(c) => write!(f, "{c}"),
            Extracted::Choices(cs) => write!(f, "{}", cs.iter().map(char::to_string).collect::<Vec<_>>().join(",")),
            Extracted::YesNo(b) => f.write_str(if *b { "yes" } else { "no" }),
            Extracted::Number(x) => write!(f, "{x}"),
            Extracted::Timestamp(t) => write!(f, "{t}s"),
        }
    }
}

/// Which rule decided; written beside every scored prediction so extraction can be audited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    /// A JSON object's field (UAV-DualCog's answer format, or `{"answer": ...}`).
    Json,
    Declared,
    Bare,
    Leading,
    Wrapped,
    Trailing,
    Label,
    OptionText,
    /// Yes/no: the first word, or the only family of yes/no words present.
    Word,
    /// Numbers and times: the only distinct value in the output.
    Unique,
    /// Unanswered: the output names more than one answer.
    Ambiguous,
    /// Unanswered: the output names an answer that is not among the options.
    Invalid,
    /// Unanswered: nothing that reads as an answer.
    None,
    /// The official SIS-Bench cascade ([`extract_official`]): a letter A–D opening the output.
    OfficialStart,
    /// The official cascade: "answer is X", "答案是X" or "选X".
    OfficialPattern,
    /// The official cascade: a letter alone on a line.
    OfficialLine,
    /// The official cascade: the last one-letter word A–D.
    OfficialLast,
}

impl Rule {
    pub fn name(self) -> &'static str {
        match self {
            Rule::Json => "json",
            Rule::Declared => "declared",
            Rule::Bare => "bare",
            Rule::Leading => "leading",
            Rule::Wrapped => "wrapped",
            Rule::Trailing => "trailing",
            Rule::Label => "label",
            Rule::OptionText => "option_text",
            Rule::Word => "word",
            Rule::Unique => "unique",
            Rule::Ambiguous => "ambiguous",
            Rule::Invalid => "invalid",
            Rule::None => "none",
            Rule::OfficialStart => "official_start",
            Rule::OfficialPattern => "official_pattern",
            Rule::OfficialLine => "official_line",
            Rule::OfficialLast => "official_last",
        }
    }
}

/// The answer found (or not) and the rule that decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Extraction {
    pub answer: Option<Extracted>,
    pub rule: Rule,
}

impl Extraction {
    fn found(answer: Extracted, rule: Rule) -> Self {
        Extraction { answer: Some(answer), rule }
    }

    fn unanswered(rule: Rule) -> Self {
        Extraction { answer: None, rule }
    }

    fn or_json(self) -> Self {
        match self.answer {
            Some(a) => Extraction::found(a, Rule::Json),
            None => self,
        }
    }
}

fn re(pattern: &str) -> Regex {
    // The patterns are constants of this file; a typo is caught by every test run.
    Regex::new(pattern).unwrap_or_else(|e| panic!("extraction pattern {pattern:?} does not compile: {e}"))
}

/// Punctuation that may trail an answer without changing it.
const TRAILING_PUNCT: &[char] = &[' ', '\t', '\r', '\n', '.', '!', '?', ',', ';', ':', '。', '！', '？', '，', '；', '：'];

/// Lower-cased words of a text, for option-text matching.
pub(crate) fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()).map(str::to_lowercase).collect()
}

// ---------------------------------------------------------------------------------------------
// Cleaning

/// Drops reasoning blocks, scopes to the last answer container, strips Markdown emphasis.
pub fn clean(raw: &str) -> String {
    let mut text = raw.to_string();
    // A closing tag without an opening one: everything before it was reasoning.
    if let Some(end) = find_ci(&text, "</think>")
        && find_ci(&text[..end], "<think>").is_none()
    {
        text = text[end + "</think>".len()..].to_string();
    }
    while let Some(start) = find_ci(&text, "<think>") {
        match find_ci(&text[start..], "</think>") {
            Some(end) => text.replace_range(start..start + end + "</think>".len(), " "),
            // Cut off while reasoning: no answer was given.
            None => text.truncate(start),
        }
    }
    if let Some(scope) = last_container(&text) {
        text = scope;
    }
    let text = text.replace("**", "").replace("__", "").replace('`', "");
    text.trim().to_string()
}

fn find_ci(haystack: &str, needle: &str) -> Option<usize> {
    haystack.to_ascii_lowercase().find(&needle.to_ascii_lowercase())
}

/// Content of the last `<answer>…</answer>` (to the end when unclosed) or `\boxed{…}`.
fn last_container(text: &str) -> Option<String> {
    static ANSWER_TAG: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)<answer\b[^<>]*>"));
    static CLOSE_TAG: LazyLock<Regex> = LazyLock::new(|| re(r"(?i)</answer\s*>"));
    let tag = ANSWER_TAG.find_iter(text).last().map(|m| (m.start(), m.end()));
    let boxed = text.rfind("\\boxed{").map(|s| (s, s + "\\boxed{".len()));
    match (tag, boxed) {
        (Some(t), b) if b.is_none_or(|b| t.0 > b.0) => {
            let rest = &text[t.1..];
            let end = CLOSE_TAG.find(rest).map_or(rest.len(), |m| m.start());
            Some(rest[..end].to_string())
        }
        (_, Some(b)) => {
            let rest = &text[b.1..];
            let mut depth = 1;
            let end = rest
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(rest.len(), |(i, _)| i);
            let inner = &rest[..end];
            // `\boxed{\text{B}}` → `B`.
            static LATEX: LazyLock<Regex> = LazyLock::new(|| re(r"\\(?:text|mathrm|mathbf|textbf)\s*\{([^{}]*)\}"));
            Some(LATEX.replace_all(inner, "$1").into_owned())
        }
        _ => None,
    }
}

/// Applies [`clean`] and unwraps a JSON object's `answer`-like field when the output is one.
fn prepare(raw: &str) -> (String, bool) {
    let text = clean(raw);
    if let Some(obj) = parse_json_lenient(&text) {
        for key in ["answer", "final_answer", "answer_option_id", "option", "choice", "prediction"] {
            match obj.get(key) {
                Some(Value::String(s)) => return (clean(s), true),
                Some(Value::Number(n)) => return (n.to_string(), true),
                Some(Value::Bool(b)) => return ((if *b { "yes" } else { "no" }).to_string(), true),
                Some(Value::Array(items)) => {
                    let parts: Vec<String> = items
                        .iter()
                        .filter_map(|v| match v {
                            Value::String(s) => Some(s.clone()),
                            Value::Number(n) => Some(n.to_string()),
                            _ => None,
                        })
                        .collect();
                    return (parts.join(", "), true);
                }
                _ => {}
            }
        }
    }
    (text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_scopes_to_containers_and_drops_reasoning() {
        assert_eq!(clean("<think>maybe A</think>The answer is C."), "The answer is C.");
        assert_eq!(clean("<think>still thinking about A"), "");
        assert_eq!(clean("reasoning... </think> B"), "B");
        assert_eq!(clean("Options A and B... <answer>C</answer>"), "C");
        assert_eq!(clean(r"so \boxed{\text{D}}."), "D");
        assert_eq!(clean("**B**"), "B");
    }
}
