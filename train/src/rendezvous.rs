//! How the processes of a launched group find each other: where this process sits
//! ([`Launch`], from torchrun's or srun's environment), the hand-over of NCCL's unique id from
//! rank 0 to the others ([`share_unique_id`]), and the connections that hand-over leaves
//! ([`connect_star`]): one from every rank to rank 0, which the CPU process group sums over.
//!
//! The hand-over is a TCP exchange that no stranger can join or stall. Each rank sends a hello
//! naming the protocol, the job (`SLURM_JOB_ID`, `TORCHELASTIC_RUN_ID`, or
//! `MOTIONVL_RDZV_TOKEN`), its rank and the world size; rank 0 answers only a matching hello
//! from a rank it has not served, so a port scan, a health check or another job's rank takes no
//! slot. Every wait has a limit: a rank that cannot get the id, and a rank 0 that does not hear
//! from every rank, fail with an error rather than hang. Under torchrun, whose agent already
//! holds `MASTER_PORT` for its own store, the exchange uses the next port.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// What can go wrong finding the group.
#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("data parallel: environment variable {key}: {problem}")]
    Env { key: &'static str, problem: String },
    #[error("data parallel: rendezvous with rank 0 at {addr}: {source}")]
    Io { addr: String, source: std::io::Error },
    #[error(
        "data parallel: rank 0 at {addr} heard from {joined} of {expected} ranks within {seconds} s; the others did not start, or run another job (token `{token}`)"
    )]
    Incomplete { addr: String, joined: usize, expected: usize, seconds: u64, token: String },
    #[error(
        "data parallel: rank {rank} got no id from rank 0 at {addr} within {seconds} s (it did not start, or belongs to another job: token `{token}`)"
    )]
    NoId { addr: String, rank: usize, seconds: u64, token: String },
    #[error("data parallel: rank 0 has no unique id to share")]
    NoId0,
}

type Result<T> = std::result::Result<T, RendezvousError>;

/// Where this process sits in a launched group and how it reaches rank 0: its [`Ranks`], and
/// `MASTER_ADDR` and `MASTER_PORT` (torchrun's, or exported by the job script under SLURM).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    pub rank: usize,
    pub world_size: usize,
    /// This process's place among those of its node.
    pub local_rank: usize,
    pub master_addr: String,
    /// The port of the id hand-over: `MASTER_PORT`, or the next one under torchrun.
    pub master_port: u16,
    /// What tells this job's ranks from another's at the hand-over.
    pub token: String,
}

/// Where this process sits among the ranks of a launch, read from the launcher's environment
/// alone: all that work split by rank needs (`flow extract`), without a rendezvous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ranks {
    pub rank: usize,
    pub world_size: usize,
    /// This process's place among those of its node.
    pub local_rank: usize,
}

impl Ranks {
    /// The ranks described by `var` (the process environment: `|k| std::env::var(k).ok()`):
    /// torchrun's `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, or srun's `SLURM_PROCID`, `SLURM_NTASKS`,
    /// `SLURM_LOCALID`; `None` when there is no launcher or the world is one process. SLURM's
    /// task variables count only inside a job step (`srun`, which sets `SLURM_STEP_ID`): a batch
    /// script's own shell sees `SLURM_NTASKS` too, and a plain command there runs alone.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Ranks>> {
        let keys = if var("WORLD_SIZE").is_some() {
            ("WORLD_SIZE", "RANK", "LOCAL_RANK")
        } else if var("SLURM_NTASKS").is_some() && var("SLURM_STEP_ID").is_some() {
            ("SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID")
        } else {
            return Ok(None);
        };
        let (world_key, rank_key, local_key) = keys;
        let number = |key: &'static str| -> Result<usize> {
            let value = var(key).ok_or_else(|| RendezvousError::Env { key, problem: format!("not set, but {world_key} is") })?;
            value.trim().parse().map_err(|_| RendezvousError::Env { key, problem: format!("`{value}` is not a number") })
        };
        let world_size = number(world_key)?;
        if world_size <= 1 {
            return Ok(None);
        }
        let rank = number(rank_key)?;
        if rank >= world_size {
            return Err(RendezvousError::Env { key: rank_key, problem: format!("{rank} is not below {world_key} = {world_size}") });
        }
        Ok(Some(Ranks { rank, world_size, local_rank: number(local_key)? }))
    }

    /// The CUDA ordinal of this rank's GPU among those it can see (`CUDA_VISIBLE_DEVICES`):
    /// `srun --gpus-per-task 1` shows each task its one GPU as device 0, torchrun shows every
    /// process all of the node's.
    pub fn cuda_ordinal(&self, visible_devices: Option<&str>) -> usize {
        match visible_devices.map(|v| v.split(',').filter(|d| !d.trim().is_empty()).count()) {
            Some(visible) if visible >= 1 => self.local_rank % visible,
            _ => self.local_rank,
        }
    }
}

