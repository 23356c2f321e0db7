//! Progress as plain lines, for logs without a terminal (SLURM's `--output` files, `nohup`,
//! pipes): a bar drawn there would be hidden, and lines printed above it lost with it. Each bar
//! prints where it starts, a line every `every` while it runs, and one where it ends.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use motionvl_data::progress::{ProgressBar, ProgressSink};

/// Writes one finished line (stderr in the binaries).
type Writer = Box<dyn Fn(&str) + Send + Sync>;

/// The sink of plain progress lines, one every `every` per bar.
pub struct PlainLines {
    pub every: Duration,
}

impl ProgressSink for PlainLines {
    fn bar(&self, len: u64, unit: &str) -> Box<dyn ProgressBar> {
        Box::new(PlainBar::new(len, unit, self.every, Box::new(|line| eprintln!("{line}"))))
    }
}

struct PlainBar {
    len: u64,
    unit: String,
    every: Duration,
    start: Instant,
    state: Mutex<State>,
    write: Writer,
}

struct State {
    position: u64,
    message: String,
    /// When the last line went out; `None` before the first.
    last: Option<Instant>,
    ended: bool,
}

impl PlainBar {
    fn new(len: u64, unit: &str, every: Duration, write: Writer) -> Self {
        let state = State { position: 0, message: String::new(), last: None, ended: false };
        Self { len, unit: unit.to_owned(), every, start: Instant::now(), state: Mutex::new(state), write }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A few counters and a message: consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Applies `change`, then prints a line when the last is `every` old (or `force`).
    fn update(&self, force: bool, change: impl FnOnce(&mut State)) {
        let mut st = self.state();
        if st.ended {
            return;
        }
        change(&mut st);
        let now = Instant::now();
        if force || st.last.is_none_or(|last| now.duration_since(last) >= self.every) {
            st.last = Some(now);
            (self.write)(&self.line(&st, now));
        }
    }

    /// `37/120 steps (31%) · loss 1.234 · 0:02:10 elapsed, about 0:04:52 left`
    fn line(&self, st: &State, now: Instant) -> String {
        let elapsed = now.duration_since(self.start);
        let mut line = format!("{}/{} {}", st.position, self.len, self.unit);
        if self.len > 0 {
            line += &format!(" ({:.0}%)", 100.0 * st.position as f64 / self.len as f64);
        }
        if !st.message.is_empty() {
            line += &format!(" · {}", st.message);
        }
        line += &format!(" · {} elapsed", clock(elapsed));
        if st.position > 0 && st.position < self.len {
            let left = elapsed.mul_f64((self.len - st.position) as f64 / st.position as f64);
            line += &format!(", about {} left", clock(left));
        }
        line
    }
}

/// `h:mm:ss`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

impl ProgressBar for PlainBar {
    fn set_position(&self, position: u64) {
        self.update(false, |st| st.position = position);
    }
    fn inc(&self, delta: u64) {
        self.update(false, |st| st.position += delta);
    }
    fn set_message(&self, message: String) {
        // The message rides on the next count's line.
        self.state().message = message;
    }
    fn println(&self, line: String) {
        (self.write)(&line);
    }
    fn finish(&self) {
        self.update(true, |st| st.position = st.position.max(self.len));
        self.state().ended = true;
    }
    fn abandon(&self) {
        self.update(true, |_| {});
        self.state().ended = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn recorded(every: Duration) -> (PlainBar, Arc<Mutex<Vec<String>>>) {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        let bar = PlainBar::new(10, "steps", every, Box::new(move |line| sink.lock().expect("lines").push(line.to_owned())));
        (bar, lines)
    }

    #[test]
    fn a_bar_prints_its_start_its_end_and_what_it_is_asked_to() {
        // An hour between lines: only the first count and the end print on their own.
        let (bar, lines) = recorded(Duration::from_secs(3600));
        bar.set_message("loss 2.5".into());
        bar.inc(1);
        bar.inc(2);
        bar.println("step 3 saved".into());
        bar.set_message("loss 1.25".into());
        bar.finish();
        bar.inc(1);
        let lines = lines.lock().expect("lines").clone();
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines[0].starts_with("1/10 steps (10%) · loss 2.5 · 0:00:00 elapsed, about 0:00:00 left"), "{}", lines[0]);
        assert_eq!(lines[1], "step 3 saved");
        assert!(lines[2].starts_with("10/10 steps (100%) · loss 1.25 · 0:00:00 elapsed"), "{}", lines[2]);
        assert!(!lines[2].contains("left"), "{}", lines[2]);
    }

    #[test]
    fn a_running_bar_prints_every_interval_and_where_it_stopped() {
        let (bar, lines) = recorded(Duration::ZERO);
        bar.set_position(4);
        bar.inc(2);
        bar.abandon();
        let lines = lines.lock().expect("lines").clone();
        let counts: Vec<&str> = lines.iter().map(|l| l.split(' ').next().unwrap_or_default()).collect();
        assert_eq!(counts, ["4/10", "6/10", "6/10"], "{lines:?}");
        assert_eq!(clock(Duration::from_secs(3 * 3600 + 7 * 60 + 5)), "3:07:05");
    }
}
