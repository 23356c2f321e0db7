//! CVAA retrieval before prompting: square sliding windows over the satellite image, embedded
//! in batches once per image (and cached), ranked by cosine similarity to the UAV frame's
//! embedding; the best window's box is the alignment prior. Also the retrieval metrics:
//! Recall@1/5/10 and AP over a pairs manifest (drone → satellite and back), and for windowed
//! retrieval the IoU of the chosen box with the true footprint and the hit rate at IoU ≥ 0.5.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::{Device, Tensor};
use motionvl_data::cvaa::{Pair, UavView, box_iou, crop, normalized_chw, sliding_windows};
use motionvl_data::video::load_image;
use motionvl_models::cvaa::Cvaa;
use ndarray::{Array3, ArrayView3};
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::error::{EvalError, Result};

/// How satellite images are cut into windows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WindowConfig {
    /// Window sides as fractions of the satellite image's shorter side (multi-scale).
    pub sizes: Vec<f64>,
    /// Step between windows as a fraction of the window side.
    pub stride: f64,
    /// Windows embedded per forward pass.
    pub batch: usize,
}

impl Default for WindowConfig {
    fn default() -> Self {
        Self { sizes: vec![0.3, 0.4, 0.5, 0.6], stride: 0.25, batch: 64 }
    }
}

/// One retrieved window: its box (normalised, 3 decimals) and cosine similarity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Retrieved {
    #[serde(rename = "box")]
    pub bbox: [f64; 4],
    pub score: f32,
}

/// `{"boxes": [...], "scores": [...]}`, best first: what `evaluate retrieve` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RetrievalOutput {
    pub boxes: Vec<[f64; 4]>,
    pub scores: Vec<f32>,
}

impl From<&[Retrieved]> for RetrievalOutput {
    fn from(r: &[Retrieved]) -> Self {
        Self { boxes: r.iter().map(|w| w.bbox).collect(), scores: r.iter().map(|w| w.score).collect() }
    }
}

/// A satellite image's windows and their embeddings `[W, E]`.
pub struct WindowIndex {
    pub boxes: Vec<[f64; 4]>,
    pub embeddings: Tensor,
}

pub struct Retriever {
    model: Cvaa,
    windows: WindowConfig,
    device: Device,
    cache: Mutex<HashMap<PathBuf, Arc<WindowIndex>>>,
}

impl Retriever {
    pub fn new(model: Cvaa, windows: WindowConfig, device: Device) -> Result<Self> {
        if windows.batch == 0 {
            return Err(EvalError::WindowBatch);
        }
        sliding_windows(2, 2, &windows.sizes, windows.stride)?;
        Ok(Self { model, windows, device, cache: Mutex::default() })
    }

    /// A `train cvaa` checkpoint folder.
    pub fn load(checkpoint: &Path, windows: WindowConfig, device: &Device) -> Result<Self> {
        let model = Cvaa::load(checkpoint, device).map_err(|source| EvalError::CvaaCheckpoint { checkpoint: checkpoint.to_path_buf(), source })?;
        Self::new(model, windows, device.clone())
    }

    pub fn model(&self) -> &Cvaa {
        &self.model
    }

    /// `[B, 3, S, S]` pixels of `views`, resized to the model's satellite input.
    fn satellite_pixels(&self, views: &[Array3<u8>]) -> Result<Tensor> {
        let s = self.model.config().satellite_size;
        let data: Vec<f32> = views.iter().flat_map(|v| normalized_chw(v.view(), s, s)).collect();
        Ok(Tensor::from_vec(data, (views.len(), 3, s, s), &self.device)?)
    }

    /// Embeddings `[N, E]` of satellite views, in batches.
    pub fn embed_satellite_views(&self, views: &[Array3<u8>]) -> Result<Tensor> {
        let mut parts = Vec::new();
        for chunk in views.chunks(self.windows.batch) {
            parts.push(self.model.embed_satellite(&self.satellite_pixels(chunk)?)?);
        }
        Ok(Tensor::cat(&parts, 0)?)
    }

    /// Embeddings `[N, E]` of UAV frames.
    pub fn embed_uav_frames(&self, frames: &[Array3<u8>]) -> Result<Tensor> {
        let [h, w] = self.model.config().uav_size;
        let mut parts = Vec::new();
        for chunk in frames.chunks(self.windows.batch) {
            let data: Vec<f32> = chunk.iter().flat_map(|f| normalized_chw(f.view(), h, w)).collect();
            let pixels = Tensor::from_vec(data, (chunk.len(), 3, h, w), &self.device)?;
            parts.push(self.model.embed_uav(&pixels)?);
        }
        Ok(Tensor::cat(&parts, 0)?)
    }

