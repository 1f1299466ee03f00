//! The supervisor: brings the running plugins in line with what the plugin
//! directory and the embedder hold — loads new plugins, prepares changed ones
//! beside the running version and hands them to its worker, unloads removed
//! ones — by the pure rule of [`step`].
//!
//! | file | what |
//! | --- | --- |
//! | this one | the plugins it knows, the rescan, the rollouts it sets up |
//! | `load` | one load of one version, whose every failure is a `LoadError` reported once |
//! | `leadership` | the gate that runs a writing plugin only while this replica leads it |
//!
//! Each plugin loads in a task of its own (compile, `init`, informers, cache
//! sync), each step under its limit, so a plugin that is slow to load delays
//! only itself: the scan, the other plugins' loads and the status go on. A
//! plugin compiles one file at a time: a compile past its limit is abandoned,
//! but the plugin's next compile waits for it to end.

mod leadership;
mod load;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::directory::{self, Fingerprint};
use super::embedded::EmbeddedPlugin;
use super::env::EnvSources;
use super::pool::{Pool, TaskHandle};
use super::rollout::{Link, Rollout, Slot};
use super::status::{PluginState, PluginStatus, SharedStatus, update};
use super::worker::{Command, WorkerHandle};
use super::{BatchObserver, Error, RuntimeConfig};
use crate::apiserver::Cluster;
use crate::informer::SharedInformerFactory;
use crate::leader::Leadership;
use crate::manifest::EnvVar;
use crate::outbound::{AddressPolicy, Resolver, in_cluster_api_server, interface_addresses};
use crate::plugin::{LogSink, PluginComponent, PluginEngine};
use crate::rollout::{Role, RolloutMode, RolloutPolicy, next_of};
use crate::scope::Scope;
use kinformer_informers::Recover as _;

/// A plugin the supervisor knows, by name.
struct Plugin {
    status: SharedStatus,
    /// The version last tried, whether it loaded or not: not tried again until
    /// the directory holds another.
    applied: Option<Fingerprint>,
    /// The compiled component of the last file that compiled, for
    /// manifest-only changes.
    component: Option<PluginComponent>,
    /// The worker, while one runs.
    worker: Option<WorkerHandle>,
    /// The load in progress, if one is.
    loading: Option<Loading>,
    /// Held by the plugin's compile, until the compiler returns.
    compiling: Arc<tokio::sync::Mutex<()>>,
    /// It can write to the cluster (a write grant, or the controller world):
    /// it runs only while this replica leads.
    writes: bool,
    /// It writes and waits for this replica to lead.
    standby: bool,
    /// Deltas its listeners were not told about, across its versions:
    /// outside its grant's namespaces.
    outside_grant: Arc<std::sync::atomic::AtomicU64>,
    /// Where its worker finds its part in a rollout.
    slot: Arc<Slot>,
}

/// A load of one version of a plugin, running as a task of its own.
struct Loading {
    fingerprint: Fingerprint,
    task: tokio::task::AbortHandle,
    done: Done,
}

/// Ends (its sender dropped) when a load ends, however it ends.
#[derive(Clone)]
pub(super) struct Done(tokio::sync::watch::Receiver<()>);

impl Done {
    /// Waits for the load to end.
    pub(super) async fn wait(mut self) {
        while self.0.changed().await.is_ok() {}
    }
}

/// What a load takes from its plugin's record.
struct Load {
    status: SharedStatus,
    /// The component of the last file that compiled.
    component: Option<PluginComponent>,
    compiling: Arc<tokio::sync::Mutex<()>>,
    outside_grant: Arc<std::sync::atomic::AtomicU64>,
}

/// What a rescan does with a plugin the directory (or the embedder) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Its version is the one last tried: nothing.
    Keep,
    /// Its version is loading already: wait for that load.
    Await,
    /// It changed back to the version last tried while another loaded:
    /// drop that load, keep what runs.
    Cancel,
    /// It changed while an older version loaded: drop that load, load it.
    Replace,
    /// It is new or changed: load it.
    Load,
}

/// The rescan's rule, from the version last tried (`applied`, whether it
/// loaded or not), the version loading, and the version `wanted` now.
fn step(applied: Option<&Fingerprint>, loading: Option<&Fingerprint>, wanted: &Fingerprint) -> Step {
    match (applied == Some(wanted), loading) {
        (true, None) => Step::Keep,
        (true, Some(_)) => Step::Cancel,
        (false, Some(loading)) if loading == wanted => Step::Await,
        (false, Some(_)) => Step::Replace,
        (false, None) => Step::Load,
    }
}

