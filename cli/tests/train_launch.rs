//! `train sft` launched as processes (the environment torchrun and srun set) on a CPU recipe:
//! the ranks sum over TCP through rank 0. Two processes of `grad_accum` 4 train the adapter one
//! process of `grad_accum` 8 trains; a stranger on the port does not disturb them; a rank killed
//! mid-run ends the other with an error naming it, not a hang.

use std::collections::HashMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use candle_core::Device;

mod common;

/// The tiny recipe into `out` with `extra` overrides, written beside `out` for `--config`.
fn recipe_file(out: &Path, extra: &[(&str, &str)]) -> PathBuf {
    let mut extra = extra.to_vec();
    extra.push(("logging.tensorboard", "false"));
    let file = out.with_extension("toml");
    std::fs::write(&file, common::tiny(out, &extra).to_toml()).expect("recipe written");
    file
}

/// `train sft --config config [extra…]`, as rank `rank` of `world` when `launch` is given.
fn train(config: &Path, launch: Option<(usize, usize, u16)>) -> Child {
    train_with(config, launch, &[])
}

fn train_with(config: &Path, launch: Option<(usize, usize, u16)>, extra: &[&str]) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_train"));
    cmd.args(["sft", "--config"]).arg(config).args(extra).stdout(Stdio::null()).stderr(Stdio::piped()).env("RUST_BACKTRACE", "0");
    for key in ["WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_NTASKS", "TORCHELASTIC_USE_AGENT_STORE"] {
        cmd.env_remove(key);
    }
    if let Some((rank, world, port)) = launch {
        cmd.env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", world.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("MOTIONVL_RDZV_TOKEN", format!("train-launch-{port}"))
            .env("MOTIONVL_COLLECTIVE_TIMEOUT_S", "300");
    }
    cmd.spawn().expect("train starts")
}

fn free_port() -> u16 {
    // Released before rank 0 binds it.
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("free port").port()
}

/// Connects to rank 0's rendezvous port once it listens.
fn connect_when_listening(port: u16, rank0: &mut Child) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
            return stream;
        }
        assert!(Instant::now() < deadline && rank0.try_wait().expect("poll").is_none(), "rank 0 never listened on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn finish(child: Child, what: &str) -> String {
    let out = child.wait_with_output().expect("exits");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{what} failed:\n{stderr}");
    stderr
}

fn adapter(run: &Path) -> HashMap<String, Vec<f32>> {
    let path = run.join("adapter_model.safetensors");
    let tensors = candle_core::safetensors::load(&path, &Device::Cpu).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    tensors.into_iter().map(|(name, t)| (name, t.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("f32 adapter"))).collect()
}

fn losses(run: &Path) -> Vec<f64> {
    let log = std::fs::read_to_string(run.join("trainer_log.jsonl")).expect("trainer log");
    log.lines().map(|line| serde_json::from_str::<serde_json::Value>(line).expect("json line")["loss"].as_f64().expect("loss")).collect()
}

#[test]
fn two_processes_of_four_micro_batches_train_the_adapter_of_one_process_of_eight() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Adam turns a gradient's rounding into a step of up to ±lr where the gradient is near zero
    // (the ranks sum their micro-batches in another order than one process does): a small lr keeps
    // that below the 1e-5 the comparison allows, while the steps still move the adapter.
    let settings = [("optim.max_steps", "3"), ("optim.lr", "1e-3")];
    let alone = dir.path().join("alone");
    finish(train(&recipe_file(&alone, &[settings[0], settings[1], ("optim.grad_accum", "8")]), None), "the single process");
    let threads = dir.path().join("threads");
    finish(
        train_with(&recipe_file(&threads, &[settings[0], settings[1], ("optim.grad_accum", "4")]), None, &["--data-parallel", "2"]),
        "two threads",
    );

    let pair = dir.path().join("pair");
    let config = recipe_file(&pair, &[settings[0], settings[1], ("optim.grad_accum", "4")]);
    let port = free_port();
    let mut rank0 = train(&config, Some((0, 2, port)));
    // Strangers before rank 1 starts: a connection that stays silent and one that sends garbage.
    let _silent = connect_when_listening(port, &mut rank0);
    let mut garbage = connect_when_listening(port, &mut rank0);
    garbage.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").expect("garbage sent");
    let rank1 = train(&config, Some((1, 2, port)));
    let stderr1 = finish(rank1, "rank 1");
    let stderr0 = finish(rank0, "rank 0");

    let (single, pair_losses) = (losses(&alone), losses(&pair));
    assert_eq!(single.len(), 3, "one log line per step, from rank 0 alone: {pair_losses:?}\n{stderr0}{stderr1}");
    assert_eq!(pair_losses.len(), 3, "{pair_losses:?}");
    assert!(single.windows(2).any(|w| w[0] != w[1]), "the steps train: {single:?}");
    for (a, b) in single.iter().zip(&pair_losses) {
        assert!((a - b).abs() <= 1e-5, "loss {a} alone vs {b} over two processes");
    }
    let bytes = |run: &Path| std::fs::read(run.join("adapter_model.safetensors")).expect("adapter");
    assert!(bytes(&pair) == bytes(&threads), "two processes train the adapter of two threads, byte for byte");
    let (one, two) = (adapter(&alone), adapter(&pair));
    // PEFT starts every lora_B at zero: a trained adapter has moved them.
    assert!(one.iter().filter(|(name, _)| name.contains("lora_B")).all(|(_, v)| v.iter().any(|x| *x != 0.0)), "every lora_B trained");
    assert_eq!(one.keys().collect::<std::collections::BTreeSet<_>>(), two.keys().collect(), "the same adapter tensors");
    for (name, values) in &one {
        let worst = values.iter().zip(&two[name]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 1e-5, "{name}: differs by {worst} between one process and two");
    }
}

#[test]
fn a_killed_rank_ends_the_other_with_its_name_within_a_minute() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run");
    let config = recipe_file(&run, &[("optim.max_steps", "100000"), ("checkpoint.every", "100000")]);
    let port = free_port();
    let mut rank0 = train(&config, Some((0, 2, port)));
    let mut rank1 = train(&config, Some((1, 2, port)));
    // Both ranks train: rank 0 logs steps only after summing with rank 1.
    let deadline = Instant::now() + Duration::from_secs(600);
    while std::fs::read_to_string(run.join("trainer_log.jsonl")).map_or(0, |t| t.lines().count()) < 2 {
        assert!(Instant::now() < deadline && rank0.try_wait().expect("poll").is_none(), "the pair never trained two steps");
        std::thread::sleep(Duration::from_millis(10));
    }
    rank1.kill().expect("SIGKILL rank 1");
    rank1.wait().expect("reaped");
    let killed = Instant::now();
    while rank0.try_wait().expect("poll").is_none() {
        assert!(killed.elapsed() < Duration::from_secs(60), "rank 0 still runs a minute after rank 1 died");
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = rank0.wait_with_output().expect("exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "rank 0 must fail when its peer dies:\n{stderr}");
    assert!(stderr.contains("rank 1 left"), "rank 0 names the rank that died:\n{stderr}");
}
