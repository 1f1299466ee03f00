//! What a [`Runtime`](super::Runtime) runs and how: [`RuntimeConfig`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::EmbeddedPlugin;
use crate::delta::Delta;
use crate::leader::LeaderElectionConfig;
use crate::plugin::{EngineOptions, LogSink};

/// What a runtime runs, and how.
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
    /// [`Runtime::status_address`](super::Runtime::status_address)).
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
    /// Run the `Handler`s and `ClusterHandler`s of the cluster as plugins
    /// ([`crate::handlers`]): their CRDs must be installed
    /// ([`crate::handlers::CRDS`]).
    pub handlers: bool,
    /// The bounds on tenants' (namespaced) Handlers
    /// ([`crate::handlers::policy`]); by default only that none reaches
    /// outside the cluster.
    pub tenant_policy: crate::handlers::TenantPolicy,
    /// How Handlers' OCI modules are pulled; their disk cache is
    /// `modules/` of the engine's `cache_dir` unless this names one.
    pub pull: crate::handlers::oci::PullConfig,
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
            .field("handlers", &self.handlers)
            .field("tenant_policy", &self.tenant_policy)
            .field("pull", &self.pull)
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

    /// Sets [`RuntimeConfig::handlers`].
    #[must_use]
    pub fn handlers(mut self, handlers: bool) -> Self {
        self.handlers = handlers;
        self
    }

    /// Sets [`RuntimeConfig::tenant_policy`].
    #[must_use]
    pub fn tenant_policy(mut self, policy: crate::handlers::TenantPolicy) -> Self {
        self.tenant_policy = policy;
        self
    }

    /// Sets [`RuntimeConfig::pull`].
    #[must_use]
    pub fn pull(mut self, pull: crate::handlers::oci::PullConfig) -> Self {
        self.pull = pull;
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
    /// [`RuntimeConfig::plugin`], or later with [`Runtime::add_plugin`](super::Runtime::add_plugin);
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
            handlers: false,
            tenant_policy: crate::handlers::TenantPolicy::default(),
            pull: crate::handlers::oci::PullConfig::default(),
        }
    }
}

/// Sees each batch a plugin is about to handle, with the plugin's name.
pub type BatchObserver = Arc<dyn Fn(&str, &[Delta]) + Send + Sync>;