impl Launch {
    /// The launch described by `var` (see [`Ranks::from_vars`]), with `MASTER_ADDR` (exported
    /// by the job script under SLURM) and `MASTER_PORT` (default 29500).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>> {
        let Some(Ranks { rank, world_size, local_rank }) = Ranks::from_vars(&var)? else { return Ok(None) };
        let master_addr = var("MASTER_ADDR").ok_or_else(|| RendezvousError::Env {
            key: "MASTER_ADDR",
            problem: "not set: export the host of rank 0 (under SLURM: `export MASTER_ADDR=$(scontrol show hostnames | head -n1)`)".into(),
        })?;
        let master_port: u16 = match var("MASTER_PORT") {
            None => 29500,
            Some(p) => p.trim().parse().map_err(|_| RendezvousError::Env { key: "MASTER_PORT", problem: format!("`{p}` is not a port") })?,
        };
        // torchrun's elastic agent serves its TCPStore on MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE).
        let agent_store = var("TORCHELASTIC_USE_AGENT_STORE").is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let master_port = if agent_store {
            master_port
                .checked_add(1)
                .ok_or_else(|| RendezvousError::Env { key: "MASTER_PORT", problem: "65535 leaves no port beside torchrun's store".into() })?
        } else {
            master_port
        };
        let token = ["MOTIONVL_RDZV_TOKEN", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"].into_iter().find_map(&var).unwrap_or_default();
        Ok(Some(Launch { rank, world_size, local_rank, master_addr, master_port, token }))
    }

    /// This rank's GPU: see [`Ranks::cuda_ordinal`].
    pub fn cuda_ordinal(&self, visible_devices: Option<&str>) -> usize {
        Ranks { rank: self.rank, world_size: self.world_size, local_rank: self.local_rank }.cuda_ordinal(visible_devices)
    }
}

/// How long the hand-over may take: ranks start minutes apart on a busy cluster.
pub const RENDEZVOUS_TIMEOUT: Duration = Duration::from_secs(300);

/// How long rank 0 waits for one connection's hello, and a rank for rank 0's answer.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

const MAGIC: &[u8; 8] = b"MVLRDZV1";

/// A rank's hello: magic, rank, world size, token.
fn hello(launch: &Launch) -> Vec<u8> {
    let token = launch.token.as_bytes();
    let mut out = MAGIC.to_vec();
    out.extend((launch.rank as u32).to_le_bytes());
    out.extend((launch.world_size as u32).to_le_bytes());
    out.extend((token.len().min(u16::MAX as usize) as u16).to_le_bytes());
    out.extend(&token[..token.len().min(u16::MAX as usize)]);
    out
}

/// The rank a connection's hello names, when it is one of `launch`'s group.
fn read_hello(stream: &mut TcpStream, launch: &Launch) -> Option<usize> {
    let mut head = [0u8; 18];
    stream.read_exact(&mut head).ok()?;
    let rank = u32::from_le_bytes(head[8..12].try_into().ok()?) as usize;
    let world = u32::from_le_bytes(head[12..16].try_into().ok()?) as usize;
    let len = u16::from_le_bytes(head[16..18].try_into().ok()?) as usize;
    let mut token = vec![0u8; len];
    stream.read_exact(&mut token).ok()?;
    (&head[..8] == MAGIC && world == launch.world_size && (1..world).contains(&rank) && token == launch.token.as_bytes()).then_some(rank)
}

/// Rank 0 hands `id` (NCCL's unique id, 128 bytes) to every other rank and returns it; the
/// others return what they receive. Within [`RENDEZVOUS_TIMEOUT`].
pub fn share_unique_id(launch: &Launch, id: Option<[u8; 128]>) -> Result<[u8; 128]> {
    share_unique_id_within(launch, id, RENDEZVOUS_TIMEOUT)
}

/// [`share_unique_id`] with its own time limit.
pub fn share_unique_id_within(launch: &Launch, id: Option<[u8; 128]>, limit: Duration) -> Result<[u8; 128]> {
    rendezvous(launch, id, limit).map(|(id, _)| id)
}

/// The connections of a star around rank 0, each one a rank whose hello named this job.
#[derive(Debug)]
pub enum Star {
    /// Rank 0: one connection per other rank, ranks 1, 2, … in order.
    Hub(Vec<TcpStream>),
    /// Any other rank: its connection to rank 0.
    Spoke(TcpStream),
}

