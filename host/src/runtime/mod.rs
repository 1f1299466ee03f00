//! The plugin runtime: every plugin of a directory, fed by shared informers,
//! each in its own sandbox and its own worker, a task of the plugins' pool.
//!
//! [`Runtime::start`] loads each `NAME.wasm` with its manifest `NAME.toml`
//! ([`crate::manifest`]), runs its `init`, checks the registration against the
//! grant, starts (or shares) the informers it asked for and hands the plugin to
//! a worker. A plugin that fails to load is reported and left out; the others
//! run.
//!
//! Each plugin gets a writer for its `cluster` imports ([`crate::apiserver`]),
//! bound to its manifest's write grant, write limits and mode; one connection
//! and one discovery cache serve every plugin's writer.
//!
//! The worker owns the plugin's wasmtime `Store`. It waits until every cache the
//! plugin registered for has synced, then takes batches from the plugin's
//! handler queues and calls `handle` with at most the manifest's `max-batch`: a
//! delta after a quiet spell at once, and what arrives within the batch window
//! after a call together in the next call, so a busy informer wakes the worker
//! once per window rather than once per delta. Deltas of one object arrive in
//! order. When `handle` returns an error the batch is retried with backoff or
//! skipped, as the manifest says. When the plugin traps, overruns its deadline or
//! hits its memory limit, its store is dropped and a fresh instance is started
//! after a backoff; it runs `init` again and receives the current cache as an
//! initial list. Too many traps within the window quarantine the plugin. None of
//! this delays another plugin: each has its own worker and its own queues, and
//! the pool hands a call that holds its thread that thread, moving the other
//! workers to a spare.
//!
//! The runtime follows the directory ([`notify`], debounced with a maximum
//! wait): a new file is loaded; a changed file or manifest is the plugin's
//! next version, loaded beside the running version (compiled, or taken from
//! the disk cache; started; its caches synced) and swapped in between two
//! batches; a removed file is drained and unloaded. The next version first
//! receives, flagged initial-list, exactly the state the running version had
//! been handed, then the same queue goes on: every delta reaches exactly one
//! version. A next version that does not load leaves the running version
//! serving and is not retried until it changes; one that keeps failing right
//! after its swap is rolled back to the previous one.
//!
//! With leader election ([`RuntimeConfig::leader_election`], [`crate::leader`]),
//! plugins that can write (a write grant, or the controller world) run only
//! while this replica leads them (per plugin, each its own Lease; or all on
//! one): on the other replicas they stand by, and when leading ends they are
//! stopped after their current call (their writes held from that moment).
//! Read-only plugins run on every replica.
//!
//! The status address serves the plugins' status (`/plugins`), who leads
//! (`/leader`), Prometheus metrics read from the same counters (`/metrics`,
//! see `metrics`), the probes `/healthz` and `/readyz`, and the host at a
//! glance ([`overview`]) as a page (`/`, see `page`) and as JSON (`/overview`).
//!
//! The pieces, in the order a plugin meets them:
//!
//! | module | what it owns |
//! | --- | --- |
//! | `config`, `error` | [`RuntimeConfig`]; [`Error`] (the runtime could not start) and `LoadError` (one version could not load) |
//! | `directory`, `embedded` | which files are plugins, reading them once, the debounced watch; plugins given in code |
//! | `env` | the Secrets and ConfigMaps a manifest's `[env]` names, watched |
//! | `supervisor` | the directory → running plugins loop, one load at a time per plugin, the leadership gate |
//! | `version`, [`prepare`] | one version started: `init`, the grant's review, informers synced |
//! | `worker`, `pool` | the task that serves a version's deltas, and the threads it runs on |
//! | `lifecycle` | the pure restart, quarantine and rollback rules the worker follows |
//! | `rollout`, `controller` | a next version beside the running one; a controller's workqueue |
//! | [`status`](PluginStatus), `metrics`, [`overview`], `page`, `server` | what each plugin is doing, served as JSON, metrics and a page |

