//! Greedy decoding with Hugging Face's repetition penalty (what the official evaluator's
//! `model.generate` applies from the base model's generation_config.json) against transformers
//! 4.57.1 itself: `tests/fixtures/repetition_penalty/<dump>.safetensors`, made by
//! tools/fixtures/repetition_penalty.py on every Qwen2.5-VL dump, one question at a time. motionvl
//! decodes the dump's video prompt alone and its two-row left-padded batch together; both must
//! give transformers' ids for every penalty, and a penalty must change some of them.

use motionvl_models::qwen25vl::{GenerateOptions, RepetitionPenalty};
use motionvl_tests::fixtures::{Tensors, fixtures_root};
use motionvl_tests::qwen_dump::QwenDump;

const PENALTIES: [&str; 3] = ["1.05", "1.5", "4.0"];

#[test]
fn penalised_greedy_ids_equal_transformers_alone_and_in_a_padded_batch() {
    let mut changed = 0;
    for fx in QwenDump::all() {
        let name = fx.dump.dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let reference = Tensors::load(&fixtures_root().join(format!("repetition_penalty/{name}.safetensors")));
        let model = fx.model();
        let options = GenerateOptions { max_new_tokens: 8, stop_ids: vec![], keep_logits: false };
        for (source, inputs, rows) in
            [("prompt_", fx.video_inputs(), vec!["single"]), ("batch.prompt_", fx.batch_inputs(), vec!["batch.row0", "batch.row1"])]
        {
            let batch = fx.prompt(source);
            let features = model.encode_vision(&inputs).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
            let embeds = model.embed(&batch, &features).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
            let positions = model.positions(&batch, &inputs).unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
            // Each row's own prompt without its padding, as a batch of one holds it.
            let prompt_ids: Vec<Vec<u32>> =
                batch.ids.iter().zip(&batch.mask).map(|(ids, mask)| ids.iter().zip(mask).filter(|(_, m)| **m).map(|(id, _)| *id).collect()).collect();
            for p in PENALTIES {
                let penalty = RepetitionPenalty { penalty: p.parse().unwrap_or(1.0), prompt_ids: prompt_ids.clone() };
                let out = model
                    .generate_penalised(&embeds, &batch.mask, &positions, &options, Some(&penalty))
                    .unwrap_or_else(|e| panic!("{}: {e}", fx.dump.label));
                for (b, row) in rows.iter().enumerate() {
                    let want: Vec<u32> = reference.i64_flat(&format!("penalty_{p}.{row}")).into_iter().map(|t| t as u32).collect();
                    assert_eq!(out.tokens[b], want, "{}: penalty {p}, {row}", fx.dump.label);
                    changed +=
                        usize::from(row == &"single" && want != reference.i64_flat("plain.single").into_iter().map(|t| t as u32).collect::<Vec<_>>());
                }
            }
        }
    }
    assert!(changed > 0, "no penalty changed a single prompt's ids: the fixture would not test the penalty");
}
