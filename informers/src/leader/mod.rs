//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` package does it.
//!
//! Every replica tries to take the Lease every retry period; the holder renews
//! it as often. A replica takes a Lease that is free (no holder: released) or
//! whose holder has not renewed it for a lease duration, as this replica
//! measured it (the moment it last saw the record change, not the record's own
//! times: clocks of replicas need not agree). Each write carries the
//! resourceVersion read, so two replicas racing for one Lease cannot both win:
//! the server answers the second with a conflict.
//!
//! A leader that has not renewed within its renew deadline (shorter than the
//! lease duration) steps down before any other replica could take the Lease;
//! a leader that stops releases the Lease (no holder, a one-second duration),
//! so another takes it at its next try, as client-go's `ReleaseOnCancel` does.
//!
//! [`Elector`] is the pure part (what to write given the Lease read, and when
//! leading ends); [`LeaderElection::start`] runs it against the API server and
//! publishes a [`Leadership`] that the runtime follows.
//!
//! Two modes. With one Lease ([`LeaderElectionConfig::new`]) the leader runs
//! every writing plugin and the other replicas none. Per plugin
//! ([`LeaderElectionConfig::per_plugin`], `plugins`) each writing plugin has
//! a Lease of its own and the replicas share the writers between them, each
//! taking no more than its share.

mod plugins;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};

pub use plugins::{plugin_lease_name, share};
use serde::Serialize;
use tokio::sync::watch;
use tokio::time::Instant;

/// How a replica takes part in leader election.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaderElectionConfig {
    /// The Lease's name; per plugin, the prefix of every Lease's name
    /// (`NAME-PLUGIN`, and `NAME.replica.IDENTITY` for each replica).
    pub lease_name: String,
    /// The Lease's namespace.
    pub lease_namespace: String,
    /// This replica's name in the Lease's `holderIdentity`; unique per replica.
    pub identity: String,
    /// How long a Lease holds after its last renewal (client-go: 15 s).
    pub lease_duration: Duration,
    /// How long a leader keeps leading without a successful renewal (client-go:
    /// 10 s). Shorter than the lease duration: the leader steps down before
    /// another replica could take over.
    pub renew_deadline: Duration,
    /// How often to try to take or renew the Lease (client-go: 2 s).
    pub retry_period: Duration,
    /// A Lease per writing plugin instead of one for all.
    pub per_plugin: bool,
}

impl LeaderElectionConfig {
    /// Client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry.
    #[must_use]
    pub fn new(lease_name: impl Into<String>, lease_namespace: impl Into<String>, identity: impl Into<String>) -> Self {
        Self {
            lease_name: lease_name.into(),
            lease_namespace: lease_namespace.into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
            per_plugin: false,
        }
    }

    /// A Lease per writing plugin, named after `lease_name`: the replicas
    /// share the writing plugins, each leading at most its share of them.
    #[must_use]
    pub fn per_plugin(mut self, per_plugin: bool) -> Self {
        self.per_plugin = per_plugin;
        self
    }

    /// Sets the lease duration, renew deadline and retry period.
    #[must_use]
    pub fn durations(mut self, lease_duration: Duration, renew_deadline: Duration, retry_period: Duration) -> Self {
        self.lease_duration = lease_duration;
        self.renew_deadline = renew_deadline;
        self.retry_period = retry_period;
        self
    }

    /// Checks that these settings can work, as client-go does: the lease
    /// duration must exceed the renew deadline, which must exceed the retry
    /// period (times its jitter, 1.2).
    ///
    /// # Errors
    ///
    /// The first setting that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.identity.is_empty() {
            return Err(ConfigError::NoIdentity);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseNotLongerThanRenewDeadline);
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER) {
            return Err(ConfigError::RenewDeadlineTooShort);
        }
        Ok(())
    }
}

/// Why leader election settings cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// No identity: replicas could not tell who holds the Lease.
    #[error("the leader election identity is empty")]
    NoIdentity,
    /// A leader could lose the Lease before it notices it failed to renew.
    #[error("the lease duration must be longer than the renew deadline")]
    LeaseNotLongerThanRenewDeadline,
    /// The leader would give up before its retries could renew.
    #[error("the renew deadline must be longer than 1.2 retry periods")]
    RenewDeadlineTooShort,
}

/// Client-go's jitter factor of the retry period.
const JITTER: f64 = 1.2;

