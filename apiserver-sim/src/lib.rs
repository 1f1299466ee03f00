//! An embedded Kubernetes API server emulation, for demos, tests and benchmarks.
//!
//! [`ApiServer::start`] serves the Kubernetes REST API over real HTTP on a loopback
//! port: discovery (legacy and aggregated, `apidiscovery.k8s.io/v2`),
//! get/list/watch/create/update/patch/delete/deletecollection,
//! the `status` and `scale` subresources, server-side apply, `dryRun=All`,
//! label and field selectors, paging with continue tokens, a cluster-wide
//! `resourceVersion` with a compaction window (older versions answer 410 Gone),
//! watch bookmarks and streaming lists (`sendInitialEvents`), and metadata-only
//! answers (`PartialObjectMetadata`) when the `Accept` header asks for them, OpenAPI v2
//! and v3 documents (so kubectl validates, applies and explains with its defaults), and
//! the health endpoints and `/metrics`. Built-in objects are defaulted as kube-apiserver
//! defaults them, and custom resources checked in full against their CRD's schema, CEL
//! rules included. kube-rs clients and `kubectl` talk to it as to a cluster.
//!
//! Beside it run the controllers a workload needs ([`SimConfig::controllers`],
//! on by default): a Deployment written by anyone gets a ReplicaSet and pods,
//! which start [`SimConfig::pod_start_delay`] later, and the statuses follow,
//! with revisions and Events; the dependents of a deleted Deployment or
//! ReplicaSet are deleted; every namespace gets its `default` ServiceAccount
//! and `kube-root-ca.crt` ConfigMap; PodDisruptionBudgets get their status.
//!
//! The resource metrics API, `metrics.k8s.io/v1beta1`, is served as
//! metrics-server serves it behind the aggregator, so that `kubectl top` and an
//! HPA controller read pod and node usage from it: `PodMetrics` and
//! `NodeMetrics`, get and list only (no watch, no writes: 405), and 503 while
//! [`Metrics::set_available`] has it down. The usage is in no object: it is a
//! table beside the store ([`ApiServer::metrics`]), set by the workload, by the
//! ReplicaSet controller for new pods, and by tests ([`Metrics::set_pod_cpu`]).
//!
//! Requests are authenticated, impersonated and authorized as kube-apiserver
//! does it: a bearer token the server issued (a TokenRequest) is its
//! service account, any other credential the kubeconfig's admin (in
//! `system:masters`); the `Impersonate-*` headers need the `impersonate`
//! verb; and what is not the admin's gets what the stored Roles,
//! ClusterRoles and bindings grant, and kube-apiserver's `403` otherwise.
//! The access reviews (`kubectl auth can-i`, `--list`) answer from the same
//! rules.
//!
//! No kubelet runs: pod logs, exec, attach, port-forward and node proxy are
//! answered as when the kubelet refuses the connection, and
//! `componentstatuses` reports the scheduler and controller manager
//! unreachable, as kube-apiserver's probes would.
//!
//! [`Faults`] injects what real clusters do to clients: dropped watches, 410s,
//! 429/500 answers, hung watches and latency. [`workload::Workload`] generates a
//! seeded synthetic cluster workload, whose CPU load is random or rises and falls
//! in phases ([`workload::Load`]).
//!
//! # Writes as a real server takes them
//!
//! - The `scale` subresource of `apps/v1` Deployments, ReplicaSets and
//!   StatefulSets (and of CRDs that declare one) reads and writes an
//!   `autoscaling/v1` `Scale`, through to the object's `spec.replicas`.
//! - Server-side apply (`application/apply-patch+yaml`, with the JSON that
//!   kube-rs and kubectl send) needs a `fieldManager` (422 without), creates a
//!   missing object, and records the applied fields in `metadata.managedFields`
//!   as an `Apply` entry. Changing a field another manager owns is a 409
//!   conflict unless `force=true`; a field the manager stops applying is removed.
//!   Lists are atomic and the configuration is merged as a merge patch; a real
//!   server merges keyed lists such as `containers` item by item.
//! - Any other write with a `fieldManager` is recorded as an `Update` entry owning
//!   the fields it changed; without one, ownership stays as it was.
//! - `dryRun=All` on a create, update, patch, apply, delete or subresource write
//!   is checked exactly as the write and answered with the object as it would be;
//!   nothing is stored, no resourceVersion is used, no watch sees it. Any other
//!   `dryRun` value is 422, as the API server's options validation answers.
//! - Events are served as `v1` and as `events.k8s.io/v1` from one storage,
//!   as kube-apiserver serves them: an Event written through either API is
//!   read, listed, watched and deleted through both, converted (see
//!   [`Conversion`]).
//!
//! # Examples
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use apiserver_sim::{ApiServer, SimConfig};
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::api::{Api, PostParams};
//!
//! let server = ApiServer::start(SimConfig::default()).await?;
//! let client = kube::Client::try_from(server.client_config())?;
//! let configmaps: Api<ConfigMap> = Api::namespaced(client, "default");
//! let mut cm = ConfigMap::default();
//! cm.metadata.name = Some("settings".into());
//! configmaps.create(&PostParams::default(), &cm).await?;
//! server.faults().close_watches();
//! # Ok(()) }
//! ```

