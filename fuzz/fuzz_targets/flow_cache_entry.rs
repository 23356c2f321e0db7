#![no_main]
//! Flow-cache entries; the header check agrees with the full read.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::FlowCacheEntry, data));
