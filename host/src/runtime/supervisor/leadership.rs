//! The leadership gate: a plugin that writes runs only while this replica
//! leads it (leads at all, with one Lease); it stands by until then, and is
//! stopped when leading it ends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::leader::LeaderStatus;
use crate::rollout::next_of;

use super::super::directory::Fingerprint;
use super::super::status::{PluginState, SharedStatus, update};
use super::super::worker::{Command, WorkerHandle};
use super::{Done, Plugin, Supervisor};

impl Supervisor {
    /// Leaves a writing plugin waiting until this replica leads it, unless it
    /// does: true when it waits. Asked and marked under the plugins' lock,
    /// which [`Supervisor::follow_leadership`] takes once leading began, so a
    /// plugin that waits is started then.
    pub(super) fn stand_by(
        &self,
        plugins: &mut BTreeMap<String, Plugin>,
        name: &str,
        fingerprint: &Fingerprint,
        status: &SharedStatus,
    ) -> bool {
        if self.leadership.leads(crate::rollout::lease_group(name)) {
            return false;
        }
        if let Some(plugin) = plugins.get_mut(name) {
            plugin.applied = Some(fingerprint.clone());
            plugin.standby = true;
        }
        update(status, |status| status.state = PluginState::Standby);
        tracing::info!(plugin = %name, "the plugin writes to the cluster: it runs once this replica leads it");
        true
    }

    /// Tells the election which writing plugins this replica can run (a next
    /// version runs with the plugin it is the next version of).
    pub(super) fn offer_writers(&self, plugins: &BTreeMap<String, Plugin>) {
        let writers: BTreeSet<String> = plugins
            .iter()
            .filter(|(_, plugin)| plugin.writes)
            .map(|(name, _)| next_of(name).unwrap_or(name).to_owned())
            .collect();
        self.leadership.offer(writers);
    }

    /// Stops the writing plugins this replica no longer leads, after the
    /// call each is in (their writes are already held by the cluster's
    /// gate); then starts those it now leads. Returns the loads started.
    pub(in crate::runtime) async fn follow_leadership(self: &Arc<Self>, leader: &LeaderStatus) -> Vec<Done> {
        let one_at_a_time = self.rescanning.lock().await;
        let stopping: Vec<(SharedStatus, Option<WorkerHandle>)> = self
            .plugins()
            .iter_mut()
            .filter(|(name, plugin)| {
                plugin.writes && !plugin.standby && !leader.leads(crate::rollout::lease_group(name))
            })
            .map(|(_, plugin)| {
                if let Some(loading) = plugin.loading.take() {
                    loading.task.abort();
                }
                plugin.standby = true;
                (Arc::clone(&plugin.status), plugin.worker.take())
            })
            .collect();
        for (status, worker) in stopping {
            let name = update(&status, |status| status.name.clone());
            tracing::info!(plugin = %name, "this replica no longer leads: stopping the writing plugin");
            if let Some(worker) = worker {
                let _ = worker.commands.send(Command::Stop);
                drop(tokio::task::spawn_blocking(move || worker.task.join()).await);
            }
            update(&status, |status| status.state = PluginState::Standby);
        }
        drop(one_at_a_time);
        let mut starting = false;
        for (_, plugin) in self
            .plugins()
            .iter_mut()
            .filter(|(name, plugin)| plugin.standby && leader.leads(crate::rollout::lease_group(name)))
        {
            plugin.standby = false;
            plugin.applied = None;
            starting = true;
        }
        if starting {
            self.begin_rescan().await
        } else {
            Vec::new()
        }
    }
}
