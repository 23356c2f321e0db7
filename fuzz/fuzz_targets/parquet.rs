#![no_main]
//! Parquet benchmark files (footer, pages, rows).

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::Parquet, data));
