//! A plugin's worker: a task of the plugins' [`Pool`] that owns the plugin's
//! instance and serves it batches, restarts it, swaps versions and rolls back,
//! as its [`Lifecycle`] says. Its calls run on the thread that polls it; the
//! pool replaces a thread held by a long call.
//!
//! | file | what |
//! | --- | --- |
//! | this one | the loop: one turn per state of the [`Lifecycle`], swaps, restarts and rollbacks |
//! | `delivery` | what comes next (replayed deltas, batches gathered for the batch window, a controller's keys) and the calls |
//! | `mirror` | its part in a rollout: its role, the calls a running version mirrors to a shadow, the counts |

mod delivery;
mod mirror;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::controller::Keys;
use super::lifecycle::{Event, Lifecycle, State};
use super::pool::{Pool, TaskHandle};
use super::rollout::{Link, Mirror, MirrorWork, Slot};
use super::status::{PluginState, SharedStatus, update};
use super::version::{Feed, Version};
use super::{BatchObserver, LoadError};
use crate::delta::Delta;
use crate::plugin::PluginInstance;
use crate::rollout::Role;
use delivery::{Delivery, ErrorLines, Work};

/// What a worker is told between two batches.
pub(super) enum Command {
    /// Swap in the next version.
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

/// One plugin's worker.
pub(super) struct Worker {
    name: String,
    status: SharedStatus,
    stopped: tokio::sync::watch::Receiver<bool>,
    commands: tokio::sync::mpsc::UnboundedReceiver<Command>,
    running: Version,
    /// The version before the running one, for a rollback while on probation.
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
    ) -> Result<WorkerHandle, LoadError> {
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
            running: version,
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
            .map_err(|source| LoadError::Thread {
                plugin: name.to_owned(),
                source,
            })?;
        Ok(WorkerHandle { commands, task })
    }

    /// Serves the plugin until it is stopped or unloaded: each turn does what
    /// the state asks and steps the lifecycle with what happened.
    async fn run(mut self) {
        self.show_running();
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
            State::Serving if from != State::Serving => self.show_running(),
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
                    let window_s = self.running.manifest.failures.restart_window.as_secs();
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

    /// Records that the running version handles deltas from now on.
    fn show_running(&self) {
        update(&self.status, |status| {
            status.state = PluginState::Running;
            status.running_digest = Some(self.running.digest().to_owned());
            status.registration = Some(self.running.registration.clone());
            status.cpu_millicores = self.running.manifest.limits.cpu_millicores;
            status.refused = self.running.refused.iter().map(ToString::to_string).collect();
            status.handles_nothing = self.running.handles_nothing;
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
                let old = std::mem::replace(&mut self.running, version);
                tracing::info!(
                    plugin = %self.name,
                    from = &old.digest()[..12],
                    to = &self.running.digest()[..12],
                    replayed = self.pending.len(),
                    "swapped in the next version"
                );
                self.previous = Some(old);
                self.rolled_back = false;
                self.follow_running_version();
                update(&self.status, |status| status.reloads += 1);
                self.show_running();
                Event::Swapped {
                    policy: self.running.manifest.failures,
                    with_previous: true,
                }
            }
        }
    }

    /// Starts a fresh instance of the running version, from the cache as an
    /// initial list.
    fn restart(&mut self) -> Event {
        match self.running.fresh_instance() {
            Ok(fresh) => {
                self.instance = Some(fresh);
                (self.feeds, _) = self.running.attach(&self.name, Vec::new());
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

    /// Replaces the running version by the previous one, which starts afresh where
    /// the failed one stopped.
    fn roll_back(&mut self) -> Event {
        let Some(previous) = self.previous.take() else {
            return self.restart();
        };
        let failed = std::mem::replace(&mut self.running, previous);
        tracing::error!(
            plugin = %self.name,
            failed = &failed.digest()[..12],
            restored = &self.running.digest()[..12],
            "the version swapped in keeps failing: rolled back to the previous one"
        );
        update(&self.status, |status| {
            status.rollbacks += 1;
            status.rejected_digest = Some(failed.digest().to_owned());
        });
        self.lifecycle.set_policy(self.running.manifest.failures);
        (self.feeds, self.pending) = self.running.attach(&self.name, std::mem::take(&mut self.feeds));
        show_queues(&self.status, &self.feeds);
        self.follow_running_version();
        match self.running.fresh_instance() {
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

    /// Points a controller's workqueue at the running version (a reload or a
    /// rollback) and queues every primary key, so the version reconciles the
    /// whole state; what was queued before stays queued.
    fn follow_running_version(&mut self) {
        self.keys = match (self.keys.take(), self.running.controller.clone()) {
            (_, None) => None,
            (Some(mut keys), Some((spec, primary))) => {
                keys.retarget(spec, primary);
                Some(keys)
            }
            (None, Some((spec, primary))) => Some(Keys::new(spec, primary)),
        };
        if let Some(keys) = &self.keys {
            let queued = keys.enqueue_all();
            tracing::info!(plugin = %self.name, keys = queued, "every primary key queued for the running version");
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
}

/// Points the status at the queues of `feeds`, which it reads when it is
/// read (not at every batch, which would lock each queue once more).
fn show_queues(status: &SharedStatus, feeds: &[Feed]) {
    let queues = feeds.iter().map(|feed| feed.listener.probe()).collect();
    update(status, |status| status.queues = queues);
}
