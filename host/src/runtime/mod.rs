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
//! wait): a new file is loaded, a changed file or manifest is loaded beside the
//! running version (compiled, or taken from the disk cache; started; its
//! caches synced) and swapped in between two batches, a removed file is drained
//! and unloaded. The new version first receives, flagged initial-list, exactly
//! the state the old one had been handed, then the same queue goes on: every
//! delta reaches exactly one version. A file that does not load leaves the old
//! version serving and is not retried until it changes; a new version that keeps
//! failing right after its swap is rolled back to the previous one.
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
//! The pieces, in the order a plugin meets them: `directory` (which files are
//! plugins, reading them once, the debounced watch), `supervisor` (the
//! directory → running plugins loop), `version` (one version started: `init`,
//! the grant's review, informers synced), `worker` (the thread that serves a
//! version's deltas), `lifecycle` (the pure restart, quarantine and rollback
//! rules the worker follows) and [`status`](PluginStatus) (what each plugin is
//! doing, served as JSON).

mod controller;
mod directory;
mod embedded;
mod lifecycle;
mod metrics;
pub mod overview;
mod page;
pub(crate) mod pool;
pub mod prepare;
mod rollout;
mod server;
mod settings;
mod status;
mod supervisor;
mod version;
mod worker;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::delta::Delta;
use crate::informer::SharedInformerFactory;
use crate::leader::{LeaderElection, LeaderElectionConfig, LeaderStatus};
use crate::plugin::{EngineOptions, LogSink, PluginEngine};

pub use controller::keys_for;
pub use directory::plugin_files;
pub use embedded::EmbeddedPlugin;
pub use overview::Overview;
pub use settings::{MAX_SETTING_BYTES, SettingsError, SettingsProblem};
pub use status::{PluginState, PluginStatus};

use supervisor::Supervisor;

/// An error as the log and the status show it: on one line, its plugin-chosen
/// parts (messages, backtrace names) sanitised and its length capped.
pub(crate) fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    crate::text::sanitize(&crate::one_line(error), crate::text::MAX_ERROR_LEN)
}

