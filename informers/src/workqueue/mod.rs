//! The workqueue: keys waiting to be reconciled, with client-go's guarantees.
//!
//! A controller does not act on each change it sees: it queues the key of the
//! object that changed and reconciles that object later, from the cache. The
//! queue is what makes that work, as client-go's `workqueue` package does:
//!
//! - a key queued several times before a worker takes it is handed out once;
//! - a key is never handed to two workers at once: added while it is being
//!   processed, it is handed out again after [`WorkQueue::done`];
//! - a key can wait before it is queued ([`WorkQueue::add_after`], the earliest
//!   of two waits wins) and a failed key waits longer each time
//!   ([`WorkQueue::add_rate_limited`], see [`RateLimiter`]) until it is
//!   forgotten ([`WorkQueue::forget`]);
//! - the metrics client-go exports for a queue are kept ([`WorkQueueStats`]).
//!
//! [`QueueState`] is the queue as a plain value whose every step takes the time;
//! [`WorkQueue`] shares one between tasks and waits on Tokio's clock, so paused
//! time drives its delays.

mod queue;
mod rate_limiter;
mod stats;

use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::Recover as _;
use tokio::sync::Notify;
use tokio::time::Instant;

pub use queue::QueueState;
pub use rate_limiter::{RateLimiter, RateLimiterConfig};
pub use stats::{BUCKET_BOUNDS, DurationHistogram, WorkQueueStats};

/// A rate-limiting, delaying work queue of keys, shared by the tasks that feed
/// it and the workers that drain it. Clones are handles to the same queue.
///
/// Workers loop on [`get`](Self::get), process the key, and call
/// [`done`](Self::done) with it; after a success they [`forget`](Self::forget)
/// the key, after a failure they [`add_rate_limited`](Self::add_rate_limited)
/// it, and to look again later they [`add_after`](Self::add_after) it. After
/// [`shut_down`](Self::shut_down), `get` hands out what is still queued and then
/// returns `None`.
///
/// # Examples
///
/// ```
/// use kinformer_informers::workqueue::WorkQueue;
///
/// # fn reconcile(_key: &str) -> Result<(), ()> { Ok(()) }
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let queue = WorkQueue::default();
///
/// // An informer's event handler queues the keys of the objects that changed.
/// queue.add("default/web".to_owned());
/// queue.add("default/web".to_owned()); // still queued: reconciled once
/// queue.add("default/db".to_owned());
///
/// // A worker reconciles them, one at a time per key.
/// let worker = queue.clone();
/// let reconciled = tokio::spawn(async move {
///     let mut reconciled = Vec::new();
///     while let Some(key) = worker.get().await {
///         match reconcile(&key) {
///             Ok(()) => worker.forget(&key),
///             Err(()) => worker.add_rate_limited(key.clone()),
///         }
///         worker.done(&key);
///         reconciled.push(key);
///     }
///     reconciled
/// });
///
/// // Stop taking keys, and wait until the worker has finished the queued ones.
/// queue.shut_down_with_drain().await;
/// let reconciled = reconciled.await.expect("the worker panicked");
/// assert_eq!(reconciled, ["default/web", "default/db"]);
/// assert_eq!(queue.stats().adds, 2);
/// # }
/// ```
#[derive(Debug)]
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

#[derive(Debug)]
struct Shared<K> {
    state: Mutex<QueueState<K>>,
    /// Wakes workers waiting in `get`: a key was queued, a delayed key is due
    /// sooner, or the queue is shutting down.
    ready: Notify,
    /// Wakes callers of `shut_down_with_drain` once the queue is drained.
    drained: Notify,
}

/// What a worker's `get` finds.
enum Next<K> {
    Key(K),
    ShutDown,
    /// Nothing queued: wait for a change, or until the next delayed key is due.
    Wait(Option<Instant>),
}

impl<K: Clone + Eq + Hash> Default for WorkQueue<K> {
    /// A queue with client-go's default controller rate limiter.
    fn default() -> Self {
        Self::new(RateLimiterConfig::default())
    }
}