/// The Lease record the election reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Who holds it; empty when released.
    pub holder: String,
    /// Its `leaseDurationSeconds`.
    pub lease_duration_seconds: i32,
    /// When the holder took it.
    pub acquire_time: Option<Timestamp>,
    /// When the holder last renewed it.
    pub renew_time: Option<Timestamp>,
    /// How many times it changed hands.
    pub transitions: i32,
}

impl LeaseRecord {
    fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        Self {
            holder: spec.holder_identity.unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.map(|time| time.0),
            renew_time: spec.renew_time.map(|time| time.0),
            transitions: spec.lease_transitions.unwrap_or_default(),
        }
    }

    fn spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.map(MicroTime),
            renew_time: self.renew_time.map(MicroTime),
            lease_transitions: Some(self.transitions),
            ..LeaseSpec::default()
        }
    }
}

/// What to do after reading the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// There is no Lease: create it with this record.
    Create(LeaseRecord),
    /// Write this record over the one read (taking or renewing the Lease).
    Update(LeaseRecord),
    /// Another replica holds a Lease that is still valid.
    Follow {
        /// Its holder.
        holder: String,
    },
}

/// One replica's view of the election: the record last seen, when it was seen,
/// and when this replica last renewed. Pure: the caller reads and writes the
/// Lease and says what time it is.
#[derive(Debug, Clone)]
pub struct Elector {
    identity: String,
    lease_duration: Duration,
    renew_deadline: Duration,
    observed: Option<LeaseRecord>,
    observed_at: Option<Instant>,
    /// When the last successful take or renewal was sent, while leading.
    renewed: Option<Instant>,
}

impl Elector {
    /// A replica that does not lead yet.
    #[must_use]
    pub fn new(config: &LeaderElectionConfig) -> Self {
        Self {
            identity: config.identity.clone(),
            lease_duration: config.lease_duration,
            renew_deadline: config.renew_deadline,
            observed: None,
            observed_at: None,
            renewed: None,
        }
    }

    /// True while this replica leads.
    #[must_use]
    pub fn is_leading(&self) -> bool {
        self.renewed.is_some()
    }

    /// The holder of the Lease as last seen (empty when free).
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        self.observed
            .as_ref()
            .map(|record| record.holder.as_str())
            .filter(|holder| !holder.is_empty())
    }

    /// When leading ends unless a renewal succeeds first.
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.renewed.map(|renewed| renewed + self.renew_deadline)
    }

    /// What to write, given the Lease as read at `now` (`None`: there is none)
    /// and the wall clock time `wall` for the record.
    pub fn attempt(&mut self, read: Option<&LeaseRecord>, now: Instant, wall: Timestamp) -> Attempt {
        let identity = self.identity.clone();
        let seconds = self.lease_duration.as_secs().max(1).try_into().unwrap_or(i32::MAX);
        let mine = |acquire_time, transitions| LeaseRecord {
            holder: identity.clone(),
            lease_duration_seconds: seconds,
            acquire_time: Some(acquire_time),
            renew_time: Some(wall),
            transitions,
        };
        let Some(read) = read else {
            return Attempt::Create(mine(wall, 0));
        };
        if read.holder == self.identity {
            self.held_by_other(read, now);
            return Attempt::Update(mine(read.acquire_time.unwrap_or(wall), read.transitions));
        }
        if self.held_by_other(read, now) {
            return Attempt::Follow {
                holder: read.holder.clone(),
            };
        }
        Attempt::Update(mine(wall, read.transitions + 1))
    }

    /// Notes the Lease as read at `now`: true when another replica holds it
    /// and its holder renewed it within its duration, measured from when
    /// this replica saw the record change (a released Lease says one second).
    pub fn held_by_other(&mut self, read: &LeaseRecord, now: Instant) -> bool {
        if self.observed.as_ref() != Some(read) {
            self.observed = Some(read.clone());
            self.observed_at = Some(now);
        }
        let observed_at = self.observed_at.unwrap_or(now);
        let duration = Duration::from_secs(u64::try_from(read.lease_duration_seconds).unwrap_or(0));
        !read.holder.is_empty() && read.holder != self.identity && now < observed_at + duration
    }

    /// The write of an attempt sent at `sent` succeeded: this replica leads
    /// until `sent` plus the renew deadline, unless it renews again.
    pub fn succeeded(&mut self, sent: Instant, written: LeaseRecord) {
        self.observed = Some(written);
        self.observed_at = Some(sent);
        self.renewed = Some(sent);
    }

    /// An attempt failed or found another holder at `now`: true when this
    /// replica led and must stop now, its renew deadline passed.
    pub fn failed(&mut self, now: Instant) -> bool {
        match self.deadline() {
            Some(deadline) if now >= deadline => {
                self.renewed = None;
                true
            }
            _ => false,
        }
    }

    /// Steps down without waiting for the deadline (lost the Lease to another,
    /// or stopping).
    pub fn step_down(&mut self) {
        self.renewed = None;
    }

    /// The record that releases the Lease: no holder, a one-second duration.
    #[must_use]
    pub fn release(&self, wall: Timestamp) -> LeaseRecord {
        LeaseRecord {
            holder: String::new(),
            lease_duration_seconds: 1,
            acquire_time: Some(wall),
            renew_time: Some(wall),
            transitions: self.observed.as_ref().map_or(0, |record| record.transitions),
        }
    }
}

