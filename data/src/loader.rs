//! The training data loader: worker threads turn [`TrainingSample`]s into tokenised samples with
//! pixel arrays, in an order fixed by `(seed, epoch)` and resumable at any sample.
//!
//! Why it is built this way:
//! - **Deterministic order.** Each epoch is a permutation of the dataset drawn from
//!   `(seed, epoch)` with our own SplitMix64 + Fisher–Yates, so the order does not change when
//!   a dependency's RNG does, and a checkpointed run resumes on exactly the same samples.
//!   Workers finish out of order; results are put back in order by index before they are
//!   yielded, so the number of workers never changes what the trainer sees.
//! - **Bounded prefetch.** Workers may only claim sample `k` while `k < next_to_yield +
//!   prefetch`, so at most `prefetch` decoded samples (each tens of MB of f32 pixels) wait in
//!   memory, whatever the speed difference between decoding and training.
//! - **Resumable position.** [`EpochIter::position`] is the `(epoch, index)` of the next
//!   sample in epoch order; [`DataLoader::resume`] starts there. Skipped samples count as
//!   consumed, so the position never re-runs them.
//! - **Media are pluggable.** The loader only needs something that turns a sample's media into
//!   `(pixel_values, grid_thw)`: the [`MediaProcessor`] trait of [`crate::media`].
//!   [`QwenMedia`] is the real one (ffmpeg decode → frame plan → Qwen2.5-VL preprocessing);
//!   tests and the synthetic world can pass a closure.
//!
//! No Candle here: workers never touch a device; tensors are made by the trainer.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::budget::{DataCheck, DataReport, SampleFit, fit_videos, vision_tokens};
use crate::samples::TrainingSample;
use crate::text::{EncodedSample, MediaKind, QwenTokenizer, TemplateOptions, TextError};

// The loader's media side lives in `crate::media`; re-exported so `loader::QwenMedia` and the
// rest keep working for the crates that name them here.
pub use crate::media::{BoxError, MediaGrids, MediaProcessor, PixelInput, PlannedFrames, ProcessedMedia, QwenMedia};

/// Where a run stands: the next sample to load is number `index` of epoch `epoch`'s order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Position {
    pub epoch: u64,
    pub index: usize,
}

/// Loader settings.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderConfig {
    /// Worker threads (the paper uses 4). 0 loads on the caller's thread.
    pub workers: usize,
    /// Samples loaded ahead of the consumer at most (≥ 1).
    pub prefetch: usize,
    pub seed: u64,
    /// Shuffle each epoch; otherwise the dataset order is kept.
    pub shuffle: bool,
    pub template: TemplateOptions,
    /// Turn media and template errors into skipped samples instead of yielding them.
    pub skip_errors: bool,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig { workers: 4, prefetch: 8, seed: 0, shuffle: true, template: TemplateOptions::default(), skip_errors: false }
    }
}

/// A sample ready for the trainer.
#[derive(Debug, Clone)]
pub struct LoadedSample {
    /// Position of this sample in its epoch's order.
    pub position: Position,
    /// Index into the dataset the loader was built from.
    pub dataset_index: usize,
    pub encoded: EncodedSample,
    pub images: Vec<PixelInput>,
    pub videos: Vec<PixelInput>,
    /// Motion pseudo-image pixels per video (see [`ProcessedMedia::motion`]).
    pub motion: Vec<PixelInput>,
}

/// A sample left out, and why. The trainer logs these.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedSample {
    pub position: Position,
    pub sample_id: String,
    /// `file:line` of the row.
    pub location: String,
    pub reason: String,
}

/// Loading failures, each naming the sample and its row.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("sample {sample_id} ({location}): media: {source}")]
    Media { sample_id: String, location: String, source: BoxError },
    #[error("sample {sample_id} ({location}): media processor returned {got} {kind}(s) for {expected}")]
    MediaCount { sample_id: String, location: String, kind: MediaKind, expected: usize, got: usize },
    #[error("{location}: {source}")]
    Text { location: String, source: TextError },
    #[error("sample {sample_id} ({location}): loading panicked: {message}")]
    Panicked { sample_id: String, location: String, message: String },
    #[error("cannot resume at index {index}: the dataset has {len} samples")]
    BadPosition { index: usize, len: usize },
    #[error("loader workers stopped unexpectedly")]
    WorkersGone,
}

/// Loads order index `k` on the caller's thread (the `workers == 0` mode).
type InlineLoad = Box<dyn Fn(usize) -> Result<Outcome, LoadError> + Send>;

/// What loading one sample gives.
enum Outcome {
    Sample(Box<LoadedSample>),
    Skipped(SkippedSample),
}

