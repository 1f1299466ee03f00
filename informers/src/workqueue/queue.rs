//! The work queue's state and its steps, with the clock passed in.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use super::rate_limiter::{RateLimiter, RateLimiterConfig};
use super::stats::{DurationHistogram, WorkQueueStats};

/// The longest delay: a key asked to wait longer waits this long (30 years,
/// as Tokio's far future), so a deadline never overflows.
const FOREVER: Duration = Duration::from_secs(30 * 365 * 24 * 60 * 60);

/// A rate-limiting, delaying work queue as a plain value: every step takes the
/// time it happens at. [`WorkQueue`](super::WorkQueue) shares one between tasks
/// and waits on Tokio's clock; use this type directly to drive a queue by hand.
///
/// A key is in at most one of these places at a time, except that a key being
/// processed may also be waiting again:
///
/// - *queued*: ready to be handed out, in the order it was added;
/// - *processing*: handed out by [`get`](Self::get), until [`done`](Self::done);
///   adding it again marks it *dirty*, and `done` queues it again;
/// - *delayed*: added with [`add_after`](Self::add_after), queued once its
///   delay is over.
///
/// Every step that takes `now` first queues the delayed keys that are due by
/// `now` ([`advance`](Self::advance)); the accessors report the state as of the
/// last step.
#[derive(Debug)]
pub struct QueueState<K> {
    /// Keys ready to be handed out, oldest first; each is dirty and not processing.
    queue: VecDeque<K>,
    /// Keys that need processing, with when each was added.
    dirty: HashMap<K, Instant>,
    /// Keys handed out and not yet done, with when each was handed out.
    processing: HashMap<K, Instant>,
    /// Delayed keys by when they are due; the sequence number keeps one order
    /// among keys due at the same time.
    delayed: BTreeMap<(Instant, u64), K>,
    /// Each delayed key's place in `delayed`.
    delayed_at: HashMap<K, (Instant, u64)>,
    next_sequence: u64,
    rate_limiter: RateLimiter<K>,
    shutting_down: bool,
    adds: u64,
    retries: u64,
    queue_latency: DurationHistogram,
    work_duration: DurationHistogram,
}

impl<K: Clone + Eq + Hash> QueueState<K> {
    /// An empty queue whose rate-limited adds follow `config`.
    #[must_use]
    pub fn new(config: &RateLimiterConfig) -> Self {
        Self {
            queue: VecDeque::new(),
            dirty: HashMap::new(),
            processing: HashMap::new(),
            delayed: BTreeMap::new(),
            delayed_at: HashMap::new(),
            next_sequence: 0,
            rate_limiter: RateLimiter::new(config),
            shutting_down: false,
            adds: 0,
            retries: 0,
            queue_latency: DurationHistogram::default(),
            work_duration: DurationHistogram::default(),
        }
    }

    /// Marks `key` as needing processing. A key already waiting is not queued
    /// twice; a key being processed is queued again when it is done. Ignored
    /// once shutting down.
    pub fn add(&mut self, key: K, now: Instant) {
        self.advance(now);
        self.insert(key, now);
    }

    /// Adds `key` once `delay` has passed. A key already delayed keeps the
    /// earlier of its two times. Ignored once shutting down.
    pub fn add_after(&mut self, key: K, delay: Duration, now: Instant) {
        self.advance(now);
        if self.shutting_down {
            return;
        }
        self.retries += 1;
        if delay.is_zero() {
            self.insert(key, now);
            return;
        }
        let due = now + delay.min(FOREVER);
        if let Some(&(earlier, sequence)) = self.delayed_at.get(&key) {
            if earlier <= due {
                return;
            }
            self.delayed.remove(&(earlier, sequence));
        }
        let place = (due, self.next_sequence);
        self.next_sequence += 1;
        self.delayed.insert(place, key.clone());
        self.delayed_at.insert(key, place);
    }

    /// Adds `key` after the delay the rate limiter gives it, counting a failure
    /// of the key. Ignored once shutting down.
    pub fn add_rate_limited(&mut self, key: K, now: Instant) {
        if self.shutting_down {
            return;
        }
        let delay = self.rate_limiter.when(&key, now);
        self.add_after(key, delay, now);
    }

    /// Clears the failures of `key`, so that its next rate-limited add waits the
    /// shortest delay. Call it when the key was processed successfully.
    pub fn forget(&mut self, key: &K) {
        self.rate_limiter.forget(key);
    }

