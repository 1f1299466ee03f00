//! A plugin's worker: a task of the plugins' [`Pool`] that owns the plugin's
//! instance and serves it batches, restarts it, swaps versions and rolls back,
//! as its [`Lifecycle`] says. Its calls run on the thread that polls it; the
//! pool replaces a thread held by a long call.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::controller::Keys;
use super::lifecycle::{Event, Lifecycle, State, retry_backoff};
use super::pool::{Pool, TaskHandle};
use super::rollout::{Link, Mirror, MirrorWork, Slot};
use super::status::{PluginState, SharedStatus, update};
use super::version::{Feed, Version};
use super::{BatchObserver, Error};
use crate::delta::Delta;
use crate::plugin::{PluginInstance, SharedInputs};
use crate::rollout::{Call, Role, compare};

/// How long after the running version's call a shadow may still make the
/// same call and have it compared; a shadow further behind skips it.
const MIRROR_STALE: Duration = Duration::from_secs(1);

/// What a worker is told between two batches.
pub(super) enum Command {
    /// Swap in a new version.
    Swap(Box<Version>),
    /// Handle what is queued, then stop.
    Unload,
    /// Stop after the current call, leaving what is queued: this replica no
    /// longer leads.
    Stop,
}

/// The supervisor's handle on a worker.
pub(super) struct WorkerHandle {
    pub(super) commands: tokio::sync::mpsc::UnboundedSender<Command>,
    pub(super) task: TaskHandle,
}

impl WorkerHandle {
    /// True while the worker takes commands.
    pub(super) fn alive(&self) -> bool {
        !self.task.is_finished() && !self.commands.is_closed()
    }
}

/// What the worker waited for.
enum Work {
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
enum Delivery {
    Done,
    Stopped,
    Failed,
}

/// One plugin's worker.
pub(super) struct Worker {
    name: String,
    status: SharedStatus,
    stopped: tokio::sync::watch::Receiver<bool>,
    commands: tokio::sync::mpsc::UnboundedReceiver<Command>,
    live: Version,
    /// The version before the live one, for a rollback while on probation.
    previous: Option<Version>,
    lifecycle: Lifecycle,
    /// The instance, while serving.
    instance: Option<PluginInstance>,
    feeds: Vec<Feed>,
    /// Deltas to hand out before the feeds': a replay after a swap.
    pending: VecDeque<Delta>,
    /// A controller's workqueue, kept across restarts and reloads.
    keys: Option<Keys>,
    /// How many of the plugin's error messages reach the log, per second.
    error_lines: ErrorLines,
    observer: Option<BatchObserver>,
    /// A batch was just handled: the next is gathered for the batch window.
    gathering: bool,
    /// Where it finds its part in a rollout, and that part.
    slot: Arc<Slot>,
    slot_changes: tokio::sync::watch::Receiver<u64>,
    link: Option<Link>,
    /// A shadow's end of the running version's mirrored calls.
    mirrors: Option<tokio::sync::mpsc::Receiver<Mirror>>,
    /// The last call returned an error (perhaps retried to success).
    call_failed: bool,
    /// The next version it runs was rolled back.
    rolled_back: bool,
}

impl Worker {
    /// Starts the worker of `version` as a task of `pool`.
    pub(super) fn spawn(
        pool: &Pool,
        name: &str,
        status: &SharedStatus,
        mut version: Version,
        stopped: tokio::sync::watch::Receiver<bool>,
        observer: Option<BatchObserver>,
        slot: Arc<Slot>,
    ) -> Result<WorkerHandle, Error> {
        let (commands, received) = tokio::sync::mpsc::unbounded_channel();
        let (feeds, _) = version.attach(name, Vec::new());
        show_queues(status, &feeds);
        let keys = version
            .controller
            .clone()
            .map(|(spec, primary)| Keys::new(spec, primary));
        let worker = Self {
            name: name.to_owned(),
            status: Arc::clone(status),
            stopped,
            commands: received,
            lifecycle: Lifecycle::new(version.manifest.failures),
            instance: version.instance.take(),
            live: version,
            previous: None,
            feeds,
            pending: VecDeque::new(),
            keys,
            error_lines: ErrorLines::new(),
            observer,
            gathering: false,
            slot_changes: slot.subscribe(),
            slot,
            link: None,
            mirrors: None,
            call_failed: false,
            rolled_back: false,
        };
        let task = pool
            .spawn(&format!("plugin-{name}"), worker.run())
            .map_err(|source| Error::Thread {
                plugin: name.to_owned(),
                source,
            })?;
        Ok(WorkerHandle { commands, task })
    }

