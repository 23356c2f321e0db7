//! Optical flow for motionvl.
