//! Answer extraction: from a model's free text to an answer of the question's form.
//!
//! A model may answer "B", "The answer is (B).", "B. move backward", "Option: [C]" (the
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
//!    "answer:", "option: [C]", "I choose", "答案是" — followed by a letter (optionally wrapped
//!    in `()`, `[]`, quotes or `**`); only without any of those, the last weaker one ("option
//!    C", "it is C", not negated as in "option C is wrong"). A lower-case letter counts only when
//!    a label mark or the end follows it ("answer is b." yes, "answer is a left turn" no). A
//!    declared letter that is not an option ("Answer: E." with four options) or that is
//!    followed by an alternative ("A or B") makes the output unanswered.
//! 2. `bare`: the whole output is one letter, however wrapped ("b", "(B)", "[C].").
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

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use motionvl_data::manifest::AnswerOption;

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
        Extraction {
            answer: Some(answer),
            rule,
        }
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
const TRAILING_PUNCT: &[char] = &[
    ' ', '\t', '\r', '\n', '.', '!', '?', ',', ';', ':', '。', '！', '？', '，', '；', '：',
];

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
        for key in [
            "answer",
            "final_answer",
            "answer_option_id",
            "option",
            "choice",
            "prediction",
        ] {
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

// ---------------------------------------------------------------------------------------------
// Option letters

/// A letter read at some position, with what surrounds it.
#[derive(Debug, Clone, Copy)]
struct Read<'a> {
    /// Upper-cased.
    letter: char,
    /// Written in upper case.
    upper: bool,
    /// Inside `()`, `[]`, quotes, `<>` or `*`.
    wrapped: bool,
    /// A label mark (`.`, `)`, `:`) right after the letter.
    punct: bool,
    /// The text after the letter and its wrappers and mark.
    rest: &'a str,
}

impl Read<'_> {
    /// Nothing but punctuation follows, or a label mark, or a wrapper: unmistakably a letter.
    fn clear(&self) -> bool {
        self.wrapped || self.punct || self.rest.trim_matches(TRAILING_PUNCT).is_empty()
    }
}

fn closer_of(c: char) -> Option<char> {
    Some(match c {
        '(' => ')',
        '[' => ']',
        '{' => '}',
        '"' => '"',
        '\'' => '\'',
        '“' => '”',
        '‘' => '’',
        '（' => '）',
        '【' => '】',
        '<' => '>',
        '*' => '*',
        _ => return None,
    })
}

/// Reads one ASCII letter at the start of `s` (after spaces and `:`/`=`/dashes), with optional
/// wrappers and, when `prefix_word`, an optional "option"/"choice"/"letter" word before it.
fn read_choice(s: &str, prefix_word: bool) -> Option<Read<'_>> {
    let skip = |c: char| c.is_whitespace() || matches!(c, ':' | '：' | '=' | '-' | '–' | '—');
    let mut t = s.trim_start_matches(skip);
    if prefix_word {
        for word in ["option", "choice", "letter"] {
            if t.get(..word.len()).is_some_and(|head| head.eq_ignore_ascii_case(word))
                && !t[word.len()..].starts_with(|c: char| c.is_alphanumeric())
            {
                t = t[word.len()..].trim_start_matches(skip);
                break;
            }
        }
    }
    let mut closers = Vec::new();
    while let Some(c) = t.chars().next() {
        let Some(close) = closer_of(c) else { break };
        closers.push(close);
        t = t[c.len_utf8()..].trim_start();
        if closers.len() > 3 {
            return None;
        }
    }
    let letter = t.chars().next().filter(char::is_ascii_alphabetic)?;
    let mut rest = &t[1..];
    if rest.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let mut punct = false;
    for close in closers.iter().rev() {
        rest = rest.trim_start();
        if let Some(c) = rest.chars().next()
            && matches!(c, '.' | ':' | ')')
            && c != *close
        {
            punct = true;
            rest = rest[1..].trim_start();
        }
        rest = rest.strip_prefix(*close)?;
    }
    if let Some(c) = rest.chars().next() {
        let next = rest[c.len_utf8()..].chars().next();
        let word_follows = next.is_some_and(|n| n.is_alphanumeric() || n == '/' || n == '_');
        if matches!(c, '.' | ':' | ')') && !punct {
            // "B.com", "C:/path" are not labels.
            if word_follows && c != ')' {
                return None;
            }
            punct = true;
            rest = &rest[1..];
        } else if matches!(c, '\'' | '’' | '-') && word_follows && closers.is_empty() {
            // "B's", "A-list".
            return None;
        }
    }
    Some(Read {
        letter: letter.to_ascii_uppercase(),
        upper: letter.is_ascii_uppercase(),
        wrapped: !closers.is_empty(),
        punct,
        rest,
    })
}

