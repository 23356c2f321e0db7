#![no_main]
//! A checkpoint's `motionvl_state.json`; what reads is saved back and reads the same.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::ResumeState, data));
