#![no_main]
//! PyTorch `.pth` zip pickles (a MOFNet checkpoint).

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::PthCheckpoint, data));
