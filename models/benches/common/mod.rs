//! What the Qwen2.5-VL benches share: each measurement runs in a child process that prints one
//! JSON line last.

use std::process::Command;

use serde_json::Value;

/// Runs `command` and reads its last stdout line as JSON; `None` (with the reason on stderr) if it
/// cannot run or fails, as the Python side does where torch is not installed.
pub fn child(command: &mut Command, what: &str) -> Option<Value> {
    match command.output() {
        Ok(out) if out.status.success() => serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim().lines().last()?).ok(),
        Ok(out) => {
            eprintln!("{what} failed:\n{}", String::from_utf8_lossy(&out.stderr));
            None
        }
        Err(e) => {
            eprintln!("{what} not run ({e}); install torch and transformers to compare");
            None
        }
    }
}

/// The allocator setting of motionvl's binaries (`motionvl_cli::keep_freed_memory`): freed pages
/// stay with the process instead of coming back as page faults every step.
pub fn as_the_cli_runs(command: &mut Command) -> &mut Command {
    command.env("MIMALLOC_PURGE_DELAY", "-1")
}