/// "A or B", "B, C", "A and C", "A/B", "B C" right after a read letter.
fn has_alternative(read: &Read<'_>, allowed: &[char]) -> bool {
    static CONNECTOR: LazyLock<Regex> = LazyLock::new(|| re(r"^(?i:and\s*/\s*or\b|and\b|or\b|&|/|,|\+|\||或|和)\s*"));
    let tail = read.rest.trim_start_matches([' ', '\t']);
    let second = |s: &str| {
        read_choice(s, false)
            .is_some_and(|r| allowed.contains(&r.letter) && (r.upper || r.wrapped) && (r.clear() || r.upper))
    };
    if let Some(m) = CONNECTOR.find(tail) {
        return second(&tail[m.end()..]);
    }
    // A compact "B C" with nothing after it.
    !read.punct
        && !tail.starts_with(['\n', '\r'])
        && read_choice(tail, false).is_some_and(|r| r.upper && allowed.contains(&r.letter) && r.clear() && !r.punct)
}

/// Lower-cased words of a text, for option-text matching.
fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

fn contains_run(haystack: &[String], needle: &[String]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

/// Whether `rest` begins with the text of option `letter`.
fn option_text_follows(rest: &str, letter: char, options: &[AnswerOption]) -> bool {
    let Some(option) = options.iter().find(|o| o.label == letter) else {
        return false;
    };
    let want = words(&option.text);
    let have = words(rest);
    !want.is_empty() && have.len() >= want.len() && have[..want.len()] == want[..]
}

/// "B is correct", "B seems right", "B would be the answer".
fn asserts(rest: &str) -> bool {
    static ASSERTION: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"(?i)^\s*(?:is|seems|looks|appears|would\s+be|should\s+be)\s+(?:to\s+be\s+)?(?:the\s+|a\s+)?(?:most\s+)?(?:correct|right|best|answer|option|choice|likely|appropriate)\b",
        )
    });
    ASSERTION.is_match(rest)
}