    /// Serves the plugin until it is stopped or unloaded: each turn does what
    /// the state asks and steps the lifecycle with what happened.
    async fn run(mut self) {
        self.went_live();
        self.relink();
        loop {
            let state = self.lifecycle.state();
            let event = match state {
                State::Stopped => break,
                State::Serving => match self.next_work(None).await {
                    Work::Batch(mut batch) => match &self.keys {
                        Some(keys) => {
                            keys.enqueue(&batch);
                            continue;
                        }
                        None => {
                            if let Some(link) = &self.link {
                                batch.retain(|delta| link.rollout.owns(link.role, delta.key()));
                                if batch.is_empty() {
                                    continue;
                                }
                            }
                            match self.observed(MirrorWork::Batch(batch)).await {
                                Delivery::Done => {
                                    self.gathering = true;
                                    continue;
                                }
                                Delivery::Stopped => Event::Stop,
                                Delivery::Failed => Event::Failed,
                            }
                        }
                    },
                    Work::Key(key) => {
                        if let (Some(link), Some(keys)) = (&self.link, &self.keys)
                            && !link.rollout.owns(link.role, &key)
                        {
                            // The other version owns it: it has it queued.
                            keys.finished(&key, Ok(None));
                            continue;
                        }
                        match self.observed(MirrorWork::Key(key)).await {
                            Delivery::Done => continue,
                            Delivery::Stopped => Event::Stop,
                            Delivery::Failed => Event::Failed,
                        }
                    }
                    Work::Rollout => match self.relink() {
                        Some(event) => event,
                        None => continue,
                    },
                    Work::Mirror(mirror) => match self.shadow(mirror).await {
                        Delivery::Done => continue,
                        Delivery::Stopped => Event::Stop,
                        Delivery::Failed => Event::Failed,
                    },
                    Work::Resync => {
                        if let Some(keys) = &mut self.keys {
                            keys.resync();
                        }
                        continue;
                    }
                    Work::Command(command) => self.command(command),
                    Work::Due => continue,
                    Work::Stop => Event::Stop,
                },
                State::Restarting { at } => match self.next_work(Some(at)).await {
                    Work::Due => self.restart(),
                    work => match self.waiting(work) {
                        Some(event) => event,
                        None => continue,
                    },
                },
                State::RollingBack => self.roll_back(),
                State::Quarantined => {
                    let work = self.next_work(None).await;
                    match self.waiting(work) {
                        Some(event) => event,
                        None => continue,
                    }
                }
                State::Draining => {
                    self.drain().await;
                    Event::Drained
                }
            };
            let next = self.lifecycle.step(event, Instant::now());
            self.entered(state, next);
        }
    }

