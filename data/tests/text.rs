//! Chat template, label masks and media expansion, checked against a tokenizer trained here.

use motionvl_data::text::{
    EncodedSample, IGNORE_INDEX, IM_END, IMAGE_PAD, LabelMask, MediaKind, Message, QwenTokenizer, Role, TemplateOptions, TextError, VIDEO_PAD,
    VISION_END, VISION_START, pad_count, render_chat, train_tokenizer,
};

fn tokenizer() -> QwenTokenizer {
    let corpus = [
        "You are a helpful assistant.",
        "What is the drone doing in this video? Answer with the option's letter.",
        "The drone flies forward over the road, then turns left at the crossing.",
        "A. fly forward\nB. fly backward\nC. ascend\nD. descend",
        "Which landmark appears first? The red building or the bridge?",
        "Describe the motion of the camera in detail.",
    ];
    train_tokenizer(corpus, 500).expect("training a small tokenizer")
}

fn opts() -> TemplateOptions {
    TemplateOptions { max_seq_len: None, ..TemplateOptions::default() }
}

const VGRID: [usize; 3] = [2, 4, 6]; // 12 video pads
const IGRID: [usize; 3] = [1, 2, 4]; // 2 image pads

fn mcq() -> Vec<Message> {
    vec![Message::user("<video>\nWhat is the drone doing?\nA. fly forward\nB. ascend"), Message::assistant("B. ascend")]
}

#[test]
fn render_matches_qwen_template_text() {
    let s = render_chat("s1", &mcq(), &[], &[[1, 2, 2]], &opts(), false).expect("render");
    let expected = format!(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n\
         {VISION_START}{VIDEO_PAD}{VISION_END}\nWhat is the drone doing?\nA. fly forward\nB. ascend<|im_end|>\n\
         <|im_start|>assistant\nB. ascend<|im_end|>\n"
    );
    assert_eq!(s, expected);
}

#[test]
fn ids_equal_encoding_of_the_rendered_string() {
    let t = tokenizer();
    let msgs = vec![
        Message::system("Watch closely."),
        Message::user("First clip <video> then a photo <image>. Which landmark appears first?"),
        Message::assistant("The red building."),
        Message::user("And the camera?"),
        Message::assistant("It flies forward, then turns left."),
    ];
    let enc = t.encode_chat("s2", &msgs, &[IGRID], &[VGRID], &opts()).expect("encode");
    let rendered = render_chat("s2", &msgs, &[IGRID], &[VGRID], &opts(), false).expect("render");
    let whole = t.inner().encode(rendered.as_str(), false).expect("encode string");
    assert_eq!(enc.input_ids, whole.get_ids());
    assert_eq!(enc.labels.len(), enc.input_ids.len());
    assert_eq!(enc.mm_token_type_ids.len(), enc.input_ids.len());
    assert_eq!(t.decode(&enc.input_ids, false).expect("decode"), rendered);
}

/// The trained runs of an encoding, decoded.
fn trained_runs(t: &QwenTokenizer, enc: &EncodedSample) -> Vec<String> {
    let mut runs: Vec<Vec<u32>> = Vec::new();
    let mut prev = false;
    for (&id, &l) in enc.input_ids.iter().zip(&enc.labels) {
        let trained = l != IGNORE_INDEX;
        if trained {
            assert_eq!(l, i64::from(id), "a trained label equals its input id");
            if !prev {
                runs.push(Vec::new());
            }
            runs.last_mut().expect("run").push(id);
        }
        prev = trained;
    }
    runs.iter().map(|r| t.decode(r, false).expect("decode")).collect()
}

#[test]
fn answers_their_im_end_and_its_newline_are_trained_or_without_the_newline() {
    let t = tokenizer();
    let msgs = vec![
        Message::user("<video>What is the drone doing?"),
        Message::assistant("It ascends."),
        Message::user("And then?"),
        Message::assistant("It turns left."),
    ];
    let enc = t.encode_chat("s3", &msgs, &[], &[VGRID], &opts()).expect("encode");
    assert_eq!(trained_runs(&t, &enc), vec![format!("It ascends.{IM_END}\n"), format!("It turns left.{IM_END}\n")]);
    let older = TemplateOptions { label_mask: LabelMask::AnswerImEnd, ..opts() };
    let enc = t.encode_chat("s3", &msgs, &[], &[VGRID], &older).expect("encode");
    assert_eq!(trained_runs(&t, &enc), vec![format!("It ascends.{IM_END}"), format!("It turns left.{IM_END}")]);
    let last = enc.labels.len() - 1;
    assert_eq!(enc.labels[last], IGNORE_INDEX);
    assert_eq!(t.decode(&enc.input_ids[last..], false).expect("decode"), "\n");
}