/// The runtime's shared part: what every plugin of the directory runs with, and
/// the plugins themselves.
pub(super) struct Supervisor {
    pub(super) engine: PluginEngine,
    pub(super) factory: SharedInformerFactory,
    pub(super) cluster: Cluster,
    /// The plugin directory, when plugins come from one.
    pub(super) dir: Option<PathBuf>,
    /// The embedder's plugins, by name: run beside the directory's, and
    /// instead of a directory file of the same name.
    embedded: Mutex<BTreeMap<String, EmbeddedPlugin>>,
    /// The cluster's Handlers' plugins, by name: run beside the others, and
    /// never instead of a directory's or the embedder's plugin of the same
    /// name (that one runs, and the Handler is refused).
    handlers: Mutex<BTreeMap<String, EmbeddedPlugin>>,
    /// The directory's plugins as its last scan found them, by name.
    directory_names: Mutex<std::collections::BTreeSet<String>>,
    pub(super) scope: Scope,
    pub(super) log_sink: Option<LogSink>,
    pub(super) observer: Option<BatchObserver>,
    /// Whether this replica leads: writing plugins run only while it does.
    pub(super) leadership: Leadership,
    /// Where no plugin's outbound HTTP may connect.
    pub(super) addresses: AddressPolicy,
    /// How plugins' outbound HTTP looks names up.
    resolver: Resolver,
    /// The Secrets and ConfigMaps the plugins' `[env]` name, watched.
    pub(super) env: EnvSources,
    /// The leader election's view, when there is one.
    pub(super) election: Option<Leadership>,
    /// Set once the directory was scanned: every plugin of it is known.
    scanned: std::sync::atomic::AtomicBool,
    plugins: Mutex<BTreeMap<String, Plugin>>,
    /// The rollouts of next versions, by the running plugin's name.
    rollouts: Mutex<BTreeMap<String, Arc<Rollout>>>,
    /// Held while the directory is rescanned: one rescan at a time.
    rescanning: tokio::sync::Mutex<()>,
    pub(super) stop: tokio::sync::watch::Sender<bool>,
    /// The threads the plugins' workers run on.
    pool: Pool,
}

impl Supervisor {
    /// The supervisor of `config`'s plugins, run by `engine` on `factory`'s
    /// informers; `election` when this replica takes part in one.
    pub(super) fn new(
        engine: PluginEngine,
        factory: SharedInformerFactory,
        config: &RuntimeConfig,
        election: Option<Leadership>,
    ) -> Self {
        let leadership = election.clone().unwrap_or_else(Leadership::always);
        let scope = if config.namespaces.is_empty() {
            Scope::all()
        } else {
            Scope::only(config.namespaces.iter().cloned())
        };
        Self {
            engine,
            cluster: Cluster::new(factory.client().clone())
                .with_leadership(leadership.clone())
                .with_instance(config.instance.as_deref().unwrap_or("kinformer")),
            leadership,
            addresses: {
                let policy = AddressPolicy::new(config.api_server.iter().copied().chain(in_cluster_api_server()));
                policy.set_host_addresses(interface_addresses());
                policy
            },
            resolver: config.resolver.clone(),
            env: EnvSources::new(factory.client().clone()),
            factory,
            dir: config.plugins.clone(),
            embedded: Mutex::default(),
            handlers: Mutex::default(),
            directory_names: Mutex::default(),
            scope,
            log_sink: config.log_sink.clone(),
            observer: config.observer.clone(),
            election,
            scanned: std::sync::atomic::AtomicBool::new(false),
            plugins: Mutex::new(BTreeMap::new()),
            rollouts: Mutex::default(),
            rescanning: tokio::sync::Mutex::new(()),
            stop: tokio::sync::watch::channel(false).0,
            pool: Pool::per_core(),
        }
    }

