//! The rules a plugin's worker lives by: restarts with backoff, quarantine after
//! too many failures within a window, and rollback of a version swapped in
//! that fails while on probation — a pure state machine, advanced by [`Lifecycle::step`].
//!
//! The worker ([`super::worker`]) does what the state says (serve batches, wait
//! for a restart, start the previous version again, drain, stop) and reports
//! what happened as an [`Event`]; the step decides the next state. No wasmtime,
//! no threads and no clock here: time is passed in.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::limits::{FailurePolicy, MAX_RESTART_BACKOFF, OnError};

/// How long after a swap a failing version is rolled back.
pub(crate) const PROBATION: Duration = Duration::from_secs(30);
/// Failures within the probation that roll a version swapped in back.
pub(crate) const PROBATION_FAILURES: u32 = 2;

/// Where a plugin's worker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// An instance handles deltas.
    Serving,
    /// The instance failed; a fresh one starts at `at`.
    Restarting {
        /// When the fresh instance starts.
        at: Instant,
    },
    /// The version swapped in failed on probation: the previous one starts again.
    RollingBack,
    /// Failed too often within the window; waits for a next version.
    Quarantined,
    /// Unloaded: hands what is queued to the instance, then stops.
    Draining,
    /// Done.
    Stopped,
}

/// What happened to the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Event {
    /// The serving instance trapped, overran its deadline or hit its memory limit.
    Failed,
    /// A fresh instance started (after a restart or a rollback).
    Started,
    /// A fresh instance could not start.
    StartFailed,
    /// The next version was swapped in, with its own instance and failure policy.
    Swapped {
        /// Its failure policy.
        policy: FailurePolicy,
        /// Whether an earlier version can be rolled back to.
        with_previous: bool,
    },
    /// The plugin's file was removed.
    Unload,
    /// What was queued has been handled.
    Drained,
    /// The host is shutting down.
    Stop,
    /// A next version was rolled back for doing worse than the running one:
    /// it waits for a next version, as a quarantined one does.
    RolledBack,
}

/// The probation of a version swapped in: failing twice before it ends rolls it back.
#[derive(Debug, Clone, Copy)]
struct Probation {
    until: Instant,
    failures: u32,
}

/// A worker's state and the failures that decide its next one.
#[derive(Debug, Clone)]
pub(crate) struct Lifecycle {
    state: State,
    policy: FailurePolicy,
    /// When the recent failures happened, oldest first, within the window.
    failures: VecDeque<Instant>,
    probation: Option<Probation>,
}

impl Lifecycle {
    /// A worker serving its first instance under `policy`.
    pub(crate) fn new(policy: FailurePolicy) -> Self {
        Self {
            state: State::Serving,
            policy,
            failures: VecDeque::new(),
            probation: None,
        }
    }

    /// Where the worker is.
    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// Failures counted in the current window.
    pub(crate) fn recent_failures(&self) -> usize {
        self.failures.len()
    }

    /// Uses `policy` from now on (the version rolled back to has its own).
    pub(crate) fn set_policy(&mut self, policy: FailurePolicy) {
        self.policy = policy;
    }

    /// Advances the state by what happened at `now`; returns the new state.
    pub(crate) fn step(&mut self, event: Event, now: Instant) -> State {
        self.state = match (self.state, event) {
            (State::Stopped, _) => State::Stopped,
            (_, Event::Stop) => State::Stopped,
            (_, Event::Swapped { policy, with_previous }) => {
                self.policy = policy;
                self.failures.clear();
                self.probation = with_previous.then_some(Probation {
                    until: now + PROBATION,
                    failures: 0,
                });
                State::Serving
            }
            (State::Serving, Event::Unload) => State::Draining,
            (_, Event::Unload) => State::Stopped,
            (_, Event::RolledBack) => State::Quarantined,
            (State::Draining, Event::Drained) => State::Stopped,
            (State::Serving, Event::Failed) => self.failed(now, true),
            (State::Restarting { .. } | State::RollingBack, Event::StartFailed) => self.failed(now, false),
            (State::Restarting { .. } | State::RollingBack, Event::Started) => State::Serving,
            // Anything else changes nothing (a stale report).
            (state, _) => state,
        };
        self.state
    }

