//! Option letters: one ([`extract_choice`]) or several ([`extract_choices`]), by the rules in the
//! module docs of [`super`].

use std::sync::LazyLock;

use regex::Regex;

use motionvl_data::manifest::AnswerOption;

use super::{Extracted, Extraction, Rule, TRAILING_PUNCT, prepare, re, words};

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
            if t.get(..word.len()).is_some_and(|head| head.eq_ignore_ascii_case(word)) && !t[word.len()..].starts_with(|c: char| c.is_alphanumeric())
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
    Some(Read { letter: letter.to_ascii_uppercase(), upper: letter.is_ascii_uppercase(), wrapped: !closers.is_empty(), punct, rest })
}

/// "A or B", "B, C", "A and C", "A/B", "B C" right after a read letter.
fn has_alternative(read: &Read<'_>, allowed: &[char]) -> bool {
    static CONNECTOR: LazyLock<Regex> = LazyLock::new(|| re(r"^(?i:and\s*/\s*or\b|and\b|or\b|&|/|,|\+|\||或|和)\s*"));
    let tail = read.rest.trim_start_matches([' ', '\t']);
    let second = |s: &str| read_choice(s, false).is_some_and(|r| allowed.contains(&r.letter) && (r.upper || r.wrapped) && (r.clear() || r.upper));
    if let Some(m) = CONNECTOR.find(tail) {
        return second(&tail[m.end()..]);
    }
    // A compact "B C" with nothing after it.
    !read.punct
        && !tail.starts_with(['\n', '\r'])
        && read_choice(tail, false).is_some_and(|r| r.upper && allowed.contains(&r.letter) && r.clear() && !r.punct)
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
        re(r"(?i)\bit(?:'s|’s|\s+is|\s+must\s+be|\s+should\s+be)(?:\s+(?:likely|probably|clearly|definitely))?|\b(?:answer|option|choice)\b")
    });
    static NEGATED: LazyLock<Regex> = LazyLock::new(|| {
        re(r"(?i)^\s*(?:is|was|seems|looks|would\s+be|are)\s+(?:not|wrong|incorrect|false|unlikely|impossible)\b|^\s*(?:isn't|isn’t)")
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
    static WRAPPED: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|[^\w])[\(\[（【]\s*([A-Za-z])\s*[\.:]?\s*[\)\]）】](?:[^\w]|$)"));
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
    static PAIR: LazyLock<Regex> = LazyLock::new(|| re(r"(?:^|[^\w'’])\(?([A-Z])\)?\s*(?:,|/|&|\bor\b|\band\b)\s*\(?([A-Z])\)?(?:[^\w'’]|$)"));
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
    let matched: Vec<(char, Vec<String>)> = options.iter().map(|o| (o.label, words(&o.text))).filter(|(_, w)| contains_run(&have, w)).collect();
    matched
        .iter()
        .filter(|(label, w)| !matched.iter().any(|(other, ow)| other != label && ow.len() > w.len() && contains_run(ow, w)))
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
    static LIST_DECLARATION: LazyLock<Regex> =
        LazyLock::new(|| re(r"(?i)\b(?:(?:the|my)\s+)?(?:(?:correct|final|best)\s+)?(?:answers?|options?|choices?)\s*(?:are|is|=|:|：)"));
    let declared = LIST_DECLARATION.find_iter(text).filter_map(|m| letter_list(&text[m.end()..], &allowed)).last();
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
    if found.is_empty() { Extraction::unanswered(single.rule) } else { Extraction::found(Extracted::Choices(found), Rule::OptionText) }
}

/// A list of letters at the start of `s` ("A, C", "[A, C]", "A and C", "(A)(C)"), sorted and
/// de-duplicated; `None` unless every item is an option letter and the list ends the clause.
fn letter_list(s: &str, allowed: &[char]) -> Option<Vec<char>> {
    static ITEM: LazyLock<Regex> = LazyLock::new(|| re(r#"^\s*(?:and\s+|&\s*|,\s*|;\s*|/\s*|\+\s*)?[\[\(\{"']?\s*([A-Za-z])(?:\s*[\]\)\}"'])?"#));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(texts: &[&str]) -> Vec<AnswerOption> {
        AnswerOption::lettered(texts)
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
    fn option_text_prefers_the_longer_option() {
        let o = opts(&["move forward", "move forward and ascend", "turn left", "hover"]);
        assert_eq!(matching_options("It will move forward and ascend.", &o), vec!['B']);
    }
}