/// The letters of explicit declarations (rule 1). Strong declarations ("the answer is",
/// "answer:", "option: [C]", "I choose", "答案是") outrank weak ones (a bare "option C", "it is
/// C"), so a verdict is not overturned by a later mention such as "option A is wrong"; within a
/// tier the last one decides, and a weak one that is negated ("option C is not ...") is no
/// declaration at all.
fn declared_choice(text: &str, allowed: &[char]) -> Option<Extraction> {
    static STRONG: LazyLock<Regex> = LazyLock::new(|| {
        re(concat!(
            r"(?i)(?:\b(?:(?:the|my|your|our)\s+)?(?:(?:correct|best|final|right|most\s+(?:likely|appropriate|suitable))\s+)?",
            r"(?:answer|option|choice)s?\s*(?:is|would\s+be|should\s+be|will\s+be|must\s+be|=|:|：)",
            r"(?:\s+(?:likely|probably|clearly|definitely|most\s+likely))?",
            r"|\bi\s+(?:would\s+|will\s+|'d\s+)?(?:choose|select|pick|go\s+with)\b",
            r"|答案是|答案为|答案[:：]|选项|选择)",
        ))
    });
    static WEAK: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"(?i)\bit(?:'s|’s|\s+is|\s+must\s+be|\s+should\s+be)(?:\s+(?:likely|probably|clearly|definitely))?|\b(?:answer|option|choice)\b",
        )
    });
    static NEGATED: LazyLock<Regex> = LazyLock::new(|| {
        re(
            r"(?i)^\s*(?:is|was|seems|looks|would\s+be|are)\s+(?:not|wrong|incorrect|false|unlikely|impossible)\b|^\s*(?:isn't|isn’t)",
        )
    });
    let last_of = |pattern: &Regex, weak: bool| {
        let mut last: Option<Extraction> = None;
        for m in pattern.find_iter(text) {
            let Some(read) = read_choice(&text[m.end()..], true) else {
                continue;
            };
            if !read.upper && !read.clear() {
                // "the answer is a left turn": an article, not a letter.
                continue;
            }
            if weak && NEGATED.is_match(read.rest) {
                continue;
            }
            let decision = if !allowed.contains(&read.letter) {
                // "Answer: E." names an impossible option; "Answer: I think ..." names nothing.
                if read.clear() {
                    Extraction::unanswered(Rule::Invalid)
                } else {
                    continue;
                }
            } else if has_alternative(&read, allowed) {
                Extraction::unanswered(Rule::Ambiguous)
            } else {
                Extraction::found(Extracted::Choice(read.letter), Rule::Declared)
            };
            last = Some(decision);
        }
        last
    };
    last_of(&STRONG, false).or_else(|| last_of(&WEAK, true))
}

/// Extracts one option letter (the module docs list the rules).
pub fn extract_choice(raw: &str, options: &[AnswerOption]) -> Extraction {
    let (text, from_json) = prepare(raw);
    let result = choice_from_clean(&text, options);
    if from_json { result.or_json() } else { result }
}

