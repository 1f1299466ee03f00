//! Rates: the one token bucket every limit of the host is made of (requeues,
//! writes, Events per object, a plugin's log lines and error lines).

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket in the manner of Go's `rate.Limiter`: it starts full and
/// refills at `qps`. A reservation on an empty bucket takes a token on credit
/// and waits until that token has been refilled (`Reserve`); `try_take` takes
/// one only if it is there (`Allow`).
#[derive(Debug)]
pub struct TokenBucket {
    /// `None` when there is no overall limit.
    qps: Option<f64>,
    burst: f64,
    /// Negative when reservations were made on credit.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    updated: Option<Instant>,
}

impl TokenBucket {
    /// A bucket of `burst` tokens (at least one), refilled at `qps` a
    /// second; no limit when `qps` is not a positive number.
    #[must_use]
    pub fn new(qps: f64, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: (qps.is_finite() && qps > 0.0).then_some(qps),
            burst,
            tokens: burst,
            updated: None,
        }
    }

    /// `rate` tokens a second, in bursts of up to `rate` (at least one).
    pub fn per_second(rate: u32) -> Self {
        let rate = rate.max(1);
        Self::new(f64::from(rate), rate)
    }

    /// Takes a token at `now`; the wait until it is there.
    pub fn reserve(&mut self, now: Instant) -> Duration {
        let Some(qps) = self.qps else {
            return Duration::ZERO;
        };
        self.refill(now, qps);
        self.tokens -= 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-self.tokens / qps).unwrap_or(Duration::MAX)
        }
    }

    /// Takes a token at `now` if one is there: true when taken.
    pub fn try_take(&mut self, now: Instant) -> bool {
        let Some(qps) = self.qps else {
            return true;
        };
        self.refill(now, qps);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// True when the bucket at `now` would be full: it is then the same as a
    /// new one.
    pub fn is_full(&self, now: Instant) -> bool {
        self.qps.is_none_or(|qps| {
            let rested = self
                .updated
                .map_or(0.0, |updated| now.saturating_duration_since(updated).as_secs_f64());
            self.tokens + rested * qps >= self.burst
        })
    }

    /// Adds what was refilled since the last update, up to the burst.
    fn refill(&mut self, now: Instant, qps: f64) {
        if let Some(updated) = self.updated {
            let refill = now.saturating_duration_since(updated).as_secs_f64() * qps;
            self.tokens = (self.tokens + refill).min(self.burst);
        }
        self.updated = Some(self.updated.map_or(now, |updated| updated.max(now)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_lets_a_burst_through_then_refills_at_its_rate() {
        let mut bucket = TokenBucket::new(10.0, 100);
        let start = Instant::now();
        assert!((0..100).all(|_| bucket.reserve(start).is_zero()));
        assert_eq!(bucket.reserve(start), Duration::from_millis(100));
        assert_eq!(bucket.reserve(start), Duration::from_millis(200));
        // Two reservations on credit: after one second, eight tokens are there.
        let later = start + Duration::from_secs(1);
        assert!((0..8).all(|_| bucket.reserve(later).is_zero()));
        assert!(!bucket.reserve(later).is_zero());
        // Never more than the burst, however long it rested.
        let much_later = later + Duration::from_secs(3600);
        assert_eq!((0..200).filter(|_| bucket.reserve(much_later).is_zero()).count(), 100);
    }

    #[test]
    fn taking_from_the_bucket_never_goes_into_credit() {
        let mut bucket = TokenBucket::new(2.0, 3);
        let start = Instant::now();
        assert_eq!((0..10).filter(|_| bucket.try_take(start)).count(), 3);
        assert!(!bucket.is_full(start));
        // Refused takes cost nothing: half a second later one token is back.
        let later = start + Duration::from_millis(500);
        assert!(bucket.try_take(later));
        assert!(!bucket.try_take(later));
        assert!(bucket.is_full(later + Duration::from_secs(2)));
    }

    #[test]
    fn a_qps_that_is_not_positive_turns_the_overall_limit_off() {
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let mut bucket = TokenBucket::new(qps, 1);
            let now = Instant::now();
            assert!((0..1000).all(|_| bucket.reserve(now).is_zero()), "qps {qps}");
        }
    }

    #[test]
    fn a_bucket_of_ten_a_second_refuses_a_flood_then_refills() {
        let mut bucket = TokenBucket::new(10.0, 10);
        let start = Instant::now();
        assert_eq!((0..1000).filter(|_| bucket.try_take(start)).count(), 10);
        assert!(bucket.try_take(start + Duration::from_millis(100)));
    }
}