/// Who leads, as this replica last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LeaderStatus {
    /// This replica's identity.
    pub identity: String,
    /// `namespace/name` of the Lease; per plugin, `namespace/prefix`.
    pub lease: String,
    /// One Lease for every writer, or one each.
    pub mode: LeaseMode,
    /// True while this replica leads: its writing plugins run. Per plugin:
    /// while it leads any.
    pub leading: bool,
    /// The Lease's holder as last seen, if any (one Lease only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// Per plugin: the plugins this replica leads.
    pub leads: BTreeSet<String>,
    /// Per plugin: every writing plugin this replica can run, with its
    /// Lease's holder as last seen (`None`: free).
    pub plugins: BTreeMap<String, Option<String>>,
    /// Per plugin: the replicas seen alive, this one included.
    pub replicas: usize,
    /// Per plugin: how many plugins this replica leads at most.
    pub share: usize,
}

/// How the replicas share what they lead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LeaseMode {
    /// One Lease: its holder runs every writer.
    Single,
    /// A Lease per writer (per plugin), shared out between the replicas.
    PerPlugin,
}

impl LeaseMode {
    /// `single` or `per-plugin`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Single => "single",
            Self::PerPlugin => "per-plugin",
        }
    }
}

impl LeaderStatus {
    /// The status of a replica on one Lease (`lease`, `namespace/name`),
    /// leading or not, that has seen no holder yet.
    #[must_use]
    pub fn single(identity: String, lease: String, leading: bool) -> Self {
        Self {
            identity,
            lease,
            mode: LeaseMode::Single,
            leading,
            holder: None,
            leads: BTreeSet::new(),
            plugins: BTreeMap::new(),
            replicas: 0,
            share: 0,
        }
    }

    /// True while this replica may run what the Lease of `group` guards (a
    /// plugin's name: the caller groups what shares one Lease, such as a
    /// plugin and its next version).
    #[must_use]
    pub fn leads(&self, group: &str) -> bool {
        if self.mode == LeaseMode::Single {
            return self.leading;
        }
        self.leads.contains(group)
    }
}

/// Reads who leads; cheap to clone. What it says may be up to a retry period
/// old.
#[derive(Debug, Clone)]
pub struct Leadership {
    status: watch::Receiver<LeaderStatus>,
    /// Per plugin: where the runtime says which writing plugins it can run.
    candidates: Option<Arc<watch::Sender<BTreeSet<String>>>>,
}

impl Leadership {
    /// A replica that always leads: no election.
    #[must_use]
    pub fn always() -> Self {
        let status = LeaderStatus::single(String::new(), String::new(), true);
        Self {
            status: watch::channel(status).1,
            candidates: None,
        }
    }

    /// A leadership switched by hand, with the sender that switches it (a
    /// program that decides itself who leads; tests).
    #[must_use]
    pub fn manual(leading: bool) -> (watch::Sender<LeaderStatus>, Self) {
        let (switch, status) = watch::channel(LeaderStatus::single("test".into(), "default/test".into(), leading));
        (
            switch,
            Self {
                status,
                candidates: None,
            },
        )
    }

    /// True while this replica leads (per plugin: any plugin).
    #[must_use]
    pub fn is_leading(&self) -> bool {
        self.status.borrow().leading
    }

    /// True while this replica may run what the Lease of `group` guards.
    #[must_use]
    pub fn leads(&self, group: &str) -> bool {
        self.status.borrow().leads(group)
    }

    /// The status now.
    #[must_use]
    pub fn status(&self) -> LeaderStatus {
        self.status.borrow().clone()
    }

