//! A call's deadline credit: the time a plugin spent waiting on the host (for
//! the API server, say), given back to its epoch deadline.
//!
//! A call's deadline is counted in epoch ticks of wall-clock time, but it is
//! meant to bound the plugin's own computing. When the deadline passes, the
//! store's epoch callback asks [`DeadlineCredit::take_ticks`]: the time spent
//! blocked in host calls since the last look extends the deadline by as much;
//! with nothing to give back, the call is interrupted.

use std::time::{Duration, Instant};

/// The time a call spent blocked in host functions and not yet given back,
/// and when the call's time runs out.
#[derive(Debug, Default)]
pub(crate) struct DeadlineCredit {
    waited: Duration,
    ends: Option<Instant>,
}

impl DeadlineCredit {
    /// Starts a call of at most `timeout`: credit from earlier calls does not
    /// carry over.
    pub(crate) fn start_call(&mut self, timeout: Duration) {
        self.waited = Duration::ZERO;
        self.ends = Instant::now().checked_add(timeout);
    }

    /// Adds time the call spent blocked in the host.
    pub(crate) fn waited(&mut self, blocked: Duration) {
        self.waited = self.waited.saturating_add(blocked);
        self.ends = self.ends.and_then(|ends| ends.checked_add(blocked));
    }

    /// What is left of the call's time (the waits given back included): how
    /// long a plugin may block in a WASI call before the call is over.
    pub(crate) fn remaining(&self) -> Duration {
        self.ends
            .map_or(Duration::ZERO, |ends| ends.saturating_duration_since(Instant::now()))
    }

    /// The ticks of `tick` to extend the deadline by, rounded up; 0 when the
    /// call has nothing to be given back. What is taken is given once.
    pub(crate) fn take_ticks(&mut self, tick: Duration) -> u64 {
        let waited = std::mem::take(&mut self.waited);
        if waited.is_zero() || tick.is_zero() {
            return 0;
        }
        let ticks = waited.as_nanos().div_ceil(tick.as_nanos());
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(10);

    #[test]
    fn time_blocked_in_the_host_is_given_back_once_rounded_up_to_ticks() {
        let mut credit = DeadlineCredit::default();
        assert_eq!(credit.take_ticks(TICK), 0, "nothing waited: interrupt");
        credit.waited(Duration::from_millis(250));
        credit.waited(Duration::from_millis(1));
        assert_eq!(credit.take_ticks(TICK), 26);
        assert_eq!(credit.take_ticks(TICK), 0, "given back once");
    }

    #[test]
    fn a_wait_given_back_extends_the_time_left_for_blocking() {
        let mut credit = DeadlineCredit::default();
        assert_eq!(credit.remaining(), Duration::ZERO, "no call, no time");
        credit.start_call(Duration::from_secs(1));
        assert!(credit.remaining() <= Duration::from_secs(1));
        assert!(credit.remaining() > Duration::from_millis(500));
        credit.waited(Duration::from_secs(10));
        assert!(credit.remaining() > Duration::from_secs(10));
    }

    #[test]
    fn a_new_call_starts_without_the_last_ones_credit() {
        let mut credit = DeadlineCredit::default();
        credit.waited(Duration::from_secs(5));
        credit.start_call(Duration::from_secs(1));
        assert_eq!(credit.take_ticks(TICK), 0);
        credit.waited(Duration::MAX);
        credit.waited(Duration::MAX);
        assert!(credit.take_ticks(TICK) > 0);
    }
}