/// Everything a worker needs, shared read-only.
struct Context<P> {
    samples: Arc<Vec<TrainingSample>>,
    tokenizer: Arc<QwenTokenizer>,
    media: Arc<P>,
    template: TemplateOptions,
    skip_errors: bool,
}

impl<P> Clone for Context<P> {
    fn clone(&self) -> Self {
        Context {
            samples: Arc::clone(&self.samples),
            tokenizer: Arc::clone(&self.tokenizer),
            media: Arc::clone(&self.media),
            template: self.template.clone(),
            skip_errors: self.skip_errors,
        }
    }
}

impl<P: MediaProcessor> Context<P> {
    fn media_error(&self, sample: &TrainingSample, source: BoxError) -> LoadError {
        LoadError::Media { sample_id: sample.id.clone(), location: sample.location(), source }
    }

    /// How `sample`, whose media have `grids`, meets `max_seq_len` (headers only, no decoding).
    fn fit(&self, sample: &TrainingSample, grids: &MediaGrids, max_seq_len: usize) -> Result<SampleFit, LoadError> {
        let encode = |videos: &[[usize; 3]], seconds: &[Vec<f64>], template: &TemplateOptions| {
            self.tokenizer.encode_chat_timed(&sample.id, &sample.messages, &grids.images, videos, seconds, template)
        };
        let text_error = |source| LoadError::Text { location: sample.location(), source };
        match encode(&grids.videos, &grids.video_seconds, &self.template) {
            Ok(encoded) => return Ok(SampleFit::Fits { tokens: encoded.input_ids.len() }),
            Err(e) if e.is_skip() => {}
            Err(source) => return Err(text_error(source)),
        }
        let whole = TemplateOptions { max_seq_len: None, ..self.template.clone() };
        let full = encode(&grids.videos, &grids.video_seconds, &whole).map_err(text_error)?.input_ids.len();
        let merge = self.template.merge_size;
        let video_tokens = |videos: &[[usize; 3]]| videos.iter().map(|g| vision_tokens(*g, merge)).sum::<usize>();
        let others = full - video_tokens(&grids.videos);
        let Some(budget) = self.media.video_budget(sample) else {
            return Ok(SampleFit::TooLong { tokens: full });
        };
        let budget = budget.map_err(|source| self.media_error(sample, source))?;
        let fitted =
            fit_videos(&budget, max_seq_len, |videos| others + video_tokens(videos)).map_err(|reason| self.media_error(sample, reason.into()))?;
        let Some((limits, _)) = fitted else {
            let smallest = budget.candidates().last().map(|l| budget.grids(*l)).transpose();
            let smallest = smallest.map_err(|reason| self.media_error(sample, reason.into()))?.unwrap_or_default();
            return Ok(SampleFit::TooLong { tokens: others + video_tokens(&smallest) });
        };
        let videos = budget.grids(limits).map_err(|reason| self.media_error(sample, reason.into()))?;
        let seconds = budget.grid_seconds(limits).map_err(|reason| self.media_error(sample, reason.into()))?;
        match encode(&videos, &seconds, &self.template) {
            Ok(encoded) => Ok(SampleFit::Fitted { limits, tokens: encoded.input_ids.len() }),
            Err(e) if e.is_skip() => Ok(SampleFit::TooLong { tokens: others + video_tokens(&videos) }),
            Err(source) => Err(text_error(source)),
        }
    }

