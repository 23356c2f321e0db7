#![no_main]
//! Evaluation run configs (TOML).

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::EvalConfig, data));
