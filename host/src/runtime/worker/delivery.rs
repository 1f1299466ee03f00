//! What a worker does next and how it calls: batches (replayed deltas first,
//! then what is queued, gathered for the batch window), a controller's keys,
//! the retries of a rejected batch, and the drain before an unload.

use std::time::{Duration, Instant};

use super::{Command, Worker};
use crate::delta::Delta;
use crate::plugin::PluginInstance;
use crate::runtime::controller::Keys;
use crate::runtime::lifecycle::{State, retry_backoff};
use crate::runtime::rollout::{Mirror, MirrorWork};
use crate::runtime::status::{SharedStatus, update};

/// What the worker waited for.
pub(super) enum Work {
    Batch(Vec<Delta>),
    /// A controller's key to reconcile.
    Key(String),
    /// A controller's periodic resync is due.
    Resync,
    Command(Command),
    /// The worker's part in a rollout changed.
    Rollout,
    /// A call of the running version, for a shadow to make too.
    Mirror(Mirror),
    Due,
    Stop,
}

/// How delivering a batch ended.
pub(super) enum Delivery {
    Done,
    Stopped,
    Failed,
}

impl Worker {
    /// Hands the plugin a batch or has it reconcile a key.
    pub(super) async fn call(&mut self, work: &MirrorWork) -> Delivery {
        match work {
            MirrorWork::Batch(batch) => self.deliver(batch).await,
            MirrorWork::Key(key) => self.reconcile(key),
        }
    }

    /// Reconciles one key; the workqueue retries it with backoff after an
    /// error. A failed instance is dropped.
    fn reconcile(&mut self, key: &String) -> Delivery {
        let (Some(keys), Some(instance)) = (&self.keys, self.instance.as_mut()) else {
            return Delivery::Failed;
        };
        let _span = tracing::debug_span!("reconcile", plugin = %self.name, key = %key).entered();
        let outcome = instance.reconcile(key);
        self.call_failed = outcome.is_err();
        note_paused(&self.status, instance);
        keys.finished(key, outcome.as_ref().map(|requeue| *requeue).map_err(|_| ()));
        let stats = keys.stats();
        let memory_bytes = instance.memory_bytes();
        update(&self.status, |status| {
            status.memory_bytes = memory_bytes;
            status.reconciles += 1;
            status.queue_depth = stats.depth;
            status.workqueue = Some(stats);
            status.errors += u64::from(outcome.is_err());
        });
        match outcome.as_ref().err().map(CallError::of) {
            None => Delivery::Done,
            Some(CallError::Rejected(message)) => {
                if let Some(suppressed) = self.error_lines.take() {
                    tracing::info!(plugin = %self.name, %key, %message, suppressed, "reconcile failed; retrying the key with backoff");
                }
                update(&self.status, |status| status.last_error = Some(message.to_owned()));
                Delivery::Done
            }
            Some(CallError::Failed(error)) => self.drop_failed(error),
        }
    }

    /// Drops an instance that failed (trapped, overran its deadline or hit
    /// its memory limit); the lifecycle starts a fresh one after a backoff.
    pub(super) fn drop_failed(&mut self, error: String) -> Delivery {
        tracing::warn!(plugin = %self.name, %error, "plugin failed; its instance is dropped");
        self.instance = None;
        update(&self.status, |status| {
            status.traps += 1;
            status.last_error = Some(error);
        });
        Delivery::Failed
    }

