//! What every benchmark reader shares: the row loop with id and error attachment, and the
//! parsers of options, answer letters, intervals and timestamps.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::records::{MediaResolver, ReadError, ReadOptions, ReadOutcome, Row, RowProblem, read_rows};

use super::question::{Answer, AnswerOption, Interval, Question};
use super::taxonomy::{Benchmark, Task};

pub(super) fn unknown_task(task: &str, known: impl Iterator<Item = &'static str>) -> RowProblem {
    RowProblem::UnknownTask { task: task.to_string(), known: known.collect::<Vec<_>>().join(", ") }
}

/// Common shape of a question before the benchmark-specific parts are filled in.
pub(super) struct Base {
    pub(super) benchmark: Benchmark,
    pub(super) file: PathBuf,
    pub(super) line: usize,
}

impl Base {
    pub(super) fn question(&self, id: String, task: Task, question: String, options: Vec<AnswerOption>, answer: Answer) -> Question {
        Question {
            benchmark: self.benchmark,
            id,
            task,
            question,
            options,
            answer,
            videos: Vec::new(),
            images: Vec::new(),
            fps: None,
            clip_count: None,
            split: None,
            intervals: Vec::new(),
            file: self.file.clone(),
            line: self.line,
        }
    }
}

/// Wraps a per-row parser with the id lookup and error attachment every reader shares.
pub(super) fn read_questions(
    benchmark: Benchmark,
    path: &Path,
    opts: &ReadOptions,
    id_keys: &[&'static str],
    media: MediaResolver,
    parse: impl Fn(&Row<'_>, String, &Base, &MediaResolver) -> Result<Question, RowProblem>,
) -> Result<ReadOutcome<Question>, ReadError> {
    read_rows(path, opts, |value: &Value, line| {
        let row = Row::new(value).map_err(|p| (None, p))?;
        let id = row.required_string(id_keys).map_err(|p| (None, p))?;
        let base = Base { benchmark, file: path.to_path_buf(), line };
        let q = parse(&row, id.clone(), &base, &media).map_err(|p| (Some(id.clone()), p))?;
        Ok((q, id))
    })
}

/// Options from a `{ "A": text, ... }` map, a list of `"A. text"` strings, a list of plain
/// strings (lettered A, B, ... in order) or a list of `{option_id, label}` objects.
pub(super) fn parse_options(row: &Row<'_>, keys: &[&'static str]) -> Result<Vec<AnswerOption>, RowProblem> {
    let (field, value) = row.get(keys).ok_or(RowProblem::MissingField(keys[0]))?;
    let wrong = || RowProblem::WrongType { field: field.to_string(), expected: "a map of letters to texts or a list of options" };
    let mut options = Vec::new();
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                let label = option_letter(k).ok_or_else(wrong)?;
                options.push(AnswerOption { label, text: value_text(v).ok_or_else(wrong)? });
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let option = match item {
                    Value::String(s) => match split_label(s) {
                        Some((label, text)) => AnswerOption { label, text },
                        None => AnswerOption { label: letter_at(i).ok_or_else(wrong)?, text: s.trim().to_string() },
                    },
                    Value::Object(obj) => {
                        let id = obj.get("option_id").or_else(|| obj.get("label_id")).and_then(Value::as_str);
                        let label = id.and_then(option_letter).ok_or_else(wrong)?;
                        let text = obj.get("label").or_else(|| obj.get("text")).and_then(value_text).unwrap_or_default();
                        AnswerOption { label, text }
                    }
                    _ => return Err(wrong()),
                };
                options.push(option);
            }
        }
        _ => return Err(wrong()),
    }
    if options.is_empty() {
        return Err(RowProblem::NoOptions(format!(" in `{field}`")));
    }
    options.sort_by_key(|o| o.label);
    if options.windows(2).any(|w| w[0].label == w[1].label) {
        return Err(RowProblem::WrongType { field: field.to_string(), expected: "options with distinct letters" });
    }
    Ok(options)
}

