//! A plugin's share of CPU: at most `cpu-millicores` thousandths of one core,
//! counted in windows of [`WINDOW`].
//!
//! Time counts while the plugin runs a call (its own code and the host
//! functions it calls). When a window's share is spent, the thread calling the
//! plugin pauses until the next window (the plugins' pool gives the other
//! plugins a spare thread meanwhile): at the start of a call, or at the next epoch
//! tick inside one. A runaway plugin on a small machine thus leaves its
//! neighbours the rest of the core. The pause is given back to the call's
//! deadline ([`super::deadline`]): a throttled call is stopped for running too
//! long, not for being throttled.

use std::time::{Duration, Instant};

use crate::limits::FULL_CORE_MILLICORES;

/// The window a share is counted in.
pub(crate) const WINDOW: Duration = Duration::from_millis(100);

/// Where the running time not yet counted starts.
#[derive(Debug, Clone, Copy)]
enum Mark {
    /// A call started then: short calls are counted in wall-clock time, which
    /// costs no system call.
    Wall(Instant),
    /// The thread's CPU time at the last tick: a long call is counted in CPU
    /// time, so time the thread waited for a core does not count.
    Cpu(Duration),
}

/// The time a plugin may run per window, and what it ran in the current one.
#[derive(Debug)]
pub(crate) struct CpuBudget {
    /// Running time allowed per window; `None` for no limit.
    allowed: Option<Duration>,
    window_start: Option<Instant>,
    used: Duration,
    /// Where the running time not yet in `used` starts; `None` between calls.
    mark: Option<Mark>,
    /// Time paused, not yet taken.
    paused: Duration,
}

impl CpuBudget {
    /// A budget of `millicores` thousandths of a core.
    pub(crate) fn new(millicores: u32) -> Self {
        let allowed = (millicores < FULL_CORE_MILLICORES).then(|| WINDOW * millicores / FULL_CORE_MILLICORES);
        Self {
            allowed,
            window_start: None,
            used: Duration::ZERO,
            mark: None,
            paused: Duration::ZERO,
        }
    }

    /// A call starts at `now`; returns how long to pause first when the
    /// window's share is spent.
    pub(crate) fn start(&mut self, now: Instant) -> Option<Duration> {
        self.mark = Some(Mark::Wall(now));
        self.over(now)
    }

    /// At an epoch tick inside a call, at `now`, the thread having run
    /// `thread_cpu` in all; returns how long to pause when the window's share
    /// is spent.
    pub(crate) fn tick(&mut self, now: Instant, thread_cpu: Duration) -> Option<Duration> {
        self.count(now, || thread_cpu);
        self.mark = Some(Mark::Cpu(thread_cpu));
        self.over(now)
    }

    /// The call ends at `now`; `thread_cpu` reads the thread's CPU time, when
    /// the call ran long enough to be counted in it.
    pub(crate) fn stop(&mut self, now: Instant, thread_cpu: impl FnOnce() -> Duration) {
        self.count(now, thread_cpu);
        self.mark = None;
    }

    /// Sits out a `pause` for the spent share, the thread handed over by the
    /// plugins' pool meanwhile, then starts the next window.
    pub(crate) fn sit_out(&mut self, pause: Duration, thread_cpu: impl FnOnce() -> Duration) {
        crate::runtime::pool::leave();
        std::thread::sleep(pause);
        self.resume(pause, Instant::now(), thread_cpu);
    }

    /// A pause of `paused` ends at `now`: a new window starts. `thread_cpu`
    /// reads the thread's CPU time when the call is counted in it.
    pub(crate) fn resume(&mut self, paused: Duration, now: Instant, thread_cpu: impl FnOnce() -> Duration) {
        self.paused += paused;
        self.window_start = Some(now);
        self.used = Duration::ZERO;
        self.mark = match self.mark {
            None => None,
            Some(Mark::Wall(_)) => Some(Mark::Wall(now)),
            Some(Mark::Cpu(_)) => Some(Mark::Cpu(thread_cpu())),
        };
    }

    /// Time paused since last asked.
    pub(crate) fn take_paused(&mut self) -> Duration {
        std::mem::take(&mut self.paused)
    }

