//! Flow → pseudo-images for the motion encoder: `P_t = [‖U_t‖₂, U_tˣ, U_tʸ]`, as
//! three-channel frames the Qwen2.5-VL video preprocessing consumes like real frames.
//!
//! **Normalisation.** One fixed scale per clip, `s = α · √(H² + W²)` (α = 0.05 by default, so
//! 32 px at 448², 16 px at 224²), never the per-frame maximum, which would erase absolute speed
//! and blow up noise on still frames. Components map to `clip(U/s, −1, 1)`,
//! the magnitude to `2·clip(‖U‖/s, 0, 1) − 1` (computed from the unclipped vector). Because
//! `s` is a fraction of the frame diagonal, `U/s` does not change when the frame is resized,
//! so the preprocessing may resize pseudo-images exactly as it resizes video frames.
//!
//! **Range.** [`PseudoImages::to_u8`] maps [−1, 1] onto 0..=255 (zero motion → 128 in the
//! component channels), so after the preprocessing's `/255` and CLIP mean/std normalisation the
//! pseudo-image spans exactly the range real pixels do — the range the frozen ViT was trained
//! on. [`PseudoImages::values`] gives the [−1, 1] floats for callers that normalise themselves.
//!
//! **Temporal alignment.** N frames have N−1 flows. [`Alignment::Forward`] (default) gives
//! frame t the flow leaving it, `U_{t→t+1}`, and the last frame repeats the last flow (constant
//! velocity): every pseudo-image is a real flow field and no motion is shifted in time.
//! [`Alignment::Central`] averages the flows arriving at and leaving frame t (a central
//! difference), with the ends taking their only neighbour.

use ndarray::{Array4, ArrayView4, Axis, s};

use crate::error::{FlowError, Result};

/// How N−1 flows become N pseudo-images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Alignment {
    #[default]
    Forward,
    Central,
}

/// Which frames the flow is computed on and how flows become the motion encoder's pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MotionPipeline {
    /// motionvl's: the estimator's full-resolution flow of the vision-size u8 frames (cached as
    /// f16), this module's fixed diagonal scale and [`Alignment`], u8 pseudo-frames through the
    /// video preprocessing.
    #[default]
    Motionvl,
    /// The SIS-Motion authors' ([`crate::official`]): MOFNet on the decoded frames resized to
    /// 320×480, one pass per clip, 1/8-resolution flow (cached as f32), per-video min-max, float
    /// pixels resized onto the grid. `diagonal_fraction` and `alignment` do not apply.
    Official,
}

impl MotionPipeline {
    pub fn is_motionvl(&self) -> bool {
        *self == MotionPipeline::Motionvl
    }
}

/// Pseudo-image settings (they belong in a recipe's `[motion.pseudo_images]` table; keys left
/// out take their defaults, so `pipeline = "official"` alone selects the official pipeline).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct PseudoImageConfig {
    /// α: the flow magnitude, as a fraction of the frame diagonal, that saturates a channel.
    pub diagonal_fraction: f32,
    pub alignment: Alignment,
    /// `pipeline = "official"` selects the SIS-Motion pipeline. Left out when it is the default,
    /// so configs and `motion.json` files written before it existed read and write unchanged.
    #[serde(skip_serializing_if = "MotionPipeline::is_motionvl")]
    pub pipeline: MotionPipeline,
}

impl Default for PseudoImageConfig {
    fn default() -> Self {
        PseudoImageConfig { diagonal_fraction: 0.05, alignment: Alignment::Forward, pipeline: MotionPipeline::Motionvl }
    }
}

impl PseudoImageConfig {
    /// The SIS-Motion authors' pipeline.
    pub fn official() -> Self {
        PseudoImageConfig { pipeline: MotionPipeline::Official, ..Default::default() }
    }
}

/// N pseudo-images `[N,H,W,3]`, channels (magnitude, x, y), values in [−1, 1].
#[derive(Debug, Clone, PartialEq)]
pub struct PseudoImages {
    values: Array4<f32>,
}

impl PseudoImages {
    /// From the `[N−1,2,H,W]` flows of an N-frame clip.
    pub fn from_flows(flows: ArrayView4<f32>, cfg: &PseudoImageConfig) -> Result<Self> {
        let (t, c, h, w) = flows.dim();
        if t == 0 || c != 2 {
            return Err(FlowError::Clip {
                what: "a pseudo-image",
                needs: "[N-1,2,H,W] flows with N ≥ 2".into(),
                got: format!("{:?}", flows.shape()),
            });
        }
        if !cfg.diagonal_fraction.is_finite() || cfg.diagonal_fraction <= 0.0 {
            return Err(FlowError::BadSetting { key: "diagonal_fraction", problem: format!("must be positive, got {}", cfg.diagonal_fraction) });
        }
        let scale = cfg.diagonal_fraction * ((h * h + w * w) as f32).sqrt();
        let n = t + 1;
        let mut values = Array4::<f32>::zeros((n, h, w, 3));
        for frame in 0..n {
            let (u, v) = match cfg.alignment {
                Alignment::Forward => {
                    let k = frame.min(t - 1);
                    (flows.slice(s![k, 0, .., ..]).to_owned(), flows.slice(s![k, 1, .., ..]).to_owned())
                }
                Alignment::Central => {
                    let ks: Vec<usize> = [frame.checked_sub(1), Some(frame).filter(|&f| f < t)].into_iter().flatten().collect();
                    let mean = |ch: usize| {
                        let mut acc = flows.slice(s![ks[0], ch, .., ..]).to_owned();
                        for &k in &ks[1..] {
                            acc += &flows.slice(s![k, ch, .., ..]);
                        }
                        acc / ks.len() as f32
                    };
                    (mean(0), mean(1))
                }
            };
            let mut out = values.index_axis_mut(Axis(0), frame);
            ndarray::Zip::from(out.rows_mut()).and(&u).and(&v).for_each(|mut px, &ux, &uy| {
                px[0] = 2.0 * ((ux * ux + uy * uy).sqrt() / scale).min(1.0) - 1.0;
                px[1] = (ux / scale).clamp(-1.0, 1.0);
                px[2] = (uy / scale).clamp(-1.0, 1.0);
            });
        }
        Ok(PseudoImages { values })
    }