    /// Returns once this replica may not run what the Lease of `group`
    /// guards (at once if it may not); never while the election runs and it
    /// may, nor after the election ends.
    pub async fn lost(&mut self, group: &str) {
        if self.status.wait_for(|status| !status.leads(group)).await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Waits for who leads what to change: the new status; `None` when the
    /// election stopped.
    pub async fn changed(&mut self) -> Option<LeaderStatus> {
        self.status.changed().await.ok()?;
        Some(self.status.borrow_and_update().clone())
    }

    /// Says which writing plugins this replica can run: per plugin, it takes
    /// part in the election of each (and leaves that of the others).
    pub fn offer(&self, plugins: BTreeSet<String>) {
        if let Some(candidates) = &self.candidates {
            candidates.send_if_modified(|offered| {
                let changed = *offered != plugins;
                *offered = plugins;
                changed
            });
        }
    }
}

/// A running leader election: the task that takes and renews the Lease.
#[derive(Debug)]
pub struct LeaderElection {
    leadership: Leadership,
    release: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl LeaderElection {
    /// Starts taking part in the election on the Lease of `config` (per
    /// plugin: on the Lease of each plugin the runtime offers).
    #[must_use]
    pub fn start(client: kube::Client, config: LeaderElectionConfig) -> Self {
        let mut status = LeaderStatus::single(
            config.identity.clone(),
            format!("{}/{}", config.lease_namespace, config.lease_name),
            false,
        );
        let (release, released) = watch::channel(false);
        let api = kube::Api::<Lease>::namespaced(client, &config.lease_namespace);
        let (leadership, task) = if config.per_plugin {
            status.mode = LeaseMode::PerPlugin;
            let (publish, status) = watch::channel(status);
            let (candidates, offered) = watch::channel(BTreeSet::new());
            let task = tokio::spawn(plugins::run(api, config, publish, offered, released));
            let leadership = Leadership {
                status,
                candidates: Some(Arc::new(candidates)),
            };
            (leadership, task)
        } else {
            let (publish, status) = watch::channel(status);
            let task = tokio::spawn(run(api, config, publish, released));
            let leadership = Leadership {
                status,
                candidates: None,
            };
            (leadership, task)
        };
        Self {
            leadership,
            release,
            task: Some(task),
        }
    }

    /// Who leads.
    #[must_use]
    pub fn leadership(&self) -> Leadership {
        self.leadership.clone()
    }

    /// Stops leading and releases the Lease if this replica holds it, so
    /// another takes it at once; returns when the release was written (or
    /// failed, or took longer than `limit`). Stop the writers first.
    pub async fn release(mut self, limit: Duration) {
        let _ = self.release.send(true);
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(limit, task).await.is_err() {
                abort.abort();
                tracing::warn!("the Lease was not released in time; another replica takes it once it expires");
            }
        }
    }
}

impl Drop for LeaderElection {
    fn drop(&mut self) {
        // Dropped without `release`: stop without releasing, as a replica
        // that dies does; the Lease expires.
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The election loop: take or renew every retry period (jittered while
/// following), step down at the renew deadline, release when told.
async fn run(
    api: kube::Api<Lease>,
    config: LeaderElectionConfig,
    publish: watch::Sender<LeaderStatus>,
    mut released: watch::Receiver<bool>,
) {
    let mut elector = Elector::new(&config);
    let name = config.lease_name.as_str();
    let show = |elector: &Elector| {
        publish.send_if_modified(|status| {
            let holder = elector.holder().map(str::to_owned);
            let changed = status.leading != elector.is_leading() || status.holder != holder;
            status.leading = elector.is_leading();
            status.holder = holder;
            changed
        });
    };
    let mut resource_version: Option<String> = None;
    loop {
        let sent = Instant::now();
        // No try outlives the renew deadline while leading, nor a retry
        // period otherwise: a hung connection is a failed try.
        let limit = elector.deadline().unwrap_or(sent + config.renew_deadline);
        let outcome = tokio::select! {
            outcome = tokio::time::timeout_at(limit, try_once(&api, name, &mut elector, &mut resource_version, sent)) => outcome,
            _ = released.wait_for(|release| *release) => break,
        };
        match outcome {
            Ok(Ok(true)) => {
                if !publish.borrow().leading {
                    tracing::info!(identity = %config.identity, lease = %publish.borrow().lease, "became the leader");
                }
            }
            Ok(Ok(false)) => {
                if elector.is_leading() {
                    elector.step_down();
                    tracing::warn!(
                        holder = elector.holder().unwrap_or("(none)"),
                        "lost the Lease to another replica; stopping the writing plugins"
                    );
                }
            }
            Ok(Err(error)) => {
                tracing::warn!("cannot take or renew the Lease: {}", crate::retry::client_error(&error));
                if elector.failed(Instant::now()) {
                    tracing::error!(
                        "the Lease was not renewed within the renew deadline; stopping the writing plugins"
                    );
                }
            }
            Err(_) => {
                tracing::warn!("no answer from the API server for the Lease");
                if elector.failed(Instant::now()) {
                    tracing::error!(
                        "the Lease was not renewed within the renew deadline; stopping the writing plugins"
                    );
                }
            }
        }
        show(&elector);
        let pause = if elector.is_leading() {
            config.retry_period
        } else {
            config.retry_period.mul_f64(1.0 + rand_fraction() * (JITTER - 1.0))
        };
        // Wake at the deadline if it comes first: stepping down is not late.
        let wake = elector
            .deadline()
            .map_or(sent + pause, |deadline| (sent + pause).min(deadline));
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            _ = released.wait_for(|release| *release) => break,
        }
        if elector.deadline().is_some_and(|deadline| Instant::now() >= deadline) && elector.failed(Instant::now()) {
            tracing::error!("the Lease was not renewed within the renew deadline; stopping the writing plugins");
            show(&elector);
        }
    }
    if elector.is_leading() {
        elector.step_down();
        show(&elector);
        let meta = ObjectMeta {
            name: Some(name.to_owned()),
            resource_version,
            ..ObjectMeta::default()
        };
        match release(&api, meta, &elector).await {
            Ok(()) => tracing::info!(lease = %publish.borrow().lease, "released the Lease"),
            Err(error) => tracing::warn!("cannot release the Lease: {}", crate::retry::client_error(&error)),
        }
    }
}

/// Writes the released record over the Lease `meta` names, at the
/// resourceVersion it carries.
async fn release(api: &kube::Api<Lease>, meta: ObjectMeta, elector: &Elector) -> Result<(), kube::Error> {
    let name = meta.name.clone().unwrap_or_default();
    let lease = Lease {
        metadata: meta,
        spec: Some(elector.release(Timestamp::now()).spec()),
    };
    api.replace(&name, &PostParams::default(), &lease).await.map(drop)
}

/// Reads the Lease and writes what the elector says: true when this replica
/// holds the Lease afterwards.
async fn try_once(
    api: &kube::Api<Lease>,
    name: &str,
    elector: &mut Elector,
    resource_version: &mut Option<String>,
    sent: Instant,
) -> Result<bool, kube::Error> {
    let read = api.get_opt(name).await?;
    let record = read.as_ref().map(LeaseRecord::of);
    let attempt = elector.attempt(record.as_ref(), Instant::now(), Timestamp::now());
    let meta = ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    };
    let Some(written) = write(api, meta, read.as_ref(), attempt).await? else {
        return Ok(false);
    };
    resource_version.clone_from(&written.0.metadata.resource_version);
    elector.succeeded(sent, written.1);
    Ok(true)
}

/// Writes what `attempt` says, as the Lease `meta` describes (its name,
/// labels), over `read`: the Lease and record written; `None` when another
/// replica holds it.
async fn write(
    api: &kube::Api<Lease>,
    mut meta: ObjectMeta,
    read: Option<&Lease>,
    attempt: Attempt,
) -> Result<Option<(Lease, LeaseRecord)>, kube::Error> {
    let name = meta.name.clone().unwrap_or_default();
    let (record, create) = match attempt {
        Attempt::Follow { .. } => return Ok(None),
        Attempt::Create(record) => (record, true),
        Attempt::Update(record) => (record, false),
    };
    meta.resource_version = read.and_then(|lease| lease.metadata.resource_version.clone());
    let lease = Lease {
        metadata: meta,
        spec: Some(record.spec()),
    };
    let written = if create {
        api.create(&PostParams::default(), &lease).await?
    } else {
        api.replace(&name, &PostParams::default(), &lease).await?
    };
    Ok(Some((written, record)))
}

/// A fraction in [0, 1) for the retry jitter; no need for a good generator.
fn rand_fraction() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    f64::from(nanos % 1000) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(identity: &str) -> LeaderElectionConfig {
        LeaderElectionConfig::new("kinformer", "default", identity)
    }

