//! The plugins' pool: a few threads, one per core, that run every plugin's
//! worker as a task. A delta handed to ten plugins wakes one thread, which
//! calls them one after the other, where a thread per plugin would wake ten.
//!
//! A plugin's call runs on the thread that polls its worker, so a call that
//! runs long (a loop until its deadline, a pause for its CPU share, a write or
//! a request waiting for its answer) would hold that thread from every other
//! plugin. The pool hands such a thread over: a monitor looks at the threads
//! every [`TICK`], and one still in the same poll a tick later is detached —
//! it finishes that poll alone, and a spare thread (or a new one) takes its
//! place. A thread about to block may say so itself ([`leave`]) and be
//! replaced at once. A detached thread that finishes rejoins the pool if it is
//! short of threads, waits as a spare otherwise, or ends.
//!
//! The monitor ticks only while the pool has been busy in its last
//! [`IDLE_TICKS`] ticks, so an idle host costs no wakeups.

use kinformer_informers::Recover as _;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// How often the monitor looks for a thread held by one poll, and how long a
/// poll may hold its thread before the thread is replaced.
pub(super) const TICK: Duration = Duration::from_millis(5);

/// Ticks without a poll before the monitor parks.
const IDLE_TICKS: u32 = 20;

/// A poll this long has the next queued task shared with a waiting thread.
const HEAVY: Duration = Duration::from_micros(200);

/// How long a spare thread waits to be needed before it ends.
const SPARE_FOR: Duration = Duration::from_secs(60);

type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The pool; its threads start with its first task and end once it is
/// dropped and its last task finished.
pub(super) struct Pool {
    size: usize,
    shared: Mutex<Option<Arc<Shared>>>,
}

/// A task of the pool, to see whether it finished and to wait for it.
#[derive(Clone)]
pub(super) struct TaskHandle {
    name: Arc<str>,
    done: Arc<Done>,
}

struct Shared {
    /// Threads taking tasks, the pool's size.
    size: usize,
    /// The Tokio runtime whose timers and channels the tasks use.
    runtime: tokio::runtime::Handle,
    state: Mutex<State>,
    /// Tells a waiting thread that a task is queued (or the pool ends).
    queued: Condvar,
    /// Tells a spare that the pool is short of a thread (or ends).
    short: Condvar,
    /// The threads' polls, for the monitor.
    polls: Mutex<Vec<Arc<Polling>>>,
    /// When the monitor's clock starts; a poll's start is kept from it.
    origin: Instant,
    monitor: Mutex<Option<std::thread::Thread>>,
    monitor_parked: AtomicBool,
    /// Polls started so far, for the monitor to tell an idle pool.
    polls_started: AtomicU64,
    /// Threads detached so far.
    detached: AtomicU64,
    /// Times the monitor parked so far.
    parks: AtomicU64,
}

#[derive(Default)]
struct State {
    tasks: VecDeque<Arc<Task>>,
    /// Threads taking tasks (a detached thread is not one).
    active: usize,
    /// Active threads waiting for a task.
    waiting: usize,
    /// Waiting threads told of a task that have not woken yet.
    told: usize,
    /// Threads waiting to be needed.
    spares: usize,
    /// Places handed to spares that have not woken yet.
    handed: usize,
    /// Tasks spawned and not finished.
    live: usize,
    /// The pool was dropped: threads end once no task is live.
    closing: bool,
}

/// What a thread is polling, for the monitor.
struct Polling {
    /// Nanoseconds from the pool's origin to the start of the current poll,
    /// zero between polls.
    since: AtomicU64,
    /// The monitor (or the thread itself) replaced this thread.
    detached: AtomicBool,
}

/// A task's state, for its waker.
const IDLE: u8 = 0;
const SCHEDULED: u8 = 1;
const RUNNING: u8 = 2;
/// Woken while it was being polled: it is queued again after the poll.
const NOTIFIED: u8 = 3;
const FINISHED: u8 = 4;

struct Task {
    name: Arc<str>,
    future: Mutex<Option<BoxFuture>>,
    state: AtomicU8,
    pool: Weak<Shared>,
    done: Arc<Done>,
}

#[derive(Default)]
struct Done {
    finished: Mutex<bool>,
    signal: Condvar,
}

thread_local! {
    /// The pool thread's poll, on a thread of a pool.
    static CURRENT: RefCell<Option<(Weak<Shared>, Arc<Polling>)>> = const { RefCell::new(None) };
}

