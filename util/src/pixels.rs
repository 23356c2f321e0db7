//! The pixels of one preprocessed image or video: what `data` hands to `models`, so that the
//! model crate reads the loader's output without depending on the decoder that made it.

use ndarray::Array2;

/// Pixels of one image or video, ready for the vision tower.
#[derive(Debug, Clone, PartialEq)]
pub struct PixelInput {
    /// `[n_patches, 3·temporal_patch·patch²]`, in the merge-block order the tower expects.
    pub pixel_values: Array2<f32>,
    /// `[t, h, w]` in patches.
    pub grid_thw: [usize; 3],
    /// Seconds per temporal grid slot (`second_per_grid_ts`), from the frame plan's *actual*
    /// rate; `None` for images.
    pub second_per_grid: Option<f64>,
    /// Per temporal grid step, the time Qwen3-VL's processor writes before its frames
    /// (`<t seconds>`): the mean of the step's frame times. Empty for images.
    pub grid_seconds: Vec<f64>,
}
