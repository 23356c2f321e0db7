//! Answer extraction on outputs of the kind models really produce: terse letters, labelled
//! options, chatty explanations, UrbanVideo-Bench's "Option: [C]" format, reasoning blocks,
//! JSON, refusals and hedges between two options.

use motionvl_data::manifest::AnswerOption;
use motionvl_eval::extract::{
    Extracted, Rule, extract_choice, extract_choices, extract_number, extract_timestamp, extract_yes_no, parse_json_lenient,
};

fn options(texts: &[&str]) -> Vec<AnswerOption> {
    AnswerOption::lettered(texts)
}

/// SIS-Bench Action Recognition-style options.
fn motion() -> Vec<AnswerOption> {
    options(&["move forward", "move backward", "ascend", "descend"])
}

#[test]
fn option_letters_from_real_looking_outputs() {
    let o = motion();
    // (output, expected letter or None for unanswered, rule that must decide)
    let cases: &[(&str, Option<char>, Rule)] = &[
        ("B", Some('B'), Rule::Bare),
        ("B.", Some('B'), Rule::Bare),
        ("(B)", Some('B'), Rule::Bare),
        ("b", Some('B'), Rule::Bare),
        ("[C].", Some('C'), Rule::Bare),
        ("The answer is (B).", Some('B'), Rule::Declared),
        ("the answer is b.", Some('B'), Rule::Declared),
        ("Answer: D", Some('D'), Rule::Declared),
        ("Option: [C]; Reason: [The camera rises steadily above the rooftops.]", Some('C'), Rule::Declared),
        ("Option B", Some('B'), Rule::Declared),
        ("The correct option is C) ascend", Some('C'), Rule::Declared),
        ("Final answer: (A) move forward", Some('A'), Rule::Declared),
        ("The answer is: **B** (move backward)", Some('B'), Rule::Declared),
        ("Based on the video, the drone is moving backward, away from the building. So the answer is B.", Some('B'), Rule::Declared),
        ("I think it's D.", Some('D'), Rule::Declared),
        ("It is likely C, since the ground gets farther away.", Some('C'), Rule::Declared),
        ("I would choose A.", Some('A'), Rule::Declared),
        ("答案是C", Some('C'), Rule::Declared),
        ("Answer: I think B", Some('B'), Rule::Trailing),
        ("Answer: B) move backward. Option A is wrong because the drone recedes.", Some('B'), Rule::Declared),
        ("Option C is not correct; option D is.", Some('D'), Rule::Declared),
        ("B. move backward", Some('B'), Rule::Leading),
        ("**C. ascend**", Some('C'), Rule::Leading),
        ("A: move forward", Some('A'), Rule::Leading),
        ("B move backward", Some('B'), Rule::Leading),
        ("C is correct because the horizon drops.", Some('C'), Rule::Leading),
        ("B, because the scene recedes from the camera.", Some('B'), Rule::Leading),
        ("B\nThe drone flies backwards while facing the tower.", Some('B'), Rule::Leading),
        ("The drone is moving backward relative to the tower. B", Some('B'), Rule::Trailing),
        ("move backward", Some('B'), Rule::OptionText),
        ("Move Backward.", Some('B'), Rule::OptionText),
        ("The drone appears to descend steadily toward the road.", Some('D'), Rule::OptionText),
        ("<think>The buildings shrink, so maybe A? No, the roofs grow.</think>\nB", Some('B'), Rule::Bare),
        ("```json\n{\"answer\": \"B\"}\n```", Some('B'), Rule::Json),
        ("\\boxed{C}", Some('C'), Rule::Bare),
        ("<answer>D</answer>", Some('D'), Rule::Bare),
        // Unanswered: refusals, hedges, impossible letters, articles that are not letters.
        ("I'm sorry, but I can't determine the drone's motion from these frames.", None, Rule::None),
        ("None of the options.", None, Rule::None),
        ("", None, Rule::None),
        ("A or B", None, Rule::Ambiguous),
        ("A and C", None, Rule::Ambiguous),
        ("The answer is A or B.", None, Rule::Ambiguous),
        ("Between (A) and (C), the altitude change suggests (C).", None, Rule::Ambiguous),
        ("move forward or move backward", None, Rule::Ambiguous),
        ("Answer: E", None, Rule::Invalid),
        ("A drone flies over the river and then climbs.", None, Rule::None),
        ("<think>Comparing the first and last frames, A looks", None, Rule::None),
    ];
    assert!(cases.len() >= 30);
    for (output, want, rule) in cases {
        let got = extract_choice(output, &o);
        assert_eq!(got.answer, want.map(Extracted::Choice), "output {output:?} (rule {:?})", got.rule);
        assert_eq!(got.rule, *rule, "rule for {output:?}");
    }
}

#[test]
fn urbanvideo_letters_beyond_d() {
    let o = options(&["Fly forward", "Turn left", "Turn right", "Ascend", "Descend", "Stop", "Fly backward"]);
    assert_eq!(extract_choice("Option: [G]; Reason: [the target is behind]", &o).answer, Some(Extracted::Choice('G')));
    assert_eq!(extract_choice("E. Descend", &o).answer, Some(Extracted::Choice('E')));
    assert_eq!(extract_choice("turn right", &o).answer, Some(Extracted::Choice('C')));
    // "H" is not among A–G: the output names an impossible option.
    assert_eq!(extract_choice("H", &o).rule, Rule::Invalid);
}

