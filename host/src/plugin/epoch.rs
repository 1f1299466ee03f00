//! The epoch ticker: a thread that advances the engine's epoch every
//! [`EPOCH_TICK`], so that a running plugin's deadline and CPU share are looked
//! at (see `component::at_epoch_tick`).
//!
//! Ticks matter only while a plugin runs. After [`IDLE_TICKS`] ticks in which
//! no call ran or started, the ticker parks, and the next call to start wakes
//! it: an idle host costs no wakeups, and a busy one, whose calls keep the
//! ticker awake, no extra wakeup per call. A woken ticker ticks [`EPOCH_TICK`]
//! later, as it would have anyway, so a call's deadline holds either way.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use wasmtime::{Engine, EngineWeak};

/// How often the epoch ticks while plugins run.
pub(super) const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Ticks without a call before the ticker parks.
const IDLE_TICKS: u32 = 10;

#[derive(Debug, Default)]
struct Shared {
    /// Calls running now.
    running: AtomicUsize,
    /// Calls started so far.
    started: AtomicU64,
    /// The ticker is parked, or about to, until a call starts.
    parked: AtomicBool,
    stop: AtomicBool,
    /// Ticks so far.
    ticks: AtomicU64,
    /// Times the ticker parked so far.
    parks: AtomicU64,
}

/// The ticker thread; it stops when this is dropped.
pub(super) struct Ticker {
    clock: EpochClock,
    thread: Option<JoinHandle<()>>,
}

/// What a call needs of the ticker: a way to say it runs.
#[derive(Debug, Clone)]
pub(super) struct EpochClock {
    shared: Arc<Shared>,
    ticker: Thread,
}

/// A call running: the ticker stays awake until it is dropped.
pub(super) struct Running<'a>(&'a Shared);

impl Ticker {
    /// Starts ticking `engine`'s epoch.
    pub(super) fn start(engine: &Engine) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let engine = engine.weak();
        let ticking = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("kinformer-epoch".into())
            .spawn(move || tick(&ticking, &engine))?;
        Ok(Self {
            clock: EpochClock {
                shared,
                ticker: thread.thread().clone(),
            },
            thread: Some(thread),
        })
    }

    /// The handle calls use to keep the ticker awake.
    pub(super) fn clock(&self) -> &EpochClock {
        &self.clock
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.clock.shared.stop.store(true, Ordering::SeqCst);
        self.clock.ticker.unpark();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl EpochClock {
    /// Marks a call (or a start-up) as running, waking a parked ticker.
    pub(super) fn enter(&self) -> Running<'_> {
        let shared = &*self.shared;
        shared.running.fetch_add(1, Ordering::SeqCst);
        shared.started.fetch_add(1, Ordering::Relaxed);
        // Read after `running` was raised: either the ticker sees the call
        // before it parks, or this sees it parked and wakes it.
        if shared.parked.load(Ordering::SeqCst) && shared.parked.swap(false, Ordering::SeqCst) {
            self.ticker.unpark();
        }
        Running(shared)
    }

    /// The ticks so far.
    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }

    /// The times the ticker parked so far.
    #[cfg(test)]
    fn parks(&self) -> u64 {
        self.shared.parks.load(Ordering::Relaxed)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The ticker thread's loop.
fn tick(shared: &Shared, engine: &EngineWeak) {
    let mut idle = 0;
    let mut started = shared.started.load(Ordering::Relaxed);
    loop {
        // An unpark meant for a park below may end one wait early: a tick
        // comes early, which a deadline, measured in time, does not mind.
        std::thread::park_timeout(EPOCH_TICK);
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Some(engine) = engine.upgrade() else {
            return;
        };
        engine.increment_epoch();
        drop(engine);
        shared.ticks.fetch_add(1, Ordering::Relaxed);

        let now_started = shared.started.load(Ordering::Relaxed);
        if shared.running.load(Ordering::SeqCst) > 0 || now_started != started {
            idle = 0;
            started = now_started;
            continue;
        }
        idle += 1;
        if idle < IDLE_TICKS {
            continue;
        }
        idle = 0;
        shared.parks.fetch_add(1, Ordering::Relaxed);
        shared.parked.store(true, Ordering::SeqCst);
        // Read after `parked` was raised: see `EpochClock::enter`.
        while shared.parked.load(Ordering::SeqCst)
            && shared.running.load(Ordering::SeqCst) == 0
            && !shared.stop.load(Ordering::SeqCst)
        {
            std::thread::park();
        }
        shared.parked.store(false, Ordering::SeqCst);
        started = shared.started.load(Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const PATIENCE: Duration = Duration::from_secs(10);

    /// Waits up to [`PATIENCE`] for `done`.
    fn within(mut done: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + PATIENCE;
        while Instant::now() < end {
            if done() {
                return true;
            }
            std::thread::sleep(EPOCH_TICK / 2);
        }
        false
    }

    /// Waits for the ticker to park once more than `parks` times.
    fn parked(clock: &EpochClock, parks: u64) -> bool {
        within(|| clock.parks() > parks && clock.shared.parked.load(Ordering::SeqCst))
    }

    /// A ticker of a fresh engine, once it parked for want of calls.
    fn idle_ticker() -> (Engine, Ticker) {
        let engine = Engine::default();
        let ticker = Ticker::start(&engine).expect("ticker");
        assert!(parked(ticker.clock(), 0), "never parked");
        (engine, ticker)
    }

    #[test]
    fn an_idle_ticker_parks_and_a_call_wakes_it_for_as_long_as_it_runs() {
        let (_engine, ticker) = idle_ticker();
        let clock = ticker.clock().clone();
        let ticks = clock.ticks();
        std::thread::sleep(EPOCH_TICK * 5);
        assert_eq!(clock.ticks(), ticks, "a parked ticker ticked");

        let parks = clock.parks();
        let running = clock.enter();
        let woken = clock.ticks();
        assert!(
            within(|| clock.ticks() > woken + u64::from(IDLE_TICKS) * 2),
            "a call woke no ticker"
        );
        assert_eq!(clock.parks(), parks, "the ticker parked while a call ran");
        drop(running);
        assert!(parked(&clock, parks), "never parked again");
    }

    #[test]
    fn calls_that_keep_starting_keep_the_ticker_awake() {
        let (_engine, ticker) = idle_ticker();
        let clock = ticker.clock().clone();
        drop(clock.enter());
        let (parks, ticks) = (clock.parks(), clock.ticks());
        assert!(
            within(|| {
                drop(clock.enter());
                clock.ticks() >= ticks + u64::from(IDLE_TICKS) * 3
            }),
            "calls woke no ticker"
        );
        assert_eq!(
            clock.parks(),
            parks,
            "short calls, one after another, let the ticker park"
        );
        assert!(parked(&clock, parks), "never parked after the calls");
    }

    #[test]
    fn dropping_the_ticker_stops_a_parked_thread() {
        let (_engine, ticker) = idle_ticker();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(ticker);
            let _ = done.send(());
        });
        assert!(
            finished.recv_timeout(PATIENCE).is_ok(),
            "dropping a parked ticker hangs"
        );
    }
}
