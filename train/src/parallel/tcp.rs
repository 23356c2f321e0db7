//! The CPU process group: ranks launched as processes (torchrun, srun, or by hand with the same
//! environment) sum over TCP through rank 0, on the connections the rendezvous authenticated.
//!
//! A star, not a ring: every rank sends its buffer to rank 0, which sums the ranks' values in
//! rank order (the order [`ThreadExchange`](super::ThreadExchange) sums in, so threads and
//! processes take the same steps bit for bit) and sends the sum back. LoRA gradients are small,
//! and one hub keeps a dead rank's failure a single, named event: rank 0 tells the others which
//! rank went, and every wait has a limit.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use candle_core::{Device, Tensor};

use super::{GradExchange, Launch, ParallelError, Result, sum_on_host};
use crate::rendezvous::{RENDEZVOUS_TIMEOUT, Star, connect_star};

/// A frame: 4-byte tag, then a little-endian u64 (the values that follow, or the lost rank).
const SUM: &[u8; 4] = b"MVSM";
/// Rank 0 to the others: the rank the frame names left the group.
const GONE: &[u8; 4] = b"MVGN";

/// One process of a CPU data-parallel group.
pub struct TcpExchange {
    rank: usize,
    world: usize,
    star: Star,
    /// How long a rank waits for a peer within one collective.
    timeout: Duration,
    device: Device,
}

impl TcpExchange {
    /// Joins the group `launch` describes; every collective then waits at most `timeout` for a
    /// peer (the slowest rank's work between two collectives must fit in it).
    pub fn connect(launch: &Launch, timeout: Duration) -> Result<Self> {
        let star = connect_star(launch, RENDEZVOUS_TIMEOUT)?;
        let streams = match &star {
            Star::Hub(ranks) => ranks.iter().collect::<Vec<_>>(),
            Star::Spoke(root) => vec![root],
        };
        for stream in streams {
            stream
                .set_read_timeout(Some(timeout))
                .and_then(|()| stream.set_write_timeout(Some(timeout)))
                .and_then(|()| stream.set_nodelay(true))
                .map_err(ParallelError::Socket)?;
        }
        Ok(Self { rank: launch.rank, world: launch.world_size, star, timeout, device: Device::Cpu })
    }

    /// What a failed read or write from `peer` means for the group.
    fn lost(&self, peer: usize, e: std::io::Error) -> ParallelError {
        match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => ParallelError::Stalled { peer, waited: self.timeout },
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
                ParallelError::PeerGone(peer)
            }
            _ => ParallelError::Link { peer, source: e },
        }
    }

    /// Rank 0: gathers every rank's values, sums them in rank order, returns the sum to all.
    fn hub_sum(&self, ranks: &[TcpStream], values: &mut [f32]) -> Result<()> {
        let mut gathered = Vec::with_capacity(ranks.len());
        for (i, mut stream) in ranks.iter().enumerate() {
            let peer = i + 1;
            let received = read_frame(&mut stream).map_err(|e| self.lost(peer, e)).and_then(|frame| match frame {
                Frame::Sum(v) if v.len() == values.len() => Ok(v),
                Frame::Sum(v) => Err(ParallelError::SizeMismatch { from: peer, to: 0, got: v.len(), expected: values.len() }),
                Frame::Gone(_) => Err(ParallelError::UnexpectedFrame { from: peer }),
            });
            match received {
                Ok(v) => gathered.push(v),
                Err(e) => return Err(self.abort(ranks, peer, e)),
            }
        }
        for (i, v) in values.iter_mut().enumerate() {
            *v = std::iter::once(*v).chain(gathered.iter().map(|g| g[i])).sum();
        }
        let frame = sum_frame(values);
        for (i, mut stream) in ranks.iter().enumerate() {
            if let Err(e) = stream.write_all(&frame) {
                return Err(self.abort(ranks, i + 1, self.lost(i + 1, e)));
            }
        }
        Ok(())
    }

    /// Tells every rank but `peer` that `peer` left (best effort: they may be gone too), and
    /// returns `error` for rank 0 to report.
    fn abort(&self, ranks: &[TcpStream], peer: usize, error: ParallelError) -> ParallelError {
        let mut frame = GONE.to_vec();
        frame.extend((peer as u64).to_le_bytes());
        for (_, mut stream) in ranks.iter().enumerate().filter(|(i, _)| i + 1 != peer) {
            let _ = stream.write_all(&frame);
        }
        error
    }

    /// Any other rank: sends its values to rank 0 and reads back the sum.
    fn spoke_sum(&self, mut root: &TcpStream, values: &mut [f32]) -> Result<()> {
        root.write_all(&sum_frame(values)).map_err(|e| self.lost(0, e))?;
        match read_frame(&mut root).map_err(|e| self.lost(0, e))? {
            Frame::Sum(sum) if sum.len() == values.len() => {
                values.copy_from_slice(&sum);
                Ok(())
            }
            Frame::Sum(sum) => Err(ParallelError::SizeMismatch { from: 0, to: self.rank, got: sum.len(), expected: values.len() }),
            Frame::Gone(rank) => Err(ParallelError::PeerGone(rank)),
        }
    }
}

enum Frame {
    Sum(Vec<f32>),
    Gone(usize),
}

fn sum_frame(values: &[f32]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(12 + 4 * values.len());
    frame.extend(SUM);
    frame.extend((values.len() as u64).to_le_bytes());
    frame.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    frame
}