    /// `[N,H,W,3]` floats in [−1, 1].
    pub fn values(&self) -> &Array4<f32> {
        &self.values
    }

    /// `[N,H,W,3]` u8 frames: [−1, 1] → 0..=255, for the video preprocessing.
    pub fn to_u8(&self) -> Array4<u8> {
        self.values.mapv(|x| ((x + 1.0) * 127.5).round().clamp(0.0, 255.0) as u8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two flows over 3 frames of 6x8: flow 0 is (+3, 0) everywhere, flow 1 is (0, −200).
    fn flows() -> Array4<f32> {
        let mut f = Array4::zeros((2, 2, 6, 8));
        f.slice_mut(s![0, 0, .., ..]).fill(3.0);
        f.slice_mut(s![1, 1, .., ..]).fill(-200.0);
        f
    }

    #[test]
    fn channels_are_magnitude_x_y_scaled_by_the_diagonal() {
        let cfg = PseudoImageConfig { diagonal_fraction: 0.6, alignment: Alignment::Forward, ..Default::default() };
        let p = PseudoImages::from_flows(flows().view(), &cfg).expect("valid");
        let v = p.values();
        assert_eq!(v.dim(), (3, 6, 8, 3));
        let scale = 0.6 * 10.0; // diagonal of 6x8 is 10
        let px = v.slice(s![0, 2, 3, ..]).to_vec();
        assert!((px[0] - (2.0 * 3.0 / scale - 1.0)).abs() < 1e-6 && (px[1] - 3.0 / scale).abs() < 1e-6 && px[2] == 0.0, "{px:?}");
        // Frame 1 carries flow 1, saturated: magnitude +1, y −1.
        assert_eq!(v.slice(s![1, 0, 0, ..]).to_vec(), vec![1.0, 0.0, -1.0]);
        // The last frame repeats the last flow.
        assert_eq!(v.slice(s![2, .., .., ..]), v.slice(s![1, .., .., ..]));
        let u8s = p.to_u8();
        assert_eq!(u8s.slice(s![1, 0, 0, ..]).to_vec(), vec![255, 128, 0]);
    }

    #[test]
    fn central_alignment_averages_neighbouring_flows() {
        let cfg = PseudoImageConfig { diagonal_fraction: 100.0, alignment: Alignment::Central, ..Default::default() };
        let p = PseudoImages::from_flows(flows().view(), &cfg).expect("valid");
        let scale = 1000.0;
        let mid = p.values().slice(s![1, 4, 4, ..]).to_vec();
        assert!((mid[1] - 1.5 / scale).abs() < 1e-7 && (mid[2] + 100.0 / scale).abs() < 1e-7, "{mid:?}");
        assert!((p.values()[[0, 0, 0, 1]] - 3.0 / scale).abs() < 1e-7);
        assert!((p.values()[[2, 0, 0, 2]] + 200.0 / scale).abs() < 1e-7);
    }

    /// Settings written before the pipeline existed read as motionvl's and write back
    /// unchanged; `pipeline = "official"` alone selects the official one.
    #[test]
    fn the_pipeline_is_optional_and_named() {
        let old = r#"{"diagonal_fraction":0.05,"alignment":"central"}"#;
        let cfg: PseudoImageConfig = serde_json::from_str(old).expect("old settings");
        assert_eq!((cfg.pipeline, cfg.alignment), (MotionPipeline::Motionvl, Alignment::Central));
        assert_eq!(serde_json::to_string(&cfg).expect("json"), old);
        let official: PseudoImageConfig = serde_json::from_str(r#"{"pipeline":"official"}"#).expect("official");
        assert_eq!(official, PseudoImageConfig::official());
        assert_eq!(serde_json::to_value(official).expect("json")["pipeline"], "official");
        assert!(serde_json::from_str::<PseudoImageConfig>(r#"{"pipeline":"sis"}"#).is_err());
    }

    #[test]
    fn zero_motion_is_mid_grey_and_bad_input_is_rejected() {
        let p = PseudoImages::from_flows(Array4::zeros((1, 2, 4, 4)).view(), &PseudoImageConfig::default()).expect("valid");
        assert!(p.to_u8().slice(s![.., .., .., 1..]).iter().all(|&x| x == 128));
        assert!(p.to_u8().slice(s![.., .., .., 0]).iter().all(|&x| x == 0));
        assert!(PseudoImages::from_flows(Array4::zeros((1, 3, 4, 4)).view(), &PseudoImageConfig::default()).is_err());
        let bad = PseudoImageConfig { diagonal_fraction: 0.0, ..Default::default() };
        assert!(PseudoImages::from_flows(Array4::zeros((1, 2, 4, 4)).view(), &bad).is_err());
    }
}
