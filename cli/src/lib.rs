//! What the motionvl binaries share: the terminal progress bars the libraries report through
//! (`motionvl_data::progress`).

use indicatif::{ProgressBar as Bar, ProgressStyle};
use motionvl_data::progress::{self, ProgressBar, ProgressSink};

/// Installs terminal progress bars for the libraries' long work; call once at the start of `main`.
pub fn install_progress_bars() {
    progress::install(Box::new(Terminal));
}

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
