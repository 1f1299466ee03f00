//! A call's deadline, and the time a plugin spent waiting on the host (for the
//! API server, say) given back to it.
//!
//! A call's deadline is wall-clock time, but it is meant to bound the plugin's
//! own computing: time blocked in host calls, and time paused for the plugin's
//! CPU share ([`super::budget`]), extend it by as much. The store's epoch
//! callback looks at every tick while the plugin runs, and interrupts the call
//! once [`DeadlineCredit::remaining`] is zero.

use std::time::{Duration, Instant};

/// When the current call's time runs out.
#[derive(Debug, Default)]
pub(crate) struct DeadlineCredit {
    ends: Option<Instant>,
}

impl DeadlineCredit {
    /// Starts a call of at most `timeout`: time given to earlier calls does
    /// not carry over.
    pub(crate) fn start_call(&mut self, timeout: Duration) {
        self.ends = Instant::now().checked_add(timeout);
    }

    /// Gives back time the call spent blocked in the host or paused.
    pub(crate) fn waited(&mut self, blocked: Duration) {
        self.ends = self.ends.and_then(|ends| ends.checked_add(blocked));
    }

    /// What is left of the call's time (the waits given back included); zero
    /// outside a call.
    pub(crate) fn remaining(&self) -> Duration {
        self.ends
            .map_or(Duration::ZERO, |ends| ends.saturating_duration_since(Instant::now()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_given_back_extends_the_time_left() {
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
        credit.start_call(Duration::from_secs(1));
        credit.waited(Duration::from_secs(50));
        credit.start_call(Duration::from_secs(1));
        assert!(credit.remaining() <= Duration::from_secs(1));
    }

    #[test]
    fn a_call_whose_time_is_up_has_none_left() {
        let mut credit = DeadlineCredit::default();
        credit.start_call(Duration::ZERO);
        assert_eq!(credit.remaining(), Duration::ZERO);
        credit.waited(Duration::MAX);
        assert_eq!(
            credit.remaining(),
            Duration::ZERO,
            "an overflowing wait is no endless call"
        );
    }
}