    /// The windows of a satellite image, embedded once and cached by path.
    pub fn index(&self, satellite: &Path) -> Result<Arc<WindowIndex>> {
        if let Some(hit) = self.cache.lock().ok().and_then(|c| c.get(satellite).cloned()) {
            return Ok(hit);
        }
        let image = load_image(satellite)?;
        let index = Arc::new(self.index_image(image.view())?);
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(satellite.to_path_buf(), index.clone());
        }
        Ok(index)
    }

    pub fn index_image(&self, image: ArrayView3<u8>) -> Result<WindowIndex> {
        let (h, w) = (image.shape()[0], image.shape()[1]);
        let boxes = sliding_windows(w, h, &self.windows.sizes, self.windows.stride)?;
        let views: Vec<Array3<u8>> = boxes.iter().map(|b| crop(image, *b)).collect();
        Ok(WindowIndex { embeddings: self.embed_satellite_views(&views)?, boxes })
    }

    /// The `top_k` windows of `satellite` most similar to the UAV frame, best first.
    pub fn retrieve(&self, uav: &UavView, satellite: &Path, top_k: usize) -> Result<Vec<Retrieved>> {
        let frame = uav.load()?;
        let query = self.embed_uav_frames(&[frame])?;
        let index = self.index(satellite)?;
        rank_windows(&index, &query, top_k)
    }
}

/// Windows of `index` ranked by cosine similarity to `query` `[1, E]` (both unit length).
pub fn rank_windows(index: &WindowIndex, query: &Tensor, top_k: usize) -> Result<Vec<Retrieved>> {
    let scores: Vec<f32> = index.embeddings.matmul(&query.t()?)?.flatten_all()?.to_vec1()?;
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    Ok(order.into_iter().take(top_k.max(1)).map(|i| Retrieved { bbox: index.boxes[i].map(round3), score: scores[i] }).collect())
}

pub fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// The box serialised as the prompt's alignment prior: `[0.125, 0.250, 0.500, 0.625]`.
pub fn serialise_box(b: [f64; 4]) -> String {
    format!("[{:.3}, {:.3}, {:.3}, {:.3}]", b[0], b[1], b[2], b[3])
}

/// Recall@1/5/10 and mean average precision, in percent, with the number of queries.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RankMetrics {
    pub queries: usize,
    pub recall_at_1: f64,
    pub recall_at_5: f64,
    pub recall_at_10: f64,
    pub ap: f64,
}

/// Ranks every gallery row for every query; `positives[q]` lists the gallery rows that match
/// query q. `similarity` is `[Q, G]`.
pub fn rank_metrics(similarity: &[Vec<f32>], positives: &[Vec<usize>]) -> RankMetrics {
    let mut m = RankMetrics { queries: similarity.len(), ..RankMetrics::default() };
    for (scores, good) in similarity.iter().zip(positives) {
        let mut order: Vec<usize> = (0..scores.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        let first = order.iter().position(|g| good.contains(g)).unwrap_or(usize::MAX);
        for (k, slot) in [(1, &mut m.recall_at_1), (5, &mut m.recall_at_5), (10, &mut m.recall_at_10)] {
            if first < k {
                *slot += 1.0;
            }
        }
        let (mut hits, mut precision_sum) = (0usize, 0.0);
        for (rank, g) in order.iter().enumerate() {
            if good.contains(g) {
                hits += 1;
                precision_sum += hits as f64 / (rank + 1) as f64;
            }
        }
        m.ap += if good.is_empty() { 0.0 } else { precision_sum / good.len() as f64 };
    }
    let n = m.queries.max(1) as f64;
    for v in [&mut m.recall_at_1, &mut m.recall_at_5, &mut m.recall_at_10, &mut m.ap] {
        *v *= 100.0 / n;
    }
    m
}

/// Windowed retrieval over the pairs with a footprint: IoU of the top window with the truth.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WindowMetrics {
    pub frames: usize,
    pub mean_iou: f64,
    /// Fraction of frames whose top window has IoU ≥ 0.5 with the true footprint.
    pub hit_rate: f64,
    /// The same for a uniformly random window (seeded), the floor to beat.
    pub random_mean_iou: f64,
    pub random_hit_rate: f64,
    /// The best any window could do, for scale.
    pub oracle_hit_rate: f64,
    pub windows_per_image: usize,
}

/// Every metric of a pairs manifest.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PairsReport {
    pub pairs: usize,
    pub drone_to_satellite: RankMetrics,
    pub satellite_to_drone: RankMetrics,
    pub windowed: Option<WindowMetrics>,
    /// Satellite windows embedded per second (all windows of all images, one pass each).
    pub windows_per_s: f64,
}