    fn wall() -> Timestamp {
        Timestamp::from_second(1_700_000_000).unwrap()
    }

    fn held_by(holder: &str, seconds: i32) -> LeaseRecord {
        LeaseRecord {
            holder: holder.into(),
            lease_duration_seconds: seconds,
            acquire_time: Some(wall()),
            renew_time: Some(wall()),
            transitions: 3,
        }
    }

    #[test]
    fn a_missing_lease_is_created_with_this_replica_as_holder() {
        let mut elector = Elector::new(&config("a"));
        let Attempt::Create(record) = elector.attempt(None, Instant::now(), wall()) else {
            panic!("no lease: create it");
        };
        assert_eq!(
            (
                record.holder.as_str(),
                record.lease_duration_seconds,
                record.transitions
            ),
            ("a", 15, 0)
        );
    }

    #[test]
    fn another_holders_lease_is_taken_only_a_lease_duration_after_it_last_changed() {
        let mut elector = Elector::new(&config("b"));
        let start = Instant::now();
        let lease = held_by("a", 15);
        assert_eq!(
            elector.attempt(Some(&lease), start, wall()),
            Attempt::Follow { holder: "a".into() }
        );
        // The same record seen again later: the clock runs from the first sight.
        assert_eq!(
            elector.attempt(Some(&lease), start + Duration::from_secs(14), wall()),
            Attempt::Follow { holder: "a".into() }
        );
        let Attempt::Update(taken) = elector.attempt(Some(&lease), start + Duration::from_secs(15), wall()) else {
            panic!("an expired lease is taken");
        };
        assert_eq!((taken.holder.as_str(), taken.transitions), ("b", 4));
    }