/// Why the runtime or one plugin could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin directory could not be read.
    #[error("{path}: cannot read the plugin directory")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The plugin file is not a regular file, or too large.
    #[error("{path}: cannot read the plugin")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::file::FileError,
    },
    /// The plugin's manifest is broken.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::Error),
    /// The plugin failed to compile, link or start.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::Error),
    /// An informer the plugin needs could not start.
    #[error("{plugin}: {source}")]
    Informer {
        /// The plugin.
        plugin: String,
        /// Why.
        #[source]
        source: Box<crate::informer::Error>,
    },
    /// What the plugin registered cannot be served: over its limits, an
    /// index it cannot have, a primary resource it is not granted.
    #[error("{plugin}: {source}")]
    Registration {
        /// The plugin.
        plugin: String,
        /// What is wrong.
        #[source]
        source: prepare::PrepareError,
    },
    /// A step of loading the plugin took longer than its limit.
    #[error("{plugin}: {step} took longer than {} ms ({key}){detail}", limit.as_millis())]
    Timeout {
        /// The plugin.
        plugin: String,
        /// `compiling the plugin file`, `syncing its caches`.
        step: &'static str,
        /// The limit.
        limit: Duration,
        /// The manifest key of the limit.
        key: &'static str,
        /// What is known of why, starting with `: `; empty when nothing is.
        detail: String,
    },
    /// The status endpoint's address could not be bound.
    #[error("cannot serve the status at {address}")]
    Status {
        /// The address.
        address: std::net::SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The leader election settings cannot work.
    #[error("leader election: {0}")]
    LeaderElection(#[from] crate::leader::ConfigError),
    /// A setting of its `[env]` could not be read from the cluster.
    #[error("{plugin}: {source}")]
    Settings {
        /// The plugin.
        plugin: String,
        /// Which, and why.
        #[source]
        source: Box<settings::SettingsError>,
    },
    /// An embedder's plugin was compiled by another engine than the
    /// runtime's ([`Runtime::engine`]).
    #[error("{plugin}: the component was compiled by another engine than the runtime's")]
    ForeignComponent {
        /// The plugin.
        plugin: String,
    },
    /// The thread pool the workers run on could not be started.
    #[error("{plugin}: cannot start the plugins' worker threads")]
    Thread {
        /// The plugin.
        plugin: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Settings of the runtime.
#[derive(Clone)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// The plugin directory, when plugins come from one.
    pub plugins: Option<PathBuf>,
    /// Plugins given in code, run beside the directory's (see
    /// [`EmbeddedPlugin`]).
    pub embedded: Vec<EmbeddedPlugin>,
    /// Confine every plugin (and every informer) to these namespaces; every
    /// namespace when empty. Each is listed and watched on its own: the host
    /// never lists across namespaces.
    pub namespaces: std::collections::BTreeSet<String>,
    /// How the engine compiles and allocates.
    pub engine: EngineOptions,
    /// Where every plugin's log lines go, besides `tracing`.
    pub log_sink: Option<LogSink>,
    /// Called with each batch just before a plugin's `handle` is entered (not
    /// again for retries), on the thread that calls the plugin: for metrics and
    /// benchmarks. Keep it cheap.
    pub observer: Option<BatchObserver>,
    /// Watch the directory and reload plugins as their files change.
    pub watch: bool,
    /// A change is applied once the directory was quiet this long...
    pub quiet: Duration,
    /// ...or at the latest this long after the first change, so a file written
    /// continuously cannot starve reloading.
    pub max_wait: Duration,
    /// Serve the plugins' status at `GET /plugins` here, from before the
    /// first plugin loads (port 0: any free port, see
    /// [`Runtime::status_address`]).
    pub status_address: Option<std::net::SocketAddr>,
    /// Take part in leader election on this Lease: plugins that can write
    /// (a write grant, or the controller world) run only while this replica
    /// leads; the others run all along. `None`: this replica always leads.
    pub leader_election: Option<LeaderElectionConfig>,
    /// This host's name in the Events plugins record (`reportingInstance`),
    /// e.g. the pod's name; `kinformer` when `None`.
    pub instance: Option<String>,
    /// The API server's addresses: no plugin's outbound HTTP may reach them
    /// (plugins reach the API server through the host, under their grant).
    /// In a pod, `KUBERNETES_SERVICE_HOST` and `_PORT` are added by
    /// themselves, and the addresses of the Service `default/kubernetes` and
    /// its EndpointSlices are followed as they change.
    pub api_server: Vec<std::net::SocketAddr>,
    /// How plugins' outbound HTTP looks names up: the system's DNS, with
    /// the names set by [`RuntimeConfig::resolve`] answered first.
    pub resolver: crate::outbound::Resolver,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("plugins", &self.plugins)
            .field(
                "embedded",
                &self.embedded.iter().map(EmbeddedPlugin::name).collect::<Vec<_>>(),
            )
            .field("namespaces", &self.namespaces)
            .field("engine", &self.engine)
            .field("log_sink", &self.log_sink.is_some())
            .field("observer", &self.observer.is_some())
            .field("watch", &self.watch)
            .field("quiet", &self.quiet)
            .field("max_wait", &self.max_wait)
            .field("status_address", &self.status_address)
            .field("leader_election", &self.leader_election)
            .field("instance", &self.instance)
            .field("api_server", &self.api_server)
            .field("resolver", &self.resolver)
            .finish()
    }
}

impl RuntimeConfig {
    /// The plugins of `dir`, watched for changes, with no disk cache, and
    /// instances allocated on demand: no pool that one plugin's instances
    /// could use up for the others (each plugin is held to its own
    /// `limits.max-instances`).
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            plugins: Some(dir.into()),
            ..Self::default()
        }
    }

    /// Adds a plugin given in code ([`RuntimeConfig::embedded`]).
    #[must_use]
    pub fn plugin(mut self, plugin: EmbeddedPlugin) -> Self {
        self.embedded.push(plugin);
        self
    }

    /// Sets [`RuntimeConfig::leader_election`].
    #[must_use]
    pub fn leader_election(mut self, config: LeaderElectionConfig) -> Self {
        self.leader_election = Some(config);
        self
    }

    /// Sets [`RuntimeConfig::instance`].
    #[must_use]
    pub fn instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }

    /// Sets [`RuntimeConfig::api_server`] to the addresses the API server's
    /// URL resolves to (none when it does not resolve).
    #[must_use]
    pub fn api_server(mut self, url: &http::Uri) -> Self {
        self.api_server = crate::outbound::resolve_url(url);
        self
    }

    /// Answers the name `name` with `addresses` for plugins' outbound HTTP,
    /// before and instead of DNS, as an `/etc/hosts` line would. The
    /// addresses are checked as any others: a name pinned to a private
    /// address is refused unless a plugin's grant opens its network.
    #[must_use]
    pub fn resolve(mut self, name: &str, addresses: impl IntoIterator<Item = std::net::IpAddr>) -> Self {
        self.resolver = self.resolver.with_override(name, addresses);
        self
    }

    /// Sets [`RuntimeConfig::status_address`].
    #[must_use]
    pub fn status_address(mut self, address: std::net::SocketAddr) -> Self {
        self.status_address = Some(address);
        self
    }

    /// Sets [`RuntimeConfig::watch`].
    #[must_use]
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Adds `namespace` to [`RuntimeConfig::namespaces`].
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespaces.insert(namespace.into());
        self
    }

    /// Sets [`EngineOptions::cache_dir`].
    #[must_use]
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.engine.cache_dir = Some(dir.into());
        self
    }

    /// Sets [`RuntimeConfig::observer`].
    #[must_use]
    pub fn observer(mut self, observer: BatchObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Sets [`RuntimeConfig::log_sink`].
    #[must_use]
    pub fn log_sink(mut self, sink: LogSink) -> Self {
        self.log_sink = Some(sink);
        self
    }
}

