#![no_main]
//! PLY point clouds (binary and ASCII); what reads is written back and reads the same.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::PlyCloud, data));