    fn load(&self, position: Position, dataset_index: usize) -> Result<Outcome, LoadError> {
        let sample = &self.samples[dataset_index];
        let result = catch_unwind(AssertUnwindSafe(|| self.load_inner(position, dataset_index, sample))).unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(LoadError::Panicked { sample_id: sample.id.clone(), location: sample.location(), message })
        });
        match result {
            Err(e) if self.skip_errors => {
                Ok(Outcome::Skipped(SkippedSample { position, sample_id: sample.id.clone(), location: sample.location(), reason: e.to_string() }))
            }
            other => other,
        }
    }

    fn load_inner(&self, position: Position, dataset_index: usize, sample: &TrainingSample) -> Result<Outcome, LoadError> {
        let skipped = |e: TextError| {
            Outcome::Skipped(SkippedSample { position, sample_id: sample.id.clone(), location: sample.location(), reason: e.to_string() })
        };
        // Length check before decoding, when the processor can predict its grids; a sample too
        // long is fitted by limiting its videos, and left out only when that cannot help.
        let mut limits = None;
        if let Some(max_seq_len) = self.template.max_seq_len
            && let Some(predicted) = self.media.grids(sample)
        {
            let grids = predicted.map_err(|source| self.media_error(sample, source))?;
            match self.fit(sample, &grids, max_seq_len)? {
                SampleFit::Fits { .. } => {}
                SampleFit::Fitted { limits: l, .. } => limits = Some(l),
                SampleFit::TooLong { tokens } => {
                    return Ok(skipped(TextError::TooLong { sample_id: sample.id.clone(), len: tokens, max_seq_len }));
                }
            }
        }
        let media = match limits {
            None => self.media.process(sample),
            Some(l) => self.media.process_limited(sample, l),
        }
        .map_err(|source| self.media_error(sample, source))?;
        for (kind, expected, got) in
            [(MediaKind::Image, sample.images.len(), media.images.len()), (MediaKind::Video, sample.videos.len(), media.videos.len())]
        {
            if expected != got {
                return Err(LoadError::MediaCount { sample_id: sample.id.clone(), location: sample.location(), kind, expected, got });
            }
        }
        let image_grids: Vec<[usize; 3]> = media.images.iter().map(|p| p.grid_thw).collect();
        let video_grids: Vec<[usize; 3]> = media.videos.iter().map(|p| p.grid_thw).collect();
        let video_seconds: Vec<Vec<f64>> = media.videos.iter().map(|p| p.grid_seconds.clone()).collect();
        match self.tokenizer.encode_chat_timed(&sample.id, &sample.messages, &image_grids, &video_grids, &video_seconds, &self.template) {
            Ok(encoded) => Ok(Outcome::Sample(Box::new(LoadedSample {
                position,
                dataset_index,
                encoded,
                images: media.images,
                videos: media.videos,
                motion: media.motion,
            }))),
            Err(e) if e.is_skip() => Ok(skipped(e)),
            Err(source) => Err(LoadError::Text { location: sample.location(), source }),
        }
    }
}

/// Loads training samples in a reproducible order with worker threads.
pub struct DataLoader<P> {
    ctx: Context<P>,
    config: LoaderConfig,
}