impl Default for RuntimeConfig {
    /// No plugin directory and no plugins: add them with
    /// [`RuntimeConfig::plugin`], or later with [`Runtime::add_plugin`];
    /// otherwise as [`RuntimeConfig::new`].
    fn default() -> Self {
        Self {
            plugins: None,
            embedded: Vec::new(),
            engine: EngineOptions::default(),
            namespaces: std::collections::BTreeSet::new(),
            log_sink: None,
            observer: None,
            watch: true,
            quiet: Duration::from_millis(200),
            max_wait: Duration::from_secs(2),
            status_address: None,
            leader_election: None,
            instance: None,
            api_server: Vec::new(),
            resolver: crate::outbound::Resolver::default(),
        }
    }
}

/// Sees each batch a plugin is about to handle, with the plugin's name.
pub type BatchObserver = Arc<dyn Fn(&str, &[Delta]) + Send + Sync>;

/// The running plugins: those of a directory, and those an embedder gave.
pub struct Runtime {
    supervisor: Arc<Supervisor>,
    watcher: Option<tokio::task::JoinHandle<()>>,
    /// Rescans when a plugin's setting changes.
    settings_follower: tokio::task::JoinHandle<()>,
    /// Keeps the API server's addresses current for the plugins' outbound
    /// HTTP.
    api_server_follower: tokio::task::JoinHandle<()>,
    /// The leader election, when configured, and the task that starts and
    /// stops the writing plugins as leading starts and ends.
    election: Option<(LeaderElection, tokio::task::JoinHandle<()>)>,
    /// Where the status endpoint of [`RuntimeConfig::status_address`] listens.
    status_address: Option<std::net::SocketAddr>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("dir", &self.supervisor.dir)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts every plugin of the directory against the cluster `client` talks
    /// to, then (with [`RuntimeConfig::watch`]) follows the directory. Returns
    /// once every plugin was tried, as [`Runtime::rescan`] does; the status
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

    /// As [`Runtime::start`], with the plugins' informers taken from
    /// `factory`: an embedder that watches a resource through the same
    /// factory shares one list and watch with the plugins.
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

    /// As [`Runtime::start`], but returns once the plugins' loads began,
    /// without waiting for them: a program that must answer a stop signal at
    /// any moment (one plugin may take a minute to compile) waits for them
    /// with [`Runtime::rescan`] beside its signal, and on the signal calls
    /// [`Runtime::shutdown`], which ends the compiles still running.
    ///
    /// # Errors
    ///
    /// As [`Runtime::start`].
    pub async fn launch(client: kube::Client, config: RuntimeConfig) -> Result<Self, Error> {
        Self::launch_with(SharedInformerFactory::new(client), config).await
    }

    /// As [`Runtime::launch`], with the plugins' informers taken from
    /// `factory`, as [`Runtime::start_with`].
    ///
    /// # Errors
    ///
    /// As [`Runtime::start_with`].
    pub async fn launch_with(factory: SharedInformerFactory, config: RuntimeConfig) -> Result<Self, Error> {
        let engine = PluginEngine::with_options(&config.engine)?;
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
        let settings_follower = {
            let weak = Arc::downgrade(&supervisor);
            let changed = Arc::clone(&supervisor.settings.changed);
            tokio::spawn(async move {
                loop {
                    changed.notified().await;
                    let Some(supervisor) = weak.upgrade() else { break };
                    drop(supervisor.rescan().await);
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
                                drop(supervisor.rescan().await);
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
        let mut runtime = Self {
            supervisor,
            watcher,
            settings_follower,
            api_server_follower,
            election,
            status_address: None,
        };
        if let Some(address) = config.status_address {
            let bound = runtime
                .serve_status(address)
                .await
                .map_err(|source| Error::Status { address, source })?;
            runtime.status_address = Some(bound);
        }
        drop(runtime.supervisor.rescan().await);
        Ok(runtime)
    }

    /// Runs `plugin` beside the directory's plugins (instead of a directory
    /// file of the same name), and returns once it was tried, as
    /// [`Runtime::rescan`] does. A plugin of the same name added before is
    /// replaced as a changed file is: its new version is loaded beside the
    /// running one and swapped in between two batches.
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

    /// Drains and unloads the embedder's plugin `name`; false when there is
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

    /// Brings the running plugins in line with the directory (and the
    /// embedder's plugins) now: loads new
    /// files, reloads changed files and manifests, unloads removed files, and
    /// returns once each plugin of the directory was tried (each load is
    /// bounded by its plugin's limits, and the plugins load side by side). The
    /// directory watch does this by itself without waiting; call it to apply a
    /// change at once.
    pub async fn rescan(&self) {
        for load in self.supervisor.rescan().await {
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
        self.settings_follower.abort();
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

/// How long [`Runtime::shutdown`] waits for the workers to finish their calls.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

impl Drop for Runtime {
    /// Stops without releasing a Lease it holds, as a replica that dies does:
    /// the Lease expires.
    fn drop(&mut self) {
        self.settings_follower.abort();
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
