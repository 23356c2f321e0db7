#![no_main]
//! DCCS `valid_instances.json`; what reads is written back and reads the same.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::DccsInstances, data));