impl<P: MediaProcessor + 'static> DataLoader<P> {
    pub fn new(samples: Vec<TrainingSample>, tokenizer: QwenTokenizer, media: P, config: LoaderConfig) -> Self {
        DataLoader {
            ctx: Context {
                samples: Arc::new(samples),
                tokenizer: Arc::new(tokenizer),
                media: Arc::new(media),
                template: config.template.clone(),
                skip_errors: config.skip_errors,
            },
            config,
        }
    }

    /// Samples per epoch.
    pub fn len(&self) -> usize {
        self.ctx.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ctx.samples.is_empty()
    }

    pub fn samples(&self) -> &[TrainingSample] {
        &self.ctx.samples
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// How dataset sample `index` meets `max_seq_len` (headers only); `None` when the loader
    /// has no `max_seq_len` or the processor cannot predict its grids.
    pub fn sample_fit(&self, index: usize) -> Result<Option<SampleFit>, LoadError> {
        let Some(sample) = self.ctx.samples.get(index) else {
            return Err(LoadError::BadPosition { index, len: self.len() });
        };
        match (self.ctx.template.max_seq_len, self.ctx.media.grids(sample)) {
            (Some(max), Some(grids)) => {
                let grids = grids.map_err(|source| self.ctx.media_error(sample, source))?;
                self.ctx.fit(sample, &grids, max).map(Some)
            }
            _ => Ok(None),
        }
    }

    /// Fits every sample to `max_seq_len` from headers alone (no decoding) and counts the
    /// outcomes: what `train sft --check-data` prints and every run logs at its start. A
    /// sample whose media cannot be probed is an error, or counted as failed when the loader
    /// skips errors. `progress` is called once per sample.
    pub fn check_data(&self, progress: &(dyn Fn() + Sync)) -> Result<DataCheck, LoadError> {
        use rayon::prelude::*;
        let ctx = &self.ctx;
        let outcomes: Vec<Result<Option<SampleFit>, LoadError>> = ctx
            .samples
            .par_iter()
            .map(|sample| {
                let fit = match (ctx.template.max_seq_len, ctx.media.grids(sample)) {
                    (Some(max), Some(grids)) => {
                        grids.map_err(|source| ctx.media_error(sample, source)).and_then(|g| ctx.fit(sample, &g, max)).map(Some)
                    }
                    _ => Ok(None),
                };
                progress();
                fit
            })
            .collect();
        let mut report = DataReport { samples: ctx.samples.len(), ..DataReport::default() };
        let mut fits = Vec::with_capacity(ctx.samples.len());
        let mut total_tokens = 0usize;
        for (sample, outcome) in ctx.samples.iter().zip(outcomes) {
            let fit = match outcome {
                Ok(fit) => fit,
                Err(_) if ctx.skip_errors => {
                    report.failed += 1;
                    fits.push(None);
                    continue;
                }
                Err(e) => return Err(e),
            };
            let tokens = fit.as_ref().map_or(0, SampleFit::tokens);
            match fit {
                None | Some(SampleFit::Fits { .. }) => report.kept += 1,
                Some(SampleFit::Fitted { .. }) => report.fitted += 1,
                Some(SampleFit::TooLong { .. }) => report.dropped += 1,
            }
            if report.longest.as_ref().is_none_or(|l| tokens > l.2) {
                report.longest = Some((sample.id.clone(), sample.location(), tokens));
            }
            if !matches!(fit, Some(SampleFit::TooLong { .. })) {
                report.max_tokens = report.max_tokens.max(tokens);
                total_tokens += tokens;
            }
            fits.push(fit);
        }
        report.mean_tokens = if report.usable() == 0 { 0.0 } else { total_tokens as f64 / report.usable() as f64 };
        Ok(DataCheck { report, fits })
    }

    /// Dataset indices in the order epoch `epoch` visits them.
    pub fn order(&self, epoch: u64) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len()).collect();
        if self.config.shuffle {
            shuffle(&mut order, self.config.seed, epoch);
        }
        order
    }

    /// Iterates epoch `epoch` from its start.
    pub fn epoch(&self, epoch: u64) -> EpochIter {
        self.start(Position { epoch, index: 0 })
    }

    /// Iterates from a saved position. `index == len()` is the end of that epoch (an empty
    /// iterator); the caller moves on to `epoch + 1`.
    pub fn resume(&self, position: Position) -> Result<EpochIter, LoadError> {
        if position.index > self.len() {
            return Err(LoadError::BadPosition { index: position.index, len: self.len() });
        }
        Ok(self.start(position))
    }

    /// Loads only the order indices `visit` (ascending) of epoch `epoch`: a data-parallel rank's
    /// share. [`EpochIter::position`] then names the next index it would visit.
    pub fn visit(&self, epoch: u64, visit: Vec<usize>) -> Result<EpochIter, LoadError> {
        if let Some(&index) = visit.iter().find(|&&k| k >= self.len()) {
            return Err(LoadError::BadPosition { index, len: self.len() });
        }
        Ok(self.start_visit(epoch, visit))
    }

    fn start(&self, position: Position) -> EpochIter {
        self.start_visit(position.epoch, (position.index..self.len()).collect())
    }

    fn start_visit(&self, epoch: u64, visit: Vec<usize>) -> EpochIter {
        let order = Arc::new(self.order(epoch));
        let order_len = order.len();
        let visit = Arc::new(visit);
        let len = visit.len();
        let (tx, rx) = channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State { next_claim: 0, next_yield: 0, stop: false }),
            wake: Condvar::new(),
            window: self.config.prefetch.max(1),
            len,
        });
        let mut handles = Vec::new();
        let inline = if self.config.workers == 0 {
            let ctx = self.ctx.clone();
            let (order, visit) = (Arc::clone(&order), Arc::clone(&visit));
            Some(Box::new(move |j: usize| ctx.load(Position { epoch, index: visit[j] }, order[visit[j]])) as InlineLoad)
        } else {
            for w in 0..self.config.workers {
                let ctx = self.ctx.clone();
                let (order, visit) = (Arc::clone(&order), Arc::clone(&visit));
                let shared = Arc::clone(&shared);
                let tx: Sender<(usize, Result<Outcome, LoadError>)> = tx.clone();
                let spawned =
                    std::thread::Builder::new().name(format!("motionvl-loader-{w}")).spawn(move || worker(&ctx, &order, &visit, &shared, &tx, epoch));
                match spawned {
                    Ok(h) => handles.push(h),
                    // Fewer threads still load everything; none at all is caught in `next`.
                    Err(_) => break,
                }
            }
            None
        };
        drop(tx);
        EpochIter { epoch, next: 0, len, visit, order_len, shared, rx, buffer: BTreeMap::new(), handles, inline, skipped: Vec::new() }
    }
}

/// Claim bookkeeping shared by the consumer and the workers.
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    window: usize,
    len: usize,
}

struct State {
    /// Next entry of the visit list a worker may take.
    next_claim: usize,
    /// Next entry the consumer will yield.
    next_yield: usize,
    stop: bool,
}