    /// The next thing to do: replayed deltas first (while serving), then
    /// whichever comes first of a batch, a command, the stop signal and `due`.
    pub(super) async fn next_work(&mut self, due: Option<Instant>) -> Work {
        let serving = self.instance.is_some() && self.lifecycle.state() == State::Serving;
        let max_batch = self.running.manifest.limits.max_batch;
        let moment = Moment {
            serving,
            pending: self.pending.len(),
            controller: self.keys.is_some(),
            interrupted: due.is_some() || *self.stopped.borrow() || !self.commands.is_empty(),
            after_call: std::mem::take(&mut self.gathering),
        };
        let take = next_take(&moment, max_batch, self.running.manifest.limits.batch_window);
        if let Take::Pending(count) = take {
            return Work::Batch(self.pending.drain(..count).collect());
        }
        if serving && let Some(keys) = &self.keys {
            // A controller takes every ready delta first (they only queue
            // keys), so changes are never starved by a busy queue.
            for feed in &mut self.feeds {
                while let Some(batch) = feed.listener.try_next_batch(max_batch) {
                    keys.enqueue(&batch);
                }
            }
        }
        if let Take::Ready { gather } = take {
            if let Some(batch) = self.ready_batch(max_batch) {
                return Work::Batch(batch);
            }
            if let Some(window) = gather {
                tokio::time::sleep(window).await;
                if let Some(batch) = self.ready_batch(max_batch) {
                    return Work::Batch(batch);
                }
            }
        }
        let controller = self.keys.as_ref().filter(|_| serving);
        let resync = controller.and_then(Keys::resync_due);
        let (stopped, commands, feeds) = (&mut self.stopped, &mut self.commands, &mut self.feeds);
        let (slot_changes, mirrors) = (&mut self.slot_changes, &mut self.mirrors);
        {
            let key = async {
                match controller {
                    Some(keys) => keys.queue().get().await,
                    None => std::future::pending().await,
                }
            };
            let resync = async {
                match resync {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let batches = async {
                if serving && !feeds.is_empty() {
                    let next = feeds
                        .iter_mut()
                        .map(|feed| Box::pin(feed.listener.next_batch(max_batch)));
                    futures::future::select_all(next).await.0
                } else {
                    std::future::pending().await
                }
            };
            let mirror = async {
                match mirrors.as_mut().filter(|_| serving) {
                    Some(mirrors) => mirrors.recv().await,
                    None => std::future::pending().await,
                }
            };
            let due = async {
                match due {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                _ = stopped.wait_for(|stop| *stop) => Work::Stop,
                command = commands.recv() => command.map_or(Work::Stop, Work::Command),
                Ok(()) = slot_changes.changed() => Work::Rollout,
                () = due => Work::Due,
                () = resync => Work::Resync,
                Some(mirror) = mirror => Work::Mirror(mirror),
                Some(key) = key => Work::Key(key),
                batch = batches => batch.map_or(Work::Stop, Work::Batch),
            }
        }
    }

    /// A batch of the deltas queued now, if any.
    fn ready_batch(&mut self, max_batch: usize) -> Option<Vec<Delta>> {
        self.feeds
            .iter_mut()
            .find_map(|feed| feed.listener.try_next_batch(max_batch))
    }

    /// Handles what is queued now (not what arrives meanwhile), before unloading.
    pub(super) async fn drain(&mut self) {
        let max_batch = self.running.manifest.limits.max_batch;
        let mut batches: Vec<Vec<Delta>> = Vec::new();
        while !self.pending.is_empty() {
            let take = self.pending.len().min(max_batch);
            batches.push(self.pending.drain(..take).collect());
        }
        for feed in &mut self.feeds {
            let mut left = feed.listener.stats().queued;
            while left > 0 {
                let Some(batch) = feed.listener.try_next_batch(left.min(max_batch)) else {
                    break;
                };
                left = left.saturating_sub(batch.len());
                batches.push(batch);
            }
        }
        let drained: usize = batches.iter().map(Vec::len).sum();
        for batch in batches {
            if !matches!(self.deliver(&batch).await, Delivery::Done) {
                break;
            }
        }
        tracing::info!(plugin = %self.name, deltas = drained, "drained and unloaded");
    }

    /// Sleeps, unless stopped first: true when stopped.
    async fn sleep(&mut self, duration: std::time::Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(duration) => false,
            _ = self.stopped.wait_for(|stop| *stop) => true,
        }
    }

    /// Hands one batch to the plugin, retrying or skipping it when the plugin
    /// rejects it. A failed instance is dropped.
    async fn deliver(&mut self, batch: &[Delta]) -> Delivery {
        let count = batch.len() as u64;
        let policy = self.running.manifest.failures;
        let mut attempt = 0_u32;
        self.call_failed = false;
        if let Some(observer) = &self.observer {
            observer(&self.name, batch);
        }
        loop {
            let Some(instance) = self.instance.as_mut() else {
                return Delivery::Failed;
            };
            let started = Instant::now();
            let handled = {
                // Entered for the call only: the worker may wait on another thread.
                let _span = tracing::debug_span!(
                    "handle",
                    plugin = %self.name,
                    deltas = batch.len(),
                    first = %batch.first().map_or("", |delta| delta.key())
                )
                .entered();
                for delta in batch {
                    tracing::trace!(
                        key = %delta.key(),
                        delta = ?delta.delta_type,
                        rv = %delta.object.resource_version(),
                        "delivering"
                    );
                }
                instance.handle(batch)
            };
            let took = started.elapsed();
            let memory_bytes = instance.memory_bytes();
            let paused = instance.take_paused();
            update(&self.status, |status| {
                status.handle_duration.observe(took);
                status.memory_bytes = memory_bytes;
                status.cpu_paused_ms += paused.as_millis() as u64;
                if handled.is_ok() {
                    status.deltas += count;
                    status.batches += 1;
                }
            });
            match handled.as_ref().err().map(CallError::of) {
                None => return Delivery::Done,
                Some(CallError::Rejected(message)) => {
                    self.call_failed = true;
                    update(&self.status, |status| {
                        status.errors += 1;
                        status.last_error = Some(message.to_owned());
                    });
                    let Some(backoff) = retry_backoff(&policy, attempt) else {
                        if let Some(suppressed) = self.error_lines.take() {
                            tracing::warn!(plugin = %self.name, deltas = count, %message, suppressed, "batch skipped after the plugin rejected it");
                        }
                        update(&self.status, |status| status.skipped += count);
                        return Delivery::Done;
                    };
                    attempt += 1;
                    if let Some(suppressed) = self.error_lines.take() {
                        tracing::info!(plugin = %self.name, attempt, %message, suppressed, "batch rejected; retrying");
                    }
                    update(&self.status, |status| status.retries += 1);
                    if self.sleep(backoff).await {
                        return Delivery::Stopped;
                    }
                }
                Some(CallError::Failed(error)) => return self.drop_failed(error),
            }
        }
    }
}

/// How a failed call is taken, for `handle` and `reconcile` alike.
enum CallError<'a> {
    /// The plugin returned an error: the batch or key is retried with
    /// backoff (or skipped), and the instance kept.
    Rejected(&'a str),
    /// It trapped, overran its deadline or hit its memory limit: the
    /// instance is dropped. The error as the log and the status show it.
    Failed(String),
}

impl<'a> CallError<'a> {
    fn of(error: &'a crate::plugin::Error) -> Self {
        match error {
            crate::plugin::Error::Plugin { message, .. } => Self::Rejected(message),
            error => Self::Failed(crate::runtime::error_text(error)),
        }
    }
}

/// What the worker knows when it looks for its next work.
#[derive(Debug, Clone, Copy, Default)]
struct Moment {
    /// An instance serves deltas (not starting, restarting or
    /// quarantined).
    serving: bool,
    /// Replayed deltas waiting (the initial list of a version just swapped in).
    pending: usize,
    /// The plugin is a controller: deltas only queue keys.
    controller: bool,
    /// Something else is due: a retry or restart time, a command, a stop.
    interrupted: bool,
    /// A call just ended.
    after_call: bool,
}

/// Where the next batch of deltas comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// This many replayed deltas, before anything queued.
    Pending(usize),
    /// Deltas queued now, without waiting; if none, after sleeping `gather`
    /// (the batch window) when it is set.
    Ready {
        /// The batch window to gather the next deltas in.
        gather: Option<Duration>,
    },
    /// Whatever comes first: a batch, a key, a command, the stop, a due time.
    Wait,
}

/// The batching rule. Replayed deltas go first, at most `max_batch` at a
/// time. A plugin that handles deltas takes what queued while its last call
/// ran at once, with no wakeup; right after a call it gathers the next
/// deltas for `window` (one wakeup and one call for all of them) unless
/// something else is due. A controller never gathers: its deltas only
/// queue keys.
fn next_take(moment: &Moment, max_batch: usize, window: Duration) -> Take {
    if !moment.serving {
        return Take::Wait;
    }
    if moment.pending > 0 {
        return Take::Pending(moment.pending.min(max_batch));
    }
    if moment.controller || moment.interrupted {
        return Take::Wait;
    }
    Take::Ready {
        gather: (moment.after_call && !window.is_zero()).then_some(window),
    }
}

/// The budget of a plugin's error lines in the host's log: error messages are
/// the plugin's words and must not flood the log any more than its log lines.
pub(super) struct ErrorLines {
    budget: crate::rate::TokenBucket,
    suppressed: u64,
}

impl ErrorLines {
    /// Five lines a second.
    pub(super) fn new() -> Self {
        Self {
            budget: crate::rate::TokenBucket::per_second(5),
            suppressed: 0,
        }
    }