    fn count(&mut self, now: Instant, thread_cpu: impl FnOnce() -> Duration) {
        self.used += match self.mark {
            None => Duration::ZERO,
            Some(Mark::Wall(since)) => now.saturating_duration_since(since),
            Some(Mark::Cpu(since)) => thread_cpu().saturating_sub(since),
        };
    }

    /// How long to pause when the window's share is spent; rolls the window.
    fn over(&mut self, now: Instant) -> Option<Duration> {
        let allowed = self.allowed?;
        let start = *self.window_start.get_or_insert(now);
        let ends = start + WINDOW;
        if now >= ends {
            self.window_start = Some(now);
            // What ran past the share of the last window counts in this one.
            self.used = self.used.saturating_sub(allowed).min(allowed);
            return (self.used >= allowed).then_some(WINDOW);
        }
        (self.used >= allowed).then(|| ends.saturating_duration_since(now).max(Duration::from_millis(1)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_plugin_within_its_share_is_never_paused() {
        let mut budget = CpuBudget::new(500);
        let t = Instant::now();
        for window in 0..5 {
            let start = t + WINDOW * window;
            assert_eq!(budget.start(start), None);
            assert_eq!(budget.tick(start + 10 * MS, 10 * MS), None);
            assert_eq!(budget.tick(start + 40 * MS, 40 * MS), None);
            budget.stop(start + 45 * MS, || 45 * MS);
        }
        assert_eq!(budget.take_paused(), Duration::ZERO);
    }

    #[test]
    fn a_long_call_that_spends_the_share_pauses_until_the_window_ends() {
        let mut budget = CpuBudget::new(250);
        let t = Instant::now();
        assert_eq!(budget.start(t), None);
        assert_eq!(budget.tick(t + 10 * MS, 10 * MS), None);
        assert_eq!(
            budget.tick(t + 30 * MS, 30 * MS),
            Some(70 * MS),
            "25 ms of 100 spent: pause to the window's end"
        );
        budget.resume(70 * MS, t + 100 * MS, || 30 * MS);
        assert_eq!(budget.tick(t + 110 * MS, 40 * MS), None, "a fresh window");
        assert_eq!(budget.tick(t + 130 * MS, 60 * MS), Some(70 * MS));
        assert_eq!(budget.take_paused(), 70 * MS);
        assert_eq!(budget.take_paused(), Duration::ZERO, "taken once");
    }

    #[test]
    fn inside_a_call_only_the_threads_cpu_time_counts() {
        let mut budget = CpuBudget::new(250);
        let t = Instant::now();
        assert_eq!(budget.start(t), None);
        assert_eq!(budget.tick(t + 10 * MS, 10 * MS), None);
        // 80 ms pass, but the thread waited for a core for 70 of them.
        assert_eq!(budget.tick(t + 90 * MS, 20 * MS), None, "20 ms of 25 used");
        budget.stop(t + 95 * MS, || 24 * MS);
        assert_eq!(budget.start(t + 96 * MS), None);
    }

    #[test]
    fn many_short_calls_add_up_and_pause_at_the_next_start() {
        let mut budget = CpuBudget::new(100);
        let t = Instant::now();
        let mut at = t;
        for _ in 0..5 {
            assert_eq!(budget.start(at), None);
            budget.stop(at + 2 * MS, || unreachable!("a short call needs no CPU clock"));
            at += 3 * MS;
        }
        assert_eq!(
            budget.start(at),
            Some(WINDOW - 15 * MS),
            "10 ms of 100 spent in five calls"
        );
    }

    #[test]
    fn time_between_calls_does_not_count() {
        let mut budget = CpuBudget::new(100);
        let t = Instant::now();
        assert_eq!(budget.start(t), None);
        budget.stop(t + 5 * MS, || Duration::ZERO);
        assert_eq!(budget.start(t + 90 * MS), None, "5 ms used, though 90 ms passed");
    }

    #[test]
    fn a_full_core_is_no_limit() {
        let mut budget = CpuBudget::new(FULL_CORE_MILLICORES);
        let t = Instant::now();
        assert_eq!(budget.start(t), None);
        assert_eq!(budget.tick(t + 10 * WINDOW, 10 * WINDOW), None);
    }
}