impl Shared {
    /// The state even if a thread panicked while holding the lock (the state stays valid:
    /// it is only ever a few counters).
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

fn worker<P: MediaProcessor>(
    ctx: &Context<P>,
    order: &[usize],
    visit: &[usize],
    shared: &Shared,
    tx: &Sender<(usize, Result<Outcome, LoadError>)>,
    epoch: u64,
) {
    loop {
        let k = {
            let mut st = shared.lock();
            loop {
                if st.stop || st.next_claim >= shared.len {
                    return;
                }
                if st.next_claim < st.next_yield + shared.window {
                    break;
                }
                st = shared.wake.wait(st).unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            st.next_claim += 1;
            st.next_claim - 1
        };
        let result = ctx.load(Position { epoch, index: visit[k] }, order[visit[k]]);
        if tx.send((k, result)).is_err() {
            return;
        }
    }
}

/// One epoch's samples in order, from a start position. Dropping it stops the workers.
pub struct EpochIter {
    epoch: u64,
    /// Next entry of `visit` to yield.
    next: usize,
    len: usize,
    /// The order indices this iterator loads, ascending.
    visit: Arc<Vec<usize>>,
    order_len: usize,
    shared: Arc<Shared>,
    rx: Receiver<(usize, Result<Outcome, LoadError>)>,
    buffer: BTreeMap<usize, Result<Outcome, LoadError>>,
    handles: Vec<JoinHandle<()>>,
    inline: Option<InlineLoad>,
    skipped: Vec<SkippedSample>,
}

impl EpochIter {
    /// Position of the next sample this iterator will consider; save it with a checkpoint and
    /// pass it to [`DataLoader::resume`].
    pub fn position(&self) -> Position {
        Position { epoch: self.epoch, index: self.visit.get(self.next).copied().unwrap_or(self.order_len) }
    }

    /// Samples skipped so far (too long for `max_seq_len`, or failing under `skip_errors`).
    pub fn skipped(&self) -> &[SkippedSample] {
        &self.skipped
    }

    /// Samples this iterator still has to consider.
    pub fn remaining(&self) -> usize {
        self.len - self.next
    }

    /// The result for order index `self.next`, from the inline loader or the workers.
    fn fetch(&mut self) -> Result<Outcome, LoadError> {
        let k = self.next;
        if let Some(load) = &self.inline {
            return load(k);
        }
        loop {
            if let Some(r) = self.buffer.remove(&k) {
                return r;
            }
            match self.rx.recv() {
                Ok((i, r)) => {
                    self.buffer.insert(i, r);
                }
                Err(_) => return Err(LoadError::WorkersGone),
            }
        }
    }
}

impl Iterator for EpochIter {
    type Item = Result<LoadedSample, LoadError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.next < self.len {
            let result = match self.fetch() {
                Err(LoadError::WorkersGone) => {
                    // Nothing will ever arrive; end after reporting it once.
                    self.next = self.len;
                    return Some(Err(LoadError::WorkersGone));
                }
                r => r,
            };
            self.next += 1;
            {
                let mut st = self.shared.lock();
                st.next_yield = self.next;
            }
            self.shared.wake.notify_all();
            match result {
                Ok(Outcome::Sample(s)) => return Some(Ok(*s)),
                Ok(Outcome::Skipped(s)) => self.skipped.push(s),
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.len - self.next))
    }
}

impl Drop for EpochIter {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_all();
        // Workers blocked on a full window wake and exit; a worker mid-sample finishes it and
        // exits on its next check.
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// SplitMix64: tiny, fast and fully specified, so orders never change with a dependency.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Fisher–Yates with a generator seeded from `(seed, epoch)`; indices drawn by Lemire's
/// multiply-shift (bias below 2⁻³² for any realistic dataset).
fn shuffle(order: &mut [usize], seed: u64, epoch: u64) {
    let mut mix = SplitMix64(seed ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
    // Decorrelate nearby (seed, epoch) pairs before drawing.
    let mut rng = SplitMix64(mix.next_u64());
    for i in (1..order.len()).rev() {
        let j = ((u128::from(rng.next_u64()) * (i as u128 + 1)) >> 64) as usize;
        order.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_permutation_and_depends_on_seed_and_epoch() {
        let base: Vec<usize> = (0..100).collect();
        let mut a = base.clone();
        shuffle(&mut a, 7, 0);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, base);
        assert_ne!(a, base);
        let mut b = base.clone();
        shuffle(&mut b, 7, 0);
        assert_eq!(a, b);
        let mut c = base.clone();
        shuffle(&mut c, 7, 1);
        assert_ne!(a, c);
        let mut d = base.clone();
        shuffle(&mut d, 8, 0);
        assert_ne!(a, d);
    }

    #[test]
    fn splitmix_reference_values() {
        // First outputs for seed 0 of the reference SplitMix64 (Vigna).
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }
}