mod config;
mod controller;
mod directory;
mod embedded;
mod env;
mod error;
mod lifecycle;
mod metrics;
pub mod overview;
mod page;
pub(crate) mod pool;
pub mod prepare;
mod rollout;
mod server;
mod status;
mod supervisor;
mod version;
mod worker;

use std::sync::Arc;
use std::time::Duration;

use crate::informer::SharedInformerFactory;
use crate::leader::{LeaderElection, LeaderStatus};
use crate::plugin::PluginEngine;

pub use config::{BatchObserver, RuntimeConfig};
pub use controller::keys_for;
pub use directory::plugin_files;
pub use embedded::EmbeddedPlugin;
pub use env::{EnvError, EnvProblem, MAX_ENV_VALUE_BYTES};
pub use error::Error;
pub(crate) use error::{LoadError, error_text};
pub use overview::Overview;
pub use status::{PluginState, PluginStatus};

use supervisor::Supervisor;

/// The running plugins: those of a directory, and those an embedder gave.
///
/// What each call waits for (a plugin's load is its compile, `init`,
/// registration review and cache sync, each bounded by its manifest's
/// limits):
///
/// | call | returns once |
/// | --- | --- |
/// | [`start`](Runtime::start), [`start_with`](Runtime::start_with) | every plugin's load ended: loaded, failed, or standing by for leadership |
/// | [`launch`](Runtime::launch), [`launch_with`](Runtime::launch_with) | the loads began; it waits for none |
/// | [`rescan`](Runtime::rescan), [`add_plugin`](Runtime::add_plugin), [`remove_plugin`](Runtime::remove_plugin) | every load it began, or found running, ended |
/// | [`shutdown`](Runtime::shutdown) | every worker finished its call, or [`SHUTDOWN_GRACE`] passed |
///
/// The names are the public API embedders already call; the table, and
/// each call's first line, say what they wait for.
pub struct Runtime {
    supervisor: Arc<Supervisor>,
    watcher: Option<tokio::task::JoinHandle<()>>,
    /// Rescans when a value a plugin's `[env]` takes from the cluster
    /// changes.
    env_follower: tokio::task::JoinHandle<()>,
    /// Keeps the API server's addresses current for the plugins' outbound
    /// HTTP.
    api_server_follower: tokio::task::JoinHandle<()>,
    /// The leader election, when configured, and the task that starts and
    /// stops the writing plugins as leading starts and ends.
    election: Option<(LeaderElection, tokio::task::JoinHandle<()>)>,
    /// Where the status endpoint of [`RuntimeConfig::status_address`] listens.
    status_address: Option<std::net::SocketAddr>,
    /// Runs the cluster's Handlers as plugins ([`RuntimeConfig::handlers`]).
    handlers: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("dir", &self.supervisor.dir)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts the runtime and waits for every plugin's load: loads every
    /// plugin of the directory against the cluster `client` talks to, then
    /// (with [`RuntimeConfig::watch`]) follows the directory. Returns once
    /// every plugin was tried, as [`Runtime::rescan`] does; the status
    /// endpoint, when configured, answers from the start. A plugin that cannot
    /// start is logged and shows as [`PluginState::Failed`] in
    /// [`Runtime::status`].
    ///
    /// # Errors
    ///
    /// When the engine cannot be set up, the directory cannot be read or
    /// watched, or the status address cannot be bound.
    pub async fn start(client: kube::Client, config: RuntimeConfig) -> Result<Self, Error> {
        Self::start_with(SharedInformerFactory::new(client), config).await
    }

    /// As [`Runtime::start`] (it waits for every plugin's load), with the
    /// plugins' informers taken from `factory`: an embedder that watches a
    /// resource through the same factory shares one list and watch with the
    /// plugins.
    ///
    /// # Errors
    ///
    /// As [`Runtime::start`]; also when an embedded plugin's component was
    /// compiled by another engine.
    pub async fn start_with(factory: SharedInformerFactory, config: RuntimeConfig) -> Result<Self, Error> {
        let runtime = Self::launch_with(factory, config).await?;
        runtime.rescan().await;
        Ok(runtime)
    }