/// The group's star of authenticated connections (the same hand-over as
/// [`share_unique_id_within`], within `limit`).
pub fn connect_star(launch: &Launch, limit: Duration) -> Result<Star> {
    let own = (launch.rank == 0).then_some([0; 128]);
    rendezvous(launch, own, limit).map(|(_, star)| star)
}

/// The hand-over itself: rank 0 serves `id` to one hello-authenticated connection per rank and
/// keeps them; the others keep theirs to rank 0.
fn rendezvous(launch: &Launch, id: Option<[u8; 128]>, limit: Duration) -> Result<([u8; 128], Star)> {
    let addr = format!("{}:{}", launch.master_addr, launch.master_port);
    let io = |source| RendezvousError::Io { addr: addr.clone(), source };
    let deadline = Instant::now() + limit;
    if launch.rank == 0 {
        let id = id.ok_or(RendezvousError::NoId0)?;
        // MASTER_ADDR's interface when it is this host's; every interface otherwise (a name the
        // others resolve differently): the hello keeps strangers out either way.
        let listener = TcpListener::bind((launch.master_addr.as_str(), launch.master_port))
            .or_else(|_| TcpListener::bind(("0.0.0.0", launch.master_port)))
            .map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        // Hellos are read on threads of their own: a connection that stays silent delays nobody.
        let (hellos, heard) = std::sync::mpsc::channel::<(usize, TcpStream)>();
        // Rank r's connection once it has the id; rank 0's own place stays empty.
        let mut served: Vec<Option<TcpStream>> = (0..launch.world_size).map(|_| None).collect();
        while served.iter().skip(1).any(Option::is_none) {
            if Instant::now() > deadline {
                return Err(RendezvousError::Incomplete {
                    addr,
                    joined: served.iter().flatten().count(),
                    expected: launch.world_size - 1,
                    seconds: limit.as_secs(),
                    token: launch.token.clone(),
                });
            }
            match listener.accept() {
                Ok((mut stream, _)) => {
                    let (hellos, launch) = (hellos.clone(), launch.clone());
                    std::thread::spawn(move || {
                        let ready = stream.set_nonblocking(false).and_then(|()| stream.set_read_timeout(Some(HELLO_TIMEOUT)));
                        // A connection that says nothing, or not the right thing, is dropped uncounted.
                        if let (Ok(()), Some(rank)) = (ready, read_hello(&mut stream, &launch)) {
                            let _ = hellos.send((rank, stream));
                        }
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(io(e)),
            }
            match heard.recv_timeout(Duration::from_millis(20)) {
                Ok((rank, mut stream)) if served[rank].is_none() => {
                    let sent = stream.set_write_timeout(Some(HELLO_TIMEOUT)).and_then(|()| stream.write_all(&id));
                    served[rank] = sent.is_ok().then_some(stream);
                }
                _ => {}
            }
        }
        return Ok((id, Star::Hub(served.into_iter().flatten().collect())));
    }
    let targets: Vec<_> = (launch.master_addr.as_str(), launch.master_port).to_socket_addrs().map_err(io)?.collect();
    while Instant::now() < deadline {
        for target in &targets {
            let Ok(mut stream) = TcpStream::connect_timeout(target, HELLO_TIMEOUT) else { continue };
            let exchanged = stream
                .set_read_timeout(Some(HELLO_TIMEOUT))
                .and_then(|()| stream.set_write_timeout(Some(HELLO_TIMEOUT)))
                .and_then(|()| stream.write_all(&hello(launch)))
                .and_then(|()| {
                    let mut id = [0u8; 128];
                    stream.read_exact(&mut id).map(|()| id)
                });
            if let Ok(id) = exchanged {
                return Ok((id, Star::Spoke(stream)));
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(RendezvousError::NoId { addr, rank: launch.rank, seconds: limit.as_secs(), token: launch.token.clone() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| map.get(k).cloned()
    }

    fn launch(rank: usize, port: u16, token: &str) -> Launch {
        Launch { rank, world_size: 3, local_rank: rank, master_addr: "127.0.0.1".into(), master_port: port, token: token.into() }
    }

    fn free_port() -> u16 {
        // A free port, released before rank 0 binds it.
        TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
    }

    #[test]
    fn launches_from_torchrun_and_srun() {
        let torch = vars(&[
            ("RANK", "1"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "node0"),
            ("MASTER_PORT", "29400"),
            ("TORCHELASTIC_RUN_ID", "job7"),
        ]);
        let launch = Launch::from_vars(torch).expect("valid").expect("a group");
        assert_eq!(launch, Launch { rank: 1, world_size: 4, local_rank: 1, master_addr: "node0".into(), master_port: 29400, token: "job7".into() });
        // torchrun's agent holds MASTER_PORT for its store: the hand-over takes the next port.
        let agent = vars(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("LOCAL_RANK", "0"),
            ("MASTER_ADDR", "n"),
            ("MASTER_PORT", "29400"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
        ]);
        assert_eq!(Launch::from_vars(agent).expect("valid").expect("a group").master_port, 29401);
        let srun = vars(&[
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_JOB_ID", "4242"),
            ("MASTER_ADDR", "gpu12"),
        ]);
        let launch = Launch::from_vars(srun).expect("valid").expect("a group");
        assert_eq!((launch.rank, launch.world_size, launch.local_rank, launch.master_port, launch.token.as_str()), (5, 8, 1, 29500, "4242"));
        // The batch script's own shell: SLURM_NTASKS without a job step trains alone.
        let batch = vars(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "8"), ("SLURM_LOCALID", "0"), ("MASTER_ADDR", "gpu12")]);
        assert_eq!(Launch::from_vars(batch).expect("valid"), None);
        assert_eq!(Launch::from_vars(vars(&[])).expect("no launcher"), None);
        assert_eq!(Launch::from_vars(vars(&[("WORLD_SIZE", "1"), ("RANK", "0")])).expect("one process"), None);
    }

    #[test]
    fn bad_launch_variables_are_named() {
        let no_addr = vars(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0")]);
        assert!(Launch::from_vars(no_addr).expect_err("no address").to_string().contains("MASTER_ADDR"));
        let rank_too_big = vars(&[("RANK", "2"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "0"), ("MASTER_ADDR", "h")]);
        assert!(Launch::from_vars(rank_too_big).expect_err("rank ≥ world").to_string().contains("RANK: 2 is not below"));
        let junk = vars(&[("SLURM_NTASKS", "two"), ("SLURM_STEP_ID", "0")]);
        assert!(Launch::from_vars(junk).expect_err("not a number").to_string().contains("SLURM_NTASKS: `two`"));
    }

    #[test]
    fn each_rank_takes_a_gpu_it_can_see() {
        let third = Launch { local_rank: 3, ..launch(0, 1, "") };
        assert_eq!(third.cuda_ordinal(Some("5")), 0, "srun --gpus-per-task 1: its one GPU");
        assert_eq!(third.cuda_ordinal(Some("0,1,2,3")), 3, "torchrun: the node's GPUs");
        assert_eq!(third.cuda_ordinal(None), 3);
    }

    #[test]
    fn rank_zero_hands_the_unique_id_to_every_rank_and_no_stranger() {
        let port = free_port();
        let id: [u8; 128] = std::array::from_fn(|i| i as u8);
        let zero = std::thread::spawn(move || share_unique_id_within(&launch(0, port, "job-1"), Some(id), Duration::from_secs(60)));
        // Strangers first: a silent port scan, a stray job's rank, garbage. None takes a slot.
        let addr = format!("127.0.0.1:{port}");
        let connect = || loop {
            if let Ok(s) = TcpStream::connect(&addr) {
                break s;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        drop(connect());
        let mut garbage = connect();
        garbage.write_all(b"GET / HTTP/1.1\r\n\r\n").expect("garbage");
        let other_job = std::thread::spawn(move || share_unique_id_within(&launch(1, port, "job-2"), None, Duration::from_secs(3)));
        let err = other_job.join().expect("thread").expect_err("another job's rank gets nothing");
        assert!(err.to_string().contains("job-2"), "{err}");
        let ranks: Vec<_> =
            (1..3).map(|r| std::thread::spawn(move || share_unique_id_within(&launch(r, port, "job-1"), None, Duration::from_secs(60)))).collect();
        for r in ranks {
            assert_eq!(r.join().expect("rank thread").expect("rendezvous"), id);
        }
        assert_eq!(zero.join().expect("rank 0").expect("served"), id);
    }

    #[test]
    fn missing_ranks_end_in_errors_not_hangs() {
        let port = free_port();
        let err = share_unique_id_within(&launch(0, port, "t"), Some([7; 128]), Duration::from_millis(500)).expect_err("nobody came");
        assert!(err.to_string().contains("heard from 0 of 2 ranks"), "{err}");
        // A port that accepts and never answers (torchrun's store, say): the rank gives up.
        let silent = TcpListener::bind("127.0.0.1:0").expect("listener");
        let port = silent.local_addr().expect("addr").port();
        let err = share_unique_id_within(&launch(2, port, "t"), None, Duration::from_millis(500)).expect_err("no id");
        assert!(err.to_string().contains("rank 2 got no id"), "{err}");
    }
}