impl Pool {
    /// A pool of `size` threads (at least one).
    pub(super) fn new(size: usize) -> Self {
        Self {
            size: size.max(1),
            shared: Mutex::new(None),
        }
    }

    /// A pool with a thread per core.
    pub(super) fn per_core() -> Self {
        Self::new(std::thread::available_parallelism().map_or(2, usize::from))
    }

    /// Runs `future` as a task of the pool. The first task starts the pool's
    /// threads, whose tasks use the current Tokio runtime's timers.
    pub(super) fn spawn(
        &self,
        name: &str,
        future: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<TaskHandle> {
        let shared = self.started()?;
        let name: Arc<str> = name.into();
        let done = Arc::new(Done::default());
        let task = Arc::new(Task {
            name: Arc::clone(&name),
            future: Mutex::new(Some(Box::pin(future))),
            state: AtomicU8::new(SCHEDULED),
            pool: Arc::downgrade(&shared),
            done: Arc::clone(&done),
        });
        lock(&shared.state).live += 1;
        shared.push(task);
        Ok(TaskHandle { name, done })
    }

    /// The pool's threads, started if they are not yet.
    fn started(&self) -> std::io::Result<Arc<Shared>> {
        let mut started = lock(&self.shared);
        if let Some(shared) = started.as_ref() {
            return Ok(Arc::clone(shared));
        }
        let shared = Arc::new(Shared {
            size: self.size,
            runtime: tokio::runtime::Handle::current(),
            state: Mutex::new(State::default()),
            queued: Condvar::new(),
            short: Condvar::new(),
            polls: Mutex::new(Vec::new()),
            origin: Instant::now(),
            monitor: Mutex::new(None),
            monitor_parked: AtomicBool::new(false),
            polls_started: AtomicU64::new(0),
            detached: AtomicU64::new(0),
            parks: AtomicU64::new(0),
        });
        let weak = Arc::downgrade(&shared);
        let monitor = std::thread::Builder::new()
            .name("kinformer-pool-monitor".into())
            .spawn(move || monitor(&weak))?;
        *lock(&shared.monitor) = Some(monitor.thread().clone());
        for _ in 0..shared.size {
            lock(&shared.state).active += 1;
            if let Err(error) = start_thread(&shared) {
                close(&shared);
                return Err(error);
            }
        }
        *started = Some(Arc::clone(&shared));
        Ok(shared)
    }

    /// Threads detached so far: handed over to a poll that held them.
    #[cfg(test)]
    fn detached(&self) -> u64 {
        lock(&self.shared)
            .as_ref()
            .map_or(0, |shared| shared.detached.load(Ordering::Relaxed))
    }

    /// Times the monitor parked so far.
    #[cfg(test)]
    fn parks(&self) -> u64 {
        lock(&self.shared)
            .as_ref()
            .map_or(0, |shared| shared.parks.load(Ordering::Relaxed))
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        if let Some(shared) = lock(&self.shared).take() {
            close(&shared);
        }
    }
}

/// Lets the pool's threads end once its last task finished.
fn close(shared: &Shared) {
    lock(&shared.state).closing = true;
    shared.queued.notify_all();
    shared.short.notify_all();
    if let Some(monitor) = lock(&shared.monitor).as_ref() {
        monitor.unpark();
    }
}

impl TaskHandle {
    /// The task's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// True once the task finished (or panicked).
    pub(super) fn is_finished(&self) -> bool {
        *lock(&self.done.finished)
    }

    /// Waits until the task finished.
    pub(super) fn join(&self) {
        let mut finished = lock(&self.done.finished);
        while !*finished {
            finished = self.done.signal.wait(finished).recover();
        }
    }
}

/// Says that the calling thread is about to block (a write waiting for its
/// answer, a WASI wait, a pause for a CPU share): a thread of a pool is
/// replaced at once, so the other tasks go on. Elsewhere it does nothing.
pub(crate) fn leave() {
    CURRENT.with(|current| {
        if let Some((pool, polling)) = current.borrow().as_ref()
            && let Some(pool) = pool.upgrade()
        {
            pool.detach(polling);
        }
    });
}

impl Shared {
    /// Queues a task and tells a waiting thread, unless one was told already
    /// and has not woken: a run of tasks queued at once wakes one thread.
    fn push(&self, task: Arc<Task>) {
        let mut state = lock(&self.state);
        state.tasks.push_back(task);
        let tell = state.waiting > state.told && state.told == 0;
        if tell {
            state.told += 1;
        }
        drop(state);
        if tell {
            self.queued.notify_one();
        }
    }

