//! Which samples make each micro-batch, and which rank reads it.
//!
//! An epoch's micro-batches are its usable samples (its order, less those too long for
//! `max_seq_len` even fitted) in runs of `batch_size`, the last run shorter; micro-batches are
//! numbered across epochs (`global = epoch × per_epoch + chunk`). An optimiser step takes
//! `grad_accum × world` consecutive micro-batches, and rank `r` reads the `r`-th run of
//! `grad_accum` of them. The split is a function of the micro-batch number alone, so 2 ranks ×
//! `grad_accum` 4 train on exactly the micro-batches of 1 rank × `grad_accum` 8, and a
//! checkpoint's position (the first sample of the next step's first micro-batch) resumes at
//! any world size.

use motionvl_data::budget::SampleFit;
use motionvl_data::loader::{DataLoader, EpochIter, LoadError, LoadedSample, MediaProcessor, Position, SkippedSample};

/// The numbering of micro-batches, and this rank's share of each step.
#[derive(Debug, Clone)]
pub struct MicroPlan {
    /// Per dataset index: whether the loader can yield it (not too long for `max_seq_len`).
    usable: Vec<bool>,
    batch: usize,
    per_epoch: u64,
    accum: usize,
    world: usize,
    rank: usize,
}

impl MicroPlan {
    /// `fits` is the start-up data check's verdict per dataset index (empty: all usable).
    pub fn new(fits: &[Option<SampleFit>], len: usize, batch: usize, accum: usize, rank: usize, world: usize) -> Self {
        let usable: Vec<bool> = (0..len).map(|i| !matches!(fits.get(i), Some(Some(SampleFit::TooLong { .. })))).collect();
        let batch = batch.max(1);
        let count = usable.iter().filter(|u| **u).count();
        MicroPlan { usable, batch, per_epoch: count.div_ceil(batch).max(1) as u64, accum: accum.max(1), world: world.max(1), rank }
    }

    /// Micro-batches one optimiser step takes over all ranks.
    /// A digest of the numbering every rank must share (which samples are usable, batch,
    /// accumulation, world size), for the ranks to check they agree.
    pub fn layout_digest(&self) -> [u8; 32] {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for n in [self.batch as u64, self.per_epoch, self.accum as u64, self.world as u64, self.usable.len() as u64] {
            h.update(n.to_le_bytes());
        }
        h.update(self.usable.iter().map(|&u| u8::from(u)).collect::<Vec<u8>>());
        h.finalize().into()
    }

    pub fn per_step(&self) -> u64 {
        (self.accum * self.world) as u64
    }

    /// The global numbers of the micro-batches this rank reads in the step that starts at
    /// micro-batch `first`.
    pub fn rank_micros(&self, first: u64) -> std::ops::Range<u64> {
        let start = first + (self.rank * self.accum) as u64;
        start..start + self.accum as u64
    }

    /// The epoch micro-batch `micro` belongs to.
    pub fn epoch_of(&self, micro: u64) -> u64 {
        micro / self.per_epoch
    }

    /// Epoch `order`'s micro-batches as order indices.
    fn chunks(&self, order: &[usize]) -> Vec<Vec<usize>> {
        let usable: Vec<usize> = (0..order.len()).filter(|&k| self.usable.get(order[k]).copied().unwrap_or(true)).collect();
        usable.chunks(self.batch).map(<[usize]>::to_vec).collect()
    }

    /// The first micro-batch at or after `position` (a checkpoint's next sample).
    pub fn micro_at<P: MediaProcessor + 'static>(&self, loader: &DataLoader<P>, position: Position) -> u64 {
        let order = loader.order(position.epoch);
        let before = (0..position.index.min(order.len())).filter(|&k| self.usable.get(order[k]).copied().unwrap_or(true)).count();
        position.epoch * self.per_epoch + before.div_ceil(self.batch) as u64
    }

    /// Where micro-batch `micro` starts: what a checkpoint saves.
    pub fn position_of<P: MediaProcessor + 'static>(&self, loader: &DataLoader<P>, micro: u64) -> Position {
        let epoch = self.epoch_of(micro);
        let order = loader.order(epoch);
        let chunk = (micro % self.per_epoch) as usize;
        let index = self.chunks(&order).get(chunk).and_then(|c| c.first().copied()).unwrap_or(order.len());
        Position { epoch, index }
    }
}