fn choice_from_clean(text: &str, options: &[AnswerOption]) -> Extraction {
    let allowed: Vec<char> = options.iter().map(|o| o.label).collect();
    if text.is_empty() {
        return Extraction::unanswered(Rule::None);
    }
    // 1. Declarations.
    if let Some(decision) = declared_choice(text, &allowed) {
        return decision;
    }
    // 2. The whole output is one letter.
    let stripped = text.trim_matches(TRAILING_PUNCT);
    if let Some(read) = read_choice(stripped, true)
        && read.rest.trim_matches(TRAILING_PUNCT).is_empty()
    {
        return if allowed.contains(&read.letter) {
            Extraction::found(Extracted::Choice(read.letter), Rule::Bare)
        } else {
            Extraction::unanswered(Rule::Invalid)
        };
    }
    // 3. A leading label.
    if let Some(read) = read_choice(text, false)
        && allowed.contains(&read.letter)
        && (read.upper || read.wrapped || read.punct)
    {
        if has_alternative(&read, &allowed) {
            return Extraction::unanswered(Rule::Ambiguous);
        }
        let rest = read.rest.trim_start_matches([' ', '\t']);
        let labelled = read.clear()
            || rest.starts_with(['\n', '\r', '-', '–', '—', ','])
            || asserts(read.rest)
            || option_text_follows(read.rest, read.letter, options);
        if labelled {
            return Extraction::found(Extracted::Choice(read.letter), Rule::Leading);
        }
    }
    // 4. Alternatives anywhere.
    if implicit_alternatives(text, &allowed) {
        return Extraction::unanswered(Rule::Ambiguous);
    }
    // 5. Wrapped letters anywhere.
    static WRAPPED: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?:^|[^\w])[\(\[（【]\s*([A-Za-z])\s*[\.:]?\s*[\)\]）】](?:[^\w]|$)"));
    match distinct_letters(WRAPPED.captures_iter(text).map(|c| c[1].to_ascii_uppercase()), &allowed) {
        Distinct::One(c) => return Extraction::found(Extracted::Choice(c), Rule::Wrapped),
        Distinct::Many => return Extraction::unanswered(Rule::Ambiguous),
        Distinct::Zero => {}
    }
    // 6. A trailing capital letter.
    static TRAILING: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|[^\w'’])([A-Z])[\s\.!?。]*$"));
    if let Some(c) = TRAILING.captures(text).and_then(|c| c[1].chars().next())
        && allowed.contains(&c)
    {
        return Extraction::found(Extracted::Choice(c), Rule::Trailing);
    }
    // 7. Labels anywhere.
    static LABEL: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|[^\w'’])([A-Z])[\.\):](?:\s|$)"));
    match distinct_letters(LABEL.captures_iter(text).map(|c| c[1].to_string()), &allowed) {
        Distinct::One(c) => return Extraction::found(Extracted::Choice(c), Rule::Label),
        Distinct::Many => return Extraction::unanswered(Rule::Ambiguous),
        Distinct::Zero => {}
    }
    // 8. Option text.
    match matching_options(text, options).as_slice() {
        [one] => Extraction::found(Extracted::Choice(*one), Rule::OptionText),
        [] => Extraction::unanswered(Rule::None),
        _ => Extraction::unanswered(Rule::Ambiguous),
    }
}

enum Distinct {
    Zero,
    One(char),
    Many,
}

fn distinct_letters(found: impl Iterator<Item = String>, allowed: &[char]) -> Distinct {
    let mut seen: Vec<char> = Vec::new();
    for s in found {
        if let Some(c) = s.chars().next()
            && allowed.contains(&c)
            && !seen.contains(&c)
        {
            seen.push(c);
        }
    }
    match seen.as_slice() {
        [] => Distinct::Zero,
        [c] => Distinct::One(*c),
        _ => Distinct::Many,
    }
}

/// Two option letters joined by "or", "and", "/", "," or "&" anywhere in the text.
fn implicit_alternatives(text: &str, allowed: &[char]) -> bool {
    static PAIR: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?:^|[^\w'’])\(?([A-Z])\)?\s*(?:,|/|&|\bor\b|\band\b)\s*\(?([A-Z])\)?(?:[^\w'’]|$)"));
    // Overlapping pairs ("A, B, C") are fine to miss: one pair is enough.
    PAIR.captures_iter(text).any(|c| {
        let (a, b) = (c[1].chars().next(), c[2].chars().next());
        matches!((a, b), (Some(a), Some(b)) if a != b && allowed.contains(&a) && allowed.contains(&b))
    })
}

/// Options whose text occurs as whole words, leaving out any whose text lies inside another
/// matching option's text.
fn matching_options(text: &str, options: &[AnswerOption]) -> Vec<char> {
    let have = words(text);
    let matched: Vec<(char, Vec<String>)> = options
        .iter()
        .map(|o| (o.label, words(&o.text)))
        .filter(|(_, w)| contains_run(&have, w))
        .collect();
    matched
        .iter()
        .filter(|(label, w)| {
            !matched
                .iter()
                .any(|(other, ow)| other != label && ow.len() > w.len() && contains_run(ow, w))
        })
        .map(|(label, _)| *label)
        .collect()
}

/// Extracts a set of option letters (multi-select questions).
pub fn extract_choices(raw: &str, options: &[AnswerOption]) -> Extraction {
    let (text, from_json) = prepare(raw);
    let result = choices_from_clean(&text, options);
    if from_json { result.or_json() } else { result }
}