mod access_review;
mod auth;
mod component_status;
mod controllers;
mod conversion;
mod defaults;
mod encoding;
mod faults;
mod health;
mod http;
mod kubelet_api;
pub mod metrics;
mod negotiation;
mod openapi;
mod printers;
mod protobuf;
pub mod resources;
mod schemas;
pub mod status;
pub mod store;
mod token;
mod watch;
pub mod workload;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::serve::ListenerExt as _;
use serde::Serialize;

pub use conversion::Conversion;
pub use faults::{FaultCounts, Faults};
pub use metrics::{Metrics, Usage};
pub use resources::ResourceDef;
use store::{ResourceId, Store};

/// Settings of an emulated server.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// The loopback port; 0 picks a free one.
    pub port: u16,
    /// Events kept per resource; a watch or exact list older than that gets 410.
    pub compaction_window: usize,
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// Runs the Deployment and ReplicaSet controllers, their garbage collection
    /// and a kubelet stand-in beside the server (on by default), so Deployments
    /// written by anyone get ReplicaSets and running pods, and their status.
    /// Without them, Deployments are stored as written and nothing else happens.
    pub controllers: bool,
    /// How long the kubelet stand-in takes to start a new pod of a ReplicaSet.
    pub pod_start_delay: Duration,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            port: 0,
            compaction_window: 100_000,
            bookmark_interval: Duration::from_secs(5),
            controllers: true,
            pod_start_delay: Duration::from_millis(500),
        }
    }
}

impl SimConfig {
    /// Sets [`SimConfig::port`].
    #[must_use]
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Sets [`SimConfig::compaction_window`].
    #[must_use]
    pub fn compaction_window(mut self, events: usize) -> Self {
        self.compaction_window = events;
        self
    }

    /// Sets [`SimConfig::bookmark_interval`].
    #[must_use]
    pub fn bookmark_interval(mut self, interval: Duration) -> Self {
        self.bookmark_interval = interval;
        self
    }

    /// Sets [`SimConfig::controllers`].
    #[must_use]
    pub fn controllers(mut self, run: bool) -> Self {
        self.controllers = run;
        self
    }

    /// Sets [`SimConfig::pod_start_delay`].
    #[must_use]
    pub fn pod_start_delay(mut self, delay: Duration) -> Self {
        self.pod_start_delay = delay;
        self
    }
}

/// What the handlers share.
pub(crate) struct Shared {
    pub(crate) store: Store,
    pub(crate) faults: Faults,
    pub(crate) stats: Stats,
    pub(crate) bookmark_interval: Duration,
    pub(crate) address: SocketAddr,
    /// Signs the service account tokens this server issues.
    pub(crate) tokens: token::TokenKey,
    /// The OpenAPI documents of what is served.
    pub(crate) openapi: openapi::Documents,
    /// Set when the server stops: watches and workloads end.
    pub(crate) stopping: tokio::sync::watch::Sender<bool>,
}

impl Shared {
    /// Decides what a user may do: the forbid rules, then RBAC.
    pub(crate) fn authorizer(&self) -> auth::Authorizer<'_> {
        auth::Authorizer {
            store: &self.store,
            faults: &self.faults,
        }
    }
}

/// Request and watch counters.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    requests: AtomicU64,
    /// Requests by verb, resource and code, as `/metrics` counts them.
    pub(crate) by_request: health::Requests,
    watches_opened: Mutex<HashMap<String, u64>>,
    pub(crate) watches_open: Mutex<HashMap<String, u64>>,
    /// Resource requests by resource (as [`stat_name`] names it) and
    /// namespace, allowed or refused.
    by_resource: Mutex<HashMap<(String, String), u64>>,
}