fn read_frame(stream: &mut impl Read) -> std::io::Result<Frame> {
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    let n = u64::from_le_bytes(head[4..].try_into().expect("8 bytes"));
    let invalid = |what: String| std::io::Error::new(ErrorKind::InvalidData, what);
    match &head[..4] {
        tag if tag == GONE => Ok(Frame::Gone(usize::try_from(n).map_err(|_| invalid(format!("rank {n}")))?)),
        tag if tag == SUM => {
            // Beyond the largest bucket the trainer sends: a corrupt or foreign stream.
            if n > 1 << 30 {
                return Err(invalid(format!("a frame of {n} values")));
            }
            let mut bytes = vec![0u8; 4 * n as usize];
            stream.read_exact(&mut bytes)?;
            Ok(Frame::Sum(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect()))
        }
        tag => Err(invalid(format!("unknown frame tag {tag:?}"))),
    }
}

impl GradExchange for TcpExchange {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world
    }

    fn device(&self) -> &Device {
        &self.device
    }

    fn all_reduce_sum(&self, flat: &Tensor) -> Result<()> {
        sum_on_host(flat, |values| match &self.star {
            Star::Hub(ranks) => self.hub_sum(ranks, values),
            Star::Spoke(root) => self.spoke_sum(root, values),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn launch(rank: usize, world: usize, port: u16) -> Launch {
        Launch { rank, world_size: world, local_rank: rank, master_addr: "127.0.0.1".into(), master_port: port, token: "tcp-test".into() }
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
    }

    /// Rank `r`'s values: distinct per rank and place, and two whose f32 sum depends on the
    /// order (1e8 + 1 rounds back to 1e8: in rank order the first sums to 0, the second to 1).
    fn values(r: usize) -> [f32; 5] {
        let x = r as f32;
        [x, 1.0 + x * x, 5.0 - 2.0 * x, [1e8, 1.0, -1e8][r], [-1e8, 1e8, 1.0][r]]
    }

    fn sum_over<E: GradExchange + Send + 'static>(ranks: Vec<Box<dyn FnOnce() -> Result<E> + Send>>) -> Vec<Vec<f32>> {
        let handles: Vec<_> = ranks
            .into_iter()
            .enumerate()
            .map(|(rank, join)| {
                std::thread::spawn(move || {
                    let ex = join()?;
                    let t = Tensor::new(&values(rank), &Device::Cpu)?;
                    ex.all_reduce_sum(&t)?;
                    Ok::<_, ParallelError>(t.to_vec1::<f32>()?)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank").expect("summed")).collect()
    }

    #[test]
    fn processes_sum_as_threads_do_bit_for_bit() {
        let port = free_port();
        let world = 3;
        let joins: Vec<Box<dyn FnOnce() -> Result<TcpExchange> + Send>> = (0..world)
            .map(|rank| Box::new(move || TcpExchange::connect(&launch(rank, world, port), Duration::from_secs(60))) as Box<dyn FnOnce() -> _ + Send>)
            .collect();
        let over_tcp = sum_over(joins);
        let threads: Vec<Box<dyn FnOnce() -> Result<super::super::ThreadExchange> + Send>> =
            super::super::ThreadExchange::group(world).into_iter().map(|ex| Box::new(move || Ok(ex)) as Box<dyn FnOnce() -> _ + Send>).collect();
        let over_threads = sum_over(threads);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for (tcp, thread) in over_tcp.iter().zip(&over_threads) {
            assert_eq!(bits(tcp), bits(thread), "tcp {tcp:?} vs threads {thread:?}");
            assert_eq!(tcp[..], [3.0, 8.0, 9.0, 0.0, 1.0], "sums in rank order");
        }
    }

    #[test]
    fn a_rank_that_leaves_is_named_to_every_other() {
        let port = free_port();
        let world = 3;
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                std::thread::spawn(move || {
                    let ex = TcpExchange::connect(&launch(rank, world, port), Duration::from_secs(60))?;
                    if rank == 2 {
                        // Leaves after joining: its connection closes.
                        return Ok(Vec::new());
                    }
                    let t = Tensor::new(&[1f32, 2.0], &Device::Cpu)?;
                    ex.all_reduce_sum(&t)?;
                    Ok::<_, ParallelError>(t.to_vec1::<f32>()?)
                })
            })
            .collect();
        let outcomes: Vec<_> = handles.into_iter().map(|h| h.join().expect("rank")).collect();
        for outcome in &outcomes[..2] {
            let err = outcome.as_ref().expect_err("rank 2 is gone");
            assert!(err.to_string().contains("rank 2 left"), "{err}");
        }
    }

    #[test]
    fn a_silent_peer_ends_in_an_error_not_a_hang() {
        let port = free_port();
        let spoke = std::thread::spawn(move || TcpExchange::connect(&launch(1, 2, port), Duration::from_millis(300)));
        let hub = TcpExchange::connect(&launch(0, 2, port), Duration::from_millis(300)).expect("rank 0");
        let _quiet = spoke.join().expect("rank 1").expect("joined");
        let err = hub.all_reduce_sum(&Tensor::new(&[1f32], &Device::Cpu).expect("tensor")).expect_err("rank 1 never sends");
        assert!(err.to_string().contains("rank 1 sent nothing for 300ms"), "{err}");
    }
}
