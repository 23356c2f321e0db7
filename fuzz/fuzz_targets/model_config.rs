#![no_main]
//! Qwen2.5-VL `config.json`.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::ModelConfig, data));