    /// How many rate-limited adds `key` had since it was last forgotten.
    #[must_use]
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.rate_limiter.num_requeues(key)
    }

    /// Queues the delayed keys that are due by `now`, in the order they became due.
    pub fn advance(&mut self, now: Instant) {
        while let Some(entry) = self.delayed.first_entry() {
            let (due, _) = *entry.key();
            if due > now {
                break;
            }
            let key = entry.remove();
            self.delayed_at.remove(&key);
            // It has been waiting in the queue since it became due.
            self.insert(key, due);
        }
    }

    fn insert(&mut self, key: K, at: Instant) {
        if self.shutting_down || self.dirty.contains_key(&key) {
            return;
        }
        self.adds += 1;
        if !self.processing.contains_key(&key) {
            self.queue.push_back(key.clone());
        }
        self.dirty.insert(key, at);
    }

    /// Hands out the oldest queued key; the caller processes it and then calls
    /// [`done`](Self::done). `None` when no key is queued.
    pub fn get(&mut self, now: Instant) -> Option<K> {
        self.advance(now);
        let key = self.queue.pop_front()?;
        if let Some(added) = self.dirty.remove(&key) {
            self.queue_latency.observe(now.saturating_duration_since(added));
        }
        self.processing.insert(key.clone(), now);
        Some(key)
    }

    /// Marks `key` as processed; queues it again if it was added meanwhile.
    /// Ignored for a key that is not being processed.
    pub fn done(&mut self, key: &K, now: Instant) {
        self.advance(now);
        let Some(started) = self.processing.remove(key) else {
            return;
        };
        self.work_duration.observe(now.saturating_duration_since(started));
        if self.dirty.contains_key(key) {
            self.queue.push_back(key.clone());
        }
    }

    /// When the next delayed key is due, if any.
    #[must_use]
    pub fn next_due(&self) -> Option<Instant> {
        self.delayed.first_key_value().map(|((due, _), _)| *due)
    }

    /// Stops taking keys: adds are ignored from now on and delayed keys are
    /// dropped, while the queued keys are still handed out.
    pub fn shut_down(&mut self) {
        self.shutting_down = true;
        self.delayed.clear();
        self.delayed_at.clear();
    }

    /// True once [`shut_down`](Self::shut_down) was called.
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// True when shutting down and every key was handed out and done.
    #[must_use]
    pub fn is_drained(&self) -> bool {
        self.shutting_down && self.queue.is_empty() && self.processing.is_empty()
    }

    /// The number of keys ready to be handed out.
    #[must_use]
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True when no key is ready to be handed out.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The queue's metrics; the ages of the keys being processed are taken at `now`.
    #[must_use]
    pub fn stats(&self, now: Instant) -> WorkQueueStats {
        let ages = self
            .processing
            .values()
            .map(|started| now.saturating_duration_since(*started));
        let (unfinished_work, longest_running_processor) = ages.fold((Duration::ZERO, Duration::ZERO), |acc, age| {
            (acc.0.saturating_add(age), acc.1.max(age))
        });
        WorkQueueStats {
            depth: self.dirty.len(),
            adds: self.adds,
            retries: self.retries,
            queue_latency: self.queue_latency,
            work_duration: self.work_duration,
            unfinished_work,
            longest_running_processor,
            delayed: self.delayed.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn queue() -> QueueState<&'static str> {
        QueueState::new(&RateLimiterConfig::default())
    }

    /// Hands out every queued key at `now`, marking each done.
    fn drain(queue: &mut QueueState<&'static str>, now: Instant) -> Vec<&'static str> {
        let mut keys = Vec::new();
        while let Some(key) = queue.get(now) {
            queue.done(&key, now);
            keys.push(key);
        }
        keys
    }

    #[test]
    fn a_key_added_many_times_before_it_is_handed_out_is_handed_out_once() {
        let mut queue = queue();
        let now = Instant::now();
        for key in ["a", "b", "a", "a", "b"] {
            queue.add(key, now);
        }
        assert_eq!(queue.len(), 2);
        assert_eq!(drain(&mut queue, now), ["a", "b"]);
    }

    #[test]
    fn a_key_added_while_processed_is_handed_out_again_once_and_only_after_done() {
        let mut queue = queue();
        let now = Instant::now();
        queue.add("a", now);
        assert_eq!(queue.get(now), Some("a"));
        queue.add("a", now);
        queue.add("a", now);
        assert_eq!(queue.get(now), None, "handed to a second worker while processed");
        queue.done(&"a", now);
        assert_eq!(queue.get(now), Some("a"));
        queue.done(&"a", now);
        assert_eq!(queue.get(now), None, "handed out again without a new add");
    }

    #[test]
    fn done_for_a_key_not_handed_out_queues_nothing() {
        let mut queue = queue();
        let now = Instant::now();
        queue.add("a", now);
        queue.done(&"a", now);
        assert_eq!(queue.len(), 1);
        assert_eq!(drain(&mut queue, now), ["a"]);
    }

    #[test]
    fn a_delayed_key_is_handed_out_when_its_delay_is_over_and_not_before() {
        let mut queue = queue();
        let start = Instant::now();
        queue.add_after("a", Duration::from_secs(10), start);
        assert_eq!(queue.next_due(), Some(start + Duration::from_secs(10)));
        assert_eq!(queue.get(start + Duration::from_millis(9_999)), None);
        assert_eq!(queue.get(start + Duration::from_secs(10)), Some("a"));
        assert_eq!(queue.next_due(), None);
    }

    #[test]
    fn the_earliest_of_two_delays_of_one_key_wins() {
        let mut queue = queue();
        let start = Instant::now();
        queue.add_after("sooner", Duration::from_secs(30), start);
        queue.add_after("sooner", Duration::from_secs(5), start);
        queue.add_after("later", Duration::from_secs(5), start);
        queue.add_after("later", Duration::from_secs(30), start);
        assert_eq!(queue.stats(start).delayed, 2);
        assert_eq!(drain(&mut queue, start + Duration::from_secs(5)), ["sooner", "later"]);
        assert_eq!(drain(&mut queue, start + Duration::from_secs(60)), [] as [&str; 0]);
    }

    #[test]
    fn keys_are_handed_out_in_the_order_they_became_ready() {
        let mut queue = queue();
        let start = Instant::now();
        queue.add_after("delayed", Duration::from_secs(1), start);
        queue.add("first", start);
        // The delayed key became ready before "late" was added.
        queue.add("late", start + Duration::from_secs(2));
        assert_eq!(
            drain(&mut queue, start + Duration::from_secs(2)),
            ["first", "delayed", "late"]
        );
    }

    #[test]
    fn a_delayed_key_that_is_already_queued_is_handed_out_once_when_both_are_due() {
        let mut queue = queue();
        let start = Instant::now();
        queue.add("a", start);
        queue.add_after("a", Duration::from_secs(1), start);
        assert_eq!(drain(&mut queue, start + Duration::from_secs(1)), ["a"]);
    }

    #[test]
    fn rate_limited_adds_of_one_key_wait_5_10_20_ms() {
        let mut queue = queue();
        let mut now = Instant::now();
        for expected in [5 * MS, 10 * MS, 20 * MS, 40 * MS] {
            queue.add_rate_limited("a", now);
            assert_eq!(queue.next_due(), Some(now + expected));
            assert_eq!(queue.get(now + expected - Duration::from_nanos(1)), None);
            now += expected;
            assert_eq!(queue.get(now), Some("a"));
            queue.done(&"a", now);
        }
        assert_eq!(queue.num_requeues(&"a"), 4);
    }

    #[test]
    fn forgetting_a_key_after_success_resets_its_backoff() {
        let mut queue = queue();
        let now = Instant::now();
        for _ in 0..3 {
            queue.add_rate_limited("a", now);
        }
        assert_eq!(queue.num_requeues(&"a"), 3);
        drain(&mut queue, now + Duration::from_secs(1));
        queue.forget(&"a");
        assert_eq!(queue.num_requeues(&"a"), 0);
        let later = now + Duration::from_secs(2);
        queue.add_rate_limited("a", later);
        assert_eq!(queue.next_due(), Some(later + 5 * MS));
    }

    #[test]
    fn a_burst_of_distinct_failing_keys_passes_100_at_once_then_10_per_second() {
        let mut queue = QueueState::new(&RateLimiterConfig::default());
        let start = Instant::now();
        for key in 0..150 {
            queue.add_rate_limited(key, start);
        }
        let ready_by = |queue: &mut QueueState<i32>, after: Duration| {
            let now = start + after;
            std::iter::from_fn(|| queue.get(now)).count()
        };
        // Each key's own backoff is 5 ms; the bucket has 100 tokens.
        assert_eq!(ready_by(&mut queue, 5 * MS), 100);
        assert_eq!(ready_by(&mut queue, Duration::from_millis(999)), 9);
        assert_eq!(ready_by(&mut queue, Duration::from_secs(1)), 1);
        assert_eq!(ready_by(&mut queue, Duration::from_secs(2)), 10);
        assert_eq!(ready_by(&mut queue, Duration::from_secs(5)), 30);
    }

    #[test]
    fn shutting_down_drops_new_and_delayed_keys_and_hands_out_the_queued_ones() {
        let mut queue = queue();
        let now = Instant::now();
        queue.add("a", now);
        queue.add("b", now);
        queue.add_after("delayed", Duration::from_secs(1), now);
        assert_eq!(queue.get(now), Some("a"));
        queue.add("a", now);
        queue.shut_down();
        queue.add("new", now);
        queue.add_rate_limited("new", now);
        assert!(queue.is_shutting_down());
        assert!(!queue.is_drained());
        assert_eq!(queue.get(now), Some("b"));
        queue.done(&"b", now);
        // "a" was added again before the shutdown: done queues it.
        queue.done(&"a", now);
        assert_eq!(drain(&mut queue, now + Duration::from_secs(2)), ["a"]);
        assert!(queue.is_drained());
        assert_eq!(queue.num_requeues(&"new"), 0);
    }

    #[test]
    fn metrics_follow_adds_hand_outs_and_work() {
        let mut queue = queue();
        let start = Instant::now();
        queue.add("a", start);
        queue.add("a", start);
        queue.add("b", start);
        queue.add_rate_limited("c", start);
        let stats = queue.stats(start);
        assert_eq!((stats.depth, stats.adds, stats.retries, stats.delayed), (2, 2, 1, 1));

        let at = |ms| start + Duration::from_millis(ms);
        assert_eq!(queue.get(at(100)), Some("a"));
        assert_eq!(queue.get(at(300)), Some("b"));
        queue.add("a", at(300));
        let stats = queue.stats(at(400));
        // "c" became due at 5 ms; "a" is waiting again, for its done.
        assert_eq!((stats.depth, stats.adds, stats.delayed), (2, 4, 0));
        assert_eq!(stats.queue_latency.count, 2);
        assert_eq!(stats.queue_latency.sum, Duration::from_millis(400));
        assert_eq!(stats.longest_running_processor, Duration::from_millis(300));
        assert_eq!(stats.unfinished_work, Duration::from_millis(400));

        queue.done(&"a", at(500));
        let stats = queue.stats(at(500));
        assert_eq!(stats.work_duration.count, 1);
        assert_eq!(stats.work_duration.sum, Duration::from_millis(400));
        assert_eq!(stats.longest_running_processor, Duration::from_millis(200));
        // "c" has waited since it became due, not since it was added.
        assert_eq!(queue.get(at(500)), Some("c"));
        assert_eq!(queue.stats(at(500)).queue_latency.sum, Duration::from_millis(400 + 495));
    }

    /// Random steps by a few workers on a few keys: a key is never handed to two
    /// workers at once, and every add is followed by a hand-out.
    #[test]
    fn random_steps_never_hand_one_key_out_twice_at_once_and_lose_no_add() {
        const KEYS: [&str; 5] = ["a", "b", "c", "d", "e"];
        for seed in 0..200 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut queue = queue();
            let mut now = Instant::now();
            let mut processing: Vec<&str> = Vec::new();
            // Keys added since they were last handed out.
            let mut owed: HashSet<&str> = HashSet::new();
            for _ in 0..300 {
                let key = KEYS[rng.random_range(0..KEYS.len())];
                match rng.random_range(0..7) {
                    0 => queue.add(key, now),
                    1 => queue.add_after(key, Duration::from_millis(rng.random_range(0..50)), now),
                    2 => queue.add_rate_limited(key, now),
                    3 | 4 => {
                        if let Some(key) = queue.get(now) {
                            assert!(!processing.contains(&key), "seed {seed}: {key} handed out twice");
                            processing.push(key);
                            owed.remove(key);
                        }
                        continue;
                    }
                    5 => {
                        if !processing.is_empty() {
                            let key = processing.swap_remove(rng.random_range(0..processing.len()));
                            queue.done(&key, now);
                            if rng.random_bool(0.5) {
                                queue.forget(&key);
                            }
                        }
                        continue;
                    }
                    _ => {
                        now += Duration::from_millis(rng.random_range(0..20));
                        continue;
                    }
                }
                owed.insert(key);
            }
            for key in processing.drain(..) {
                queue.done(&key, now);
            }
            // Past every backoff and bucket wait.
            for key in drain(&mut queue, now + Duration::from_secs(3000)) {
                owed.remove(key);
            }
            assert!(owed.is_empty(), "seed {seed}: never handed out again: {owed:?}");
            let stats = queue.stats(now);
            assert_eq!((stats.depth, stats.delayed, queue.len()), (0, 0, 0), "seed {seed}");
        }
    }
}
