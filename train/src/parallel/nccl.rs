//! [`NcclExchange`]: one process per GPU, summing with NCCL on the rank's CUDA stream, under a
//! watchdog. An NCCL collective whose peer hangs or died never returns by itself (the kernel
//! waits on the GPU, the host in the stream's synchronisation); the watchdog thread aborts the
//! communicator (`ncclCommAbort`, which NCCL lets another thread call on a hung operation) once
//! a collective has run longer than the collective timeout, so the rank fails with an error
//! instead of holding its GPU forever. The communicator is ours, not cudarc's `Comm`, because
//! the watchdog needs its handle.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use candle_core::cuda_backend::cudarc::driver::{CudaStream, DevicePtrMut};
use candle_core::cuda_backend::cudarc::nccl::{result, sys};
use candle_core::{CudaStorage, Device, InplaceOp1, Layout, Tensor};

use super::{GradExchange, Launch, ParallelError, Result, check_flat, share_unique_id};

/// The communicator's handle. NCCL allows `ncclCommAbort` from a thread other than the one
/// blocked in a collective; every other use stays on the rank's thread.
struct Handle(sys::ncclComm_t);

// SAFETY: the handle is an opaque pointer that NCCL synchronises internally for abort; the
// exchange issues collectives from one thread.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

/// What the rank's thread and the watchdog share.
struct Watch {
    comm: Handle,
    state: Mutex<WatchState>,
    wake: Condvar,
}

#[derive(Default)]
struct WatchState {
    /// When the collective in flight must have finished; `None` between collectives.
    deadline: Option<Instant>,
    /// The watchdog aborted the communicator: it must not be used, nor aborted again.
    aborted: bool,
    /// The exchange is being dropped: the watchdog returns.
    closing: bool,
}

impl Watch {
    fn lock(&self) -> MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The watchdog thread: sleeps until the armed deadline and aborts the communicator if the
    /// collective is still in flight then.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            if state.closing || state.aborted {
                return;
            }
            state = match state.deadline {
                None => self.wake.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner()),
                Some(deadline) if Instant::now() >= deadline => {
                    // SAFETY: the handle is live (not aborted, not dropped: `closing` is unset).
                    if let Err(e) = unsafe { result::comm_abort(self.comm.0) } {
                        eprintln!("NCCL watchdog: ncclCommAbort failed: {e:?}");
                    }
                    state.aborted = true;
                    state.deadline = None;
                    continue;
                }
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    self.wake.wait_timeout(state, left).unwrap_or_else(|poisoned| poisoned.into_inner()).0
                }
            };
        }
    }
}

/// One process per GPU, summing with NCCL on the rank's CUDA stream.
pub struct NcclExchange {
    watch: Arc<Watch>,
    watchdog: Option<JoinHandle<()>>,
    stream: Arc<CudaStream>,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    device: Device,
}

impl NcclExchange {
    /// Joins the group `launch` describes on `device` (this rank's GPU, `cuda:LOCAL_RANK`); a
    /// collective still running after `timeout` aborts the communicator and fails the rank.
    pub fn connect(launch: &Launch, device: &Device, timeout: Duration) -> Result<Self> {
        let Device::Cuda(cuda) = device else {
            return Err(ParallelError::NcclNeedsCuda { device: format!("{device:?}") });
        };
        let nccl = |what: &'static str| move |e: result::NcclError| ParallelError::Nccl { what, detail: format!("{e:?}") };
        let own =
            if launch.rank == 0 { Some(result::get_uniqueid().map_err(nccl("the group's unique id"))?.internal.map(|c| c as u8)) } else { None };
        let bytes = share_unique_id(launch, own)?;
        let id = sys::ncclUniqueId { internal: bytes.map(|b| b as std::ffi::c_char) };
        let (world, rank) = (i32::try_from(launch.world_size), i32::try_from(launch.rank));
        let (Ok(world), Ok(rank)) = (world, rank) else {
            return Err(ParallelError::Nccl {
                what: "ranks",
                detail: format!("rank {} of {} does not fit NCCL's int", launch.rank, launch.world_size),
            });
        };
        let mut comm = std::mem::MaybeUninit::uninit();
        // SAFETY: `comm` is written by NCCL before it is read; the id is the group's (rank 0's).
        let comm = unsafe {
            result::comm_init_rank(comm.as_mut_ptr(), world, id, rank).map_err(nccl("joining the communicator"))?;
            comm.assume_init()
        };
        let watch = Arc::new(Watch { comm: Handle(comm), state: Mutex::new(WatchState::default()), wake: Condvar::new() });
        let watchdog = {
            let watch = Arc::clone(&watch);
            std::thread::Builder::new()
                .name("nccl-watchdog".into())
                .spawn(move || watch.run())
                .map_err(|e| ParallelError::Nccl { what: "starting the watchdog thread", detail: e.to_string() })?
        };
        Ok(Self {
            watch,
            watchdog: Some(watchdog),
            stream: cuda.cuda_stream(),
            rank: launch.rank,
            world_size: launch.world_size,
            timeout,
            device: device.clone(),
        })
    }
}

