//! Leader election per writing plugin: each writing plugin has a Lease of its
//! own (`PREFIX-PLUGIN`), and the replicas share the writers between them.
//!
//! Every Lease is taken, renewed, lost and released by the one-Lease rules of
//! [`Elector`]. Balance comes from each replica knowing how many replicas
//! there are: each holds a Lease of its own, `PREFIX.replica.IDENTITY`,
//! renewed with the others, so a replica that leads nothing is still counted
//! and one that died drops out when its Lease expires. All of them carry the
//! label `kinformer.dev/lease-group=PREFIX`: one list a retry period reads
//! them all. Chosen over a shared registry Lease, which every replica would
//! rewrite each period and so conflict on, and over counting the holders of
//! plugin Leases, which cannot see a replica that leads nothing yet.
//!
//! A replica takes a free or expired plugin Lease only while it holds fewer
//! than its [`share`] (the writers it can run over the live replicas, rounded
//! up). One that holds more than its share for a lease duration, as after
//! others joined, gives one back a retry period (released: holder empty, one
//! second) until it holds its share; one under its share takes it at its
//! next try. A replica that stops releases every Lease it holds, its own
//! included, so the others take over and recount at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, ObjectMeta};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Attempt, Elector, JITTER, LeaderElectionConfig, LeaderStatus, LeaseRecord, rand_fraction};

/// The label every Lease of one group of replicas carries.
const GROUP_LABEL: &str = "kinformer.dev/lease-group";
/// `plugin` or `replica`.
const ROLE_LABEL: &str = "kinformer.dev/lease-role";
/// The plugin a plugin Lease is for, as its name may not spell it.
const PLUGIN_ANNOTATION: &str = "kinformer.dev/plugin";

/// The Lease of the writing plugin `plugin` among the replicas of `prefix`:
/// `PREFIX-PLUGIN`, the plugin's name lowercased with what a Lease's name
/// cannot hold as `-` (and then a hash of the name, to keep apart two names
/// that would read alike).
#[must_use]
pub fn plugin_lease_name(prefix: &str, plugin: &str) -> String {
    let clean: String = plugin
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if clean == plugin && clean.ends_with(|c: char| c.is_ascii_alphanumeric()) {
        format!("{prefix}-{clean}")
    } else {
        format!("{prefix}-{clean}-{:08x}", crate::stable_hash(plugin) as u32)
    }
}

/// The Lease by which the replica `identity` is counted; a `.` keeps it apart
/// from every plugin Lease.
fn replica_lease_name(prefix: &str, identity: &str) -> String {
    let clean: String = identity
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    format!(
        "{prefix}.replica.{}",
        clean.trim_matches(|c: char| c == '-' || c == '.')
    )
}

/// How many of `writers` plugins one of `replicas` replicas leads at most:
/// an even split, rounded up so that every plugin has a replica.
#[must_use]
pub fn share(writers: usize, replicas: usize) -> usize {
    writers.div_ceil(replicas.max(1))
}

/// When to give a plugin back: after holding more than the share for a
/// lease duration (a replica that just joined, or one counted dead for a
/// moment, moves nothing), then one each time asked while still over it.
#[derive(Debug, Default)]
struct Balance {
    over_since: Option<Instant>,
}

impl Balance {
    fn give_back(&mut self, held: usize, share: usize, now: Instant, patience: Duration) -> bool {
        if held <= share {
            self.over_since = None;
            return false;
        }
        let since = *self.over_since.get_or_insert(now);
        now >= since + patience
    }
}

/// One replica's part in the elections of the plugins it can run.
struct Elections {
    api: kube::Api<Lease>,
    config: LeaderElectionConfig,
    /// This replica's own Lease, by which the others count it.
    member: Elector,
    member_name: String,
    /// The other replicas' Leases, by name: who is alive.
    others: BTreeMap<String, Elector>,
    /// Each plugin's election, by plugin.
    plugins: BTreeMap<String, Elector>,
    /// The resourceVersion of each Lease as last read or written, by name:
    /// what a release writes over.
    versions: BTreeMap<String, String>,
    balance: Balance,
    replicas: usize,
    share: usize,
    publish: watch::Sender<LeaderStatus>,
}

