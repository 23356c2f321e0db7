#![no_main]
//! XYZ text point clouds; what reads is written back as PLY and reads the same.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::XyzCloud, data));