impl GradExchange for NcclExchange {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn all_reduce_sum(&self, flat: &Tensor) -> Result<()> {
        check_flat(flat)?;
        {
            let mut state = self.watch.lock();
            if state.aborted {
                return Err(ParallelError::Aborted { waited: self.timeout });
            }
            state.deadline = Some(Instant::now() + self.timeout);
        }
        self.watch.wake.notify_one();
        // Enqueued on the stream, then waited for: the wait is what a hung peer blocks.
        let outcome = flat.inplace_op1(&NcclSum { comm: self.watch.comm.0, stream: &self.stream }).and_then(|()| self.device.synchronize());
        let aborted = {
            let mut state = self.watch.lock();
            state.deadline = None;
            state.aborted
        };
        if aborted {
            return Err(ParallelError::Aborted { waited: self.timeout });
        }
        Ok(outcome?)
    }
}

impl Drop for NcclExchange {
    fn drop(&mut self) {
        let aborted = {
            let mut state = self.watch.lock();
            state.closing = true;
            state.aborted
        };
        self.watch.wake.notify_one();
        if let Some(watchdog) = self.watchdog.take() {
            let _ = watchdog.join();
        }
        if !aborted {
            // SAFETY: the watchdog has returned and never aborted: the handle is live, and unused
            // from here on. Abort, not finalize: finalizing waits for peers that may be gone.
            if let Err(e) = unsafe { result::comm_abort(self.watch.comm.0) } {
                eprintln!("NCCL: releasing the communicator failed: {e:?}");
            }
        }
    }
}

/// The in-place sum of a contiguous f32 CUDA tensor over the group.
struct NcclSum<'a> {
    comm: sys::ncclComm_t,
    stream: &'a CudaStream,
}

impl InplaceOp1 for NcclSum<'_> {
    fn name(&self) -> &'static str {
        "nccl-all-reduce"
    }

    fn cpu_fwd(&self, _: &mut candle_core::CpuStorage, _: &Layout) -> candle_core::Result<()> {
        candle_core::bail!("nccl-all-reduce: the tensor is on the CPU; NCCL sums CUDA tensors")
    }

    fn cuda_fwd(&self, storage: &mut CudaStorage, layout: &Layout) -> candle_core::Result<()> {
        if layout.contiguous_offsets() != Some((0, layout.shape().elem_count())) {
            candle_core::bail!("nccl-all-reduce: needs a contiguous tensor from offset 0");
        }
        let slice = storage.as_cuda_slice_mut::<f32>()?;
        let count = slice.len();
        let (pointer, _written) = slice.device_ptr_mut(self.stream);
        // SAFETY: `pointer` holds `count` f32 on this rank's device, valid until `_written` drops
        // (after the enqueue, which is all NCCL needs of the host); the comm is live (checked by
        // the caller under the watch lock's `aborted`).
        unsafe {
            result::all_reduce(
                pointer as *const std::ffi::c_void,
                pointer as *mut std::ffi::c_void,
                count,
                sys::ncclDataType_t::ncclFloat32,
                sys::ncclRedOp_t::ncclSum,
                self.comm,
                self.stream.cu_stream() as _,
            )
        }
        .map_err(|e| candle_core::Error::Msg(format!("nccl-all-reduce: {e:?}")))?;
        Ok(())
    }
}