    #[test]
    fn a_renewal_seen_restarts_the_clock() {
        let mut elector = Elector::new(&config("b"));
        let start = Instant::now();
        elector.attempt(Some(&held_by("a", 15)), start, wall());
        let mut renewed = held_by("a", 15);
        renewed.renew_time = Some(wall() + Duration::from_secs(2));
        let later = start + Duration::from_secs(10);
        elector.attempt(Some(&renewed), later, wall());
        assert!(matches!(
            elector.attempt(Some(&renewed), later + Duration::from_secs(14), wall()),
            Attempt::Follow { .. }
        ));
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let mut releasing = Elector::new(&config("a"));
        releasing.succeeded(Instant::now(), held_by("a", 15));
        let released = releasing.release(wall());
        assert_eq!((released.holder.as_str(), released.lease_duration_seconds), ("", 1));
        let mut elector = Elector::new(&config("b"));
        assert!(matches!(
            elector.attempt(Some(&released), Instant::now(), wall()),
            Attempt::Update(LeaseRecord { ref holder, .. }) if holder == "b"
        ));
    }

    #[test]
    fn the_holder_renews_keeping_its_acquire_time_and_transitions() {
        let mut elector = Elector::new(&config("a"));
        let mut lease = held_by("a", 15);
        lease.acquire_time = Some(wall() - Duration::from_secs(60));
        let Attempt::Update(renewal) = elector.attempt(Some(&lease), Instant::now(), wall()) else {
            panic!("the holder renews");
        };
        assert_eq!(renewal.acquire_time, lease.acquire_time);
        assert_eq!(renewal.renew_time, Some(wall()));
        assert_eq!(renewal.transitions, 3);
    }

    #[test]
    fn a_leader_steps_down_at_its_renew_deadline_before_the_lease_could_expire() {
        let config = config("a");
        let mut elector = Elector::new(&config);
        let sent = Instant::now();
        elector.succeeded(sent, held_by("a", 15));
        assert!(elector.is_leading());
        assert!(!elector.failed(sent + Duration::from_secs(9)));
        assert!(elector.is_leading());
        assert!(elector.failed(sent + Duration::from_secs(10)));
        assert!(!elector.is_leading());
        // Another replica saw the renewal no earlier than it was sent: it can
        // take the Lease from `sent + lease_duration` on, after the step down.
        assert!(elector.deadline().is_none());
        assert!(config.renew_deadline < config.lease_duration);
    }

    #[test]
    fn settings_that_cannot_work_are_refused() {
        assert_eq!(config("a").validate(), Ok(()));
        let equal = config("a").durations(Duration::from_secs(10), Duration::from_secs(10), Duration::from_secs(2));
        assert_eq!(equal.validate(), Err(ConfigError::LeaseNotLongerThanRenewDeadline));
        let tight = config("a").durations(Duration::from_secs(15), Duration::from_secs(2), Duration::from_secs(2));
        assert_eq!(tight.validate(), Err(ConfigError::RenewDeadlineTooShort));
        assert_eq!(config("").validate(), Err(ConfigError::NoIdentity));
    }
}