    /// Starts the runtime and waits for no plugin's load: as
    /// [`Runtime::start`], but returns once the loads began. A program that
    /// must answer a stop signal at any moment (one plugin may take a minute
    /// to compile) waits for the loads with [`Runtime::rescan`] beside its
    /// signal, and on the signal calls [`Runtime::shutdown`], which ends the
    /// compiles still running.
    ///
    /// # Errors
    ///
    /// As [`Runtime::start`].
    pub async fn launch(client: kube::Client, config: RuntimeConfig) -> Result<Self, Error> {
        Self::launch_with(SharedInformerFactory::new(client), config).await
    }

    /// As [`Runtime::launch`] (it waits for no plugin's load), with the
    /// plugins' informers taken from `factory`, as [`Runtime::start_with`].
    ///
    /// # Errors
    ///
    /// As [`Runtime::start_with`].
    pub async fn launch_with(factory: SharedInformerFactory, config: RuntimeConfig) -> Result<Self, Error> {
        let engine = PluginEngine::with_options(&config.engine).map_err(Error::Engine)?;
        if let Some(election) = &config.leader_election {
            election.validate()?;
        }
        let election = config
            .leader_election
            .clone()
            .map(|election| LeaderElection::start(factory.client().clone(), election));
        let leadership = election.as_ref().map(LeaderElection::leadership);
        let supervisor = Arc::new(Supervisor::new(engine, factory, &config, leadership.clone()));
        for plugin in config.embedded {
            supervisor.embed(plugin)?;
        }
        let election = election.zip(leadership).map(|(election, mut leadership)| {
            let weak = Arc::downgrade(&supervisor);
            let follower = tokio::spawn(async move {
                while let Some(leader) = leadership.changed().await {
                    let Some(supervisor) = weak.upgrade() else { break };
                    drop(supervisor.follow_leadership(&leader).await);
                }
            });
            (election, follower)
        });
        let env_follower = {
            let weak = Arc::downgrade(&supervisor);
            let changed = Arc::clone(&supervisor.env.changed);
            tokio::spawn(async move {
                loop {
                    changed.notified().await;
                    let Some(supervisor) = weak.upgrade() else { break };
                    drop(supervisor.begin_rescan().await);
                }
            })
        };
        let watcher = match &supervisor.dir {
            Some(dir) => {
                // Fail early on a directory that cannot be read.
                if plugin_files(dir)?.is_empty() {
                    tracing::warn!(dir = %dir.display(), "no plugins (*.wasm) in the plugin directory");
                }
                // Watch before the first scan, so no change slips between the two.
                config
                    .watch
                    .then(|| {
                        let weak = Arc::downgrade(&supervisor);
                        directory::watch(dir, config.quiet, config.max_wait, move || {
                            let weak = weak.clone();
                            async move {
                                let Some(supervisor) = weak.upgrade() else { return false };
                                // The loads go on by themselves: the next change is
                                // not held up by a plugin slow to load.
                                drop(supervisor.begin_rescan().await);
                                true
                            }
                        })
                    })
                    .transpose()?
            }
            None => None,
        };
        let api_server_follower =
            crate::outbound::follow_api_server(supervisor.factory.client().clone(), supervisor.addresses.clone());
        let handlers = config.handlers.then(|| {
            let mut pull = config.pull.clone();
            if pull.cache_dir.is_none()
                && let Some(dir) = &config.engine.cache_dir
            {
                pull = pull.cache_dir(dir.join("modules"));
            }
            tokio::spawn(crate::handlers::run(
                supervisor.factory.client().clone(),
                Plugins(Arc::downgrade(&supervisor)),
                config.instance.clone().unwrap_or_else(|| "kinformer".to_owned()),
                config.tenant_policy.clone(),
                pull,
                // Pulls connect as plugins do: the same address policy and resolver.
                crate::outbound::Dialer::new(supervisor.addresses.clone(), config.resolver.clone()),
            ))
        });
        let mut runtime = Self {
            supervisor,
            watcher,
            env_follower,
            api_server_follower,
            election,
            status_address: None,
            handlers,
        };
        if let Some(address) = config.status_address {
            let bound = runtime
                .serve_status(address)
                .await
                .map_err(|source| Error::Status { address, source })?;
            runtime.status_address = Some(bound);
        }
        drop(runtime.supervisor.begin_rescan().await);
        Ok(runtime)
    }