pub(super) fn value_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.trim().to_string()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

pub(super) fn letter_at(i: usize) -> Option<char> {
    (i < 26).then(|| (b'A' + i as u8) as char)
}

/// A single upper-case option letter, possibly written `(A)`, `A.` or `A)`.
pub(super) fn option_letter(s: &str) -> Option<char> {
    let t = s.trim().trim_start_matches('(').trim_end_matches(['.', ')', ':']);
    let mut chars = t.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_uppercase() => Some(c),
        _ => None,
    }
}

/// `"A. text"`, `"(A) text"`, `"A) text"`, `"A: text"` → (A, text).
pub(super) fn split_label(s: &str) -> Option<(char, String)> {
    let t = s.trim_start();
    let (inner, rest) = if let Some(r) = t.strip_prefix('(') {
        let mut cs = r.chars();
        let c = cs.next()?;
        (c, cs.as_str().strip_prefix(')')?)
    } else {
        let mut cs = t.chars();
        let c = cs.next()?;
        let rest = cs.as_str();
        let sep = rest.chars().next()?;
        if !matches!(sep, '.' | ')' | ':' | '．' | '、') {
            return None;
        }
        (c, &rest[sep.len_utf8()..])
    };
    if !inner.is_ascii_uppercase() {
        return None;
    }
    Some((inner, rest.trim().to_string()))
}

/// An answer letter (`B`, `B.`, `(B)`, `B. text`) that must be one of the options.
pub(super) fn parse_letter(raw: &str, options: &[AnswerOption]) -> Result<char, RowProblem> {
    let letters = || options.iter().map(|o| o.label.to_string()).collect::<Vec<_>>().join("/");
    let label = option_letter(raw).or_else(|| split_label(raw).map(|(c, _)| c));
    match label {
        Some(c) if options.iter().any(|o| o.label == c) => Ok(c),
        _ => Err(RowProblem::AnswerNotInOptions { answer: raw.to_string(), options: letters() }),
    }
}

pub(super) fn parse_choice(raw: &str, options: &[AnswerOption]) -> Result<Answer, RowProblem> {
    parse_letter(raw, options).map(Answer::Choice)
}

/// A released single-choice answer read as the official scorer reads it: exactly one ASCII
/// letter, in either case, is that letter (whether or not an option has it: the official
/// scorer never refuses one); anything else is kept verbatim ([`Answer::Verbatim`]).
pub(super) fn released_choice(raw: &str) -> Answer {
    let mut chars = raw.chars();
    match (chars.next(), chars.next()) {
        (Some(c), None) if c.is_ascii_alphabetic() => Answer::Choice(c.to_ascii_uppercase()),
        _ => Answer::Verbatim(raw.to_string()),
    }
}

