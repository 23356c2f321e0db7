#![no_main]
//! Inline option splitting and answer extraction from model output.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::AnswerExtraction, data));
