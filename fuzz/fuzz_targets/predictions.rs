#![no_main]
//! Predictions files: read, and resumed.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::Predictions, data));
