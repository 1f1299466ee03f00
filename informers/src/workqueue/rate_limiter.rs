//! How long a failed key waits: a per-key exponential backoff and an overall token bucket ([`crate::rate`]).

use std::collections::HashMap;
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::rate::TokenBucket;

/// Settings of a [`RateLimiter`]. The default is client-go's
/// `DefaultControllerRateLimiter`: a per-key backoff from 5 ms doubling up to
/// 1000 s, and an overall bucket of 10 requeues per second with a burst of 100.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimiterConfig {
    /// The delay after a key's first failure; each further failure doubles it.
    pub base_delay: Duration,
    /// The longest delay the per-key backoff gives.
    pub max_delay: Duration,
    /// Requeues per second over all keys once the burst is spent. A value that is
    /// not a positive finite number turns the overall limit off.
    pub qps: f64,
    /// Requeues over all keys let through at once when the bucket is full.
    pub burst: u32,
}

impl Default for RateLimiterConfig {
    fn default() -> Self {
        Self {
            base_delay: Duration::from_millis(5),
            max_delay: Duration::from_secs(1000),
            qps: 10.0,
            burst: 100,
        }
    }
}

impl RateLimiterConfig {
    /// Sets [`RateLimiterConfig::base_delay`].
    #[must_use]
    pub fn base_delay(mut self, delay: Duration) -> Self {
        self.base_delay = delay;
        self
    }

    /// Sets [`RateLimiterConfig::max_delay`].
    #[must_use]
    pub fn max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Sets [`RateLimiterConfig::qps`].
    #[must_use]
    pub fn qps(mut self, qps: f64) -> Self {
        self.qps = qps;
        self
    }

    /// Sets [`RateLimiterConfig::burst`]; at least 1.
    #[must_use]
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = burst.max(1);
        self
    }
}

/// Decides how long a key waits before it is retried: the longer of its own
/// exponential backoff and the overall token bucket's wait (client-go's
/// `MaxOfRateLimiter` of an `ItemExponentialFailureRateLimiter` and a
/// `BucketRateLimiter`).
///
/// Every [`RateLimiter::when`] counts as a failure of the key and takes a token
/// from the bucket; [`RateLimiter::forget`] clears the key's failures.
#[derive(Debug)]
pub struct RateLimiter<K> {
    base_delay: Duration,
    max_delay: Duration,
    failures: HashMap<K, u32>,
    bucket: TokenBucket,
}

impl<K: Clone + Eq + Hash> RateLimiter<K> {
    /// A rate limiter with these settings and no failures.
    #[must_use]
    pub fn new(config: &RateLimiterConfig) -> Self {
        Self {
            base_delay: config.base_delay,
            max_delay: config.max_delay,
            failures: HashMap::new(),
            bucket: TokenBucket::new(config.qps, config.burst),
        }
    }

    /// Records a failure of `key` at `now` and says how long it waits.
    pub fn when(&mut self, key: &K, now: Instant) -> Duration {
        let backoff = self.backoff(key);
        let overall = self.bucket.reserve(now);
        backoff.max(overall)
    }

    /// `base_delay * 2^failures`, capped at `max_delay`; counts the failure.
    fn backoff(&mut self, key: &K) -> Duration {
        let exponent = match self.failures.get_mut(key) {
            Some(failures) => {
                let exponent = *failures;
                *failures = failures.saturating_add(1);
                exponent
            }
            None => {
                self.failures.insert(key.clone(), 1);
                0
            }
        };
        2u32.checked_pow(exponent)
            .and_then(|factor| self.base_delay.checked_mul(factor))
            .map_or(self.max_delay, |delay| delay.min(self.max_delay))
    }

    /// Clears the failures of `key`: its next failure waits `base_delay` again.
    /// The overall bucket is not refunded.
    pub fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }

    /// How many times `key` failed since it was last forgotten.
    #[must_use]
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn each_failure_of_a_key_doubles_its_delay_from_5ms_up_to_1000s() {
        let mut limiter = RateLimiter::new(&RateLimiterConfig::default());
        let now = Instant::now();
        let delays: Vec<Duration> = (0..25).map(|_| limiter.when(&"a", now)).collect();
        assert_eq!(delays[..5], [5 * MS, 10 * MS, 20 * MS, 40 * MS, 80 * MS]);
        // 5 ms * 2^17 = 655.36 s is the last delay under the cap.
        assert_eq!(delays[17], Duration::from_millis(655_360));
        assert!(delays[18..].iter().all(|delay| *delay == Duration::from_secs(1000)));
        assert_eq!(limiter.num_requeues(&"a"), 25);
    }

    #[test]
    fn a_key_that_failed_very_often_waits_the_cap_without_overflowing() {
        let mut limiter = RateLimiter::new(&RateLimiterConfig::default().qps(f64::INFINITY));
        let now = Instant::now();
        for _ in 0..100 {
            limiter.when(&"a", now);
        }
        assert_eq!(limiter.when(&"a", now), Duration::from_secs(1000));
    }

    #[test]
    fn keys_back_off_independently() {
        let mut limiter = RateLimiter::new(&RateLimiterConfig::default());
        let now = Instant::now();
        limiter.when(&"a", now);
        limiter.when(&"a", now);
        assert_eq!(limiter.when(&"b", now), 5 * MS);
        assert_eq!(limiter.num_requeues(&"a"), 2);
        assert_eq!(limiter.num_requeues(&"b"), 1);
    }

    #[test]
    fn forgetting_a_key_starts_its_backoff_over() {
        let mut limiter = RateLimiter::new(&RateLimiterConfig::default());
        let now = Instant::now();
        for _ in 0..4 {
            limiter.when(&"a", now);
        }
        limiter.forget(&"a");
        assert_eq!(limiter.num_requeues(&"a"), 0);
        assert_eq!(limiter.when(&"a", now), 5 * MS);
    }
}