impl Stats {
    pub(crate) fn request(&self) {
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a request on `id` in `namespace`, before it is authorized.
    pub(crate) fn resource_request(&self, id: &ResourceId, namespace: &str) {
        *lock(&self.by_resource)
            .entry((stat_name(id), namespace.to_owned()))
            .or_default() += 1;
    }

    pub(crate) fn watch_opened(&self, id: &ResourceId) {
        let name = stat_name(id);
        *lock(&self.watches_opened).entry(name.clone()).or_default() += 1;
        *lock(&self.watches_open).entry(name).or_default() += 1;
    }

    pub(crate) fn watch_closed(&self, id: &ResourceId) {
        if let Some(open) = lock(&self.watches_open).get_mut(&stat_name(id)) {
            *open = open.saturating_sub(1);
        }
    }
}

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn stat_name(id: &ResourceId) -> String {
    if id.group.is_empty() {
        id.plural.clone()
    } else {
        format!("{}.{}", id.plural, id.group)
    }
}

/// A snapshot of the server's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerStats {
    /// API requests served (discovery included).
    pub requests: u64,
    /// Watches ever opened, by resource (`pods`, `deployments.apps`).
    pub watches_opened: HashMap<String, u64>,
    /// Watches open now, by resource.
    pub watches_open: HashMap<String, u64>,
    /// The cluster-wide resourceVersion.
    pub resource_version: u64,
    /// The faults injected so far.
    pub faults: FaultCounts,
}

/// A running emulated API server. Dropping it stops the server.
pub struct ApiServer {
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    /// The task serving HTTP, until it ends.
    serving: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("address", &self.shared.address)
            .finish_non_exhaustive()
    }
}