    /// After a failure: roll back a version on probation, quarantine after too
    /// many failures within the window, otherwise restart after a backoff that
    /// doubles with each recent failure.
    fn failed(&mut self, now: Instant, on_probation_counts: bool) -> State {
        if on_probation_counts && let Some(probation) = self.probation.as_mut().filter(|p| now < p.until) {
            probation.failures += 1;
            if probation.failures >= PROBATION_FAILURES {
                self.probation = None;
                self.failures.clear();
                return State::RollingBack;
            }
        }
        self.failures.push_back(now);
        while self
            .failures
            .front()
            .is_some_and(|first| now.duration_since(*first) > self.policy.restart_window)
        {
            self.failures.pop_front();
        }
        if self.failures.len() > self.policy.max_restarts as usize {
            return State::Quarantined;
        }
        let doublings = u32::try_from(self.failures.len().saturating_sub(1)).unwrap_or(u32::MAX);
        State::Restarting {
            at: now + doubled(self.policy.restart_backoff, doublings),
        }
    }
}

/// How long to wait before delivering a rejected batch again, after `attempt`
/// earlier deliveries of it failed; `None` when it is to be skipped.
pub(crate) fn retry_backoff(policy: &FailurePolicy, attempt: u32) -> Option<Duration> {
    (policy.on_error == OnError::Retry && attempt < policy.retries).then(|| doubled(policy.retry_backoff, attempt))
}