    /// Runs `plugin` beside the directory's plugins (instead of a directory
    /// file of the same name), and waits for its load, as
    /// [`Runtime::rescan`] does. A plugin of the same name added before is
    /// replaced as a changed file is: it is that plugin's next version,
    /// loaded beside the running one and swapped in between two batches.
    ///
    /// # Errors
    ///
    /// When the plugin's component was compiled by another engine than
    /// [`Runtime::engine`]. A plugin that fails to load is no error here: it
    /// shows as [`PluginState::Failed`] in [`Runtime::status`], as a broken
    /// file of the directory does.
    pub async fn add_plugin(&self, plugin: EmbeddedPlugin) -> Result<(), Error> {
        self.supervisor.embed(plugin)?;
        self.rescan().await;
        Ok(())
    }

    /// Drains and unloads the embedder's plugin `name`, and waits for the
    /// rescan that follows, as [`Runtime::rescan`] does; false when there is
    /// none. A directory file of the same name, if there is one, runs again.
    pub async fn remove_plugin(&self, name: &str) -> bool {
        let removed = self.supervisor.embedded().remove(name).is_some();
        if removed {
            self.rescan().await;
        }
        removed
    }

    /// The engine plugins are compiled and run by: compile an
    /// [`EmbeddedPlugin::from_component`]'s component with it.
    #[must_use]
    pub fn engine(&self) -> &PluginEngine {
        &self.supervisor.engine
    }

    /// The informer factory the plugins' informers come from.
    #[must_use]
    pub fn informers(&self) -> &SharedInformerFactory {
        &self.supervisor.factory
    }

    /// Registers the runtime's metrics (those `/metrics` serves) into an
    /// embedder's `registry`, read from the runtime's counters at each scrape;
    /// they read nothing once the runtime is shut down.
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        metrics::register(registry, Arc::downgrade(&self.supervisor));
    }

    /// Rescans and waits for every load it began: brings the running
    /// plugins in line with the directory (and the embedder's plugins) now —
    /// loads new files, loads changed files and manifests as next versions,
    /// unloads removed files — and returns once each plugin of the directory
    /// was tried (each load is bounded by its plugin's limits, and the
    /// plugins load side by side). The directory watch does this by itself
    /// without waiting; call it to apply a change at once.
    pub async fn rescan(&self) {
        for load in self.supervisor.begin_rescan().await {
            load.wait().await;
        }
    }

    /// Where the status endpoint of [`RuntimeConfig::status_address`] listens.
    #[must_use]
    pub fn status_address(&self) -> Option<std::net::SocketAddr> {
        self.status_address
    }

    /// Who leads, when this runtime takes part in leader election.
    #[must_use]
    pub fn leader(&self) -> Option<LeaderStatus> {
        self.election
            .as_ref()
            .map(|(election, _)| election.leadership().status())
    }

    /// The status of every plugin, by name.
    #[must_use]
    pub fn status(&self) -> Vec<PluginStatus> {
        self.supervisor.status()
    }

    /// True when every plugin handles deltas (none starting, restarting,
    /// quarantined or failed).
    #[must_use]
    pub fn all_running(&self) -> bool {
        self.status().iter().all(|status| status.state == PluginState::Running)
    }

    /// How many plugin instances (stores) are alive.
    #[must_use]
    pub fn live_instances(&self) -> usize {
        self.supervisor.engine.live_instances()
    }

    /// How many informers run for the plugins.
    #[must_use]
    pub fn running_informers(&self) -> usize {
        self.supervisor.factory.running_count()
    }

    /// Serves the plugins' status as JSON at `GET /plugins` on `address`; returns
    /// the address bound (pass port 0 for any free one).
    ///
    /// # Errors
    ///
    /// When the address cannot be bound.
    pub async fn serve_status(&self, address: std::net::SocketAddr) -> std::io::Result<std::net::SocketAddr> {
        let bound = server::serve(
            address,
            Arc::downgrade(&self.supervisor),
            self.supervisor.stop.subscribe(),
        )
        .await?;
        // No plugin reaches the host's own endpoints, at any of its addresses.
        self.supervisor.addresses.add_host_port(bound.port());
        Ok(bound)
    }

    /// Stops every plugin and returns their final status. Each worker finishes
    /// the call it is in; one still busy after [`SHUTDOWN_GRACE`] is abandoned
    /// (its call ends at its deadline), so shutting down is bounded whatever
    /// the plugins do. A leader then releases its Lease, so another replica
    /// takes over at once.
    pub async fn shutdown(mut self) -> Vec<PluginStatus> {
        if let Some(handlers) = self.handlers.take() {
            handlers.abort();
        }
        self.env_follower.abort();
        self.api_server_follower.abort();
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        let election = self.election.take().map(|(election, follower)| {
            follower.abort();
            election
        });
        let _ = self.supervisor.stop.send(true);
        self.supervisor.engine.end_compiles();
        let workers = self.supervisor.take_workers();
        let deadline = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        for worker in workers {
            while !worker.is_finished() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if !worker.is_finished() {
                tracing::warn!(worker = %worker.name(), "a plugin worker did not stop in time; abandoned");
            }
        }
        if let Some(election) = election {
            election.release(SHUTDOWN_GRACE).await;
        }
        self.supervisor.status()
    }
}

