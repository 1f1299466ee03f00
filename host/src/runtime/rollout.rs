//! A next version beside the running one, as their two workers see it: the
//! slot through which each worker finds the rollout it takes part in, who
//! owns a key, the calls the running version mirrors to a shadow, and the
//! comparisons and regression counts both report into ([`crate::rollout`]
//! holds the rules).

use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Instant, SystemTime};

use crate::apiserver::WriteRecord;
use crate::delta::Delta;
use crate::grant::Grant;
use crate::plugin::CallInputs;
use crate::rate::TokenBucket;
use crate::rollout::{Call, Comparison, Regression, Role, RolloutMode, RolloutPolicy, RolloutReport, next_owns};
use kinformer_informers::Recover as _;

/// Calls the running version may have mirrored ahead of a shadow; past them
/// a call is not mirrored (the shadow is behind) and counted as skipped.
const MIRRORS_QUEUED: usize = 64;

/// Where a worker finds the rollout it takes part in, if any; the supervisor
/// sets it, and it wakes the worker when it changes.
#[derive(Debug)]
pub(super) struct Slot {
    link: RwLock<Option<Link>>,
    changed: tokio::sync::watch::Sender<u64>,
}

/// A worker's part in a rollout.
#[derive(Debug, Clone)]
pub(super) struct Link {
    pub(super) rollout: Arc<Rollout>,
    pub(super) role: Role,
}

impl Slot {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            link: RwLock::new(None),
            changed: tokio::sync::watch::channel(0).0,
        })
    }

    /// The worker's part now.
    pub(super) fn link(&self) -> Option<Link> {
        self.link.read().recover().clone()
    }

    /// Gives the worker a part (or none), and wakes it.
    pub(super) fn set(&self, link: Option<Link>) {
        *self.link.write().recover() = link;
        self.bump();
    }

    /// Wakes the worker: its rollout changed.
    fn bump(&self) {
        self.changed.send_modify(|generation| *generation += 1);
    }

    /// Changes of the slot, for the worker to wait on.
    pub(super) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }
}

/// A call of the running version, mirrored to a shadow: the same batch or
/// key, and (once it ended) what the running version wrote.
#[derive(Debug)]
pub(super) struct Mirror {
    pub(super) work: MirrorWork,
    /// When the running version started the call.
    pub(super) sent: Instant,
    /// What the running version wrote in the call, once it ended.
    pub(super) running: tokio::sync::oneshot::Receiver<Vec<WriteRecord>>,
    /// The running version's inputs in the call, for the shadow to be
    /// answered the same.
    pub(super) inputs: Arc<CallInputs>,
    /// The running version's grant: a shadow granted otherwise reads for
    /// itself.
    pub(super) grant: Grant,
}

/// What the running version was called with.
#[derive(Debug, Clone)]
pub(super) enum MirrorWork {
    Batch(Vec<Delta>),
    Key(String),
}

impl MirrorWork {
    /// The key the comparison is shown under: the key reconciled, or the
    /// batch's first object.
    pub(super) fn key(&self) -> &str {
        match self {
            Self::Batch(batch) => batch.first().map_or("", Delta::key),
            Self::Key(key) => key,
        }
    }
}

/// A next version beside the running one.
#[derive(Debug)]
pub(super) struct Rollout {
    /// The name of the plugin whose next version this is.
    pub(super) plugin: String,
    state: Mutex<State>,
    mirrors: tokio::sync::mpsc::Sender<Mirror>,
    receiver: Mutex<Option<tokio::sync::mpsc::Receiver<Mirror>>>,
    /// The two workers' slots, woken when the rollout changes.
    slots: [Weak<Slot>; 2],
}

#[derive(Debug)]
struct State {
    policy: RolloutPolicy,
    report: RolloutReport,
    regression: Regression,
    /// The difference lines the log may take, five a second.
    lines: TokenBucket,
    suppressed: u64,
}

impl State {
    fn new(policy: RolloutPolicy, digest: &str) -> Self {
        Self {
            policy,
            report: RolloutReport {
                mode: policy.mode,
                percent: if policy.mode == RolloutMode::Canary {
                    policy.percent
                } else {
                    0
                },
                next_digest: digest.chars().take(12).collect(),
                since_unix_s: SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |since| since.as_secs()),
                ..RolloutReport::default()
            },
            regression: Regression::new(policy),
            lines: TokenBucket::per_second(5),
            suppressed: 0,
        }
    }
}