    /// Replaces the thread of `polling` with a spare or a new thread.
    fn detach(self: &Arc<Self>, polling: &Polling) {
        if polling.detached.swap(true, Ordering::SeqCst) {
            return;
        }
        self.detached.fetch_add(1, Ordering::Relaxed);
        let mut state = lock(&self.state);
        state.active -= 1;
        if state.closing && state.live == 0 {
            return;
        }
        state.active += 1;
        if state.spares > 0 {
            state.spares -= 1;
            state.handed += 1;
            drop(state);
            self.short.notify_one();
        } else {
            drop(state);
            if let Err(error) = start_thread(self) {
                lock(&self.state).active -= 1;
                tracing::error!(%error, "the plugin pool could not start a thread");
            }
        }
    }

    /// The next task for an active thread, or `None` when the thread ends.
    /// After a `heavy` poll, a waiting thread is told of what is still
    /// queued, to share it; short polls are left to one thread, which calls
    /// them one after the other for less than a wakeup costs.
    fn next(&self, heavy: bool) -> Option<Arc<Task>> {
        let mut state = lock(&self.state);
        loop {
            if let Some(task) = state.tasks.pop_front() {
                if heavy && !state.tasks.is_empty() && state.waiting > state.told && state.told == 0 {
                    state.told += 1;
                    self.queued.notify_one();
                }
                return Some(task);
            }
            if state.closing && state.live == 0 {
                // A thread the monitor detached between two polls is not
                // counted.
                state.active = state.active.saturating_sub(1);
                return None;
            }
            state.waiting += 1;
            state = self.queued.wait(state).recover();
            state.waiting -= 1;
            state.told = state.told.saturating_sub(1);
        }
    }

    /// A detached thread whose poll ended: true if it rejoins the pool
    /// (now or after waiting as a spare), false if it ends.
    fn rejoin(&self) -> bool {
        let mut state = lock(&self.state);
        if state.closing && state.live == 0 {
            return false;
        }
        if state.active < self.size {
            state.active += 1;
            return true;
        }
        if state.spares >= self.size {
            return false;
        }
        state.spares += 1;
        loop {
            let (next, waited) = self.short.wait_timeout(state, SPARE_FOR).recover();
            state = next;
            if state.handed > 0 {
                // Counted active by the thread that handed it the place.
                state.handed -= 1;
                return true;
            }
            if (state.closing && state.live == 0) || waited.timed_out() {
                state.spares -= 1;
                return false;
            }
        }
    }

    /// Nanoseconds from the pool's origin to `at`.
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_nanos()).unwrap_or(u64::MAX)
    }

    /// A poll starts `at`: the monitor sees it (and is woken, if parked).
    fn poll_started(&self, polling: &Polling, at: Instant) {
        polling.since.store(self.nanos(at).max(1), Ordering::SeqCst);
        self.polls_started.fetch_add(1, Ordering::SeqCst);
        if self.monitor_parked.load(Ordering::SeqCst)
            && self.monitor_parked.swap(false, Ordering::SeqCst)
            && let Some(monitor) = lock(&self.monitor).as_ref()
        {
            monitor.unpark();
        }
    }

    fn task_finished(&self) {
        let mut state = lock(&self.state);
        state.live -= 1;
        let ended = state.closing && state.live == 0;
        drop(state);
        if ended {
            self.queued.notify_all();
            self.short.notify_all();
        }
    }
}

/// Starts a thread that takes tasks; the caller counted it active.
fn start_thread(shared: &Arc<Shared>) -> std::io::Result<()> {
    let weak = Arc::downgrade(shared);
    std::thread::Builder::new()
        .name("kinformer-plugins".into())
        .spawn(move || {
            if let Some(shared) = weak.upgrade() {
                serve(&shared);
            }
        })
        .map(drop)
}

