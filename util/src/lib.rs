//! The pieces every motionvl crate shares and none owns: atomic file writes, seeded
//! randomness, content digests, path confinement, the stop flag, progress bars, run-directory
//! locks, names serialised as their strings ([`serde_as_string!`]), and
//! [`pixels::PixelInput`], the preprocessed pixels `data` hands to `models`.
//!
//! It sits below every other crate and needs no video decoder, no dataset reader and no
//! Candle, so `models` can depend on it alone.

pub mod confine;
pub mod digest;
pub mod family;
pub mod files;
mod names;
pub mod pixels;
pub mod progress;
pub mod rng;
pub mod run_dir;
pub mod stop;
pub mod test_support;
