//! Evaluation of motionvl checkpoints.
