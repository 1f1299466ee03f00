//! The work queue's metrics, named as client-go's `workqueue_*` metrics are.

use std::time::Duration;

/// The upper bounds of [`DurationHistogram`]'s buckets: 10 ns to 10 s, each ten
/// times the last, as client-go's Prometheus workqueue metrics use.
pub const BUCKET_BOUNDS: [Duration; 10] = [
    Duration::from_nanos(10),
    Duration::from_nanos(100),
    Duration::from_micros(1),
    Duration::from_micros(10),
    Duration::from_micros(100),
    Duration::from_millis(1),
    Duration::from_millis(10),
    Duration::from_millis(100),
    Duration::from_secs(1),
    Duration::from_secs(10),
];

/// Observed durations, counted into [`BUCKET_BOUNDS`] as a Prometheus histogram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DurationHistogram {
    /// Observations.
    pub count: u64,
    /// The sum of the observations.
    pub sum: Duration,
    /// Observations of at most the bound of the same index in [`BUCKET_BOUNDS`]
    /// (cumulative, as Prometheus' `le` buckets); longer ones count only in
    /// [`DurationHistogram::count`].
    pub buckets: [u64; BUCKET_BOUNDS.len()],
}

impl DurationHistogram {
    /// Counts one observation.
    pub fn observe(&mut self, duration: Duration) {
        self.count += 1;
        self.sum = self.sum.saturating_add(duration);
        for (bucket, bound) in self.buckets.iter_mut().zip(BUCKET_BOUNDS) {
            if duration <= bound {
                *bucket += 1;
            }
        }
    }

    /// The mean observation; `None` before the first.
    #[must_use]
    pub fn mean(&self) -> Option<Duration> {
        let count = u32::try_from(self.count).unwrap_or(u32::MAX);
        (count > 0).then(|| self.sum / count)
    }
}

/// A snapshot of one work queue's metrics. The client-go metric each field
/// stands for is named on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkQueueStats {
    /// Keys waiting to be handed out, counting a key added again while being
    /// processed (`workqueue_depth`). Delayed keys count once their delay is over.
    pub depth: usize,
    /// Adds that queued a key: an add of a key already waiting is not one
    /// (`workqueue_adds_total`).
    pub adds: u64,
    /// Delayed and rate-limited adds (`workqueue_retries_total`).
    pub retries: u64,
    /// From a key's add to its hand-out (`workqueue_queue_duration_seconds`); for a
    /// delayed key, from the end of its delay.
    pub queue_latency: DurationHistogram,
    /// From a key's hand-out to its `done` (`workqueue_work_duration_seconds`).
    pub work_duration: DurationHistogram,
    /// The sum of how long each key being processed has been
    /// (`workqueue_unfinished_work_seconds`).
    pub unfinished_work: Duration,
    /// How long the key processed longest so far has been
    /// (`workqueue_longest_running_processor_seconds`).
    pub longest_running_processor: Duration,
    /// Keys waiting for their delay to end; client-go has no metric for it.
    pub delayed: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_observation_counts_in_every_bucket_at_least_as_long() {
        let mut histogram = DurationHistogram::default();
        histogram.observe(Duration::from_millis(5));
        histogram.observe(Duration::from_secs(60));
        assert_eq!(histogram.buckets, [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(histogram.count, 2);
        assert_eq!(histogram.sum, Duration::from_millis(60_005));
        assert_eq!(histogram.mean(), Some(Duration::from_micros(30_002_500)));
        assert_eq!(DurationHistogram::default().mean(), None);
    }
}
