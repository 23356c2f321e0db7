//! The chat template against transformers: every dump under `tests/fixtures/chat_template/`
//! (made by tools/fixtures/chat_template.py with `apply_chat_template` and Qwen2.5-VL's
//! template) must give the same ids and the same label masks, under the offsets rule and the
//! official SIS-Motion loader's rule on ids alike.

use motionvl_data::text::{LabelMask, Message, QwenTokenizer, TemplateOptions};
use motionvl_tests::fixtures::{dumps, fixtures_root};

#[test]
fn ids_and_label_masks_equal_apply_chat_template_on_every_dump() {
    let tokenizer = QwenTokenizer::from_file(fixtures_root().join("chat_template/tokenizer.json")).expect("the dumps' tokenizer");
    for dump in dumps("chat_template") {
        let (c, e) = (dump.json("conversation.json"), dump.json("expected.json"));
        let messages: Vec<Message> = dump.field("conversation.json", &c, "messages");
        let images: Vec<[usize; 3]> = dump.field("conversation.json", &c, "image_grids");
        let videos: Vec<[usize; 3]> = dump.field("conversation.json", &c, "video_grids");
        let merge_size: usize = dump.field("conversation.json", &c, "merge_size");
        let ids: Vec<u32> = dump.field("expected.json", &e, "input_ids");
        let qwen: Vec<i64> = dump.field("expected.json", &e, "labels");
        let answer_im_end: Vec<i64> = dump.field("expected.json", &e, "labels_answer_im_end");
        let name = &dump.label;
        // The official loader's id rule gives Qwen's offsets rule's labels on every dump, the
        // answers that open with newlines or spaces included.
        for (mask, labels) in [(LabelMask::Qwen, qwen.clone()), (LabelMask::Official, qwen), (LabelMask::AnswerImEnd, answer_im_end)] {
            let opts = TemplateOptions { max_seq_len: None, merge_size, label_mask: mask, ..TemplateOptions::default() };
            let got = tokenizer.encode_chat(name, &messages, &images, &videos, &opts).unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(got.input_ids, ids, "{name}: ids");
            assert_eq!(got.labels, labels, "{name}: labels under {mask:?}");
        }
        let opts = TemplateOptions { max_seq_len: None, merge_size, ..TemplateOptions::default() };
        let prompt =
            tokenizer.encode_prompt(name, &messages[..messages.len() - 1], &images, &videos, &opts).unwrap_or_else(|err| panic!("{name}: {err}"));
        let prompt_ids: Vec<u32> = dump.field("expected.json", &e, "prompt_ids");
        assert_eq!(prompt.input_ids, prompt_ids, "{name}: generation prompt");
    }
}
