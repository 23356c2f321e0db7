//! The batches of a `train cvaa` run: which pairs each step trains on (a seeded shuffle per
//! epoch, optionally one satellite image per batch), and their pixels, each satellite view
//! cropped at its pair's box with seeded jitter.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::Tensor;
use motionvl_data::cvaa::{crop, normalized_chw};
use motionvl_data::video::load_image;
use ndarray::Array3;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;

use super::{CvaaTrainer, Result};
use crate::sft::TrainError;

/// Decoded images kept for the run: satellite images are shared by many pairs.
#[derive(Default)]
pub(super) struct ImageCache {
    images: Mutex<HashMap<PathBuf, Arc<Array3<u8>>>>,
}

impl ImageCache {
    fn get(&self, path: &Path) -> Result<Arc<Array3<u8>>> {
        if let Some(hit) = self.images.lock().ok().and_then(|m| m.get(path).cloned()) {
            return Ok(hit);
        }
        let image = Arc::new(load_image(path)?);
        if let Ok(mut m) = self.images.lock() {
            m.insert(path.to_path_buf(), image.clone());
        }
        Ok(image)
    }
}

/// One pair's UAV and satellite pixels, and the UAV footprint's box in the satellite image.
type PairPixels = (Vec<f32>, Vec<f32>, Option<[f64; 4]>);

/// A batch's UAV pixels, satellite pixels and boxes.
type BatchPixels = (Tensor, Tensor, Vec<Option<[f64; 4]>>);

impl CvaaTrainer {
    /// The pairs of optimiser step `step` (0-based): full batches of a seeded shuffle per epoch,
    /// each from one satellite image when `same_image_batches` is set.
    pub(super) fn batch_indices(&self, step: usize) -> (usize, Vec<usize>) {
        let b = self.recipe.optim.batch_size;
        let batches_per_epoch = self.batches_per_epoch();
        let epoch = step / batches_per_epoch;
        let mut rng = rand::rngs::StdRng::seed_from_u64(mix(self.recipe.seed, epoch as u64));
        let mut shuffle = |items: &mut Vec<usize>| {
            for i in (1..items.len()).rev() {
                items.swap(i, rng.random_range(0..=i));
            }
        };
        let mut batches: Vec<Vec<usize>> = Vec::new();
        for mut group in self.groups() {
            shuffle(&mut group);
            batches.extend(group.chunks_exact(b).map(<[usize]>::to_vec));
        }
        let mut order: Vec<usize> = (0..batches.len()).collect();
        shuffle(&mut order);
        (epoch, batches[order[step % batches_per_epoch]].clone())
    }

    /// The pairs batches are drawn from together: one group per satellite image, or all.
    pub(super) fn groups(&self) -> Vec<Vec<usize>> {
        if !self.recipe.data.same_image_batches {
            return vec![(0..self.pairs.len()).collect()];
        }
        let mut by_image: std::collections::BTreeMap<&Path, Vec<usize>> = std::collections::BTreeMap::new();
        for (i, p) in self.pairs.iter().enumerate() {
            by_image.entry(p.satellite.as_path()).or_default().push(i);
        }
        by_image.into_values().collect()
    }

    pub(super) fn batches_per_epoch(&self) -> usize {
        let b = self.recipe.optim.batch_size;
        self.groups().iter().map(|g| g.len() / b).sum::<usize>().max(1)
    }

    /// `[B, 3, H, W]` UAV frames and `[B, 3, S, S]` satellite views of the pairs, with the box
    /// each satellite view was cropped at.
    pub(super) fn pixels(&self, step: usize, indices: &[usize]) -> Result<BatchPixels> {
        let cfg = self.model.config();
        let [uh, uw] = cfg.uav_size;
        let s = cfg.satellite_size;
        let jitter = self.recipe.data.crop_jitter;
        let views: Vec<PairPixels> = indices
            .par_iter()
            .enumerate()
            .map(|(slot, &i)| {
                let pair = &self.pairs[i];
                let uav = pair.uav.load().map_err(|source| TrainError::Pair { pair: pair.id.clone(), source: Box::new(source) })?;
                let satellite = self.images.get(&pair.satellite)?;
                let crop_box = pair.footprint.map(|b| {
                    let mut rng = rand::rngs::StdRng::seed_from_u64(mix(mix(self.recipe.seed, step as u64), slot as u64));
                    jittered(b, jitter, &mut rng)
                });
                let view = match crop_box {
                    Some(b) => crop(satellite.view(), b),
                    None => (*satellite).clone(),
                };
                Ok((normalized_chw(uav.view(), uh, uw), normalized_chw(view.view(), s, s), crop_box))
            })
            .collect::<Result<_>>()?;
        let b = indices.len();
        let mut uav = Vec::with_capacity(b * 3 * uh * uw);
        let mut sat = Vec::with_capacity(b * 3 * s * s);
        let mut crops = Vec::with_capacity(b);
        for (u, v, c) in views {
            uav.extend(u);
            sat.extend(v);
            crops.push(c);
        }
        let uav = Tensor::from_vec(uav, (b, 3, uh, uw), &self.device)?;
        let sat = Tensor::from_vec(sat, (b, 3, s, s), &self.device)?;
        Ok((uav, sat, crops))
    }
}

/// A box shifted and scaled by up to `amount` of its size, kept inside [0, 1].
fn jittered(b: [f64; 4], amount: f64, rng: &mut impl Rng) -> [f64; 4] {
    if amount == 0.0 {
        return b;
    }
    let (w, h) = (b[2] - b[0], b[3] - b[1]);
    let scale = 1.0 + rng.random_range(-amount..=amount);
    let (nw, nh) = ((w * scale).min(1.0), (h * scale).min(1.0));
    let cx = (b[0] + b[2]) / 2.0 + rng.random_range(-amount..=amount) * w;
    let cy = (b[1] + b[3]) / 2.0 + rng.random_range(-amount..=amount) * h;
    let x1 = (cx - nw / 2.0).clamp(0.0, 1.0 - nw);
    let y1 = (cy - nh / 2.0).clamp(0.0, 1.0 - nh);
    [x1, y1, x1 + nw, y1 + nh]
}

/// SplitMix64 of (seed, counter).
pub(super) fn mix(seed: u64, counter: u64) -> u64 {
    let mut z = seed ^ counter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_keeps_boxes_inside_the_image() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..200 {
            let b = jittered([0.8, 0.0, 1.0, 0.3], 0.2, &mut rng);
            assert!(b[0] >= 0.0 && b[1] >= 0.0 && b[2] <= 1.0 + 1e-12 && b[3] <= 1.0 + 1e-12 && b[0] < b[2] && b[1] < b[3], "{b:?}");
        }
    }
}
