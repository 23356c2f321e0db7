//! `train sft` under a cluster's SIGTERM: the step in flight finishes, a checkpoint of it is
//! saved, the process exits with status 75, and `--resume auto` ends at the adapter an
//! uninterrupted run ends at, byte for byte.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use motionvl_data::stop::EXIT_STOPPED;

mod common;

/// The tiny recipe with no periodic checkpoint before its end: whatever checkpoint a stop
/// leaves, the stop made.
fn recipe_file(out: &Path) -> PathBuf {
    let recipe = common::tiny(out, &[("optim.max_steps", "40"), ("checkpoint.every", "1000")]);
    let file = out.with_extension("toml");
    std::fs::write(&file, recipe.to_toml()).expect("recipe written");
    file
}

fn train(config: &Path, resume: bool) -> std::process::Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_train"));
    cmd.args(["sft", "--config"]).arg(config).stdout(Stdio::null()).stderr(Stdio::piped());
    if resume {
        cmd.args(["--resume", "auto"]);
    }
    cmd.spawn().expect("train starts")
}

fn logged_steps(out: &Path) -> usize {
    std::fs::read_to_string(out.join("trainer_log.jsonl")).map_or(0, |t| t.lines().count())
}

#[test]
fn sigterm_saves_the_current_step_and_resume_reaches_the_uninterrupted_adapter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let whole = dir.path().join("whole");
    let status = train(&recipe_file(&whole), false).wait().expect("runs");
    assert!(status.success(), "the uninterrupted run");

    let split = dir.path().join("split");
    let config = recipe_file(&split);
    let mut child = train(&config, false);
    // Somewhere in the run: after a step count that depends on the clock.
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let after = 1 + nanos as usize % 5;
    let deadline = Instant::now() + Duration::from_secs(600);
    while logged_steps(&split) < after {
        assert!(Instant::now() < deadline && child.try_wait().expect("poll").is_none(), "the run ended before step {after}");
        std::thread::sleep(Duration::from_millis(5));
    }
    // SAFETY: a plain kill(2) of our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) }, 0);
    let output = child.wait_with_output().expect("exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(EXIT_STOPPED), "{stderr}");
    let step = logged_steps(&split);
    assert!(step >= after && step < 40, "stopped at step {step}");
    assert!(split.join(format!("checkpoint-{step}")).is_dir(), "a checkpoint of the last step {step}: {stderr}");
    assert!(stderr.contains("--resume auto"), "{stderr}");

    let status = train(&config, true).wait().expect("resumes");
    assert!(status.success(), "the resumed run");
    let adapter = |run: &Path| std::fs::read(run.join("adapter_model.safetensors")).expect("final adapter");
    assert_eq!(adapter(&split), adapter(&whole), "stopped at step {step} and resumed: the same final adapter");
}