    /// Shows a new state in the status and the log, and lets go of what it
    /// no longer needs.
    fn entered(&mut self, from: State, to: State) {
        match to {
            State::Serving if from != State::Serving => self.went_live(),
            State::Restarting { at } => {
                self.instance = None;
                update(&self.status, |status| status.state = PluginState::Restarting);
                let backoff_ms = at.saturating_duration_since(Instant::now()).as_millis() as u64;
                tracing::warn!(plugin = %self.name, backoff_ms, "restarting the plugin after a failure");
            }
            State::Quarantined if from != State::Quarantined => {
                self.instance = None;
                self.feeds.clear();
                show_queues(&self.status, &self.feeds);
                self.pending.clear();
                if !self.rolled_back {
                    let window_s = self.live.manifest.failures.restart_window.as_secs();
                    let failures = self.lifecycle.recent_failures();
                    tracing::error!(
                        plugin = %self.name,
                        failures,
                        window_s,
                        "plugin quarantined: it failed too often; change its file or manifest to try again"
                    );
                    // A next version that cannot run hands its keys back.
                    if let Some(link) = self.link.as_ref().filter(|link| link.role == Role::Next) {
                        link.rollout
                            .roll_back(format!("quarantined after {failures} failures within {window_s} s"));
                    }
                }
                update(&self.status, |status| status.state = PluginState::Quarantined);
            }
            State::Stopped if from != State::Quarantined => {
                update(&self.status, |status| status.state = PluginState::Stopped);
            }
            _ => {}
        }
    }

    /// Records that the live version handles deltas from now on.
    fn went_live(&self) {
        update(&self.status, |status| {
            status.state = PluginState::Running;
            status.running_digest = Some(self.live.digest().to_owned());
            status.registration = Some(self.live.registration.clone());
            status.cpu_millicores = self.live.manifest.limits.cpu_millicores;
            status.refused = self.live.refused.iter().map(ToString::to_string).collect();
        });
    }

    /// Carries out a command from the supervisor.
    fn command(&mut self, command: Command) -> Event {
        match command {
            Command::Unload => Event::Unload,
            Command::Stop => Event::Stop,
            Command::Swap(version) => {
                let mut version = *version;
                self.instance = version.instance.take();
                (self.feeds, self.pending) = version.attach(&self.name, std::mem::take(&mut self.feeds));
                show_queues(&self.status, &self.feeds);
                let old = std::mem::replace(&mut self.live, version);
                tracing::info!(
                    plugin = %self.name,
                    from = &old.digest()[..12],
                    to = &self.live.digest()[..12],
                    replayed = self.pending.len(),
                    "swapped in the new version"
                );
                self.previous = Some(old);
                self.rolled_back = false;
                self.follow_live_version();
                update(&self.status, |status| status.reloads += 1);
                self.went_live();
                Event::Swapped {
                    policy: self.live.manifest.failures,
                    with_previous: true,
                }
            }
        }
    }

    /// Starts a fresh instance of the live version, from the cache as an
    /// initial list.
    fn restart(&mut self) -> Event {
        match self.live.fresh_instance() {
            Ok(fresh) => {
                self.instance = Some(fresh);
                (self.feeds, _) = self.live.attach(&self.name, Vec::new());
                show_queues(&self.status, &self.feeds);
                self.pending.clear();
                if let Some(keys) = &self.keys {
                    keys.enqueue_all();
                }
                update(&self.status, |status| status.restarts += 1);
                Event::Started
            }
            Err(error) => {
                let error = super::error_text(&error);
                tracing::warn!(plugin = %self.name, %error, "restart failed");
                update(&self.status, |status| status.last_error = Some(error));
                Event::StartFailed
            }
        }
    }

    /// Replaces the live version by the previous one, which starts afresh where
    /// the failed one stopped.
    fn roll_back(&mut self) -> Event {
        let Some(previous) = self.previous.take() else {
            return self.restart();
        };
        let failed = std::mem::replace(&mut self.live, previous);
        tracing::error!(
            plugin = %self.name,
            failed = &failed.digest()[..12],
            restored = &self.live.digest()[..12],
            "the new version keeps failing: rolled back to the previous one"
        );
        update(&self.status, |status| {
            status.rollbacks += 1;
            status.rejected_digest = Some(failed.digest().to_owned());
        });
        self.lifecycle.set_policy(self.live.manifest.failures);
        (self.feeds, self.pending) = self.live.attach(&self.name, std::mem::take(&mut self.feeds));
        show_queues(&self.status, &self.feeds);
        self.follow_live_version();
        match self.live.fresh_instance() {
            Ok(instance) => {
                self.instance = Some(instance);
                Event::Started
            }
            Err(error) => {
                update(&self.status, |status| {
                    status.last_error = Some(super::error_text(&error))
                });
                Event::StartFailed
            }
        }
    }

