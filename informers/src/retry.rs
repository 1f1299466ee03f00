//! How a failing list or watch waits before it tries again, and how it says so.
//!
//! [`Backoff`] is client-go's reflector back-off: 800 ms doubling to 30 s, each
//! wait stretched by up to its own length at random (jitter 1.0), started over
//! only after two minutes without a failure. kube-rs's watcher resets its
//! back-off on every event it yields, including the `Init` it yields before each
//! list attempt, so a list that always fails would be retried about once a
//! second; this one ignores those resets.
//!
//! [`describe`] turns a watcher error into one sentence with the server's
//! reason, code and message ("list ConfigMap: forbidden (403): configmaps is
//! forbidden: …"), never a debug dump; [`Repeats`] keeps the log to the first
//! of a run of identical failures and a summary at each doubling of the count.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::runtime::watcher;
use tokio::time::Instant;

/// Client-go's reflector back-off, shared with whoever reports the failure:
/// [`Backoff::next_delay`] tells how long the watcher waits after the failure
/// it just yielded.
#[derive(Debug)]
pub struct Backoff {
    builder: backon::ExponentialBuilder,
    delays: backon::ExponentialBackoff,
    last_failure: Option<Instant>,
    reset_after: Duration,
    next_delay_ms: Arc<AtomicU64>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            Duration::from_secs(120),
        )
    }
}

impl Backoff {
    /// Waits from `min` doubling to `max`, started over after `reset_after`
    /// without a failure.
    #[must_use]
    pub fn new(min: Duration, max: Duration, reset_after: Duration) -> Self {
        use backon::BackoffBuilder as _;
        let builder = backon::ExponentialBuilder::default()
            .with_min_delay(min)
            .with_max_delay(max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        Self {
            delays: builder.build(),
            builder,
            last_failure: None,
            reset_after,
            next_delay_ms: Arc::default(),
        }
    }

    /// A handle reading the wait chosen after the latest failure.
    #[must_use]
    pub fn next_delay(&self) -> NextDelay {
        NextDelay(Arc::clone(&self.next_delay_ms))
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        use backon::BackoffBuilder as _;
        let now = Instant::now();
        if self
            .last_failure
            .is_some_and(|last| now.duration_since(last) > self.reset_after)
        {
            self.delays = self.builder.build();
        }
        self.last_failure = Some(now);
        let delay = self.delays.next()?;
        self.next_delay_ms
            .store(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
        Some(delay)
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    /// Ignored: the watcher calls this on every event, including the one it
    /// yields before each list attempt. A healthy stretch resets instead.
    fn reset(&mut self) {}
}

/// The wait a [`Backoff`] chose after its latest failure.
#[derive(Debug, Clone)]
pub struct NextDelay(Arc<AtomicU64>);

impl NextDelay {
    /// The wait, as last chosen.
    #[must_use]
    pub fn get(&self) -> Duration {
        Duration::from_millis(self.0.load(Ordering::Relaxed))
    }
}

/// One sentence for a failed list or watch of `kind`: what was attempted, the
/// server's reason and code, and its message.
#[must_use]
pub fn describe(kind: &str, error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(error) => format!("list {kind}: {}", client_error(error)),
        watcher::Error::WatchStartFailed(error) | watcher::Error::WatchFailed(error) => {
            format!("watch {kind}: {}", client_error(error))
        }
        watcher::Error::WatchError(status) => format!("watch {kind}: {}", status_text(status)),
        watcher::Error::NoResourceVersion => {
            format!("list {kind}: the answer has no resourceVersion (does the resource support watch?)")
        }
    }
}

/// A client error as a sentence: the server's status when it answered one,
/// otherwise the error and its causes on one line.
#[must_use]
pub fn client_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status_text(status),
        other => crate::one_line(other),
    }
}

/// "forbidden (403): configmaps is forbidden: …": the reason in words, the
/// code, the message.
fn status_text(status: &kube::core::Status) -> String {
    let reason = words(&status.reason);
    let reason = if reason.is_empty() { "failed".to_owned() } else { reason };
    if status.message.is_empty() {
        format!("{reason} ({})", status.code)
    } else {
        format!("{reason} ({}): {}", status.code, status.message)
    }
}

/// `NotFound` as "not found".
fn words(reason: &str) -> String {
    let mut text = String::with_capacity(reason.len() + 4);
    for (at, letter) in reason.chars().enumerate() {
        if letter.is_uppercase() && at > 0 {
            text.push(' ');
        }
        text.extend(letter.to_lowercase());
    }
    text
}