#[test]
fn media_blocks_follow_tags_in_order_with_types_and_spans() {
    let t = tokenizer();
    let msgs = vec![Message::user("<video> a <image> b <video> c"), Message::assistant("ok")];
    let v2 = [4, 2, 2]; // 4 pads
    let enc = t.encode_chat("s4", &msgs, &[IGRID], &[VGRID, v2], &opts()).expect("encode");
    let kinds: Vec<(MediaKind, usize, usize)> = enc.media_spans.iter().map(|s| (s.kind, s.index, s.len)).collect();
    assert_eq!(kinds, vec![(MediaKind::Video, 0, 12), (MediaKind::Image, 0, 2), (MediaKind::Video, 1, 4)]);
    let sp = t.special();
    for span in &enc.media_spans {
        assert_eq!(enc.input_ids[span.start - 1], sp.vision_start);
        assert_eq!(enc.input_ids[span.start + span.len], sp.vision_end);
        let pad = sp.pad(span.kind);
        assert!(enc.input_ids[span.start..span.start + span.len].iter().all(|&i| i == pad));
        assert!(enc.mm_token_type_ids[span.start..span.start + span.len].iter().all(|&ty| ty == span.kind.token_type()));
        assert!(enc.labels[span.start..span.start + span.len].iter().all(|&l| l == IGNORE_INDEX));
    }
    let videos = enc.mm_token_type_ids.iter().filter(|&&x| x == 2).count();
    let images = enc.mm_token_type_ids.iter().filter(|&&x| x == 1).count();
    assert_eq!(videos, pad_count(VGRID, 2) + pad_count(v2, 2));
    assert_eq!(images, pad_count(IGRID, 2));
    assert_eq!(enc.video_grids, vec![VGRID, v2]);
    assert_eq!(enc.image_grids, vec![IGRID]);
    // Exactly the vision pads carry a non-zero type.
    let pads = enc.input_ids.iter().filter(|&&i| i == sp.video_pad || i == sp.image_pad).count();
    assert_eq!(pads, videos + images);
}

#[test]
fn tag_and_media_count_mismatch_names_both_counts_and_the_sample() {
    let t = tokenizer();
    let msgs = vec![Message::user("<video> and <video>"), Message::assistant("x")];
    let err = t.encode_chat("clip-042", &msgs, &[], &[VGRID], &opts()).expect_err("mismatch");
    assert!(matches!(err, TextError::MediaCountMismatch { kind: MediaKind::Video, tags: 2, media: 1, .. }));
    let text = err.to_string();
    assert!(text.contains("clip-042") && text.contains('2') && text.contains('1'), "{text}");
}

#[test]
fn default_system_prompt_only_when_missing() {
    let with = vec![Message::system("Be brief."), Message::user("Hi"), Message::assistant("Hello")];
    let s = render_chat("s", &with, &[], &[], &opts(), false).expect("render");
    assert!(s.starts_with("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi"));
    assert!(!s.contains("helpful assistant"));
    let without = &with[1..];
    let s = render_chat("s", without, &[], &[], &opts(), false).expect("render");
    assert!(s.starts_with("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"));
}

#[test]
fn prompt_ends_with_assistant_header_and_matches_chat_prefix() {
    let t = tokenizer();
    let full = mcq();
    let prompt = t.encode_prompt("p", &full[..1], &[], &[VGRID], &opts()).expect("prompt");
    let s = render_chat("p", &full[..1], &[], &[VGRID], &opts(), true).expect("render");
    assert!(s.ends_with("<|im_start|>assistant\n"));
    assert_eq!(t.decode(&prompt.input_ids, false).expect("decode"), s);
    // The training sequence starts with exactly the prompt.
    let enc = t.encode_chat("p", &full, &[], &[VGRID], &opts()).expect("encode");
    assert_eq!(&enc.input_ids[..prompt.input_ids.len()], prompt.input_ids.as_slice());
    assert_eq!(prompt.mm_token_type_ids.iter().filter(|&&x| x == 2).count(), 12);
    // A prompt may not end with an answer, a training sample must.
    assert!(matches!(t.encode_prompt("p", &full, &[], &[VGRID], &opts()), Err(TextError::Incomplete { .. })));
    assert!(matches!(t.encode_chat("p", &full[..1], &[], &[VGRID], &opts()), Err(TextError::Incomplete { .. })));
}

#[test]
fn too_long_sample_is_skipped_never_cut_in_a_vision_block() {
    let t = tokenizer();
    let big = [4, 8, 8]; // 64 pads
    let o = TemplateOptions { max_seq_len: Some(60), ..TemplateOptions::default() };
    let err = t.encode_chat("long-1", &mcq(), &[], &[big], &o).expect_err("too long");
    assert!(err.is_skip());
    match err {
        TextError::TooLong { sample_id, len, max_seq_len } => {
            assert_eq!(sample_id, "long-1");
            assert!(len > 64);
            assert_eq!(max_seq_len, 60);
        }
        other => panic!("unexpected {other}"),
    }
    // Other errors are not skips.
    let bad = t.encode_chat("x", &mcq(), &[], &[], &o).expect_err("mismatch");
    assert!(!bad.is_skip());
}

