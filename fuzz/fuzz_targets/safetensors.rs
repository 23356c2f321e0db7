#![no_main]
//! Safetensors files: header and every tensor.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::Safetensors, data));
