//! Progress of long work (training steps, questions asked, flows checked), reported through a
//! sink the binary installs — as the `log` crate does for messages — so that the libraries draw
//! no terminal themselves and depend on no terminal crate. Without a sink, bars are silent.

use std::sync::OnceLock;

/// One bar of work.
pub trait ProgressBar: Send + Sync {
    fn set_position(&self, position: u64);
    fn inc(&self, delta: u64);
    /// The live status after the counts (e.g. the current loss).
    fn set_message(&self, message: String);
    /// A line printed above the bar.
    fn println(&self, line: String);
    /// The work is done: the bar goes away.
    fn finish(&self);
    /// The work stopped early: the bar stays where it was.
    fn abandon(&self);
}

/// Makes bars: what the binary installs.
pub trait ProgressSink: Send + Sync {
    /// A bar over `len` items counted in `unit` ("steps", "questions").
    fn bar(&self, len: u64, unit: &str) -> Box<dyn ProgressBar>;
}

static SINK: OnceLock<Box<dyn ProgressSink>> = OnceLock::new();

/// Installs the process's sink; the first call wins, as a binary installs one at start.
pub fn install(sink: Box<dyn ProgressSink>) {
    let _ = SINK.set(sink);
}

/// A bar over `len` items, silent when `show` is false or no sink is installed.
pub fn bar(len: u64, unit: &str, show: bool) -> Box<dyn ProgressBar> {
    match SINK.get() {
        Some(sink) if show => sink.bar(len, unit),
        _ => Box::new(Silent),
    }
}

/// A bar that shows nothing.
struct Silent;

impl ProgressBar for Silent {
    fn set_position(&self, _: u64) {}
    fn inc(&self, _: u64) {}
    fn set_message(&self, _: String) {}
    fn println(&self, _: String) {}
    fn finish(&self) {}
    fn abandon(&self) {}
}