/// The runtime's plugins as the Handlers controller changes them: it adds,
/// replaces and removes plugins without waiting for their loads, and reads
/// their status. Does nothing once the runtime is gone.
#[derive(Clone)]
pub(crate) struct Plugins(std::sync::Weak<Supervisor>);

impl Plugins {
    /// Runs `plugin`, or its next version when one of its name runs.
    ///
    /// # Errors
    ///
    /// The plugin of the directory or the embedder that holds its name, in
    /// words: a Handler never replaces an operator's plugin.
    pub(crate) async fn put(&self, plugin: EmbeddedPlugin) -> Result<(), String> {
        let Some(supervisor) = self.0.upgrade() else {
            return Ok(());
        };
        if let Some(holder) = supervisor.holder(plugin.name()) {
            return Err(holder);
        }
        supervisor.handlers().insert(plugin.name().to_owned(), plugin);
        drop(supervisor.begin_rescan().await);
        Ok(())
    }

    /// What holds the name `name` other than a Handler, in words.
    pub(crate) fn holder(&self, name: &str) -> Option<String> {
        self.0.upgrade()?.holder(name)
    }

    /// Drains and unloads plugin `name`.
    pub(crate) async fn remove(&self, name: &str) {
        let Some(supervisor) = self.0.upgrade() else { return };
        let removed = supervisor.handlers().remove(name).is_some();
        if removed {
            drop(supervisor.begin_rescan().await);
        }
    }

    /// The status of plugin `name`, if it is known.
    pub(crate) fn status(&self, name: &str) -> Option<PluginStatus> {
        let supervisor = self.0.upgrade()?;
        supervisor.status().into_iter().find(|status| status.name == name)
    }
}

/// How long [`Runtime::shutdown`] waits for the workers to finish their calls.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

impl Drop for Runtime {
    /// Stops without releasing a Lease it holds, as a replica that dies does:
    /// the Lease expires.
    fn drop(&mut self) {
        if let Some(handlers) = self.handlers.take() {
            handlers.abort();
        }
        self.env_follower.abort();
        self.api_server_follower.abort();
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        if let Some((_, follower)) = &self.election {
            follower.abort();
        }
        let _ = self.supervisor.stop.send(true);
        self.supervisor.engine.end_compiles();
    }
}
