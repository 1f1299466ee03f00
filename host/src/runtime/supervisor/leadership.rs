//! The leadership gate: a plugin that writes runs only while this replica
//! leads; it stands by until then, and is stopped when leading ends.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::super::directory::Fingerprint;
use super::super::status::{PluginState, SharedStatus, update};
use super::super::worker::{Command, WorkerHandle};
use super::{Done, Plugin, Supervisor};

impl Supervisor {
    /// Leaves a writing plugin waiting until this replica leads, unless it
    /// leads: true when it waits. Asked and marked under the plugins' lock,
    /// which [`Supervisor::follow_leadership`] takes once leading began, so a
    /// plugin that waits is started then.
    pub(super) fn stand_by(
        &self,
        plugins: &mut BTreeMap<String, Plugin>,
        name: &str,
        fingerprint: &Fingerprint,
        status: &SharedStatus,
    ) -> bool {
        if self.leadership.is_leading() {
            return false;
        }
        if let Some(plugin) = plugins.get_mut(name) {
            plugin.applied = Some(fingerprint.clone());
            plugin.standby = true;
        }
        update(status, |status| status.state = PluginState::Standby);
        tracing::info!(plugin = %name, "the plugin writes to the cluster: it runs once this replica leads");
        true
    }

    /// Starts the writing plugins when this replica starts leading; stops
    /// them, after the call each is in, when it stops (their writes are
    /// already held by the cluster's gate). Returns the loads started.
    pub(in crate::runtime) async fn follow_leadership(self: &Arc<Self>, leading: bool) -> Vec<Done> {
        if leading {
            for plugin in self.plugins().values_mut().filter(|plugin| plugin.standby) {
                plugin.standby = false;
                plugin.applied = None;
            }
            return self.rescan().await;
        }
        let _one_at_a_time = self.rescanning.lock().await;
        let stopping: Vec<(SharedStatus, Option<WorkerHandle>)> = self
            .plugins()
            .values_mut()
            .filter(|plugin| plugin.writes && !plugin.standby)
            .map(|plugin| {
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
                drop(tokio::task::spawn_blocking(move || worker.thread.join()).await);
            }
            update(&status, |status| status.state = PluginState::Standby);
        }
        Vec::new()
    }
}
