#![no_main]
//! Benchmark manifests, read as each benchmark's reader reads them.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::BenchmarkManifests, data));