/// A thread of the pool: takes tasks and polls them, until it is detached
/// and not needed back, or the pool ends.
fn serve(shared: &Arc<Shared>) {
    let _runtime = shared.runtime.enter();
    loop {
        let polling = Arc::new(Polling {
            since: AtomicU64::new(0),
            detached: AtomicBool::new(false),
        });
        lock(&shared.polls).push(Arc::clone(&polling));
        CURRENT.with(|current| *current.borrow_mut() = Some((Arc::downgrade(shared), Arc::clone(&polling))));
        let mut heavy = false;
        while !polling.detached.load(Ordering::SeqCst) {
            let Some(task) = shared.next(heavy) else {
                forget(shared, &polling);
                return;
            };
            let started = Instant::now();
            shared.poll_started(&polling, started);
            task.run(shared);
            polling.since.store(0, Ordering::SeqCst);
            heavy = started.elapsed() >= HEAVY;
        }
        forget(shared, &polling);
        if !shared.rejoin() {
            return;
        }
    }
}

/// Takes a thread's poll off the monitor's list.
fn forget(shared: &Shared, polling: &Arc<Polling>) {
    lock(&shared.polls).retain(|other| !Arc::ptr_eq(other, polling));
    CURRENT.with(|current| *current.borrow_mut() = None);
}

/// Every tick, detaches the threads held by one poll since the last tick;
/// parks while the pool is idle.
fn monitor(pool: &Weak<Shared>) {
    let mut idle = 0_u32;
    let mut seen = 0_u64;
    loop {
        std::thread::park_timeout(TICK);
        let Some(shared) = pool.upgrade() else { return };
        {
            let state = lock(&shared.state);
            if state.closing && state.live == 0 {
                return;
            }
        }
        let now = shared.nanos(Instant::now());
        let tick = u64::try_from(TICK.as_nanos()).unwrap_or(u64::MAX);
        let polls: Vec<Arc<Polling>> = lock(&shared.polls).clone();
        let mut busy = false;
        // Tasks still queued at a tick: a waiting thread takes its share.
        {
            let mut state = lock(&shared.state);
            if !state.tasks.is_empty() && state.waiting > state.told {
                state.told += 1;
                shared.queued.notify_one();
            }
        }
        for polling in &polls {
            let since = polling.since.load(Ordering::SeqCst);
            if since == 0 || polling.detached.load(Ordering::SeqCst) {
                continue;
            }
            busy = true;
            if now.saturating_sub(since) >= tick {
                shared.detach(polling);
            }
        }
        let started = shared.polls_started.load(Ordering::SeqCst);
        if busy || started != seen {
            idle = 0;
        } else {
            idle += 1;
        }
        seen = started;
        if idle >= IDLE_TICKS {
            shared.monitor_parked.store(true, Ordering::SeqCst);
            // A poll that started before the flag was set is seen now.
            let started = shared.polls_started.load(Ordering::SeqCst);
            let parks = &shared.parks;
            if started == seen {
                parks.fetch_add(1, Ordering::Relaxed);
                drop(shared);
                std::thread::park();
            }
            if let Some(shared) = pool.upgrade() {
                shared.monitor_parked.store(false, Ordering::SeqCst);
            }
            idle = 0;
        }
    }
}

impl Task {
    /// Polls the task once; queues it again if it was woken meanwhile.
    fn run(self: &Arc<Self>, shared: &Shared) {
        self.state.store(RUNNING, Ordering::SeqCst);
        let waker = Waker::from(Arc::clone(self));
        let mut context = Context::from_waker(&waker);
        let mut future = lock(&self.future);
        let Some(running) = future.as_mut() else {
            return;
        };
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| running.as_mut().poll(&mut context)));
        let finished = match polled {
            Ok(Poll::Pending) => false,
            Ok(Poll::Ready(())) => true,
            Err(_) => {
                tracing::error!(task = %self.name, "a plugin worker panicked; it ends");
                true
            }
        };
        if finished {
            *future = None;
            drop(future);
            self.state.store(FINISHED, Ordering::SeqCst);
            *lock(&self.done.finished) = true;
            self.done.signal.notify_all();
            shared.task_finished();
            return;
        }
        drop(future);
        if self
            .state
            .compare_exchange(RUNNING, IDLE, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            self.state.store(SCHEDULED, Ordering::SeqCst);
            shared.push(Arc::clone(self));
        }
    }
}