    /// Points a controller's workqueue at the live version (a reload or a
    /// rollback) and queues every primary key, so the version reconciles the
    /// whole state; what was queued before stays queued.
    fn follow_live_version(&mut self) {
        self.keys = match (self.keys.take(), self.live.controller.clone()) {
            (_, None) => None,
            (Some(mut keys), Some((spec, primary))) => {
                keys.retarget(spec, primary);
                Some(keys)
            }
            (None, Some((spec, primary))) => Some(Keys::new(spec, primary)),
        };
        if let Some(keys) = &self.keys {
            let queued = keys.enqueue_all();
            tracing::info!(plugin = %self.name, keys = queued, "every primary key queued for the live version");
        }
    }

    /// What a worker with no instance serving (restarting, quarantined) does
    /// with its work: commands and its rollout's changes count, a shadow's
    /// mirrored call is skipped, deltas and keys wait in their queues.
    fn waiting(&mut self, work: Work) -> Option<Event> {
        match work {
            Work::Command(command) => Some(self.command(command)),
            Work::Rollout => self.relink(),
            Work::Mirror(_) => {
                if let Some(link) = &self.link {
                    link.rollout.skipped();
                }
                None
            }
            Work::Batch(_) | Work::Key(_) | Work::Resync | Work::Due => None,
            Work::Stop => Some(Event::Stop),
        }
    }

    /// Takes the worker's part in a rollout as its slot says now. A next
    /// version that was rolled back stops serving (`RolledBack`); otherwise a
    /// controller queues every primary key, so the keys that changed hands
    /// are reconciled by their new owner (the other version skips them).
    fn relink(&mut self) -> Option<Event> {
        let link = self.slot.link();
        if let Some(link) = link.as_ref().filter(|link| link.role == Role::Next) {
            let same = self
                .link
                .as_ref()
                .is_some_and(|old| Arc::ptr_eq(&old.rollout, &link.rollout));
            if !same || self.mirrors.is_none() {
                self.mirrors = link.rollout.take_mirrors().or(self.mirrors.take().filter(|_| same));
            }
        }
        if link.is_none() {
            self.mirrors = None;
        }
        self.link = link;
        if let Some(link) = self.link.as_ref().filter(|link| link.role == Role::Next)
            && let Some(reason) = link.rollout.rolled_back()
        {
            if self.rolled_back {
                return None;
            }
            self.rolled_back = true;
            let digest = self.live.digest().to_owned();
            update(&self.status, |status| {
                status.rollbacks += 1;
                status.rejected_digest = Some(digest);
                status.last_error = Some(format!("rolled back: {reason}"));
            });
            return Some(Event::RolledBack);
        }
        if let Some(keys) = &self.keys {
            keys.enqueue_all();
        }
        None
    }

    /// Makes one call (`handle` of a batch, `reconcile` of a key) as a
    /// rollout wants it: a running version with a shadow mirrors it, and
    /// either version counts how it went.
    async fn observed(&mut self, work: MirrorWork) -> Delivery {
        let link = self.link.clone();
        drop(self.live.take_written());
        let mirrored = link
            .as_ref()
            .filter(|link| link.role == Role::Live)
            .and_then(|link| link.rollout.mirror(work.clone(), &self.live.manifest.grant));
        if let Some((_, inputs)) = &mirrored {
            self.share_inputs(Some(SharedInputs::Record(Arc::clone(inputs))));
        }
        let delivery = self.call(&work).await;
        let written = self.live.take_written();
        let refusals = written.iter().filter(|write| !write.is_ok()).count();
        if let Some((sender, inputs)) = mirrored {
            self.share_inputs(None);
            inputs.finish();
            let _ = sender.send(written);
        }
        if let Some(link) = link {
            link.rollout.record(link.role, self.call_kind(&delivery), refusals);
        }
        delivery
    }