    /// `Some(lines suppressed since the last one)` when a line may be logged.
    pub(super) fn take(&mut self) -> Option<u64> {
        if self.budget.try_take(tokio::time::Instant::now()) {
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

/// Adds the time `instance` was paused for its CPU share to the status.
fn note_paused(status: &SharedStatus, instance: &mut PluginInstance) {
    let paused = instance.take_paused();
    if !paused.is_zero() {
        update(status, |status| status.cpu_paused_ms += paused.as_millis() as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_millis(5);

    fn serving() -> Moment {
        Moment {
            serving: true,
            ..Moment::default()
        }
    }

    #[test]
    fn replayed_deltas_go_first_in_batches_of_at_most_max_batch() {
        let moment = Moment {
            pending: 150,
            after_call: true,
            ..serving()
        };
        assert_eq!(next_take(&moment, 64, WINDOW), Take::Pending(64));
        let moment = Moment { pending: 3, ..moment };
        assert_eq!(next_take(&moment, 64, WINDOW), Take::Pending(3));
    }

    #[test]
    fn deltas_that_queued_during_a_call_are_taken_at_once_and_the_next_gathered_for_the_window() {
        assert_eq!(
            next_take(
                &Moment {
                    after_call: true,
                    ..serving()
                },
                64,
                WINDOW
            ),
            Take::Ready { gather: Some(WINDOW) }
        );
        // After a quiet spell (no call just ended), a delta is taken at once.
        assert_eq!(next_take(&serving(), 64, WINDOW), Take::Ready { gather: None });
    }

    #[test]
    fn a_window_of_zero_never_waits() {
        assert_eq!(
            next_take(
                &Moment {
                    after_call: true,
                    ..serving()
                },
                64,
                Duration::ZERO
            ),
            Take::Ready { gather: None }
        );
    }

    #[test]
    fn a_due_time_a_command_or_a_stop_is_not_held_up_by_the_window() {
        let moment = Moment {
            after_call: true,
            interrupted: true,
            ..serving()
        };
        assert_eq!(next_take(&moment, 64, WINDOW), Take::Wait);
    }

    #[test]
    fn a_controller_never_gathers_and_a_plugin_not_serving_takes_nothing() {
        let controller = Moment {
            after_call: true,
            controller: true,
            ..serving()
        };
        assert_eq!(next_take(&controller, 64, WINDOW), Take::Wait);
        let restarting = Moment {
            pending: 10,
            ..Moment::default()
        };
        assert_eq!(next_take(&restarting, 64, WINDOW), Take::Wait);
    }
}