/// Takes part in the election of each plugin `offered` names, until
/// `released`; then releases every Lease held.
pub(super) async fn run(
    api: kube::Api<Lease>,
    config: LeaderElectionConfig,
    publish: watch::Sender<LeaderStatus>,
    mut offered: watch::Receiver<BTreeSet<String>>,
    mut released: watch::Receiver<bool>,
) {
    let member_name = replica_lease_name(&config.lease_name, &config.identity);
    let mut elections = Elections {
        api,
        member: Elector::new(&config),
        member_name,
        config,
        others: BTreeMap::new(),
        plugins: BTreeMap::new(),
        versions: BTreeMap::new(),
        balance: Balance::default(),
        replicas: 1,
        share: 0,
        publish,
    };
    loop {
        let sent = Instant::now();
        let wanted = offered.borrow_and_update().clone();
        elections.leave(&wanted).await;
        let limit = elections.deadline().unwrap_or(sent + elections.config.renew_deadline);
        let outcome = tokio::select! {
            outcome = tokio::time::timeout_at(limit, elections.round(&wanted, sent)) => outcome,
            _ = released.wait_for(|release| *release) => break,
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(
                "cannot read the plugins' Leases: {}",
                crate::retry::client_error(&error)
            ),
            Err(_) => tracing::warn!("no answer from the API server for the plugins' Leases"),
        }
        elections.expire(Instant::now());
        elections.show(&wanted);
        let pause = elections
            .config
            .retry_period
            .mul_f64(1.0 + rand_fraction() * (JITTER - 1.0));
        let wake = elections
            .deadline()
            .map_or(sent + pause, |deadline| (sent + pause).min(deadline));
        tokio::select! {
            () = tokio::time::sleep_until(wake) => {}
            _ = released.wait_for(|release| *release) => break,
            // A writing plugin loaded or went: try for it now.
            _ = offered.changed() => {}
        }
        elections.expire(Instant::now());
        elections.show(&wanted);
    }
    elections.release_all().await;
}

impl Elections {
    /// The label selector of this group's Leases.
    fn selector(&self) -> String {
        format!("{GROUP_LABEL}={}", self.config.lease_name)
    }

