//! How many audit lines a plugin's refused and failed requests may write: a
//! flood of refused requests is the plugin's doing, and must not become a
//! flood of the host's log lines.
//!
//! In each [`AUDIT_WINDOW`] the first [`AUDIT_LINES`] refused or failed
//! requests get a line each; the rest are counted, by outcome, and said in one
//! line at the first request after the window (`... 19800 more refused or
//! failed in the last 10 s: throttled 19750, denied 50`). Every request still
//! reaches the plugin's status and `/metrics`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::Outcome;

/// Lines a plugin's refused or failed requests write per window.
pub const AUDIT_LINES: u32 = 20;
/// The window [`AUDIT_LINES`] counts in.
pub const AUDIT_WINDOW: Duration = Duration::from_secs(10);

/// The lines written and the requests left unsaid in the current window.
#[derive(Debug, Default)]
pub(super) struct Gate {
    started: Option<Instant>,
    lines: u32,
    unsaid: BTreeMap<Outcome, u64>,
}

/// What to write for one refused or failed request.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Pass {
    /// The summary of the window that just ended, when it left some unsaid.
    pub(super) summary: Option<String>,
    /// Whether the request gets its own line.
    pub(super) log: bool,
}

impl Gate {
    /// A request that ended in `outcome` at `now`.
    pub(super) fn pass(&mut self, now: Instant, outcome: Outcome) -> Pass {
        let mut summary = None;
        let started = *self.started.get_or_insert(now);
        let elapsed = now.saturating_duration_since(started);
        if elapsed >= AUDIT_WINDOW {
            summary = self.summary(elapsed);
            self.started = Some(now);
            self.lines = 0;
            self.unsaid.clear();
        }
        let log = self.lines < AUDIT_LINES;
        if log {
            self.lines += 1;
        } else {
            *self.unsaid.entry(outcome).or_default() += 1;
        }
        Pass { summary, log }
    }

    fn summary(&self, elapsed: Duration) -> Option<String> {
        let total: u64 = self.unsaid.values().sum();
        if total == 0 {
            return None;
        }
        let by: Vec<String> = self
            .unsaid
            .iter()
            .map(|(outcome, count)| format!("{} {count}", outcome.as_str()))
            .collect();
        Some(format!(
            "... {total} more refused or failed in the last {} s: {}",
            elapsed.as_secs(),
            by.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_gets_a_few_lines_then_one_summary_per_window() {
        let mut gate = Gate::default();
        let start = Instant::now();
        let mut lines = 0;
        for i in 0..20_000u32 {
            let outcome = if i % 100 == 0 {
                Outcome::Denied
            } else {
                Outcome::Throttled
            };
            let pass = gate.pass(start + Duration::from_micros(u64::from(i) * 60), outcome);
            assert_eq!(pass.summary, None);
            lines += u32::from(pass.log);
        }
        assert_eq!(lines, AUDIT_LINES);
        let after = gate.pass(start + AUDIT_WINDOW + Duration::from_secs(1), Outcome::Denied);
        assert!(after.log, "a new window logs again");
        let summary = after.summary.expect("the window's flood is summarised");
        assert!(
            summary.starts_with("... 19980 more refused or failed in the last 11 s"),
            "{summary}"
        );
        assert!(
            summary.contains("denied 199") && summary.contains("throttled 19781"),
            "{summary}"
        );
    }

    #[test]
    fn a_quiet_window_needs_no_summary() {
        let mut gate = Gate::default();
        let start = Instant::now();
        assert!(gate.pass(start, Outcome::Timeout).log);
        let later = gate.pass(start + AUDIT_WINDOW * 3, Outcome::Timeout);
        assert_eq!(
            later,
            Pass {
                summary: None,
                log: true
            }
        );
    }
}