impl Wake for Task {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        loop {
            let state = self.state.load(Ordering::SeqCst);
            let next = match state {
                IDLE => SCHEDULED,
                RUNNING => NOTIFIED,
                _ => return,
            };
            if self
                .state
                .compare_exchange(state, next, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                if next == SCHEDULED
                    && let Some(pool) = self.pool.upgrade()
                {
                    pool.push(Arc::clone(self));
                }
                return;
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().recover()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn pool(size: usize) -> (tokio::runtime::Runtime, Pool) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        (runtime, Pool::new(size))
    }

    fn spawn(
        runtime: &tokio::runtime::Runtime,
        pool: &Pool,
        name: &str,
        future: impl Future<Output = ()> + Send + 'static,
    ) -> TaskHandle {
        let _entered = runtime.enter();
        pool.spawn(name, future).unwrap()
    }

    #[test]
    fn every_task_runs_to_its_end_across_its_waits() {
        let (runtime, pool) = pool(2);
        let counted = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<TaskHandle> = (0..20)
            .map(|at| {
                let counted = Arc::clone(&counted);
                spawn(&runtime, &pool, &format!("task-{at}"), async move {
                    for _ in 0..10 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        counted.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for task in &tasks {
            task.join();
            assert!(task.is_finished());
        }
        assert_eq!(counted.load(Ordering::SeqCst), 200);
    }

    /// Spawns a task that holds its thread until released and, after
    /// `before`, another: true if the other ran while the first held on.
    fn another_runs_beside_one_holding_its_thread(
        runtime: &tokio::runtime::Runtime,
        pool: &Pool,
        before: Duration,
    ) -> bool {
        let release = Arc::new(AtomicBool::new(false));
        let holding = {
            let release = Arc::clone(&release);
            spawn(runtime, pool, "holding", async move {
                // A call that runs long: it never yields.
                while !release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        std::thread::sleep(before);
        let (sender, received) = std::sync::mpsc::channel();
        let other = spawn(runtime, pool, "other", async move {
            tokio::time::sleep(Duration::from_millis(1)).await;
            sender.send(()).unwrap();
        });
        let answered = received.recv_timeout(Duration::from_secs(5));
        release.store(true, Ordering::SeqCst);
        holding.join();
        other.join();
        answered.is_ok()
    }

    #[test]
    fn a_task_that_holds_its_thread_does_not_hold_up_the_others() {
        let (runtime, pool) = pool(1);
        assert!(
            another_runs_beside_one_holding_its_thread(&runtime, &pool, Duration::from_millis(20)),
            "the other task waited for the one holding the only thread"
        );
        assert!(pool.detached() >= 1);
    }

    #[test]
    fn a_thread_that_leaves_is_replaced_at_once_and_rejoins_after() {
        let (runtime, pool) = pool(1);
        let (blocked, unblock) = std::sync::mpsc::channel::<()>();
        let leaving = spawn(&runtime, &pool, "leaving", async move {
            leave();
            unblock.recv().unwrap();
        });
        let (sender, received) = std::sync::mpsc::channel();
        let other = spawn(&runtime, &pool, "other", async move { sender.send(()).unwrap() });
        let answered = received.recv_timeout(Duration::from_secs(5));
        blocked.send(()).unwrap();
        leaving.join();
        other.join();
        assert!(answered.is_ok(), "the other task waited for the thread that left");
        assert!(pool.detached() >= 1);
        // The pool still runs tasks with its threads back.
        let again = spawn(&runtime, &pool, "again", async {});
        again.join();
    }

    #[test]
    fn an_idle_pool_s_monitor_parks_and_the_next_poll_wakes_it() {
        let (runtime, pool) = pool(1);
        spawn(&runtime, &pool, "first", async {}).join();
        let deadline = Instant::now() + Duration::from_secs(10);
        while pool.parks() == 0 {
            assert!(Instant::now() < deadline, "the monitor of an idle pool never parked");
            std::thread::sleep(TICK);
        }
        // Parked: a task holding the only thread is still seen and replaced.
        assert!(
            another_runs_beside_one_holding_its_thread(&runtime, &pool, Duration::ZERO),
            "the parked monitor missed the task holding the thread"
        );
        assert!(pool.detached() >= 1);
    }

    #[test]
    fn a_panicking_task_finishes_and_the_pool_goes_on() {
        let (runtime, pool) = pool(1);
        let panicking = spawn(&runtime, &pool, "panicking", async { panic!("a worker bug") });
        panicking.join();
        let after = spawn(&runtime, &pool, "after", async {});
        after.join();
        assert!(after.is_finished());
    }
}