    /// The metadata this replica writes on a Lease of its group.
    fn meta(&self, name: &str, role: &str, plugin: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(
                [
                    (GROUP_LABEL.to_owned(), self.config.lease_name.clone()),
                    (ROLE_LABEL.to_owned(), role.to_owned()),
                ]
                .into(),
            ),
            annotations: plugin.map(|plugin| [(PLUGIN_ANNOTATION.to_owned(), plugin.to_owned())].into()),
            ..ObjectMeta::default()
        }
    }

    /// When the first plugin this replica leads stops unless renewed.
    fn deadline(&self) -> Option<Instant> {
        self.plugins.values().filter_map(Elector::deadline).min()
    }

    /// One retry period's work: read every Lease of the group, renew this
    /// replica's own, count the replicas, renew the plugins led, take free
    /// ones up to the share, give one back when over it.
    async fn round(&mut self, wanted: &BTreeSet<String>, sent: Instant) -> Result<(), kube::Error> {
        let listed = self.api.list(&ListParams::default().labels(&self.selector())).await?;
        let now = Instant::now();
        let wall = Timestamp::now();
        let read: BTreeMap<String, Lease> = listed
            .items
            .into_iter()
            .filter_map(|lease| Some((lease.metadata.name.clone()?, lease)))
            .collect();
        for (name, lease) in &read {
            if let Some(version) = &lease.metadata.resource_version {
                self.versions.insert(name.clone(), version.clone());
            }
        }

        // This replica's own Lease first: the others count it.
        let mine = read.get(&self.member_name);
        let attempt = self.member.attempt(mine.map(LeaseRecord::of).as_ref(), now, wall);
        let meta = self.meta(&self.member_name, "replica", None);
        match super::write(&self.api, meta, mine, attempt).await {
            Ok(Some((lease, record))) => {
                self.remember(&lease);
                self.member.succeeded(sent, record);
            }
            Ok(None) => {
                tracing::warn!(lease = %self.member_name, "another process holds this replica's Lease: is the identity unique?")
            }
            Err(error) => tracing::warn!(
                "cannot renew this replica's Lease: {}",
                crate::retry::client_error(&error)
            ),
        }

        // The replicas alive: this one and those whose Lease is held and renewed.
        let replica_leases: Vec<(&String, &Lease)> = read
            .iter()
            .filter(|(name, lease)| {
                **name != self.member_name
                    && lease
                        .metadata
                        .labels
                        .as_ref()
                        .is_some_and(|labels| labels.get(ROLE_LABEL).is_some_and(|role| role == "replica"))
            })
            .collect();
        self.others.retain(|name, _| read.contains_key(name));
        let mut replicas = 1;
        for (name, lease) in replica_leases {
            let elector = self
                .others
                .entry(name.clone())
                .or_insert_with(|| Elector::new(&self.config));
            replicas += usize::from(elector.held_by_other(&LeaseRecord::of(lease), now));
        }
        self.replicas = replicas;
        self.share = share(wanted.len(), replicas);

        // Renew what it leads, then take what is free while under its share.
        let mut held = self.plugins.values().filter(|elector| elector.is_leading()).count();
        let (leading, others): (Vec<String>, Vec<String>) = wanted
            .iter()
            .cloned()
            .partition(|plugin| self.plugins.get(plugin).is_some_and(Elector::is_leading));
        for plugin in leading.into_iter().chain(others) {
            let lease_name = plugin_lease_name(&self.config.lease_name, &plugin);
            let lease = read.get(&lease_name);
            let elector = self
                .plugins
                .entry(plugin.clone())
                .or_insert_with(|| Elector::new(&self.config));
            let was_leading = elector.is_leading();
            let attempt = elector.attempt(lease.map(LeaseRecord::of).as_ref(), now, wall);
            match attempt {
                Attempt::Follow { holder } => {
                    if was_leading {
                        elector.step_down();
                        held -= 1;
                        tracing::warn!(plugin = %plugin, %holder, "lost the plugin's Lease to another replica; stopping it");
                    }
                    continue;
                }
                Attempt::Create(_) | Attempt::Update(_) if !was_leading && held >= self.share => continue,
                Attempt::Create(_) | Attempt::Update(_) => {}
            }
            let meta = self.meta(&lease_name, "plugin", Some(&plugin));
            match super::write(&self.api, meta, lease, attempt).await {
                Ok(Some((lease, record))) => {
                    self.remember(&lease);
                    if let Some(elector) = self.plugins.get_mut(&plugin) {
                        elector.succeeded(sent, record);
                    }
                    if !was_leading {
                        held += 1;
                        tracing::info!(plugin = %plugin, lease = %lease_name, "took the plugin's Lease: this replica runs it");
                    }
                }
                Ok(None) => {}
                // Another replica took it first: the server refused the stale write.
                Err(kube::Error::Api(status)) if status.code == 409 => {
                    tracing::debug!(plugin = %plugin, "another replica wrote the plugin's Lease first");
                }
                Err(error) => tracing::warn!(
                    plugin = %plugin,
                    "cannot take or renew the plugin's Lease: {}",
                    crate::retry::client_error(&error)
                ),
            }
        }

        if self
            .balance
            .give_back(held, self.share, Instant::now(), self.config.lease_duration)
            && let Some(plugin) = self
                .plugins
                .iter()
                .rev()
                .find(|(_, elector)| elector.is_leading())
                .map(|(plugin, _)| plugin.clone())
        {
            tracing::info!(
                plugin = %plugin,
                held,
                share = self.share,
                replicas = self.replicas,
                "giving the plugin back: this replica leads more than its share"
            );
            self.hand_over(&plugin, wanted).await;
        }
        Ok(())
    }

    /// Keeps the resourceVersion of a Lease written.
    fn remember(&mut self, lease: &Lease) {
        if let (Some(name), Some(version)) = (&lease.metadata.name, &lease.metadata.resource_version) {
            self.versions.insert(name.clone(), version.clone());
        }
    }

    /// Steps down from `plugin` (its writes are refused from now on), then
    /// releases its Lease so another replica takes it at its next try.
    async fn hand_over(&mut self, plugin: &str, wanted: &BTreeSet<String>) {
        let Some(elector) = self.plugins.get_mut(plugin) else {
            return;
        };
        elector.step_down();
        self.show(wanted);
        let name = plugin_lease_name(&self.config.lease_name, plugin);
        let meta = self.meta(&name, "plugin", Some(plugin));
        let Some(elector) = self.plugins.get(plugin) else {
            return;
        };
        if let Err(error) = self.release(meta, elector).await {
            tracing::warn!(plugin = %plugin, "cannot release the plugin's Lease: {}", crate::retry::client_error(&error));
        }
    }

    /// Writes the released record of `elector` over the Lease `meta` names,
    /// at the resourceVersion last seen.
    async fn release(&self, mut meta: ObjectMeta, elector: &Elector) -> Result<(), kube::Error> {
        let name = meta.name.clone().unwrap_or_default();
        meta.resource_version = self.versions.get(&name).cloned();
        super::release(&self.api, meta, elector).await
    }

    /// Leaves the elections of plugins no longer offered, releasing those
    /// it leads.
    async fn leave(&mut self, wanted: &BTreeSet<String>) {
        let gone: Vec<String> = self
            .plugins
            .keys()
            .filter(|plugin| !wanted.contains(*plugin))
            .cloned()
            .collect();
        for plugin in gone {
            if self.plugins.get(&plugin).is_some_and(Elector::is_leading) {
                tracing::info!(plugin = %plugin, "the plugin no longer runs here: releasing its Lease");
                self.hand_over(&plugin, wanted).await;
            }
            self.plugins.remove(&plugin);
        }
    }

    /// Steps down from every plugin whose renew deadline passed.
    fn expire(&mut self, now: Instant) {
        for (plugin, elector) in &mut self.plugins {
            if elector.deadline().is_some_and(|deadline| now >= deadline) && elector.failed(now) {
                tracing::error!(plugin = %plugin, "the plugin's Lease was not renewed within the renew deadline; stopping it");
            }
        }
    }

    /// Publishes who leads what.
    fn show(&self, wanted: &BTreeSet<String>) {
        let leads: BTreeSet<String> = self
            .plugins
            .iter()
            .filter(|(plugin, elector)| elector.is_leading() && wanted.contains(*plugin))
            .map(|(plugin, _)| plugin.clone())
            .collect();
        let plugins: BTreeMap<String, Option<String>> = wanted
            .iter()
            .map(|plugin| {
                let holder = self
                    .plugins
                    .get(plugin)
                    .and_then(|elector| elector.holder().map(str::to_owned));
                (plugin.clone(), holder)
            })
            .collect();
        self.publish.send_if_modified(|status| {
            let changed = status.leads != leads
                || status.plugins != plugins
                || status.replicas != self.replicas
                || status.share != self.share;
            status.leading = !leads.is_empty();
            status.leads.clone_from(&leads);
            status.plugins.clone_from(&plugins);
            status.replicas = self.replicas;
            status.share = self.share;
            changed
        });
    }

    /// Stops leading every plugin, then releases their Leases and this
    /// replica's own, all at once.
    async fn release_all(&mut self) {
        let held: Vec<String> = self
            .plugins
            .iter()
            .filter(|(_, elector)| elector.is_leading())
            .map(|(plugin, _)| plugin.clone())
            .collect();
        for elector in self.plugins.values_mut() {
            elector.step_down();
        }
        self.show(&BTreeSet::new());
        let this = &*self;
        let plugins = held.iter().filter_map(|plugin| {
            let elector = this.plugins.get(plugin)?;
            Some(async move {
                let name = plugin_lease_name(&this.config.lease_name, plugin);
                let outcome = this.release(this.meta(&name, "plugin", Some(plugin)), elector).await;
                (plugin.as_str(), outcome)
            })
        });
        let member = async {
            if this.member.is_leading() {
                let meta = this.meta(&this.member_name, "replica", None);
                if let Err(error) = this.release(meta, &this.member).await {
                    tracing::warn!(
                        "cannot release this replica's Lease: {}",
                        crate::retry::client_error(&error)
                    );
                }
            }
        };
        let (outcomes, ()) = futures::join!(futures::future::join_all(plugins), member);
        for (plugin, outcome) in outcomes {
            match outcome {
                Ok(()) => tracing::info!(plugin = %plugin, "released the plugin's Lease"),
                Err(error) => {
                    tracing::warn!(plugin = %plugin, "cannot release the plugin's Lease: {}", crate::retry::client_error(&error))
                }
            }
        }
        if !held.is_empty() {
            tracing::info!(plugins = held.len(), "released the Leases");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_replica_leads_its_share_rounded_up() {
        assert_eq!(share(6, 3), 2);
        assert_eq!(share(7, 3), 3);
        assert_eq!(share(6, 1), 6);
        assert_eq!(share(1, 3), 1);
        assert_eq!(share(0, 2), 0);
        // No replica seen (this one always counts, but a share is never a
        // division by zero).
        assert_eq!(share(4, 0), 4);
    }

    #[test]
    fn lease_names_are_valid_and_never_alike_for_two_plugins() {
        assert_eq!(
            plugin_lease_name("kinformer", "hpa-controller"),
            "kinformer-hpa-controller"
        );
        let odd = plugin_lease_name("kinformer", "Team_A");
        assert!(odd.starts_with("kinformer-team-a-"), "{odd}");
        assert_ne!(odd, plugin_lease_name("kinformer", "team-a"));
        assert_ne!(plugin_lease_name("k", "a_b"), plugin_lease_name("k", "a.b"));
        assert!(plugin_lease_name("k", "trailing-").ends_with(|c: char| c.is_ascii_alphanumeric()));
        // A replica's Lease has a `.` after the prefix, which no plugin Lease has.
        assert_eq!(replica_lease_name("kinformer", "Pod_7"), "kinformer.replica.pod-7");
        assert!(!plugin_lease_name("kinformer", "replica").contains('.'));
    }

    #[test]
    fn a_plugin_is_given_back_only_after_a_lease_duration_over_the_share() {
        let mut balance = Balance::default();
        let start = Instant::now();
        let patience = Duration::from_secs(15);
        assert!(!balance.give_back(3, 2, start, patience));
        assert!(!balance.give_back(3, 2, start + Duration::from_secs(14), patience));
        assert!(balance.give_back(3, 2, start + Duration::from_secs(15), patience));
        // Still over: one more at the next ask.
        assert!(balance.give_back(3, 2, start + Duration::from_secs(17), patience));
        // At the share, the clock starts again.
        assert!(!balance.give_back(2, 2, start + Duration::from_secs(19), patience));
        assert!(!balance.give_back(3, 2, start + Duration::from_secs(20), patience));
    }
}