/// The micro-batches of one rank, loaded ahead by the loader's workers one epoch at a time.
pub struct RankBatches {
    plan: MicroPlan,
    /// First micro-batch of the step the run (re)started at: steps are counted from it.
    origin: u64,
    current: Option<EpochReader>,
}

struct EpochReader {
    epoch: u64,
    /// Order indices per micro-batch of the epoch.
    chunks: Vec<Vec<usize>>,
    iter: EpochIter,
    /// Skips already reported to the trainer.
    reported: usize,
    yielded: usize,
    /// Whether this reader started at the epoch's first micro-batch.
    from_start: bool,
}

/// One micro-batch as this rank read it.
pub struct Micro {
    pub samples: Vec<LoadedSample>,
    /// Samples the loader left out while reading it (logged by the trainer).
    pub skipped: Vec<SkippedSample>,
}

#[derive(Debug, thiserror::Error)]
pub enum MicroError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error("epoch {epoch} yielded no sample: all {skipped} were skipped (the reasons are in train.log)")]
    EmptyEpoch { epoch: u64, skipped: usize },
}

impl RankBatches {
    /// Reads from the step that starts at micro-batch `origin` on.
    pub fn new(plan: MicroPlan, origin: u64) -> Self {
        RankBatches { plan, origin, current: None }
    }

    pub fn plan(&self) -> &MicroPlan {
        &self.plan
    }

    fn owned(&self, micro: u64) -> bool {
        micro >= self.origin && ((micro - self.origin) % self.plan.per_step()) as usize / self.plan.accum == self.plan.rank
    }

    /// The samples of micro-batch `micro`, which this rank must own; calls come in increasing order.
    pub fn take<P: MediaProcessor + 'static>(&mut self, loader: &DataLoader<P>, micro: u64) -> Result<Micro, MicroError> {
        let epoch = self.plan.epoch_of(micro);
        let chunk = (micro % self.plan.per_epoch) as usize;
        if self.current.as_ref().is_none_or(|r| r.epoch != epoch) {
            if let Some(done) = self.current.take() {
                done.finish()?;
            }
            let chunks = self.plan.chunks(&loader.order(epoch));
            let first = epoch * self.plan.per_epoch;
            let visit: Vec<usize> = (chunk..chunks.len()).filter(|&c| self.owned(first + c as u64)).flat_map(|c| chunks[c].iter().copied()).collect();
            let iter = loader.visit(epoch, visit)?;
            self.current = Some(EpochReader { epoch, chunks, iter, reported: 0, yielded: 0, from_start: chunk == 0 });
        }
        let Some(reader) = self.current.as_mut() else { unreachable!("set above") };
        let want = reader.chunks.get(chunk).map_or(0, Vec::len);
        let mut samples = Vec::with_capacity(want);
        while samples.len() + reader.iter.skipped().len() - reader.reported < want {
            match reader.iter.next() {
                Some(sample) => samples.push(sample?),
                None => break,
            }
        }
        let skipped = reader.iter.skipped()[reader.reported..].to_vec();
        reader.reported = reader.iter.skipped().len();
        reader.yielded += samples.len();
        Ok(Micro { samples, skipped })
    }
}

impl EpochReader {
    /// An epoch this rank read whole without a single sample is an error, never an endless loop.
    fn finish(self) -> Result<(), MicroError> {
        if self.from_start && self.yielded == 0 && self.reported > 0 {
            return Err(MicroError::EmptyEpoch { epoch: self.epoch, skipped: self.reported });
        }
        Ok(())
    }
}