impl Rollout {
    /// The rollout of `plugin`'s next version (of `digest`) under `policy`;
    /// `slots` are the running and the next version's.
    pub(super) fn new(plugin: &str, policy: RolloutPolicy, digest: &str, slots: [&Arc<Slot>; 2]) -> Arc<Self> {
        let (mirrors, receiver) = tokio::sync::mpsc::channel(MIRRORS_QUEUED);
        Arc::new(Self {
            plugin: plugin.to_owned(),
            state: Mutex::new(State::new(policy, digest)),
            mirrors,
            receiver: Mutex::new(Some(receiver)),
            slots: slots.map(Arc::downgrade),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().recover()
    }

    fn wake(&self) {
        for slot in self.slots.iter().filter_map(Weak::upgrade) {
            slot.bump();
        }
    }

    /// A new next version (or manifest) takes over the rollout: counts and
    /// any rollback start afresh.
    pub(super) fn retarget(&self, policy: RolloutPolicy, digest: &str) {
        *self.state() = State::new(policy, digest);
        self.wake();
    }

    /// The mode, `None` once the next version was rolled back.
    pub(super) fn mode(&self) -> Option<RolloutMode> {
        let state = self.state();
        state.report.rolled_back.is_none().then_some(state.policy.mode)
    }

    /// True when the version in `role` owns `key`: a canary its share, the
    /// running version the rest; a shadow owns no key of its own (it is
    /// handed the running version's calls); a rolled back next version none.
    pub(super) fn owns(&self, role: Role, key: &str) -> bool {
        let state = self.state();
        let next = match (state.report.rolled_back.is_some(), state.policy.mode) {
            (true, _) | (false, RolloutMode::Shadow) => false,
            (false, RolloutMode::Canary) => next_owns(key, state.policy.percent),
        };
        next == (role == Role::Next)
    }

    /// Hands a call of the running version to the shadow; the sender takes
    /// what the running version wrote, the reads what it read. `None` when
    /// the shadow is behind (the call is counted as skipped) or there is none.
    pub(super) fn mirror(
        &self,
        work: MirrorWork,
        grant: &Grant,
    ) -> Option<(tokio::sync::oneshot::Sender<Vec<WriteRecord>>, Arc<CallInputs>)> {
        if self.mode() != Some(RolloutMode::Shadow) {
            return None;
        }
        let (sender, running) = tokio::sync::oneshot::channel();
        let inputs = Arc::new(CallInputs::default());
        let mirror = Mirror {
            work,
            sent: Instant::now(),
            running,
            inputs: Arc::clone(&inputs),
            grant: grant.clone(),
        };
        match self.mirrors.try_send(mirror) {
            Ok(()) => Some((sender, inputs)),
            Err(_) => {
                self.skipped();
                None
            }
        }
    }

    /// The shadow's end of the mirrored calls, for the first worker that asks.
    pub(super) fn take_mirrors(&self) -> Option<tokio::sync::mpsc::Receiver<Mirror>> {
        self.receiver.lock().recover().take()
    }

    /// A mirrored call the shadow did not get to in time.
    pub(super) fn skipped(&self) {
        self.state().report.skipped += 1;
    }

    /// Counts a call of the version in `role`, with the writes refused during
    /// it; rolls the next version back when the rule says so.
    pub(super) fn record(&self, role: Role, call: Call, refusals: usize) {
        let reason = {
            let mut state = self.state();
            if state.report.rolled_back.is_some() {
                return;
            }
            let now = Instant::now();
            match role {
                Role::Running => state.report.running.record(call, refusals),
                Role::Next => state.report.next.record(call, refusals),
            }
            state.regression.record(role, call, refusals, now);
            state.regression.judge(now)
        };
        if let Some(reason) = reason {
            self.roll_back(reason);
        }
    }

    /// Rolls the next version back: the running version owns every key again.
    pub(super) fn roll_back(&self, reason: String) {
        {
            let mut state = self.state();
            if state.report.rolled_back.is_some() {
                return;
            }
            tracing::error!(
                plugin = %self.plugin,
                next = %state.report.next_digest,
                %reason,
                "next version rolled back: the running version owns every key again"
            );
            state.report.rolled_back = Some(reason);
        }
        self.wake();
    }

    /// Why the next version was rolled back, if it was.
    pub(super) fn rolled_back(&self) -> Option<String> {
        self.state().report.rolled_back.clone()
    }

    /// Counts the comparison of a mirrored call; a difference is logged, at
    /// most five lines a second.
    pub(super) fn compared(&self, key: &str, comparison: &Comparison) {
        let mut state = self.state();
        state.report.record(key, comparison);
        if comparison.differences.is_empty() {
            return;
        }
        if !state.lines.try_take(tokio::time::Instant::now()) {
            state.suppressed += 1;
            return;
        }
        let suppressed = std::mem::take(&mut state.suppressed);
        let differences: Vec<String> = comparison.differences.iter().map(ToString::to_string).collect();
        tracing::info!(
            plugin = %self.plugin,
            %key,
            outcome = comparison.outcome().as_str(),
            differences = %differences.join(" | "),
            suppressed,
            "the next version would write differently"
        );
    }

    /// The rollout as the status shows it.
    pub(super) fn report(&self) -> RolloutReport {
        self.state().report.clone()
    }
}