fn choices_from_clean(text: &str, options: &[AnswerOption]) -> Extraction {
    let allowed: Vec<char> = options.iter().map(|o| o.label).collect();
    static LIST_DECLARATION: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?i)\b(?:(?:the|my)\s+)?(?:(?:correct|final|best)\s+)?(?:answers?|options?|choices?)\s*(?:are|is|=|:|：)")
    });
    let declared = LIST_DECLARATION
        .find_iter(text)
        .filter_map(|m| letter_list(&text[m.end()..], &allowed))
        .last();
    if let Some(list) = declared {
        return Extraction::found(Extracted::Choices(list), Rule::Declared);
    }
    if let Some(list) = letter_list(text, &allowed)
        && list_is_whole(text, &allowed)
    {
        return Extraction::found(Extracted::Choices(list), Rule::Bare);
    }
    let single = choice_from_clean(text, options);
    if let Some(Extracted::Choice(c)) = single.answer {
        return Extraction::found(Extracted::Choices(vec![c]), single.rule);
    }
    let mut found = matching_options(text, options);
    found.sort_unstable();
    if found.is_empty() {
        Extraction::unanswered(single.rule)
    } else {
        Extraction::found(Extracted::Choices(found), Rule::OptionText)
    }
}

/// A list of letters at the start of `s` ("A, C", "[A, C]", "A and C", "(A)(C)"), sorted and
/// de-duplicated; `None` unless every item is an option letter and the list ends the clause.
fn letter_list(s: &str, allowed: &[char]) -> Option<Vec<char>> {
    static ITEM: LazyLock<Regex> =
        LazyLock::new(|| re(r#"^\s*(?:and\s+|&\s*|,\s*|;\s*|/\s*|\+\s*)?[\[\(\{"']?\s*([A-Za-z])(?:\s*[\]\)\}"'])?"#));
    let mut rest = s.trim_start_matches(|c: char| c.is_whitespace() || matches!(c, ':' | '：' | '=' | '[' | '{'));
    let mut letters = Vec::new();
    while let Some(m) = ITEM.captures(rest) {
        let whole = m.get(0).map_or(0, |g| g.end());
        let after = &rest[whole..];
        if after.starts_with(|c: char| c.is_alphanumeric()) {
            break;
        }
        let c = m[1].chars().next()?.to_ascii_uppercase();
        if !allowed.contains(&c) {
            return None;
        }
        letters.push(c);
        rest = after;
    }
    let end = rest.trim_start_matches([']', '}', ' ']);
    if letters.is_empty() || !(end.is_empty() || end.starts_with(['.', '\n', ';', '!', '。'])) {
        return None;
    }
    letters.sort_unstable();
    letters.dedup();
    Some(letters)
}

fn list_is_whole(text: &str, allowed: &[char]) -> bool {
    let t = text.trim_matches(TRAILING_PUNCT);
    letter_list(t, allowed).is_some() && !t.contains('\n')
}

// ---------------------------------------------------------------------------------------------
// Yes / no

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
    static DECLARED: LazyLock<Regex> =
        LazyLock::new(|| re(r#"(?i)\banswer\s*(?:is|would\s+be|:|：|=)\s*["'(\[]?\s*(yes|no|true|false)\b"#));
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

// ---------------------------------------------------------------------------------------------
// Numbers

/// A number with the byte span it occupies.
#[derive(Debug, Clone, Copy)]
struct Found {
    value: f64,
    start: usize,
    end: usize,
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
    const TENS: [&str; 8] = [
        "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
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
fn numbers(text: &str) -> Vec<Found> {
    static DIGITS: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?:^|[^\w.])(-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?)"));
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
            out.push(Found {
                value,
                start: m.start(),
                end: m.end(),
            });
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
        out.push(Found {
            value: f64::from(value),
            start: m.start(),
            end: m.end(),
        });
    }
    out.sort_by_key(|f| f.start);
    out
}

fn unique_value(found: &[Found]) -> Option<f64> {
    let first = found.first()?.value;
    found.iter().all(|f| f.value == first).then_some(first)
}

/// The number that a declaration introduces, or that starts the text.
fn declared_number(text: &str, found: &[Found], declaration: &Regex) -> Option<f64> {
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

fn leading_value(text: &str, found: &[Found]) -> Option<f64> {
    let first = found.first()?;
    text[..first.start]
        .trim_matches(|c: char| c.is_whitespace() || matches!(c, '(' | '[' | '"' | '\''))
        .is_empty()
        .then_some(first.value)
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

// ---------------------------------------------------------------------------------------------
// Timestamps

/// Explicit time expressions: clock forms and numbers with a seconds/minutes unit.
fn times(text: &str) -> Vec<Found> {
    static CLOCK: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?:^|[^\w.:])(\d{1,2}):([0-5]\d)(?::([0-5]\d))?(\.\d+)?(?:[^\w:]|$)"));
    static MIN_SEC: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?i)\b(\d+)\s*(?:m|min|mins|minutes?)\s*(?:and\s+)?(\d+(?:\.\d+)?)\s*(?:s|sec|secs|seconds?)\b")
    });
    static SECONDS: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?i)(?:^|[^\w.])(\d+(?:\.\d+)?)\s*(?:s|sec|secs|seconds?)\b"));
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
        let frac = c
            .get(4)
            .and_then(|m| format!("0{}", m.as_str()).parse::<f64>().ok())
            .unwrap_or(0.0);
        let end = c.get(4).or(c.get(3)).unwrap_or(b).end();
        let value = match parse(c.get(3)) {
            Some(z) => x * 3600.0 + y * 60.0 + z + frac,
            None => x * 60.0 + y + frac,
        };
        out.push(Found {
            value,
            start: a.start(),
            end,
        });
    }
    for c in MIN_SEC.captures_iter(text) {
        let (Some(m), Some(s)) = (c.get(1), c.get(2)) else {
            continue;
        };
        let (Ok(min), Ok(sec)) = (m.as_str().parse::<f64>(), s.as_str().parse::<f64>()) else {
            continue;
        };
        if !overlaps(&out, m.start(), s.end()) {
            out.push(Found {
                value: min * 60.0 + sec,
                start: m.start(),
                end: s.end(),
            });
        }
    }
    for c in SECONDS.captures_iter(text) {
        let Some(m) = c.get(1) else { continue };
        if let Ok(v) = m.as_str().parse::<f64>()
            && !overlaps(&out, m.start(), m.end())
        {
            out.push(Found {
                value: v,
                start: m.start(),
                end: m.end(),
            });
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
    let plain: Vec<Found> = numbers(text)
        .into_iter()
        .filter(|n| !explicit.iter().any(|t| n.start < t.end && t.start < n.end))
        .collect();
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

// ---------------------------------------------------------------------------------------------
// Lenient JSON

/// The JSON object in a model's output, read leniently: a fenced ```` ```json ```` block or the
/// span from the first `{` to the last `}`; when that is not valid JSON, single-quoted strings,
/// unquoted keys, trailing commas, Python's `True`/`False`/`None` and typographic quotes are
/// repaired and it is tried again. UAV-DualCog's own scorer reads the same span with
/// `json.loads` and gives up on any error; models' near-JSON is common enough that repairing
/// the usual slips is fairer to all of them alike.
pub fn parse_json_lenient(text: &str) -> Option<Map<String, Value>> {
    static FENCED: LazyLock<Regex> = LazyLock::new(|| re(r"(?s)```(?:json|JSON)?\s*(\{.*\})\s*```"));
    let body = match FENCED.captures(text) {
        Some(c) => c.get(1).map_or("", |m| m.as_str()),
        None => text,
    };
    let start = body.find('{')?;
    let end = body.rfind('}')?;
    if end <= start {
        return None;
    }
    let span = &body[start..=end];
    if let Ok(Value::Object(map)) = serde_json::from_str(span) {
        return Some(map);
    }
    match serde_json::from_str(&repair_json(span)) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

/// Rewrites near-JSON into JSON (see [`parse_json_lenient`]).
fn repair_json(s: &str) -> String {
    let s = s.replace(['“', '”'], "\"").replace(['‘', '’'], "'");
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' => {
                // A string: copy it as a double-quoted one, escaping as needed.
                let quote = c;
                out.push('"');
                i += 1;
                while i < chars.len() && chars[i] != quote {
                    match chars[i] {
                        '\\' if i + 1 < chars.len() => {
                            if chars[i + 1] == '\'' {
                                out.push('\'');
                            } else {
                                out.push('\\');
                                out.push(chars[i + 1]);
                            }
                            i += 2;
                            continue;
                        }
                        '"' => out.push_str("\\\""),
                        '\n' => out.push_str("\\n"),
                        other => out.push(other),
                    }
                    i += 1;
                }
                out.push('"');
                i += 1;
            }
            ',' => {
                // Drop a trailing comma.
                let next = chars[i + 1..].iter().find(|c| !c.is_whitespace());
                if !matches!(next, Some('}') | Some(']')) {
                    out.push(',');
                }
                i += 1;
            }
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let next = chars[i..].iter().find(|c| !c.is_whitespace());
                match word.as_str() {
                    _ if next == Some(&':') => {
                        out.push('"');
                        out.push_str(&word);
                        out.push('"');
                    }
                    "True" | "true" => out.push_str("true"),
                    "False" | "false" => out.push_str("false"),
                    "None" | "null" | "NaN" => out.push_str("null"),
                    other => {
                        // A bare word value: keep it as a string.
                        out.push('"');
                        out.push_str(other);
                        out.push('"');
                    }
                }
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(texts: &[&str]) -> Vec<AnswerOption> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| AnswerOption {
                label: (b'A' + i as u8) as char,
                text: t.to_string(),
            })
            .collect()
    }

    #[test]
    fn read_choice_boundaries() {
        assert!(read_choice("B.com is a site", false).is_none());
        assert!(read_choice("B's view", false).is_none());
        assert!(read_choice("Be careful", false).is_none());
        let r = read_choice("(B) up", false).map(|r| (r.letter, r.wrapped, r.rest));
        assert_eq!(r, Some(('B', true, " up")));
        let r = read_choice("*B.* up", false).map(|r| (r.letter, r.wrapped, r.punct, r.rest));
        assert_eq!(r, Some(('B', true, true, " up")));
        let r = read_choice("option [c]", true).map(|r| (r.letter, r.upper, r.wrapped));
        assert_eq!(r, Some(('C', false, true)));
    }

    #[test]
    fn clean_scopes_to_containers_and_drops_reasoning() {
        assert_eq!(clean("<think>maybe A</think>The answer is C."), "The answer is C.");
        assert_eq!(clean("<think>still thinking about A"), "");
        assert_eq!(clean("reasoning... </think> B"), "B");
        assert_eq!(clean("Options A and B... <answer>C</answer>"), "C");
        assert_eq!(clean(r"so \boxed{\text{D}}."), "D");
        assert_eq!(clean("**B**"), "B");
    }

    #[test]
    fn repair_handles_python_style_dicts() {
        let map = parse_json_lenient("{'answer_option_ids': ['A', 'C'], 'ok': True, visible_count: 3,}");
        let map = map.unwrap_or_default();
        assert_eq!(map.get("answer_option_ids"), Some(&serde_json::json!(["A", "C"])));
        assert_eq!(map.get("ok"), Some(&Value::Bool(true)));
        assert_eq!(map.get("visible_count"), Some(&serde_json::json!(3)));
    }

    #[test]
    fn option_text_prefers_the_longer_option() {
        let o = opts(&["move forward", "move forward and ascend", "turn left", "hover"]);
        assert_eq!(matching_options("It will move forward and ascend.", &o), vec!['B']);
    }
}
