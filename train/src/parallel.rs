//! Data parallel training: the gradient exchange between ranks, and how a rank learns its place.
//!
//! One small trait, [`GradExchange`], sums a flat f32 tensor across ranks in place. Three
//! implementations: [`ThreadExchange`], ranks as threads of one process (`train sft
//! --data-parallel N` on CPU, and the tests that prove the semantics); [`TcpExchange`], CPU
//! ranks as processes launched by torchrun or SLURM ([`Launch`]), summing through rank 0; and
//! `NcclExchange` (feature `nccl`), one process per GPU, with rank 0 handing NCCL's unique id to
//! the others ([`crate::rendezvous`]) and a watchdog aborting a collective that hangs.
//!
//! The trainer reduces the accumulated gradients in buckets ([`reduce_grads`]) before
//! clipping and the optimiser step, so every rank takes the identical step.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use candle_core::{CpuStorage, DType, Device, InplaceOp1, Layout, Tensor};

use crate::optim::Grads;
pub use crate::rendezvous::{Launch, Ranks, share_unique_id};

#[cfg(feature = "nccl")]
mod nccl;
mod tcp;
#[cfg(feature = "nccl")]
pub use nccl::NcclExchange;
pub use tcp::TcpExchange;

#[derive(Debug, thiserror::Error)]
pub enum ParallelError {
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    #[error("data parallel: rank {0} left the group (it failed, and its output tells why, or it was killed)")]
    PeerGone(usize),
    #[error("data parallel: rank {peer} sent nothing for {waited:?} (MOTIONVL_COLLECTIVE_TIMEOUT_S): it hangs, or its host is gone")]
    Stalled { peer: usize, waited: std::time::Duration },
    #[error(
        "data parallel: an NCCL collective ran longer than {waited:?} (MOTIONVL_COLLECTIVE_TIMEOUT_S): a rank hangs or is gone, and the communicator was aborted"
    )]
    Aborted { waited: std::time::Duration },
    #[error("data parallel: the connection to rank {peer}: {source}")]
    Link { peer: usize, source: std::io::Error },
    #[error(transparent)]
    Rendezvous(#[from] crate::rendezvous::RendezvousError),
    #[error("data parallel: all_reduce_sum takes a contiguous 1-D f32 tensor, got {dtype:?} {dims:?}")]
    NotFlat { dtype: DType, dims: Vec<usize> },
    #[error("data parallel: rank {from} sent {got} values to sum, rank {to} has {expected}: the ranks run different recipes or data")]
    SizeMismatch { from: usize, to: usize, got: usize, expected: usize },
    #[error("data parallel: rank {from} sent a frame only rank 0 sends")]
    UnexpectedFrame { from: usize },
    #[error("data parallel: configuring the connection to the group: {0}")]
    Socket(std::io::Error),
    #[error("data parallel: NCCL needs a CUDA device, the recipe gives {device}")]
    NcclNeedsCuda { device: String },
    #[error("data parallel: NCCL, {what}: {detail}")]
    Nccl { what: &'static str, detail: String },
}

type Result<T> = std::result::Result<T, ParallelError>;

/// Sums gradients across the ranks of one data-parallel group.
pub trait GradExchange {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// Where the exchanged buffers live (the CPU for threads, the rank's GPU for NCCL).
    fn device(&self) -> &Device;
    /// Replaces the contiguous 1-D f32 tensor `flat` (on [`device`](Self::device)) by its sum
    /// over all ranks. Every rank receives bit-identical values, so the ranks' weights never drift.
    fn all_reduce_sum(&self, flat: &Tensor) -> Result<()>;
}

/// Consecutive runs of `lens` holding at most `bucket_elems` values each (a longer one is a
/// run of its own): few, large exchanges instead of one per tensor.
fn buckets(lens: &[usize], bucket_elems: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < lens.len() {
        let (mut end, mut len) = (start + 1, lens[start]);
        while end < lens.len() && len + lens[end] <= bucket_elems {
            len += lens[end];
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

/// Sums an optimiser's accumulated gradients across ranks in buckets of at most
/// `bucket_elems` values: host gradients through a bucket on the exchange's device, device
/// gradients as buckets concatenated where they live.
pub fn reduce_grads(exchange: &dyn GradExchange, grads: Grads<'_>, bucket_elems: usize) -> Result<()> {
    let Grads { mut host, mut device } = grads;
    let lens: Vec<usize> = host.iter().map(|b| b.len()).collect();
    for run in buckets(&lens, bucket_elems) {
        let packed: Vec<f32> = host[run.clone()].iter().flat_map(|b| b.iter().copied()).collect();
        let bucket = Tensor::from_vec(packed, lens[run.clone()].iter().sum::<usize>(), exchange.device())?;
        exchange.all_reduce_sum(&bucket)?;
        let summed: Vec<f32> = bucket.to_vec1()?;
        let mut at = 0;
        for buffer in &mut host[run] {
            buffer.copy_from_slice(&summed[at..at + buffer.len()]);
            at += buffer.len();
        }
    }
    let lens: Vec<usize> = device.iter().map(|t| t.elem_count()).collect();
    for run in buckets(&lens, bucket_elems) {
        let flat: Vec<Tensor> = device[run.clone()].iter().map(|t| t.flatten_all()).collect::<candle_core::Result<_>>()?;
        let bucket = Tensor::cat(&flat, 0)?.contiguous()?;
        exchange.all_reduce_sum(&bucket)?;
        let mut at = 0;
        for grad in &mut device[run] {
            let n = grad.elem_count();
            **grad = bucket.narrow(0, at, n)?.reshape(grad.shape())?;
            at += n;
        }
    }
    Ok(())
}

/// A barrier that carries each rank's outcome: returns how many ranks vote `ok = false`, the
/// same on every rank, so that one rank's failure ends all of them instead of leaving the others
/// waiting in the next collective.
pub fn vote(exchange: &dyn GradExchange, ok: bool) -> Result<usize> {
    let failed = Tensor::new(&[f32::from(u8::from(!ok))], exchange.device())?;
    exchange.all_reduce_sum(&failed)?;
    Ok(failed.to_vec1::<f32>()?[0].round() as usize)
}

/// Whether every rank holds the same `fingerprint`, in one all-reduce: each of its bytes and
/// its square are summed over the ranks, and the bytes agree exactly when, for each,
/// world · Σb² = (Σb)² (equality in Cauchy–Schwarz). The sums stay exact in f32 up to 256 ranks.
pub fn all_agree(exchange: &dyn GradExchange, fingerprint: u64) -> Result<bool> {
    let bytes = fingerprint.to_le_bytes();
    let values: Vec<f32> = bytes.iter().map(|&b| f32::from(b)).chain(bytes.iter().map(|&b| f32::from(b) * f32::from(b))).collect();
    let sums = Tensor::from_vec(values, 16, exchange.device())?;
    exchange.all_reduce_sum(&sums)?;
    let sums: Vec<f32> = sums.to_vec1()?;
    let world = exchange.world_size() as f64;
    Ok((0..8).all(|i| world * f64::from(sums[8 + i]) == f64::from(sums[i]) * f64::from(sums[i])))
}

/// Ranks as threads of one process: each deposits its buffer, waits for all, and sums every
/// rank's buffer in rank order, so all ranks compute the same sum bit for bit.
pub struct ThreadExchange {
    rank: usize,
    group: Arc<ThreadGroup>,
    device: Device,
}

struct ThreadGroup {
    world: usize,
    state: Mutex<GroupState>,
    wake: Condvar,
}

struct GroupState {
    slots: Vec<Vec<f32>>,
    arrived: usize,
    generation: u64,
    /// A rank whose exchange was dropped (its trainer failed): the others stop waiting.
    gone: Option<usize>,
}

impl ThreadExchange {
    /// The `world` members of a new group, rank 0 first.
    pub fn group(world: usize) -> Vec<ThreadExchange> {
        let group = Arc::new(ThreadGroup {
            world,
            state: Mutex::new(GroupState { slots: vec![Vec::new(); world], arrived: 0, generation: 0, gone: None }),
            wake: Condvar::new(),
        });
        (0..world).map(|rank| ThreadExchange { rank, group: Arc::clone(&group), device: Device::Cpu }).collect()
    }

    fn lock(&self) -> MutexGuard<'_, GroupState> {
        // The state is a few counters and buffers that stay consistent even if a holder panicked.
        self.group.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Blocks until every rank has arrived at this barrier.
    fn barrier<'a>(&'a self, mut st: MutexGuard<'a, GroupState>) -> Result<MutexGuard<'a, GroupState>> {
        if let Some(rank) = st.gone {
            return Err(ParallelError::PeerGone(rank));
        }
        st.arrived += 1;
        if st.arrived == self.group.world {
            st.arrived = 0;
            st.generation += 1;
            self.group.wake.notify_all();
            return Ok(st);
        }
        let generation = st.generation;
        while st.generation == generation {
            if let Some(rank) = st.gone {
                return Err(ParallelError::PeerGone(rank));
            }
            st = self.group.wake.wait(st).unwrap_or_else(|poisoned| poisoned.into_inner());
        }
        Ok(st)
    }

    fn sum_in_place(&self, values: &mut [f32]) -> Result<()> {
        let mut st = self.lock();
        st.slots[self.rank].clear();
        st.slots[self.rank].extend_from_slice(values);
        st = self.barrier(st)?;
        for (i, v) in values.iter_mut().enumerate() {
            *v = st.slots.iter().map(|slot| slot[i]).sum();
        }
        // Nobody refills a slot before every rank has read them all.
        drop(self.barrier(st)?);
        Ok(())
    }
}

impl Drop for ThreadExchange {
    fn drop(&mut self) {
        let mut st = self.lock();
        if st.gone.is_none() {
            st.gone = Some(self.rank);
        }
        self.group.wake.notify_all();
    }
}

impl GradExchange for ThreadExchange {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.group.world
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn all_reduce_sum(&self, flat: &Tensor) -> Result<()> {
        sum_on_host(flat, |values| self.sum_in_place(values))
    }
}

fn check_flat(flat: &Tensor) -> Result<()> {
    if flat.dtype() != DType::F32 || flat.rank() != 1 || !flat.is_contiguous() {
        return Err(ParallelError::NotFlat { dtype: flat.dtype(), dims: flat.dims().to_vec() });
    }
    Ok(())
}

/// Replaces the CPU tensor `flat` in place by what `sum` makes of its values: the exchanges
/// whose ranks meet on the host.
fn sum_on_host(flat: &Tensor, sum: impl Fn(&mut [f32]) -> Result<()>) -> Result<()> {
    check_flat(flat)?;
    let op = HostSum { sum, outcome: Mutex::new(Ok(())) };
    flat.inplace_op1(&op)?;
    op.outcome.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The in-place CPU op behind [`sum_on_host`]; the exchange's own error travels back through
/// `outcome` (candle's op error type cannot carry it).
struct HostSum<F> {
    sum: F,
    outcome: Mutex<Result<()>>,
}

impl<F: Fn(&mut [f32]) -> Result<()>> InplaceOp1 for HostSum<F> {
    fn name(&self) -> &'static str {
        "host-all-reduce"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> candle_core::Result<()> {
        let (CpuStorage::F32(values), Some((lo, hi))) = (storage, layout.contiguous_offsets()) else {
            candle_core::bail!("host-all-reduce: needs contiguous f32 storage")
        };
        let result = (self.sum)(&mut values[lo..hi]);
        *self.outcome.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = result;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_sum_buckets_identically_on_every_rank() {
        assert_eq!(buckets(&[3, 2, 7], 5), [0..2, 2..3]);
        assert_eq!(buckets(&[4, 1], 5), vec![0..2]);
        let handles: Vec<_> = ThreadExchange::group(3)
            .into_iter()
            .map(|ex| {
                std::thread::spawn(move || {
                    let r = ex.rank() as f32;
                    // Every entry depends on the rank and on its place, and no two sums agree, so
                    // a buffer moved, reversed or shifted inside its bucket changes the result.
                    let mut a = vec![r, 1.0 + r * r, 5.0 - 2.0 * r];
                    let mut b = vec![10.0 + r, -r * r];
                    let mut c: Vec<f32> = (0..7).map(|k| r * k as f32 + (k * k) as f32 / 4.0).collect();
                    // Tensors: the path GPU gradients take.
                    let mut d = Tensor::new(&[[r, 2.0 + r * r], [3.0 - r, 4.0 * r]], &Device::Cpu).expect("tensor");
                    let mut e = Tensor::new(&[1.0 + r * r], &Device::Cpu).expect("tensor");
                    // Buckets of 5: [a b] packed together, [c] alone (longer than a bucket), [d e].
                    let grads = Grads { host: vec![&mut a, &mut b, &mut c], device: vec![&mut d, &mut e] };
                    reduce_grads(&ex, grads, 5)?;
                    Ok::<_, ParallelError>((a, b, c, d.to_vec2::<f32>()?, e.to_vec1::<f32>()?))
                })
            })
            .collect();
        // Sums over r = 0, 1, 2 by hand (Σr = 3, Σr² = 5); c[k] sums to 3k + 3k²/4.
        for h in handles {
            let (a, b, c, d, e) = h.join().expect("rank thread").expect("reduced");
            assert_eq!(a, [3.0, 8.0, 9.0]);
            assert_eq!(b, [33.0, -5.0]);
            assert_eq!(c, [0.0, 3.75, 9.0, 15.75, 24.0, 33.75, 45.0]);
            assert_eq!(d, [[3.0, 11.0], [6.0, 12.0]]);
            assert_eq!(e, [8.0]);
        }
    }

    #[test]
    fn a_failed_rank_releases_the_others() {
        let mut group = ThreadExchange::group(2);
        let survivor = group.remove(1);
        drop(group);
        let t = Tensor::new(&[1f32], &Device::Cpu).expect("tensor");
        let err = survivor.all_reduce_sum(&t).expect_err("rank 0 is gone");
        assert!(err.to_string().contains("rank 0 left"), "{err}");
    }
}