#[test]
fn several_letters_for_multi_select() {
    let o = options(&["approach", "orbit", "depart", "rise", "map"]);
    let cases: &[(&str, Option<&[char]>)] = &[
        ("A, C", Some(&['A', 'C'])),
        ("[A, C]", Some(&['A', 'C'])),
        ("C and A", Some(&['A', 'C'])),
        ("The answers are: B, D", Some(&['B', 'D'])),
        ("D", Some(&['D'])),
        ("The drone approaches and then departs.", None),
        ("The drone made an approach and then an orbit.", Some(&['A', 'B'])),
        ("Z, Q", None),
    ];
    for (output, want) in cases {
        let got = extract_choices(output, &o);
        assert_eq!(got.answer, want.map(|w| Extracted::Choices(w.to_vec())), "output {output:?}");
    }
}

#[test]
fn yes_and_no() {
    let cases: &[(&str, Option<bool>)] = &[
        ("Yes.", Some(true)),
        ("No, the target is hidden behind the tower.", Some(false)),
        ("The target is visible in the satellite view, yes.", Some(true)),
        ("Answer: no", Some(false)),
        ("TRUE", Some(true)),
        ("{\"answer\": false}", Some(false)),
        ("It is not clear from the footage.", None),
        ("The region is reachable; yes and no depend on the bridge.", None),
    ];
    for (output, want) in cases {
        assert_eq!(extract_yes_no(output).answer, want.map(Extracted::YesNo), "output {output:?}");
    }
}

#[test]
fn numbers() {
    let cases: &[(&str, Option<f64>)] = &[
        ("3", Some(3.0)),
        ("There are three zones.", Some(3.0)),
        ("I count 12 vehicles in total.", Some(12.0)),
        ("The answer is 4.", Some(4.0)),
        ("3 vehicles (2 cars and 1 truck)", Some(3.0)),
        ("Roughly 1,200 m.", Some(1200.0)),
        ("zero", Some(0.0)),
        ("twenty-one", Some(21.0)),
        ("Count: 7", Some(7.0)),
        ("between 2 and 4", None),
        ("I cannot count them.", None),
    ];
    for (output, want) in cases {
        assert_eq!(extract_number(output).answer, want.map(Extracted::Number), "output {output:?}");
    }
}

#[test]
fn timestamps() {
    let cases: &[(&str, Option<f64>)] = &[
        ("00:12", Some(12.0)),
        ("At 12.5 seconds.", Some(12.5)),
        ("1:02.5", Some(62.5)),
        ("The event happens at around 1 min 5 s.", Some(65.0)),
        ("15", Some(15.0)),
        ("The truck enters the zone 8 s into the clip.", Some(8.0)),
        ("between 10s and 12s", None),
        ("Not visible.", None),
    ];
    for (output, want) in cases {
        assert_eq!(extract_timestamp(output).answer, want.map(Extracted::Timestamp), "output {output:?}");
    }
}

#[test]
fn lenient_json_blocks() {
    let text = "Here is my answer:\n```json\n{\"answers\": [{\"option_id\": \"A\", \"intervals_sec\": [[0.0, 1.5]]},]}\n```";
    let obj = parse_json_lenient(text).expect("fenced JSON with a trailing comma");
    assert!(obj.contains_key("answers"));
    let obj = parse_json_lenient("Result -> {visible_count: 2, 'visible_intervals_sec': [[0, 9.1], [17.7, 26.8]]} done")
        .expect("unquoted keys and single quotes");
    assert_eq!(obj.get("visible_count"), Some(&serde_json::json!(2)));
    assert!(parse_json_lenient("no braces here").is_none());
}

/// Garbage from an untrained model (multi-byte characters, stray markup, lone brackets) must
/// never make an extractor panic.
#[test]
fn extractors_survive_arbitrary_text() {
    let pieces = [
        "A",
        "b",
        "(",
        ")",
        "[",
        "]",
        "{",
        "}",
        "\"",
        "'",
        ":",
        ".",
        ",",
        " ",
        "\n",
        "or",
        "and",
        "option",
        "answer is",
        "é",
        "中",
        "—",
        "²",
        "😀",
        "<think>",
        "</think>",
        "<answer>",
        "\\boxed{",
        "```json",
        "12",
        "3.5",
        "00:1",
        "s",
        "yes",
        "no",
        "seven",
        "-",
        "**",
        "C.",
        "(D)",
    ];
    let o = motion();
    // A fixed linear congruential sequence: the same strings on every run.
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..2000 {
        let mut text = String::new();
        let len = (state >> 60) as usize + 1;
        for _ in 0..len {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            text.push_str(pieces[(state >> 33) as usize % pieces.len()]);
        }
        let _ = extract_choice(&text, &o);
        let _ = extract_choices(&text, &o);
        let _ = extract_yes_no(&text);
        let _ = extract_number(&text);
        let _ = extract_timestamp(&text);
        let _ = parse_json_lenient(&text);
    }
}