    fn plugins(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Plugin>> {
        self.plugins.lock().recover()
    }

    /// Adds (or replaces) an embedder's plugin; it loads at the next rescan.
    pub(super) fn embed(&self, plugin: EmbeddedPlugin) -> Result<(), Error> {
        if plugin
            .component()
            .is_some_and(|component| !self.engine.compiled(component))
        {
            return Err(Error::ForeignComponent {
                plugin: plugin.name().to_owned(),
            });
        }
        self.embedded().insert(plugin.name().to_owned(), plugin);
        Ok(())
    }

    /// The embedder's plugins, by name.
    pub(super) fn embedded(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, EmbeddedPlugin>> {
        self.embedded.lock().recover()
    }

    /// The Handlers' plugins, by name.
    pub(super) fn handlers(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, EmbeddedPlugin>> {
        self.handlers.lock().recover()
    }

    /// What holds the name `name` other than a Handler: the plugin
    /// directory's plugin or the embedder's, in words.
    pub(super) fn holder(&self, name: &str) -> Option<String> {
        if self.embedded().contains_key(name) {
            return Some(format!("the embedder's plugin {name}"));
        }
        let dir = self.dir.as_deref()?;
        self.directory_names
            .lock()
            .recover()
            .contains(name)
            .then(|| format!("the plugin {name} of the directory {}", dir.display()))
    }

    /// Every plugin's status, by name.
    pub(super) fn status(&self) -> Vec<PluginStatus> {
        let rollouts = self.rollouts().clone();
        self.plugins()
            .values()
            .map(|plugin| {
                let mut status = plugin.status.lock().recover().clone();
                status.outside_grant = plugin.outside_grant.load(std::sync::atomic::Ordering::Relaxed);
                if !status.queues.is_empty() {
                    (status.queued, status.catch_ups) =
                        status.queues.iter().fold((0, 0), |(queued, catch_ups), queue| {
                            let stats = queue.stats();
                            (queued + stats.queued, catch_ups + stats.overflows)
                        });
                }
                status.rollout = rollouts.get(&status.name).map(|rollout| rollout.report());
                status
            })
            .collect()
    }

    fn rollouts(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Rollout>>> {
        self.rollouts.lock().recover()
    }

    /// Puts `next_name` (the next version of `plugin`, of `digest`) beside
    /// `plugin`'s running version under `policy`, or hands an existing
    /// rollout the new next version. Without `plugin`, the next version
    /// runs on its own.
    fn start_rollout(&self, plugin: &str, next_name: &str, policy: RolloutPolicy, digest: &str) {
        let plugins = self.plugins();
        let (Some(running), Some(next)) = (plugins.get(plugin), plugins.get(next_name)) else {
            tracing::warn!(plugin = %next_name, next_of = %plugin, "a next version without its plugin runs on its own");
            return;
        };
        let mut rollouts = self.rollouts();
        let rollout = match rollouts.get(plugin) {
            Some(rollout) => {
                rollout.retarget(policy, digest);
                Arc::clone(rollout)
            }
            None => {
                let rollout = Rollout::new(plugin, policy, digest, [&running.slot, &next.slot]);
                rollouts.insert(plugin.to_owned(), Arc::clone(&rollout));
                rollout
            }
        };
        let share = match policy.mode {
            RolloutMode::Shadow => String::new(),
            RolloutMode::Canary => format!(" owning {}% of the keys", policy.percent),
        };
        tracing::info!(
            plugin = %plugin,
            next = &digest[..12.min(digest.len())],
            mode = %policy.mode,
            "next version runs beside the running one as a {}{share}",
            policy.mode
        );
        running.slot.set(Some(Link {
            rollout: Arc::clone(&rollout),
            role: Role::Running,
        }));
        next.slot.set(Some(Link {
            rollout,
            role: Role::Next,
        }));
    }

    /// Ends the rollout of `plugin`'s next version (it was removed or
    /// promoted, or `plugin` was): the running version owns every key again.
    fn end_rollout(&self, plugin: &str) {
        let Some(rollout) = self.rollouts().remove(plugin) else {
            return;
        };
        tracing::info!(plugin = %plugin, "next version gone: the running version owns every key");
        let plugins = self.plugins();
        for name in [plugin.to_owned(), format!("{plugin}{}", crate::rollout::NEXT_SUFFIX)] {
            if let Some(plugin) = plugins.get(&name) {
                plugin.slot.set(None);
            }
        }
        drop(rollout);
    }

    /// True while the plugins' workers and the informers' reflectors run
    /// (a worker ends only when its plugin is unloaded or stopped).
    pub(super) fn healthy(&self) -> bool {
        let workers = self
            .plugins()
            .values()
            .filter_map(|plugin| plugin.worker.as_ref())
            .all(|worker| !worker.task.is_finished() || *self.stop.borrow());
        workers && self.factory.stats().iter().all(|informer| informer.alive)
    }

    /// True once the directory was scanned, every plugin of it loaded,
    /// reported failed or standing by, and every informer synced.
    pub(super) fn ready(&self) -> bool {
        self.scanned.load(std::sync::atomic::Ordering::Acquire)
            && self.status().iter().all(|status| status.state != PluginState::Starting)
            && self.factory.stats().iter().all(|informer| informer.synced)
    }

    /// Takes every worker's task, to wait for them at shutdown.
    pub(super) fn take_workers(&self) -> Vec<TaskHandle> {
        self.plugins()
            .values_mut()
            .filter_map(|plugin| plugin.worker.take().map(|worker| worker.task))
            .collect()
    }

    /// Begins a rescan and waits for no load: brings the plugins in line
    /// with the directory and the embedder's plugins, unloads removed
    /// plugins and starts a load of each new or changed one (a load of an
    /// older version still running is dropped). Returns the loads now
    /// running for the directory's versions, for a caller that waits
    /// ([`Runtime::rescan`](super::Runtime::rescan)).
    pub(super) async fn begin_rescan(self: &Arc<Self>) -> Vec<Done> {
        let _one_at_a_time = self.rescanning.lock().await;
        // A directory that cannot be read now unloads nothing: its plugins
        // keep running until a scan says they are gone.
        let mut scanned = true;
        // A plugin whose file changed while it was read is not gone: it
        // keeps running until the next scan reads the file whole.
        let mut changing = std::collections::BTreeSet::new();
        let mut wanted = match self.dir.as_deref().map(directory::scan) {
            Some(Ok(scan)) => {
                changing = scan.changing;
                *self.directory_names.lock().recover() = scan.plugins.keys().chain(&changing).cloned().collect();
                scan.plugins
            }
            Some(Err(error)) => {
                tracing::warn!(error = %super::error_text(&error), "cannot scan the plugin directory; its plugins keep running");
                scanned = false;
                BTreeMap::new()
            }
            None => BTreeMap::new(),
        };
        for (name, plugin) in self.embedded().iter() {
            if wanted.insert(name.clone(), plugin.files()).is_some() {
                tracing::warn!(plugin = %name, "the directory holds a plugin of the embedder's plugin's name: the embedder's runs");
            }
        }
        for (name, plugin) in self.handlers().iter() {
            // A directory's plugin that is being written holds its name too.
            if wanted.contains_key(name) || changing.contains(name) {
                tracing::debug!(plugin = %name, "a Handler names a plugin the operator runs: the operator's runs");
                continue;
            }
            wanted.insert(name.clone(), plugin.files());
        }
        // What the manifests take from Secrets and ConfigMaps is part of
        // each version: watched, and read before the versions are compared.
        let envs: Vec<Vec<EnvVar>> = wanted
            .values()
            .filter_map(|files| files.manifest.as_ref().ok().map(|manifest| manifest.env.clone()))
            .collect();
        for env in &envs {
            self.env.watch(env).await;
        }
        if scanned {
            self.env.retain(envs.iter().map(Vec::as_slice));
        }
        for files in wanted.values_mut() {
            if let Ok(manifest) = &files.manifest {
                files.fingerprint.env = self.env.digest(&manifest.env);
            }
        }

        // Removed files: drain and unload.
        let removed: Vec<Plugin> = {
            let mut plugins = self.plugins();
            let gone: Vec<String> = plugins
                .keys()
                .filter(|name| scanned && !wanted.contains_key(*name) && !changing.contains(*name))
                .cloned()
                .collect();
            let removed = gone.iter().filter_map(|name| plugins.remove(name)).collect();
            self.offer_writers(&plugins);
            removed
        };
        for plugin in &removed {
            let name = update(&plugin.status, |status| status.name.clone());
            self.end_rollout(next_of(&name).unwrap_or(&name));
        }
        for plugin in removed {
            let name = update(&plugin.status, |status| status.name.clone());
            tracing::info!(plugin = %name, "plugin removed: draining and unloading");
            if let Some(loading) = plugin.loading {
                loading.task.abort();
            }
            if let Some(worker) = plugin.worker {
                let _ = worker.commands.send(Command::Unload);
                drop(tokio::task::spawn_blocking(move || worker.task.join()));
            }
        }

        let mut loads = Vec::new();
        for (name, files) in wanted {
            let mut plugins = self.plugins();
            let plugin = plugins.entry(name.clone()).or_insert_with(|| Plugin {
                status: Arc::new(Mutex::new(PluginStatus::new(&files.file))),
                applied: None,
                component: None,
                worker: None,
                loading: None,
                compiling: Arc::default(),
                writes: false,
                standby: false,
                outside_grant: Arc::default(),
                slot: Slot::new(),
            });
            update(&plugin.status, |status| {
                status.desired_digest = Some(files.fingerprint.digest.clone());
            });
            let loading = plugin.loading.as_ref().map(|loading| &loading.fingerprint);
            match step(plugin.applied.as_ref(), loading, &files.fingerprint) {
                Step::Keep => continue,
                Step::Await => {
                    loads.extend(plugin.loading.as_ref().map(|loading| loading.done.clone()));
                    continue;
                }
                Step::Cancel => {
                    tracing::info!(plugin = %name, "plugin file changed back while its next version loaded: the load is dropped");
                    if let Some(loading) = plugin.loading.take() {
                        loading.task.abort();
                    }
                    continue;
                }
                Step::Replace => {
                    tracing::info!(plugin = %name, "plugin file changed while loading: loading the new one instead");
                    if let Some(loading) = plugin.loading.take() {
                        loading.task.abort();
                    }
                }
                Step::Load => {}
            }
            let (finished, done) = tokio::sync::watch::channel(());
            let fingerprint = files.fingerprint.clone();
            let loading = fingerprint.clone();
            let load = Load {
                status: Arc::clone(&plugin.status),
                component: plugin.component.clone(),
                compiling: Arc::clone(&plugin.compiling),
                outside_grant: Arc::clone(&plugin.outside_grant),
            };
            let supervisor = Arc::clone(self);
            let task = tokio::spawn(async move {
                let _finished = finished;
                supervisor.apply(&name, files, load).await;
                supervisor.loaded(&name, &fingerprint);
            });
            let done = Done(done);
            loads.push(done.clone());
            plugin.loading = Some(Loading {
                fingerprint: loading,
                task: task.abort_handle(),
                done,
            });
        }
        self.scanned.store(true, std::sync::atomic::Ordering::Release);
        loads
    }

    /// Forgets the load of `fingerprint` once it ended (not a newer one).
    fn loaded(&self, name: &str, fingerprint: &Fingerprint) {
        if let Some(plugin) = self.plugins().get_mut(name)
            && plugin
                .loading
                .as_ref()
                .is_some_and(|loading| &loading.fingerprint == fingerprint)
        {
            plugin.loading = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn version(digest: &str) -> Fingerprint {
        Fingerprint {
            digest: digest.into(),
            manifest: None,
            env: None,
        }
    }

    #[test]
    fn a_new_or_changed_plugin_is_loaded_and_an_unchanged_one_left_alone() {
        let (one, two) = (version("1"), version("2"));
        assert_eq!(step(None, None, &one), Step::Load);
        assert_eq!(step(Some(&one), None, &one), Step::Keep);
        assert_eq!(step(Some(&one), None, &two), Step::Load);
    }

    #[test]
    fn a_version_loading_already_is_awaited_not_loaded_twice() {
        let (one, two) = (version("1"), version("2"));
        assert_eq!(step(Some(&one), Some(&two), &two), Step::Await);
        assert_eq!(step(None, Some(&one), &one), Step::Await);
    }

    #[test]
    fn a_change_during_a_load_replaces_that_load() {
        let (one, two, three) = (version("1"), version("2"), version("3"));
        assert_eq!(step(Some(&one), Some(&two), &three), Step::Replace);
    }

    #[test]
    fn a_file_changed_back_while_its_next_version_loads_drops_that_load() {
        let (one, two) = (version("1"), version("2"));
        assert_eq!(step(Some(&one), Some(&two), &one), Step::Cancel);
    }

    #[test]
    fn a_manifest_change_is_a_next_version() {
        let plain = version("1");
        let configured = Fingerprint {
            manifest: Some("config = \"x\"".into()),
            ..version("1")
        };
        assert_eq!(step(Some(&plain), None, &configured), Step::Load);
        let secret_changed = Fingerprint {
            env: Some("b".into()),
            ..Fingerprint {
                env: Some("a".into()),
                ..configured.clone()
            }
        };
        assert_eq!(
            step(
                Some(&Fingerprint {
                    env: Some("a".into()),
                    ..configured.clone()
                }),
                None,
                &secret_changed
            ),
            Step::Load,
            "a new value of its env is a next version"
        );
    }
}