impl ApiServer {
    /// Starts serving on `127.0.0.1`, with the built-in resources, the
    /// `default`, `kube-system` and `kube-public` namespaces, the
    /// `default/kubernetes` Service and an `APIService` per served group
    /// version.
    ///
    /// # Errors
    ///
    /// When the port cannot be bound.
    pub async fn start(config: SimConfig) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port)).await?;
        let address = listener.local_addr()?;
        let store = Store::new(resources::built_in(), config.compaction_window);
        defaults::create(&store, address.port()).expect("a fresh store takes a fresh cluster's objects");
        // Taken before any workload writes, so the controllers see every change.
        let changes = config.controllers.then(|| {
            store.feed(vec![
                resources::ids::namespaces(),
                resources::ids::deployments(),
                resources::ids::replicasets(),
                resources::ids::pods(),
                resources::ids::disruption_budgets(),
            ])
        });
        let shared = Arc::new(Shared {
            store,
            faults: Faults::default(),
            stats: Stats::default(),
            bookmark_interval: config.bookmark_interval,
            address,
            tokens: token::TokenKey::random(),
            openapi: openapi::Documents::default(),
            stopping: tokio::sync::watch::channel(false).0,
        });
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = http::router(Arc::clone(&shared));
        // Go's net package, and so kube-apiserver, turns Nagle's algorithm off
        // on every connection. With it on, the last small write of a burst
        // (the end of a watch event, a bookmark) waits for the client's
        // delayed acknowledgement, up to 40 ms.
        let listener = listener.tap_io(|stream| {
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, "TCP_NODELAY not set on a connection");
            }
        });
        let serving = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            if let Err(error) = serve.await {
                tracing::error!(%error, "emulated API server stopped");
            }
        });
        if let Some(changes) = changes {
            tokio::spawn(controllers::run(Arc::clone(&shared), changes, config.pod_start_delay));
        }
        tracing::info!(%address, "emulated API server listening");
        Ok(Self {
            shared,
            shutdown: Some(shutdown),
            serving: Some(serving),
        })
    }

    /// The address it listens on.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.shared.address
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("http://{}", self.shared.address)
    }

    /// A kube-rs client configuration pointing at this server, default namespace
    /// `default`.
    ///
    /// # Panics
    ///
    /// Never: the URL is always valid.
    #[must_use]
    pub fn client_config(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url().parse().expect("a valid URL"));
        config.default_namespace = "default".into();
        config
    }

    /// A kubeconfig file's content for this server (for `kubectl`).
    #[must_use]
    pub fn kubeconfig(&self) -> String {
        self.kubeconfig_with_user("{}")
    }

    /// [`ApiServer::kubeconfig`] for a client that sends a bearer token: the
    /// server takes any, and [`Faults::cut_off`] tells clients apart by it.
    #[must_use]
    pub fn kubeconfig_with_token(&self, token: &str) -> String {
        self.kubeconfig_with_user(&format!("{{token: {token:?}}}"))
    }

    fn kubeconfig_with_user(&self, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kinformer-sim\n  cluster:\n    server: {url}\n\
             contexts:\n- name: kinformer-sim\n  context:\n    cluster: kinformer-sim\n    user: kinformer-sim\n    namespace: default\n\
             current-context: kinformer-sim\nusers:\n- name: kinformer-sim\n  user: {user}\n",
            url = self.url()
        )
    }

    /// Writes [`ApiServer::kubeconfig`] to `path`.
    ///
    /// # Errors
    ///
    /// When the file cannot be written.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig())
    }

    /// The object store, for writing the way the cluster itself does (workloads,
    /// controllers; see [`store::Store::transaction`] for several steps no other
    /// writer interleaves with) and for checking what it holds.
    #[must_use]
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// The fault switches.
    #[must_use]
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// The pods' resource usage that `metrics.k8s.io` serves, and the switch
    /// that takes that API down; see [`Metrics`].
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        self.shared.store.metrics()
    }

    /// Serves another resource type (as registering a CRD does).
    pub fn register(&self, def: ResourceDef) {
        self.shared.store.register(def);
    }

    /// Creates the workload's objects, then keeps changing them at its rate in a
    /// background task until the returned handle is aborted or the server stops.
    ///
    /// The pods it scales up or replaces start through the server's controllers
    /// (see [`SimConfig::controllers`]); without them they stay pending.
    ///
    /// # Errors
    ///
    /// When the store refuses the initial objects.
    pub fn start_workload(&self, workload: &workload::Workload) -> status::Result<tokio::task::JoinHandle<()>> {
        let churn = workload.populate(&self.shared.store)?;
        let shared = Arc::clone(&self.shared);
        let mut stopped = self.shared.stopping.subscribe();
        Ok(tokio::spawn(async move {
            tokio::select! {
                () = churn.run(shared) => {}
                _ = stopped.changed() => {}
            }
        }))
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> ServerStats {
        server_stats(&self.shared)
    }

    /// How many requests were made on `resource` (`services`,
    /// `endpointslices.discovery.k8s.io`: plural, then group, as
    /// [`ServerStats::watches_opened`] names them) in `namespace` (`""`:
    /// across all namespaces, or a cluster-scoped resource), whatever their
    /// verb or subresource, and whether they were allowed or refused.
    #[must_use]
    pub fn requests_on(&self, resource: &str, namespace: &str) -> u64 {
        lock(&self.shared.stats.by_resource)
            .get(&(resource.to_owned(), namespace.to_owned()))
            .copied()
            .unwrap_or_default()
    }

    /// Stops serving; open watches end.
    pub fn shutdown(mut self) {
        self.stop();
    }

    /// Stops serving, waits until every connection has ended, and frees the
    /// store before returning. A store that logged a long churn holds many
    /// objects, and freeing them takes seconds of CPU: after `close`, that
    /// work is done rather than running beside whatever comes next.
    ///
    /// Workloads started with [`ApiServer::start_workload`] stop too; a
    /// task that still holds the server's state past that frees it when it
    /// ends.
    pub async fn close(mut self) {
        self.stop();
        if let Some(serving) = self.serving.take() {
            let _ = serving.await;
        }
        // Workload and controller tasks let go of the state when they see
        // the server stopping; give them a second.
        for _ in 0..100 {
            if Arc::strong_count(&self.shared) == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let _ = tokio::task::spawn_blocking(move || drop(self)).await;
    }

    fn stop(&mut self) {
        self.shared.stopping.send_replace(true);
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) fn server_stats(shared: &Shared) -> ServerStats {
    ServerStats {
        requests: shared.stats.requests.load(Ordering::Relaxed),
        watches_opened: lock(&shared.stats.watches_opened).clone(),
        watches_open: lock(&shared.stats.watches_open).clone(),
        resource_version: shared.store.resource_version(),
        faults: shared.faults.counts(),
    }
}