impl Retriever {
    /// Recall/AP both ways over `pairs` (the gallery holds each distinct satellite view once:
    /// the crop at a pair's box, or the whole image), and windowed retrieval for pairs with a
    /// box. `seed` draws the random-window baseline.
    pub fn evaluate_pairs(&self, pairs: &[Pair], seed: u64, on_item: &(dyn Fn() + Sync)) -> Result<PairsReport> {
        let mut images: HashMap<PathBuf, Arc<Array3<u8>>> = HashMap::new();
        for p in pairs {
            if !images.contains_key(&p.satellite) {
                images.insert(p.satellite.clone(), Arc::new(load_image(&p.satellite)?));
            }
        }
        let key = |p: &Pair| format!("{}|{:?}", p.satellite.display(), p.footprint.map(|b| b.map(round3)));
        let mut gallery_keys: Vec<String> = Vec::new();
        let mut gallery_views = Vec::new();
        let mut gallery_of = Vec::with_capacity(pairs.len());
        for p in pairs {
            let k = key(p);
            let g = match gallery_keys.iter().position(|x| *x == k) {
                Some(g) => g,
                None => {
                    let image = &images[&p.satellite];
                    gallery_views.push(match p.footprint {
                        Some(b) => crop(image.view(), b),
                        None => (**image).clone(),
                    });
                    gallery_keys.push(k);
                    gallery_keys.len() - 1
                }
            };
            gallery_of.push(g);
        }
        let mut frames = Vec::with_capacity(pairs.len());
        for p in pairs {
            frames.push(p.uav.load().map_err(|e| EvalError::Retrieval { whose: format!("pair {}", p.id), source: Box::new(e.into()) })?);
            on_item();
        }
        let uav = self.embed_uav_frames(&frames)?;
        let sat = self.embed_satellite_views(&gallery_views)?;
        let similarity: Vec<Vec<f32>> = uav.matmul(&sat.t()?)?.to_vec2()?;
        let positives: Vec<Vec<usize>> = gallery_of.iter().map(|&g| vec![g]).collect();
        let drone_to_satellite = rank_metrics(&similarity, &positives);
        let transposed: Vec<Vec<f32>> = (0..gallery_views.len()).map(|g| similarity.iter().map(|row| row[g]).collect()).collect();
        let back: Vec<Vec<usize>> = (0..gallery_views.len()).map(|g| (0..pairs.len()).filter(|&q| gallery_of[q] == g).collect()).collect();
        let satellite_to_drone = rank_metrics(&transposed, &back);

        let boxed: Vec<usize> = (0..pairs.len()).filter(|&i| pairs[i].footprint.is_some()).collect();
        let mut windows_per_s = 0.0;
        let windowed = if boxed.is_empty() {
            None
        } else {
            let started = std::time::Instant::now();
            let mut indices: HashMap<PathBuf, WindowIndex> = HashMap::new();
            let mut windows = 0;
            for p in boxed.iter().map(|&i| &pairs[i]) {
                if !indices.contains_key(&p.satellite) {
                    let index = self.index_image(images[&p.satellite].view())?;
                    windows += index.boxes.len();
                    indices.insert(p.satellite.clone(), index);
                }
            }
            windows_per_s = windows as f64 / started.elapsed().as_secs_f64().max(1e-9);
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut m = WindowMetrics { frames: boxed.len(), ..WindowMetrics::default() };
            for &i in &boxed {
                let (p, truth) = (&pairs[i], pairs[i].footprint.unwrap_or_default());
                let index = &indices[&p.satellite];
                m.windows_per_image = index.boxes.len();
                let best = rank_windows(index, &uav.narrow(0, i, 1)?, 1)?;
                let iou = box_iou(best[0].bbox, truth);
                let random = box_iou(index.boxes[rng.random_range(0..index.boxes.len())], truth);
                let oracle = index.boxes.iter().map(|b| box_iou(*b, truth)).fold(0.0, f64::max);
                m.mean_iou += iou;
                m.random_mean_iou += random;
                m.hit_rate += f64::from(u8::from(iou >= 0.5));
                m.random_hit_rate += f64::from(u8::from(random >= 0.5));
                m.oracle_hit_rate += f64::from(u8::from(oracle >= 0.5));
            }
            let n = boxed.len() as f64;
            for v in [&mut m.mean_iou, &mut m.random_mean_iou, &mut m.hit_rate, &mut m.random_hit_rate, &mut m.oracle_hit_rate] {
                *v /= n;
            }
            Some(m)
        };
        Ok(PairsReport { pairs: pairs.len(), drone_to_satellite, satellite_to_drone, windowed, windows_per_s })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recall_and_ap_of_a_known_ranking() {
        // Query 0: its match ranks first. Query 1: its match ranks third of four.
        let sim = vec![vec![0.9, 0.1, 0.2, 0.0], vec![0.8, 0.7, 0.1, 0.6]];
        let m = rank_metrics(&sim, &[vec![0], vec![2]]);
        assert_eq!(m.queries, 2);
        assert!((m.recall_at_1 - 50.0).abs() < 1e-9);
        assert!((m.recall_at_5 - 100.0).abs() < 1e-9);
        assert!((m.ap - 100.0 * (1.0 + 0.25) / 2.0).abs() < 1e-9);
        // Two positives at ranks 1 and 3: AP = (1 + 2/3) / 2.
        let m = rank_metrics(&[vec![0.9, 0.5, 0.7]], &[vec![0, 1]]);
        assert!((m.ap - 100.0 * (1.0 + 2.0 / 3.0) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn boxes_serialise_with_three_decimals() {
        assert_eq!(serialise_box([0.125, 0.25, 0.5, 0.6254]), "[0.125, 0.250, 0.500, 0.625]");
    }
}
