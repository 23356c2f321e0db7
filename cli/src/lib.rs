//! What the motionvl binaries share: the progress the libraries report through
//! (`motionvl_data::progress`), as terminal bars or as plain lines in logs, and the allocator's
//! setting.

pub mod config_media;
pub mod plain_progress;

/// A stop flag set by SIGTERM, SIGINT or SIGUSR1: long commands finish their current step,
/// save, and exit with [`motionvl_data::stop::EXIT_STOPPED`]. A second SIGTERM or SIGINT ends
/// the process at once (status 128 + signal), as without a handler.
pub fn stop_on_signals() -> std::io::Result<motionvl_data::stop::StopFlag> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    let stop = motionvl_data::stop::StopFlag::new();
    let flag = stop.atomic();
    for signal in [SIGTERM, SIGINT] {
        // Registered first, so it acts only once the flag is already set: the second signal.
        signal_hook::flag::register_conditional_shutdown(signal, 128 + signal, std::sync::Arc::clone(&flag))?;
        signal_hook::flag::register(signal, std::sync::Arc::clone(&flag))?;
    }
    signal_hook::flag::register(SIGUSR1, flag)?;
    Ok(stop)
}

use indicatif::{ProgressBar as Bar, ProgressStyle};
use motionvl_data::progress::{self, ProgressBar, ProgressSink};

/// Installs the progress display for the libraries' long work; call once at the start of
/// `main`. Bars on a terminal; elsewhere (a SLURM log, a pipe) plain lines, one every
/// `MOTIONVL_PROGRESS_EVERY_S` seconds (default 30) per bar.
pub fn install_progress_bars() {
    use std::io::IsTerminal;
    if std::io::stderr().is_terminal() {
        progress::install(Box::new(Terminal));
        return;
    }
    let every = std::env::var("MOTIONVL_PROGRESS_EVERY_S").ok().and_then(|v| v.trim().parse::<f64>().ok()).filter(|s| s.is_finite() && *s >= 0.0);
    progress::install(Box::new(plain_progress::PlainLines { every: std::time::Duration::from_secs_f64(every.unwrap_or(30.0)) }));
}

/// The allocator keeps freed pages instead of handing them back to the OS (mimalloc's
/// `purge_delay` = -1; the binaries' global allocator is mimalloc). A training step allocates and
/// frees the same few hundred MB of activations and gradients every step; returned pages come
/// back as fresh page faults the kernel must zero, which took 40% of a mid-size step's CPU time
/// (59k faults per run against 2k kept; docs/BENCHMARKS.md). The cost is that the process's
/// resident size stays at its peak. The benches set the same option (`MIMALLOC_PURGE_DELAY=-1`).
pub fn keep_freed_memory() {
    // SAFETY: setting an option is thread-safe in mimalloc and takes effect at the next purge.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_e` (mimalloc.h), the version the `mimalloc`
/// crate builds by default.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

struct Terminal;

impl ProgressSink for Terminal {
    fn bar(&self, len: u64, unit: &str) -> Box<dyn ProgressBar> {
        let bar = Bar::new(len);
        let template = format!("{{bar:30}} {{pos}}/{{len}} {unit} · {{msg}} · eta {{eta}}");
        bar.set_style(ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()));
        Box::new(TerminalBar(bar))
    }
}

struct TerminalBar(Bar);

impl ProgressBar for TerminalBar {
    fn set_position(&self, position: u64) {
        self.0.set_position(position);
    }
    fn inc(&self, delta: u64) {
        self.0.inc(delta);
    }
    fn set_message(&self, message: String) {
        self.0.set_message(message);
    }
    fn println(&self, line: String) {
        self.0.println(line);
    }
    fn finish(&self) {
        self.0.finish_and_clear();
    }
    fn abandon(&self) {
        self.0.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_purge_delay_index_names_mimallocs_purge_delay() {
        // Its default in mimalloc 3 is 1000 ms (options.c); the neighbouring options default to
        // 0 or 1, so a shifted enum shows here before it silently sets the wrong option.
        let default = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
        assert_eq!(default, 1000, "mimalloc option {PURGE_DELAY} is not purge_delay (default 1000 ms)");
        keep_freed_memory();
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }, -1);
    }
}
