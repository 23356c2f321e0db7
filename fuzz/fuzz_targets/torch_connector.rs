#![no_main]
//! A SIS-Motion connector as torch saves it (`.pt`).

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::TorchConnector, data));