    /// A shadow makes the running version's call and compares the writes.
    async fn shadow(&mut self, mirror: Mirror) -> Delivery {
        let Some(link) = self.link.clone() else {
            return Delivery::Done;
        };
        if mirror.sent.elapsed() > MIRROR_STALE || self.instance.is_none() {
            link.rollout.skipped();
            return Delivery::Done;
        }
        drop(self.live.take_written());
        // Granted alike, it is answered what the running version was.
        if mirror.grant == self.live.manifest.grant {
            self.share_inputs(Some(SharedInputs::Replay(Arc::clone(&mirror.inputs))));
        }
        let delivery = self.call(&mirror.work).await;
        self.share_inputs(None);
        let written = self.live.take_written();
        let refusals = written.iter().filter(|write| !write.is_ok()).count();
        link.rollout.record(Role::Next, self.call_kind(&delivery), refusals);
        let wait = self.live.manifest.limits.call_timeout + self.live.manifest.limits.write_timeout;
        let live = tokio::time::timeout(wait, mirror.live).await;
        match live {
            Ok(Ok(live)) => link.rollout.compared(mirror.work.key(), &compare(&live, &written)),
            _ => link.rollout.skipped(),
        }
        delivery
    }

    /// Shares the inputs of its instance's calls with a shadow, or stops.
    fn share_inputs(&mut self, inputs: Option<SharedInputs>) {
        if let Some(instance) = self.instance.as_mut() {
            instance.share_inputs(inputs);
        }
    }

    /// Hands the plugin a batch or has it reconcile a key.
    async fn call(&mut self, work: &MirrorWork) -> Delivery {
        match work {
            MirrorWork::Batch(batch) => self.deliver(batch).await,
            MirrorWork::Key(key) => self.reconcile(key),
        }
    }

    /// How the last call went, for a rollout's counts.
    fn call_kind(&self, delivery: &Delivery) -> Call {
        match (delivery, self.call_failed) {
            (Delivery::Failed, _) => Call::Trap,
            (_, true) => Call::Error,
            (_, false) => Call::Ok,
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
    fn drop_failed(&mut self, error: String) -> Delivery {
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
    async fn next_work(&mut self, due: Option<Instant>) -> Work {
        let serving = self.instance.is_some() && self.lifecycle.state() == State::Serving;
        let max_batch = self.live.manifest.limits.max_batch;
        let moment = Moment {
            serving,
            pending: self.pending.len(),
            controller: self.keys.is_some(),
            interrupted: due.is_some() || *self.stopped.borrow() || !self.commands.is_empty(),
            after_call: std::mem::take(&mut self.gathering),
        };
        let take = next_take(&moment, max_batch, self.live.manifest.limits.batch_window);
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
    async fn drain(&mut self) {
        let max_batch = self.live.manifest.limits.max_batch;
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
        let policy = self.live.manifest.failures;
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
            error => Self::Failed(super::error_text(error)),
        }
    }
}

/// What the worker knows when it looks for its next work.
#[derive(Debug, Clone, Copy, Default)]
struct Moment {
    /// A live instance serves deltas (not starting, restarting or
    /// quarantined).
    serving: bool,
    /// Replayed deltas waiting (a new version's initial list).
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

/// Points the status at the queues of `feeds`, which it reads when it is
/// read (not at every batch, which would lock each queue once more).
fn show_queues(status: &SharedStatus, feeds: &[Feed]) {
    let queues = feeds.iter().map(|feed| feed.listener.probe()).collect();
    update(status, |status| status.queues = queues);
}

/// The budget of a plugin's error lines in the host's log: error messages are
/// the plugin's words and must not flood the log any more than its log lines.
struct ErrorLines {
    budget: crate::rate::TokenBucket,
    suppressed: u64,
}

impl ErrorLines {
    /// Five lines a second.
    fn new() -> Self {
        Self {
            budget: crate::rate::TokenBucket::per_second(5),
            suppressed: 0,
        }
    }

    /// `Some(lines suppressed since the last one)` when a line may be logged.
    fn take(&mut self) -> Option<u64> {
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