/// `base` doubled `doublings` times, at most [`MAX_RESTART_BACKOFF`].
fn doubled(base: Duration, doublings: u32) -> Duration {
    base.saturating_mul(1 << doublings.min(16)).min(MAX_RESTART_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(max_restarts: u32, window_s: u64) -> FailurePolicy {
        FailurePolicy {
            restart_backoff: Duration::from_millis(100),
            max_restarts,
            restart_window: Duration::from_secs(window_s),
            ..FailurePolicy::default()
        }
    }

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    /// Fails the serving instance at `now`, then (when restarting) starts a
    /// fresh one at the restart time; returns the state after the failure.
    fn fail_and_restart(lifecycle: &mut Lifecycle, now: Instant) -> State {
        let after = lifecycle.step(Event::Failed, now);
        if let State::Restarting { at } = after {
            assert_eq!(lifecycle.step(Event::Started, at), State::Serving);
        }
        after
    }

    #[test]
    fn a_failure_restarts_after_a_backoff_that_doubles_per_recent_failure() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(5, 300));
        let mut delays = Vec::new();
        for i in 0..4 {
            let now = start + Duration::from_secs(i);
            match fail_and_restart(&mut lifecycle, now) {
                State::Restarting { at } => delays.push(at - now),
                other => panic!("expected a restart, got {other:?}"),
            }
        }
        assert_eq!(delays, [ms(100), ms(200), ms(400), ms(800)]);
    }

    #[test]
    fn the_backoff_is_capped() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(100, 3600));
        let mut last = Duration::ZERO;
        for i in 0..20 {
            let now = start + Duration::from_secs(i * 60);
            if let State::Restarting { at } = fail_and_restart(&mut lifecycle, now) {
                last = at - now;
            }
        }
        assert_eq!(last, MAX_RESTART_BACKOFF);
    }

    #[test]
    fn more_failures_than_max_restarts_within_the_window_quarantine() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(2, 300));
        for i in 0..2 {
            let state = fail_and_restart(&mut lifecycle, start + Duration::from_secs(i));
            assert!(matches!(state, State::Restarting { .. }), "{state:?}");
        }
        assert_eq!(
            lifecycle.step(Event::Failed, start + Duration::from_secs(2)),
            State::Quarantined
        );
        // Quarantine lasts: nothing but a next version, an unload or a stop moves it.
        assert_eq!(
            lifecycle.step(Event::Started, start + Duration::from_secs(3)),
            State::Quarantined
        );
        assert_eq!(
            lifecycle.step(Event::Failed, start + Duration::from_secs(4)),
            State::Quarantined
        );
    }

    #[test]
    fn failures_older_than_the_window_are_forgotten() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(2, 10));
        // Three failures, each 6 s apart: never more than two within 10 s.
        for i in 0..6 {
            let state = fail_and_restart(&mut lifecycle, start + Duration::from_secs(i * 6));
            assert!(matches!(state, State::Restarting { .. }), "failure {i}: {state:?}");
            assert!(lifecycle.recent_failures() <= 2);
        }
    }

    #[test]
    fn an_instance_that_cannot_start_counts_as_a_failure() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(1, 300));
        let State::Restarting { at } = lifecycle.step(Event::Failed, start) else {
            panic!("expected a restart");
        };
        assert_eq!(lifecycle.step(Event::StartFailed, at), State::Quarantined);
    }

    #[test]
    fn a_new_version_failing_twice_on_probation_is_rolled_back() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(5, 300));
        let swapped = Event::Swapped {
            policy: policy(5, 300),
            with_previous: true,
        };
        assert_eq!(lifecycle.step(swapped, start), State::Serving);
        let first = fail_and_restart(&mut lifecycle, start + ms(10));
        assert!(matches!(first, State::Restarting { .. }));
        assert_eq!(lifecycle.step(Event::Failed, start + ms(500)), State::RollingBack);
        assert_eq!(lifecycle.step(Event::Started, start + ms(501)), State::Serving);
        // The restored version starts with a clean slate and no probation.
        assert_eq!(lifecycle.recent_failures(), 0);
        let later = fail_and_restart(&mut lifecycle, start + ms(600));
        assert!(matches!(later, State::Restarting { .. }));
        assert!(matches!(
            lifecycle.step(Event::Failed, start + ms(2000)),
            State::Restarting { .. }
        ));
    }

    #[test]
    fn failures_after_the_probation_restart_instead_of_rolling_back() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(5, 300));
        lifecycle.step(
            Event::Swapped {
                policy: policy(5, 300),
                with_previous: true,
            },
            start,
        );
        let after = start + PROBATION + Duration::from_secs(1);
        for i in 0..2 {
            let state = fail_and_restart(&mut lifecycle, after + Duration::from_secs(i));
            assert!(matches!(state, State::Restarting { .. }), "{state:?}");
        }
    }

    #[test]
    fn the_first_version_has_nothing_to_roll_back_to() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(5, 300));
        lifecycle.step(
            Event::Swapped {
                policy: policy(5, 300),
                with_previous: false,
            },
            start,
        );
        for i in 0..3 {
            let state = fail_and_restart(&mut lifecycle, start + ms(i * 10));
            assert!(matches!(state, State::Restarting { .. }), "{state:?}");
        }
    }

    #[test]
    fn a_new_version_lifts_quarantine_and_clears_the_failures() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(0, 300));
        assert_eq!(lifecycle.step(Event::Failed, start), State::Quarantined);
        let swapped = Event::Swapped {
            policy: policy(3, 300),
            with_previous: false,
        };
        assert_eq!(lifecycle.step(swapped, start + ms(1)), State::Serving);
        assert_eq!(lifecycle.recent_failures(), 0);
        // The next version's policy applies: three restarts before quarantine.
        for i in 0..3 {
            let state = fail_and_restart(&mut lifecycle, start + ms(10 + i));
            assert!(matches!(state, State::Restarting { .. }), "{state:?}");
        }
        assert_eq!(lifecycle.step(Event::Failed, start + ms(20)), State::Quarantined);
    }

    #[test]
    fn unloading_drains_a_serving_plugin_and_stops_any_other() {
        let start = Instant::now();
        let mut serving = Lifecycle::new(policy(5, 300));
        assert_eq!(serving.step(Event::Unload, start), State::Draining);
        assert_eq!(serving.step(Event::Drained, start), State::Stopped);

        let mut restarting = Lifecycle::new(policy(5, 300));
        restarting.step(Event::Failed, start);
        assert_eq!(restarting.step(Event::Unload, start), State::Stopped);
    }

    #[test]
    fn stopping_wins_from_every_state_and_is_final() {
        let start = Instant::now();
        let mut lifecycle = Lifecycle::new(policy(0, 300));
        assert_eq!(lifecycle.step(Event::Failed, start), State::Quarantined);
        assert_eq!(lifecycle.step(Event::Stop, start), State::Stopped);
        let swapped = Event::Swapped {
            policy: policy(5, 300),
            with_previous: true,
        };
        assert_eq!(lifecycle.step(swapped, start), State::Stopped);
    }

    #[test]
    fn a_rejected_batch_is_retried_with_doubling_backoff_then_skipped() {
        let retry = FailurePolicy {
            retries: 3,
            retry_backoff: ms(100),
            ..FailurePolicy::default()
        };
        let delays: Vec<Option<Duration>> = (0..4).map(|attempt| retry_backoff(&retry, attempt)).collect();
        assert_eq!(delays, [Some(ms(100)), Some(ms(200)), Some(ms(400)), None]);
        let skip = FailurePolicy {
            on_error: OnError::Skip,
            ..retry
        };
        assert_eq!(retry_backoff(&skip, 0), None);
    }
}
