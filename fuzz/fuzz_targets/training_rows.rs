#![no_main]
//! Training-row files in every format the training reader accepts, with and without `skip_bad`.

use motionvl_tests::fuzz_readers::{Target, fuzz};

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz(Target::TrainingRows, data));