/// Splits UrbanVideo-style text (`Question: ...\nChoices:\nA. ...\nB. ...`) into its stem and
/// options. Options starting lines are preferred; when there are fewer than two, markers
/// inside a line (`... A. x B. y`) are used. Letters must run A, B, C, ... in order; the last
/// complete run wins, so an "A." inside the stem does not start the list.
pub fn split_inline_options(text: &str) -> (String, Vec<AnswerOption>) {
    // Line-based.
    let mut best: Option<(usize, Vec<AnswerOption>)> = None;
    let mut run: Option<(usize, Vec<AnswerOption>)> = None;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        match split_label(line.trim()) {
            Some((c, body)) if c == 'A' => {
                if let Some(r) = run.take().filter(|r| r.1.len() >= 2) {
                    best = Some(r);
                }
                run = Some((start, vec![AnswerOption { label: c, text: body }]));
            }
            Some((c, body)) if run.as_ref().is_some_and(|r| r.1.last().is_some_and(|o| o.label as u8 + 1 == c as u8)) => {
                if let Some(r) = run.as_mut() {
                    r.1.push(AnswerOption { label: c, text: body });
                }
            }
            _ => {
                // A continuation line of the current option.
                let t = line.trim();
                if let Some(last) = run.as_mut().and_then(|r| r.1.last_mut())
                    && !t.is_empty()
                {
                    last.text.push(' ');
                    last.text.push_str(t);
                }
            }
        }
    }
    if let Some(r) = run.filter(|r| r.1.len() >= 2) {
        best = Some(r);
    }
    if let Some((start, options)) = best {
        return (clean_stem(&text[..start]), options);
    }
    // Inline markers: "A." preceded by start, whitespace or '('.
    let bytes = text.as_bytes();
    let marker_at = |pos: usize, c: u8| -> Option<usize> {
        if bytes.get(pos) != Some(&c) {
            return None;
        }
        let before_ok = pos == 0 || bytes[pos - 1].is_ascii_whitespace() || bytes[pos - 1] == b'(';
        let after = bytes.get(pos + 1).copied();
        let after_ok = matches!(after, Some(b'.' | b')' | b':'));
        (before_ok && after_ok).then_some(pos + 2)
    };
    // Every marker of every letter in one pass, so that looking for the next one is a binary
    // search: scanning the text again from each `A.` made long texts quadratic.
    let mut markers: [Vec<(usize, usize)>; 26] = Default::default();
    for (p, &b) in bytes.iter().enumerate() {
        if b.is_ascii_uppercase()
            && let Some(end) = marker_at(p, b)
        {
            markers[(b - b'A') as usize].push((p, end));
        }
    }
    let find = |from: usize, c: u8| {
        let list = markers.get((c.wrapping_sub(b'A')) as usize)?;
        list.get(list.partition_point(|m| m.0 < from)).copied()
    };
    // (start of the run, [(letter, marker start, text start)]).
    type Marks = Vec<(char, usize, usize)>;
    let mut best_inline: Option<(usize, Marks)> = None;
    let mut from = 0;
    while let Some((a_pos, a_end)) = find(from, b'A') {
        let mut marks = vec![('A', a_pos, a_end)];
        let mut c = b'B';
        while let Some((p, e)) = find(marks.last().map(|m| m.2).unwrap_or(0), c) {
            marks.push((c as char, p, e));
            c += 1;
        }
        if marks.len() >= 2 {
            best_inline = Some((a_pos, marks));
        }
        from = a_end;
    }
    match best_inline {
        Some((start, marks)) => {
            let mut options = Vec::with_capacity(marks.len());
            // An option ends where the next marker (or its opening parenthesis) begins.
            let open_at = |p: usize| if p > 0 && bytes[p - 1] == b'(' { p - 1 } else { p };
            for (i, &(c, _, end)) in marks.iter().enumerate() {
                let stop = marks.get(i + 1).map(|m| open_at(m.1)).unwrap_or(text.len()).max(end);
                options.push(AnswerOption { label: c, text: text[end..stop].trim().to_string() });
            }
            (clean_stem(&text[..open_at(start)]), options)
        }
        None => (clean_stem(text), Vec::new()),
    }
}

/// Trims a question stem and drops a trailing `Choices:` / `Options:` heading and a leading
/// `Question:` label.
pub(super) fn clean_stem(s: &str) -> String {
    let mut t = s.trim();
    for heading in ["Choices:", "Options:", "Choices", "Options"] {
        if let Some(stripped) = t.strip_suffix(heading) {
            t = stripped.trim_end();
            break;
        }
    }
    t.strip_prefix("Question:").map(str::trim_start).unwrap_or(t).to_string()
}

/// Intervals as `[[s, e], ...]`, `[{start_sec, end_sec}, ...]` or one `[s, e]`.
pub(super) fn parse_intervals(v: &Value, field: &'static str) -> Result<Vec<Interval>, RowProblem> {
    let wrong = || RowProblem::WrongType { field: field.to_string(), expected: "a list of [start, end] seconds" };
    let items = v.as_array().ok_or_else(wrong)?;
    if items.len() == 2 && items.iter().all(Value::is_number) {
        return one_interval(&items[0], &items[1]).map(|i| vec![i]).ok_or_else(wrong);
    }
    items
        .iter()
        .map(|it| {
            match it {
                Value::Array(pair) if pair.len() == 2 => one_interval(&pair[0], &pair[1]),
                Value::Object(o) => match (o.get("start_sec").or_else(|| o.get("start")), o.get("end_sec").or_else(|| o.get("end"))) {
                    (Some(s), Some(e)) => one_interval(s, e),
                    _ => None,
                },
                _ => None,
            }
            .ok_or_else(wrong)
        })
        .collect()
}