#[test]
fn truncation_drops_trailing_text_turns_only() {
    let t = tokenizer();
    let msgs = vec![
        Message::user("<video>What is the drone doing?"),
        Message::assistant("It ascends."),
        Message::user("Describe the motion of the camera in detail."),
        Message::assistant("The drone flies forward over the road, then turns left at the crossing."),
    ];
    let full = t.encode_chat("t", &msgs, &[], &[VGRID], &opts()).expect("full");
    let first = t.encode_chat("t", &msgs[..2], &[], &[VGRID], &opts()).expect("first turn");
    let o = TemplateOptions { max_seq_len: Some(full.len() - 1), ..TemplateOptions::default() };
    let cut = t.encode_chat("t", &msgs, &[], &[VGRID], &o).expect("truncated");
    assert_eq!(cut.dropped_turns, 1);
    assert_eq!(cut.input_ids, first.input_ids);
    assert_eq!(cut.labels, first.labels);
    assert_eq!(cut.media_spans, first.media_spans);
    // Exactly at the limit nothing is dropped.
    let o = TemplateOptions { max_seq_len: Some(full.len()), ..TemplateOptions::default() };
    assert_eq!(t.encode_chat("t", &msgs, &[], &[VGRID], &o).expect("fits").dropped_turns, 0);
    // A later turn holding media cannot be dropped: the whole sample is skipped instead.
    let mut late = msgs.clone();
    late[0] = Message::user("What is the drone doing?");
    late[2] = Message::user("<video>Describe the motion of the camera in detail.");
    let o = TemplateOptions { max_seq_len: Some(full.len() - 1), ..TemplateOptions::default() };
    assert!(matches!(t.encode_chat("t", &late, &[], &[VGRID], &o), Err(TextError::TooLong { .. })));
}

#[test]
fn malformed_conversations_are_errors() {
    let t = tokenizer();
    let o = opts();
    let media_in_answer = vec![Message::user("q"), Message::assistant("see <image>")];
    assert!(matches!(
        t.encode_chat("a", &media_in_answer, &[IGRID], &[], &o),
        Err(TextError::MediaOutsideUserTurn { message_index: 1, role: Role::Assistant, kind: MediaKind::Image, .. })
    ));
    let media_in_system = vec![Message::system("<video>"), Message::user("q"), Message::assistant("a")];
    assert!(matches!(
        t.encode_chat("a2", &media_in_system, &[], &[VGRID], &o),
        Err(TextError::MediaOutsideUserTurn { message_index: 0, role: Role::System, kind: MediaKind::Video, .. })
    ));
    let order = vec![Message::user("q"), Message::user("q2"), Message::assistant("a")];
    assert!(matches!(t.encode_chat("b", &order, &[], &[], &o), Err(TextError::RoleOrder { index: 1, .. })));
    let reserved = vec![Message::user(format!("sneaky {IMAGE_PAD}")), Message::assistant("a")];
    assert!(matches!(t.encode_chat("c", &reserved, &[], &[], &o), Err(TextError::ReservedTokenInText { token: IMAGE_PAD, .. })));
    let odd_grid = [1, 3, 4];
    assert!(matches!(t.encode_chat("d", &mcq(), &[], &[odd_grid], &o), Err(TextError::BadGrid { index: 0, kind: MediaKind::Video, .. })));
    assert!(matches!(t.encode_chat("e", &[], &[], &[], &o), Err(TextError::Incomplete { .. })));
}

#[test]
fn tokenizer_saves_and_loads_from_a_model_dir() {
    let t = tokenizer();
    let dir = std::env::temp_dir().join(format!("motionvl-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    t.save(dir.join("tokenizer.json")).expect("save");
    let loaded = QwenTokenizer::from_model_dir(&dir).expect("load");
    assert_eq!(loaded.special(), t.special());
    let text = "The drone flies forward.";
    assert_eq!(loaded.encode_text(text).expect("ids"), t.encode_text(text).expect("ids"));
    assert_eq!(loaded.decode(&loaded.encode_text(text).expect("ids"), false).expect("decode"), text);
    let missing = QwenTokenizer::from_model_dir(dir.join("nope")).expect_err("no tokenizer.json");
    assert!(matches!(missing, TextError::Load { .. }));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_tokenizer_without_qwen_tokens_is_refused() {
    let plain = tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default());
    let err = QwenTokenizer::from_tokenizer(plain).expect_err("no specials");
    assert!(matches!(err, TextError::MissingSpecialToken { token: "<|endoftext|>", .. }));
}
