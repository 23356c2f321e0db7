#![no_main]
//! PEFT `adapter_config.json`, beside a fixture's adapter weights.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::AdapterConfig, data));
