//! The chat template against transformers: every dump under `tests/fixtures/chat_template/`
//! (made by tools/fixtures/chat_template.py with `apply_chat_template` and Qwen2.5-VL's
//! template) must give the same ids and the same label masks.

use std::path::Path;

use motionvl_data::text::{LabelMask, Message, QwenTokenizer, TemplateOptions};
use motionvl_tests::{fixture_dirs, fixture_root};
use serde_json::Value;

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `json[key]` as `T`; a missing or mistyped key names the file.
macro_rules! field {
    ($json:expr, $key:literal, $path:expr) => {{
        let value = $json.get($key).unwrap_or_else(|| panic!("{} has no `{}`", $path.display(), $key));
        serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("{}: `{}`: {e}", $path.display(), $key))
    }};
}

#[test]
fn ids_and_label_masks_equal_apply_chat_template_on_every_dump() {
    let tokenizer = QwenTokenizer::from_file(fixture_root("chat_template").join("tokenizer.json")).expect("the dumps' tokenizer");
    for dir in fixture_dirs("chat_template") {
        let (conversation, expected) = (dir.join("conversation.json"), dir.join("expected.json"));
        let (c, e) = (read_json(&conversation), read_json(&expected));
        let messages: Vec<Message> = field!(c, "messages", conversation);
        let images: Vec<[usize; 3]> = field!(c, "image_grids", conversation);
        let videos: Vec<[usize; 3]> = field!(c, "video_grids", conversation);
        let merge_size: usize = field!(c, "merge_size", conversation);
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let ids: Vec<u32> = field!(e, "input_ids", expected);
        let qwen: Vec<i64> = field!(e, "labels", expected);
        let answer_im_end: Vec<i64> = field!(e, "labels_answer_im_end", expected);
        for (mask, labels) in [(LabelMask::Qwen, qwen), (LabelMask::AnswerImEnd, answer_im_end)] {
            let opts = TemplateOptions { max_seq_len: None, merge_size, label_mask: mask, ..TemplateOptions::default() };
            let got = tokenizer.encode_chat(&name, &messages, &images, &videos, &opts).unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(got.input_ids, ids, "{name}: ids");
            assert_eq!(got.labels, labels, "{name}: labels under {mask:?}");
        }
        let opts = TemplateOptions { max_seq_len: None, merge_size, ..TemplateOptions::default() };
        let prompt = tokenizer.encode_prompt(&name, &messages[..messages.len() - 1], &images, &videos, &opts).unwrap_or_else(|err| panic!("{name}: {err}"));
        let prompt_ids: Vec<u32> = field!(e, "prompt_ids", expected);
        assert_eq!(prompt.input_ids, prompt_ids, "{name}: generation prompt");
    }
}