pub(super) fn one_interval(s: &Value, e: &Value) -> Option<Interval> {
    let (start, end) = (s.as_f64()?, e.as_f64()?);
    (start.is_finite() && end.is_finite() && start <= end).then_some(Interval { start, end })
}

/// Seconds from `12.5`, `12.5s`, `01:02.5` (mm:ss) or `1:02:03` (hh:mm:ss).
pub fn parse_timestamp(s: &str) -> Option<f64> {
    let t = s.trim();
    let t = t.strip_suffix('s').map(str::trim_end).unwrap_or(t);
    let parts: Vec<&str> = t.split(':').collect();
    if parts.len() > 3 || parts.iter().any(|p| p.trim().is_empty()) {
        return None;
    }
    let mut secs = 0.0;
    for (i, p) in parts.iter().enumerate() {
        let v: f64 = p.trim().parse().ok()?;
        if !v.is_finite() || v < 0.0 || (i > 0 && v >= 60.0) {
            return None;
        }
        secs = secs * 60.0 + v;
    }
    Some(secs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::RowProblem;

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("12.5"), Some(12.5));
        assert_eq!(parse_timestamp("12.5s"), Some(12.5));
        assert_eq!(parse_timestamp("01:02.5"), Some(62.5));
        assert_eq!(parse_timestamp("1:02:03"), Some(3723.0));
        assert_eq!(parse_timestamp("1:75"), None);
        assert_eq!(parse_timestamp("soon"), None);
        assert_eq!(parse_timestamp("-3"), None);
    }

    #[test]
    fn inline_options_line_and_inline_forms() {
        let text = "Question: You pass point A. Where is the tower?\nChoices:\nA.\tLeft of you.\nB.\tRight\nof you.\nC. Behind.";
        let (stem, opts) = split_inline_options(text);
        assert_eq!(stem, "You pass point A. Where is the tower?");
        let got: Vec<(char, &str)> = opts.iter().map(|o| (o.label, o.text.as_str())).collect();
        assert_eq!(got, vec![('A', "Left of you."), ('B', "Right of you."), ('C', "Behind.")]);

        let (stem, opts) = split_inline_options("Which way? (A) up (B) down (C) left");
        assert_eq!(stem, "Which way?");
        let got: Vec<(char, &str)> = opts.iter().map(|o| (o.label, o.text.as_str())).collect();
        assert_eq!(got, vec![('A', "up"), ('B', "down"), ('C', "left")]);

        let (_, opts) = split_inline_options("Near A. the gate? A. yes B. no");
        assert_eq!(opts.iter().map(|o| o.text.as_str()).collect::<Vec<_>>(), vec!["yes", "no"]);

        assert!(split_inline_options("No options here.").1.is_empty());
    }

    #[test]
    fn choices_and_labels() {
        let opts: Vec<AnswerOption> = "ABCD".chars().map(|c| AnswerOption { label: c, text: c.to_string() }).collect();
        assert_eq!(parse_choice("B", &opts), Ok(Answer::Choice('B')));
        assert_eq!(parse_choice("(C)", &opts), Ok(Answer::Choice('C')));
        assert_eq!(parse_choice("D. descend", &opts), Ok(Answer::Choice('D')));
        assert!(matches!(parse_choice("E", &opts), Err(RowProblem::AnswerNotInOptions { .. })));
        assert!(matches!(parse_choice("Both", &opts), Err(RowProblem::AnswerNotInOptions { .. })));
    }
}