/// A run of identical failures, so the log says the first and then how many
/// followed instead of repeating each.
#[derive(Debug, Default)]
pub struct Repeats {
    last: Option<String>,
    count: u64,
    since: String,
}

impl Repeats {
    /// Notes a failure; the line to log, or `None` when it repeats the last
    /// and the count is not at a power of two.
    pub fn note(&mut self, failure: &str, retry_in: Duration) -> Option<String> {
        let retry = format!("retrying in {:.1} s", retry_in.as_secs_f64());
        if self.last.as_deref() != Some(failure) {
            self.last = Some(failure.to_owned());
            self.count = 1;
            self.since = clock_time();
            return Some(format!("{failure}; {retry}"));
        }
        self.count += 1;
        self.count
            .is_power_of_two()
            .then(|| format!("{failure}; failed {} times since {}; {retry}", self.count, self.since))
    }

    /// Forgets the run: the next failure is logged in full.
    pub fn clear(&mut self) {
        self.last = None;
        self.count = 0;
    }
}

/// The time of day in UTC, `HH:MM:SS`.
fn clock_time() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let of_day = seconds % 86_400;
    format!("{:02}:{:02}:{:02}", of_day / 3600, of_day / 60 % 60, of_day % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn forbidden() -> watcher::Error {
        watcher::Error::InitialListFailed(kube::Error::Api(
            kube::core::Status::failure(
                "configmaps is forbidden: User \"u\" cannot list resource \"configmaps\"",
                "Forbidden",
            )
            .with_code(403)
            .boxed(),
        ))
    }

    #[test]
    fn a_failure_reads_as_one_sentence_with_reason_code_and_message() {
        let text = describe("ConfigMap", &forbidden());
        assert_eq!(
            text,
            "list ConfigMap: forbidden (403): configmaps is forbidden: User \"u\" cannot list resource \"configmaps\""
        );
        let gone = watcher::Error::WatchError(
            kube::core::Status::failure("too old resource version: 1 (5)", "Expired")
                .with_code(410)
                .boxed(),
        );
        assert_eq!(
            describe("Pod", &gone),
            "watch Pod: expired (410): too old resource version: 1 (5)"
        );
        let not_found = kube::core::Status::failure("", "NotFound").with_code(404);
        assert_eq!(status_text(&not_found), "not found (404)");
    }

    #[test]
    fn waits_double_from_800_ms_to_30_s_with_jitter_and_ignore_the_watchers_resets() {
        use kube::runtime::utils::Backoff as _;
        let mut backoff = Backoff::default();
        let next = backoff.next_delay();
        let mut floors = Vec::new();
        for _ in 0..8 {
            let delay = backoff.next().unwrap();
            assert_eq!(
                next.get(),
                Duration::from_millis(u64::try_from(delay.as_millis()).unwrap())
            );
            floors.push(delay);
            backoff.reset();
        }
        let expected = [800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000];
        for (delay, floor) in floors.iter().zip(expected) {
            let floor = Duration::from_millis(floor);
            assert!(*delay >= floor && *delay <= floor * 2, "{delay:?} vs {floor:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_stretch_starts_the_waits_over() {
        let mut backoff = Backoff::default();
        backoff.next();
        backoff.next();
        assert!(backoff.next().unwrap() >= Duration::from_millis(3200));
        tokio::time::advance(Duration::from_secs(121)).await;
        assert!(backoff.next().unwrap() < Duration::from_millis(1600));
    }

    #[test]
    fn repeats_are_summarised_at_each_doubling() {
        let mut repeats = Repeats::default();
        let wait = Duration::from_millis(6400);
        let logged: Vec<Option<String>> = (0..9)
            .map(|_| repeats.note("list ConfigMap: forbidden (403)", wait))
            .collect();
        assert_eq!(
            logged[0].as_deref(),
            Some("list ConfigMap: forbidden (403); retrying in 6.4 s")
        );
        let at: Vec<usize> = logged
            .iter()
            .enumerate()
            .filter_map(|(at, line)| line.as_ref().map(|_| at + 1))
            .collect();
        assert_eq!(at, [1, 2, 4, 8]);
        let eighth = logged[7].as_deref().unwrap();
        assert!(eighth.contains("; failed 8 times since "), "{eighth}");
        assert!(repeats.note("watch ConfigMap: gone", wait).is_some());
        repeats.clear();
        assert!(repeats.note("watch ConfigMap: gone", wait).is_some());
    }
}