impl<K: Clone + Eq + Hash> WorkQueue<K> {
    /// An empty queue whose rate-limited adds follow `config`.
    #[must_use]
    pub fn new(config: RateLimiterConfig) -> Self {
        Self {
            shared: Arc::new(Shared {
                state: Mutex::new(QueueState::new(&config)),
                ready: Notify::new(),
                drained: Notify::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState<K>> {
        self.shared.state.lock().recover()
    }

    /// Runs one step on the state at the current time, then wakes whoever the
    /// step concerns.
    fn step<T>(&self, step: impl FnOnce(&mut QueueState<K>, Instant) -> T) -> T {
        let mut state = self.lock();
        let due_before = state.next_due();
        let now = Instant::now();
        state.advance(now);
        let result = step(&mut state, now);
        let sooner = state
            .next_due()
            .is_some_and(|due| due_before.is_none_or(|before| due < before));
        let (queued, drained) = (!state.is_empty(), state.is_drained());
        drop(state);
        if queued || sooner {
            // A key for a waiting worker, or a sooner deadline for it to wait
            // until; a woken worker that takes a key wakes the next one.
            self.shared.ready.notify_one();
        }
        if drained {
            self.shared.drained.notify_waiters();
        }
        result
    }

    /// Marks `key` as needing processing. A key already queued is not queued
    /// twice; a key being processed is handed out again after its
    /// [`done`](Self::done). Ignored once shutting down.
    pub fn add(&self, key: K) {
        self.step(|state, now| state.add(key, now));
    }

    /// Adds `key` once `delay` has passed (a requeue-after). A key already
    /// waiting keeps the earlier of its two times. Ignored once shutting down.
    pub fn add_after(&self, key: K, delay: Duration) {
        self.step(|state, now| state.add_after(key, delay, now));
    }

    /// Adds `key` after the delay its [`RateLimiter`] gives it: the longer of
    /// its exponential backoff and the overall token bucket's wait. Counts a
    /// failure of the key. Ignored once shutting down.
    pub fn add_rate_limited(&self, key: K) {
        self.step(|state, now| state.add_rate_limited(key, now));
    }

    /// Clears the failures of `key`, so that its next rate-limited add waits the
    /// shortest delay. Call it when the key was processed successfully.
    pub fn forget(&self, key: &K) {
        self.lock().forget(key);
    }

    /// How many rate-limited adds `key` had since it was last forgotten.
    #[must_use]
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().num_requeues(key)
    }

    /// Waits for the next key, oldest first. The caller processes it and then
    /// calls [`done`](Self::done) with it. `None` once the queue is shutting
    /// down and nothing is queued: the worker should stop.
    pub async fn get(&self) -> Option<K> {
        loop {
            // Registered before looking, so no wake-up is missed in between.
            let mut changed = pin!(self.shared.ready.notified());
            changed.as_mut().enable();
            let next = self.step(|state, now| match state.get(now) {
                Some(key) => Next::Key(key),
                None if state.is_shutting_down() => Next::ShutDown,
                None => Next::Wait(state.next_due()),
            });
            match next {
                Next::Key(key) => return Some(key),
                Next::ShutDown => return None,
                Next::Wait(None) => changed.await,
                Next::Wait(Some(due)) => {
                    // Either way, look again.
                    let _elapsed = tokio::time::timeout_at(due, changed).await;
                }
            }
        }
    }

    /// The next key if one is ready; never waits.
    pub fn try_get(&self) -> Option<K> {
        self.step(|state, now| state.get(now))
    }

    /// Marks `key` as processed; it is handed out again if it was added while
    /// being processed.
    pub fn done(&self, key: &K) {
        self.step(|state, now| state.done(key, now));
    }

    /// Stops taking keys: adds are ignored from now on and delayed keys are
    /// dropped; workers get the keys still queued, then `None`.
    pub fn shut_down(&self) {
        self.step(|state, _| state.shut_down());
        self.shared.ready.notify_waiters();
    }

    /// Shuts down, then waits until every queued key was handed out and every
    /// handed-out key is done. Waits forever if no worker is left to do so.
    pub async fn shut_down_with_drain(&self) {
        self.shut_down();
        loop {
            let mut drained = pin!(self.shared.drained.notified());
            drained.as_mut().enable();
            if self.lock().is_drained() {
                return;
            }
            drained.await;
        }
    }

    /// True once the queue was shut down.
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        self.lock().is_shutting_down()
    }

    /// The number of keys ready to be handed out.
    #[must_use]
    pub fn len(&self) -> usize {
        self.step(|state, _| state.len())
    }

    /// True when no key is ready to be handed out.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of the queue's metrics.
    #[must_use]
    pub fn stats(&self) -> WorkQueueStats {
        self.step(|state, now| state.stats(now))
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::timeout;

    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn a_waiting_worker_gets_a_key_added_later() {
        let queue = WorkQueue::default();
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::time::sleep(SECOND).await;
        assert!(!worker.is_finished(), "get returned with nothing queued");
        queue.add("a");
        let key = timeout(SECOND, worker)
            .await
            .expect("a waiting worker was not woken by an add")
            .unwrap();
        assert_eq!(key, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_requeue_after_is_handed_out_after_its_delay_and_not_before() {
        let queue = WorkQueue::default();
        queue.add_after("a", 10 * SECOND);
        assert!(
            timeout(9 * SECOND, queue.get()).await.is_err(),
            "handed out before its delay"
        );
        let key = timeout(2 * SECOND, queue.get())
            .await
            .expect("a delayed key was not handed out after its delay");
        assert_eq!(key, Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_waiting_for_a_later_key_gets_a_sooner_one_in_time() {
        let queue = WorkQueue::default();
        queue.add_after("later", 60 * SECOND);
        let worker = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        queue.add_after("sooner", SECOND);
        let key = timeout(2 * SECOND, worker)
            .await
            .expect("the worker slept on the later deadline")
            .unwrap();
        assert_eq!(key, Some("sooner"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_added_while_one_worker_has_it_goes_to_another_only_after_done() {
        let queue = WorkQueue::default();
        queue.add("a");
        let first = queue.get().await;
        assert_eq!(first, Some("a"));
        queue.add("a");
        let second = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::time::sleep(SECOND).await;
        assert!(!second.is_finished(), "one key handed to two workers at once");
        queue.done(&"a");
        let key = timeout(SECOND, second)
            .await
            .expect("the key was not handed out after done")
            .unwrap();
        assert_eq!(key, Some("a"));
        assert_eq!(queue.try_get(), None, "handed out twice for one add");
    }

    #[tokio::test(start_paused = true)]
    async fn shutting_down_hands_out_the_queued_keys_then_none_to_every_worker() {
        let queue = WorkQueue::<&str>::default();
        let idle = tokio::spawn({
            let queue = queue.clone();
            async move { queue.get().await }
        });
        tokio::task::yield_now().await;
        queue.shut_down();
        let idle = timeout(SECOND, idle)
            .await
            .expect("a waiting worker was not woken by the shutdown")
            .unwrap();
        assert_eq!(idle, None);

        let queue = WorkQueue::default();
        queue.add("a");
        queue.add("b");
        queue.add_after("delayed", SECOND);
        queue.shut_down();
        queue.add("c");
        assert!(queue.is_shutting_down());
        let mut handed_out = Vec::new();
        while let Some(key) = timeout(10 * SECOND, queue.get())
            .await
            .expect("get hung after shutdown")
        {
            queue.done(&key);
            handed_out.push(key);
        }
        assert_eq!(handed_out, ["a", "b"]);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_with_drain_waits_until_the_key_in_flight_is_done() {
        let queue = WorkQueue::default();
        queue.add("a");
        let key = queue.get().await.unwrap();
        let drain = tokio::spawn({
            let queue = queue.clone();
            async move { queue.shut_down_with_drain().await }
        });
        tokio::time::sleep(SECOND).await;
        assert!(!drain.is_finished(), "the drain did not wait for the key in flight");
        queue.done(&key);
        timeout(SECOND, drain)
            .await
            .expect("the drain did not see the last done")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn failing_keys_come_back_later_each_time_and_sooner_once_forgotten() {
        let queue = WorkQueue::default();
        let start = Instant::now();
        let mut waits = Vec::new();
        for _ in 0..3 {
            queue.add_rate_limited("a");
            let key = timeout(SECOND, queue.get())
                .await
                .expect("a rate-limited key never came back");
            waits.push(start.elapsed());
            queue.done(&key.unwrap());
        }
        // 5, then 10, then 20 ms after the previous failure.
        let ms = Duration::from_millis;
        assert_eq!(waits, [ms(5), ms(15), ms(35)]);
        queue.forget(&"a");
        queue.add_rate_limited("a");
        // Not reset, it would wait 40 ms.
        timeout(ms(9), queue.get()).await.expect("the backoff was not reset");
    }

    #[tokio::test(start_paused = true)]
    async fn stats_count_adds_retries_depth_and_latency() {
        let queue = WorkQueue::default();
        queue.add("a");
        queue.add("a");
        queue.add("b");
        queue.add_after("c", SECOND);
        let stats = queue.stats();
        assert_eq!((stats.depth, stats.adds, stats.retries, stats.delayed), (2, 2, 1, 1));
        tokio::time::sleep(2 * SECOND).await;
        assert_eq!(queue.len(), 3);
        let key = queue.get().await.unwrap();
        tokio::time::sleep(SECOND).await;
        queue.done(&key);
        let stats = queue.stats();
        assert_eq!((stats.depth, stats.adds, stats.delayed), (2, 3, 0));
        assert_eq!(stats.queue_latency.count, 1);
        assert_eq!(stats.queue_latency.sum, 2 * SECOND);
        assert_eq!(stats.work_duration.sum, SECOND);
    }
}
