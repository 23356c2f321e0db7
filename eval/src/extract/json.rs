//! Lenient JSON: the `answer` object models write, read despite the usual slips.

use std::sync::LazyLock;

use regex::Regex;

use serde_json::{Map, Value};

use super::re;

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

    #[test]
    fn repair_handles_python_style_dicts() {
        let map = parse_json_lenient("{'answer_option_ids': ['A', 'C'], 'ok': True, visible_count: 3,}");
        let map = map.unwrap_or_default();
        assert_eq!(map.get("answer_option_ids"), Some(&serde_json::json!(["A", "C"])));
        assert_eq!(map.get("ok"), Some(&Value::Bool(true)));
        assert_eq!(map.get("visible_count"), Some(&serde_json::json!(3)));
    }
}
