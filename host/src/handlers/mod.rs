//! Handlers as resources: the cluster's `Handler`s (namespaced, a tenant's)
//! and `ClusterHandler`s (the platform team's), run as plugins of the
//! runtime, their status written back.
//!
//! For each object, in this order (the first that fails is its `Rejected`
//! condition, and no plugin runs for it):
//!
//! 1. its plugin name: `NAMESPACE.NAME` for a Handler (namespaces hold no
//!    dot, so two namespaces never collide), `NAME` for a ClusterHandler
//!    (which may then hold no dot); never ending in `.next`, the suffix of a
//!    next version;
//! 2. its module: a ConfigMap key of `binaryData`, or an OCI artifact
//!    `module.oci` pulled by digest ([`oci`]) with the credentials of
//!    `module.pullSecret` (a Handler's both in its own namespace);
//! 3. a Handler's confinement ([`spec::confine`]), discovery saying which
//!    kinds are cluster-scoped;
//! 4. its manifest, parsed as a manifest file is ([`spec::manifest`]);
//! 5. its module's bytes, within the manifest's `module-mib`.
//!
//! A pull runs in the background, one per reference, so a slow registry
//! never holds up the other objects: the object reads `Pulling` until it
//! ends. Its result is taken only by an object whose spec still names that
//! reference, so a changed or deleted Handler never loads the module it
//! named before. A registry that does not answer is `PullFailed` and tried
//! again with back-off, what runs running on; a refused pull (`TagRefused`,
//! `DigestMismatch`, no Wasm layer, too large) unloads the plugin and is not
//! made again until what it is made from changes (the reference, the pull
//! secret, `limits.moduleMib`, the ServiceAccount).
//!
//! A Handler then runs as its ServiceAccount (`spec.serviceAccountName`,
//! `default` when unset) by impersonation ([`crate::grant::Identity`]); a
//! ClusterHandler as the host. A changed spec or module is the plugin's next
//! version; a deleted object, or one now refused, unloads it.
//!
//! When the API server does not answer (a ConfigMap read, discovery), what
//! runs keeps running and the object is tried again at the next period: only
//! a refusal unloads a plugin.
//!
//! The objects are watched (a reflector per kind); every [`PERIOD`] each is
//! compared with what runs, its module read again once its spec changed or
//! [`MODULE_RECHECK`] passed, and its status patched when it differs from
//! the object's as the API server stores it (so a status someone else wrote
//! is written over), only over the object's version it was made from, with
//! an Event when its reason changed. What the host does for tenants is
//! bounded:
//!
//! - a status is written only when it would change what the server keeps,
//!   at most once a [`PERIOD`] per object, and when only its counts changed
//!   at most once a [`COUNTS_INTERVAL`]; status writes and Events together
//!   take tokens of one host-wide budget ([`WRITES_PER_SECOND`]), and an
//!   Event of a reason an object had within [`EVENT_REPEAT`] is not sent
//!   again (client-go's EventCorrelator aggregates repeats the same way);
//! - discovery is asked once per distinct kind, its answers kept for
//!   [`DISCOVERY_TTL`] and a kind it does not serve for
//!   [`DISCOVERY_MISS_TTL`];
//! - a refusal is logged once, when it changes;
//! - a Handler never takes a plugin name the plugin directory or the
//!   embedder holds ([`Refusal::Taken`]).

pub mod oci;
pub mod policy;
pub mod spec;
pub mod status;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt as _, reflector, watcher};
use serde_json::{Value, json};

use crate::grant::Identity;
use crate::manifest::Manifest;
use crate::runtime::{EmbeddedPlugin, Plugins};
use oci::{Credentials, PullError, Pulled, Puller};
pub use policy::{PolicyError, TenantPolicy};
use spec::{ModuleSource, Refusal};
use status::Observed;

/// The `Handler` and `ClusterHandler` CustomResourceDefinitions
/// (`deploy/crds/handlers.yaml`), as `kinformer crds` prints them.
pub const CRDS: &str = include_str!("../../../deploy/crds/handlers.yaml");

/// The API group of Handlers.
pub const GROUP: &str = "kinformer.dev";
/// Their version.
pub const VERSION: &str = "v1alpha1";

/// How often the objects are compared with what runs.
pub const PERIOD: Duration = Duration::from_secs(1);
/// How often a module's ConfigMap is read again (and a tag resolved again)
/// when its Handler did not change.
pub const MODULE_RECHECK: Duration = Duration::from_secs(10);
/// The shortest time between two writes of one object's status when only
/// its counts (`deltas`, `errors`) changed.
pub const COUNTS_INTERVAL: Duration = Duration::from_secs(30);
/// The host-wide budget of status writes and Events, per second (and twice
/// as many in a burst).
pub const WRITES_PER_SECOND: u32 = 50;
/// How long an object's Event of one reason holds back another of the same
/// reason.
pub const EVENT_REPEAT: Duration = Duration::from_secs(600);
/// How long discovery's answer for a kind is kept.
pub const DISCOVERY_TTL: Duration = Duration::from_secs(300);
/// How long discovery's "not served" for a kind is kept.
pub const DISCOVERY_MISS_TTL: Duration = Duration::from_secs(30);
/// The longest wait before a failed pull is tried again.
const PULL_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The two kinds of Handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Handler,
    ClusterHandler,
}

impl Kind {
    fn resource(self) -> ApiResource {
        let (kind, plural) = match self {
            Self::Handler => ("Handler", "handlers"),
            Self::ClusterHandler => ("ClusterHandler", "clusterhandlers"),
        };
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural)
    }
}

/// One object, by kind, namespace and name.
type Key = (Kind, Option<String>, String);

/// Why what should run for an object is not known now.
enum Unknown {
    /// It is refused: nothing runs for it.
    Refused(Refusal),
    /// The API server did not answer (a ConfigMap read, discovery): what
    /// runs keeps running, and it is asked again at the next period.
    Unavailable(String),
    /// Its module (the reference) is being pulled, or its last pull failed
    /// for now ([`PullError::is_transient`]) and it is tried again: what
    /// runs keeps running.
    Pulling(String, Option<PullError>),
}

impl Unknown {
    /// A pull of `reference` under way or waiting to be tried again, its
    /// last attempt `failed`: a refusal stays one until a pull succeeds.
    fn retrying(reference: &str, failed: Option<PullError>) -> Self {
        match failed {
            Some(error) if !error.is_transient() => Self::Refused(Refusal::Pull(error)),
            failed => Self::Pulling(reference.to_owned(), failed),
        }
    }
}

impl From<Refusal> for Unknown {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// What the controller knows of one object.
struct Tracked {
    plugin: String,
    generation: i64,
    module_read: tokio::time::Instant,
    /// What runs for it: the module's digest and the manifest.
    running: Option<(String, Manifest)>,
    refusal: Option<Refusal>,
    /// Its module's pull, while one is under way or failed for now.
    pulling: Option<(String, Option<PullError>)>,
    /// The status last patched.
    status: Value,
    reason: &'static str,
    /// When its status was last written, and the object's version it was
    /// written over (until the watch shows a newer one, the object read is
    /// older than the write).
    written: Option<(tokio::time::Instant, Option<String>)>,
    /// When an Event of each reason was last sent for it.
    events: BTreeMap<&'static str, tokio::time::Instant>,
}

/// The pulls of one reference with one pull secret ([`pull_key`]), shared
/// by the objects naming them: one per tenant namespace, and one for
/// ClusterHandlers (and tenants, when the policy shares the cache). A
/// tenant's pull proves that its own credentials reach the manifest, so no
/// namespace takes another's result.
#[derive(Default)]
struct Pull {
    by_tenant: BTreeMap<Option<String>, Attempt>,
}

impl Pull {
    /// The attempt of `tenant`, made from `inputs` from now on.
    fn attempt(&mut self, tenant: &Option<String>, inputs: &PullInputs, now: tokio::time::Instant) -> &mut Attempt {
        let attempt = self
            .by_tenant
            .entry(tenant.clone())
            .or_insert_with(|| Attempt::new(now, inputs.clone()));
        attempt.inputs = inputs.clone();
        attempt
    }
}

/// What a pull was made from, besides its reference and pull secret: the
/// limit on the module and the account reading the secret, both of the
/// Handler's spec.
type PullInputs = (u64, Option<String>);

/// One tenant's pull of a reference: under way, waiting to be tried again
/// after a failure, or refused.
struct Attempt {
    /// Under way, when it is.
    task: Option<tokio::task::JoinHandle<Result<Pulled, PullError>>>,
    /// The last attempt's error.
    failed: Option<PullError>,
    attempts: u32,
    /// When to try again after a failure for now.
    retry_at: tokio::time::Instant,
    /// What the last attempt was made from.
    inputs: PullInputs,
}

impl Attempt {
    fn new(now: tokio::time::Instant, inputs: PullInputs) -> Self {
        Self {
            task: None,
            failed: None,
            attempts: 0,
            retry_at: now,
            inputs,
        }
    }

    /// The refusal of the last attempt, when none is under way and it was
    /// made from `inputs`: a refused pull is not tried again until the spec
    /// changes what it is made from (the policy is the host's, fixed while
    /// it runs).
    fn refused(&self, inputs: &PullInputs) -> Option<PullError> {
        self.failed
            .as_ref()
            .filter(|error| self.task.is_none() && !error.is_transient() && self.inputs == *inputs)
            .cloned()
    }

    /// Records a failed attempt: its error, and when to try again after one
    /// for now (doubling from 2 s to [`PULL_BACKOFF_MAX`]). What the object
    /// reads until then.
    fn fail(&mut self, reference: &str, error: PullError, now: tokio::time::Instant) -> Unknown {
        if error.is_transient() {
            self.attempts = self.attempts.saturating_add(1);
            let backoff = Duration::from_secs(1 << self.attempts.min(6)).min(PULL_BACKOFF_MAX);
            self.retry_at = now + backoff;
            tracing::warn!(reference = %reference, error = %error, retry_in = ?backoff, "a module's pull failed");
        } else {
            tracing::warn!(reference = %reference, error = %error, "a module's pull was refused; not tried again until its Handler changes");
        }
        self.failed = Some(error.clone());
        Unknown::retrying(reference, Some(error))
    }
}

impl Drop for Attempt {
    /// A pull nobody waits for any more ends.
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Runs the cluster's Handlers as `plugins`, tenants' bounded by `policy`,
/// until dropped, pulling their OCI modules as `pull` says over connections
/// of `dialer` (with the policy's `[registries] networks` opened); `instance`
/// names this host in their Events.
pub(crate) async fn run(
    client: kube::Client,
    plugins: Plugins,
    instance: String,
    policy: TenantPolicy,
    pull: oci::PullConfig,
    dialer: crate::outbound::Dialer,
) {
    let puller = Puller::new(pull, dialer.with_networks(policy.registry_networks().iter().copied()));
    let mut watches = tokio::task::JoinSet::new();
    let stores: Vec<(Kind, reflector::Store<DynamicObject>)> = [Kind::Handler, Kind::ClusterHandler]
        .into_iter()
        .map(|kind| {
            let resource = kind.resource();
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let writer = reflector::store::Writer::new(resource);
            let store = writer.as_reader();
            let stream = reflector(
                writer,
                watcher(api, watcher::Config::default()).backoff(crate::retry::Backoff::default()),
            );
            watches.spawn(stream.for_each(|_| std::future::ready(())));
            (kind, store)
        })
        .collect();
    let mut controller = Controller {
        client: client.clone(),
        plugins,
        recorder: Recorder::new(
            client,
            Reporter {
                controller: "kinformer".to_owned(),
                instance: Some(instance),
            },
        ),
        tracked: BTreeMap::new(),
        scopes: BTreeMap::new(),
        writes: crate::rate::TokenBucket::new(f64::from(WRITES_PER_SECOND), WRITES_PER_SECOND * 2),
        policy,
        puller,
        pulls: BTreeMap::new(),
    };
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let objects: Vec<(Kind, std::sync::Arc<DynamicObject>)> = stores
            .iter()
            .flat_map(|(kind, store)| store.state().into_iter().map(move |object| (*kind, object)))
            .collect();
        controller.step(&objects).await;
    }
}

struct Controller {
    client: kube::Client,
    plugins: Plugins,
    recorder: Recorder,
    tracked: BTreeMap<Key, Tracked>,
    /// Discovery's answers: is `apiVersion/Kind` cluster-scoped (`None`:
    /// not served), and until when the answer holds.
    scopes: BTreeMap<String, (Option<bool>, tokio::time::Instant)>,
    /// The host-wide budget of status writes and Events.
    writes: crate::rate::TokenBucket,
    policy: TenantPolicy,
    puller: Puller,
    /// The pulls by reference and pull secret ([`pull_key`]), each by
    /// tenant.
    pulls: BTreeMap<String, Pull>,
}

impl Controller {
    /// Brings the plugins in line with `objects`, and their status with the
    /// plugins.
    async fn step(&mut self, objects: &[(Kind, std::sync::Arc<DynamicObject>)]) {
        let mut seen = std::collections::BTreeSet::new();
        let over_quota = self.over_quota(objects);
        for (kind, object) in objects {
            let key = (
                *kind,
                object.metadata.namespace.clone(),
                object.metadata.name.clone().unwrap_or_default(),
            );
            seen.insert(key.clone());
            let quota = over_quota.get(&key).cloned();
            self.reconcile(key, object, quota).await;
        }
        let gone: Vec<Key> = self
            .tracked
            .keys()
            .filter(|key| !seen.contains(*key))
            .cloned()
            .collect();
        for key in gone {
            if let Some(tracked) = self.tracked.remove(&key) {
                tracing::info!(plugin = %tracked.plugin, "its Handler was deleted; unloading");
                self.plugins.remove(&tracked.plugin).await;
            }
        }
        // Pulls no object names now are dropped, their results unread.
        let wanted: std::collections::BTreeSet<String> = objects
            .iter()
            .filter_map(|(_, object)| {
                let spec = object.data.get("spec")?;
                spec::module(spec, object.metadata.namespace.as_deref()).ok()
            })
            .filter_map(|source| pull_key(&source))
            .collect();
        self.pulls.retain(|key, _| wanted.contains(key));
        let running = self
            .tracked
            .values()
            .filter_map(|tracked| tracked.running.as_ref().map(|(digest, _)| digest.clone()))
            .collect();
        self.puller.retain(&running);
    }

    /// The Handlers of each namespace past the policy's `per-namespace`,
    /// oldest kept, with their refusal.
    fn over_quota(&self, objects: &[(Kind, std::sync::Arc<DynamicObject>)]) -> BTreeMap<Key, Refusal> {
        let Some(allowed) = self.policy.per_namespace() else {
            return BTreeMap::new();
        };
        let mut by_namespace: BTreeMap<&str, Vec<&DynamicObject>> = BTreeMap::new();
        for (kind, object) in objects {
            if let (Kind::Handler, Some(namespace)) = (kind, &object.metadata.namespace) {
                by_namespace.entry(namespace).or_default().push(object);
            }
        }
        let mut over = BTreeMap::new();
        for (namespace, mut handlers) in by_namespace {
            handlers.sort_by_key(|object| (object.metadata.creation_timestamp.clone(), object.metadata.name.clone()));
            for object in handlers.into_iter().skip(allowed) {
                let key = (
                    Kind::Handler,
                    Some(namespace.to_owned()),
                    object.metadata.name.clone().unwrap_or_default(),
                );
                over.insert(
                    key,
                    Refusal::Quota {
                        namespace: namespace.to_owned(),
                        allowed,
                    },
                );
            }
        }
        over
    }

    async fn reconcile(&mut self, key: Key, object: &DynamicObject, quota: Option<Refusal>) {
        let generation = object.metadata.generation.unwrap_or_default();
        let now = tokio::time::Instant::now();
        let due = self.tracked.get(&key).is_none_or(|tracked| {
            let quota_changed = match (&quota, &tracked.refusal) {
                (Some(_), refusal) => refusal != &quota,
                (None, refusal) => matches!(refusal, Some(Refusal::Quota { .. })),
            };
            quota_changed
                || tracked.generation != generation
                || tracked.pulling.is_some()
                || now.duration_since(tracked.module_read) >= MODULE_RECHECK
        });
        if due {
            let plugin = plugin_name(&key);
            let desired = match (&plugin, &quota) {
                (Err(refusal), _) | (Ok(_), Some(refusal)) => Err(Unknown::Refused(refusal.clone())),
                (Ok(plugin), None) => self.desired(&key, plugin, object).await,
            };
            if let Err(Unknown::Unavailable(why)) = &desired {
                tracing::warn!(handler = %key.2, why = %why, "cannot read a Handler's module or kinds now; asking again");
                self.report(&key, object, generation).await;
                return;
            }
            let plugin = plugin.unwrap_or_else(|_| key.2.clone());
            let tracked = self.tracked.entry(key.clone()).or_insert_with(|| Tracked {
                plugin: plugin.clone(),
                generation,
                module_read: now,
                running: None,
                refusal: None,
                pulling: None,
                status: object.data.get("status").cloned().unwrap_or(Value::Null),
                reason: "",
                written: None,
                events: BTreeMap::new(),
            });
            tracked.generation = generation;
            tracked.module_read = now;
            match desired {
                Ok((bytes, digest, manifest)) => {
                    tracked.refusal = None;
                    tracked.pulling = None;
                    let current = Some((digest.clone(), manifest.clone()));
                    if tracked.running != current {
                        tracing::info!(plugin = %plugin, digest = %&digest[..12], "running a Handler's module");
                        let put = self
                            .plugins
                            .put(EmbeddedPlugin::from_bytes(plugin.clone(), bytes).manifest(manifest))
                            .await;
                        match put {
                            Ok(()) => tracked.running = current,
                            Err(holder) => {
                                let refusal = Refusal::Taken {
                                    plugin: plugin.clone(),
                                    holder,
                                };
                                tracing::warn!(plugin = %plugin, why = %refusal, "a Handler is refused");
                                tracked.running = None;
                                tracked.refusal = Some(refusal);
                            }
                        }
                    }
                }
                Err(Unknown::Unavailable(_)) => {}
                Err(Unknown::Pulling(reference, failed)) => {
                    tracked.refusal = None;
                    tracked.pulling = Some((reference, failed));
                }
                Err(Unknown::Refused(refusal)) => {
                    tracked.pulling = None;
                    if tracked.refusal.as_ref() != Some(&refusal) {
                        tracing::warn!(plugin = %plugin, why = %refusal, "a Handler is refused");
                    }
                    if tracked.running.take().is_some() {
                        self.plugins.remove(&plugin).await;
                    }
                    tracked.refusal = Some(refusal);
                }
            }
        }
        self.report(&key, object, generation).await;
    }

    /// What should run for `object`: its module's bytes and digest, and its
    /// manifest.
    async fn desired(
        &mut self,
        key: &Key,
        plugin: &str,
        object: &DynamicObject,
    ) -> Result<(Vec<u8>, String, Manifest), Unknown> {
        let namespace = key.1.as_deref();
        let mut spec = object.data.get("spec").cloned().unwrap_or(Value::Null);
        if let Some(holder) = self.plugins.holder(plugin) {
            return Err(Refusal::Taken {
                plugin: plugin.to_owned(),
                holder,
            }
            .into());
        }
        spec::bounded(&spec)?;
        let module = spec::module(&spec, namespace)?;
        // A Handler acts as its ServiceAccount; a ClusterHandler as the host.
        let account = namespace.map(|_| spec::service_account(&spec)).transpose()?;
        if let Some(namespace) = namespace {
            let now = tokio::time::Instant::now();
            for kind in spec::kinds_named(&spec) {
                if self.scopes.get(&kind).is_some_and(|(_, until)| now < *until) {
                    continue;
                }
                let known = match cluster_scoped(&self.client, &kind).await {
                    Ok(scoped) => (Some(scoped), now + DISCOVERY_TTL),
                    // Not served: refused below, and asked again once the
                    // answer is old.
                    Err(kube::Error::Api(status)) if status.code == 404 => (None, now + DISCOVERY_MISS_TTL),
                    Err(kube::Error::Discovery(_)) => (None, now + DISCOVERY_MISS_TTL),
                    Err(error) => return Err(Unknown::Unavailable(crate::one_line(&error))),
                };
                self.scopes.insert(kind, known);
            }
            let scopes = &self.scopes;
            spec::confine(&mut spec, namespace, &mut |kind| {
                scopes
                    .get(kind)
                    .and_then(|(scoped, _)| *scoped)
                    .ok_or_else(|| "the API server does not serve it".to_owned())
            })?;
            self.policy.bound_limits(&mut spec)?;
        }
        let mut manifest = spec::manifest(&spec, std::path::Path::new(plugin))?;
        if let (Some(namespace), Some(account)) = (namespace, &account) {
            self.policy.check_http(&manifest)?;
            manifest.identity = Some(Identity::service_account(namespace, account));
        }
        let limit = manifest.limits.module_bytes;
        let (bytes, digest) = match &module {
            ModuleSource::ConfigMap(module) => {
                let bytes = self.config_map_bytes(module, limit).await?;
                let digest = crate::plugin::digest(&bytes);
                (bytes, digest)
            }
            ModuleSource::Oci { reference, .. } => {
                if namespace.is_some() {
                    let registry = oci::registry_of(reference).map_err(Refusal::Pull)?;
                    self.policy.check_registry(&registry)?;
                }
                let pulled = self
                    .pulled(&module, limit, namespace, manifest.identity.as_ref())
                    .await?;
                (pulled.module, pulled.digest)
            }
        };
        Ok((bytes, digest, manifest))
    }

    /// The module of an OCI `source`: from the cache, or the result of its
    /// pull, which is started (or started again, after its back-off) when
    /// none is under way; a refused one is not started again while the
    /// module's limit and `identity` stay what they were.
    ///
    /// A tenant (a Handler of `namespace`, `identity` its ServiceAccount) takes a cached
    /// module only once its own credentials reached the manifest: its pull
    /// of a cached digest is a `HEAD` of the manifest
    /// ([`oci::Cached::Check`]), and the namespace is remembered for that
    /// repository and digest once it succeeds. ClusterHandlers, and every
    /// Handler when the policy shares the cache, take the cache as it is.
    async fn pulled(
        &mut self,
        source: &ModuleSource,
        limit: u64,
        namespace: Option<&str>,
        identity: Option<&Identity>,
    ) -> Result<Pulled, Unknown> {
        let ModuleSource::Oci { reference, pull_secret } = source else {
            return Err(Unknown::Unavailable("not an OCI module".to_owned()));
        };
        // A Handler's namespace is the tenant; a ClusterHandler has none.
        let tenant = namespace.filter(|_| !self.policy.shares_cache()).map(str::to_owned);
        if let Some(digest) = oci::pinned_digest(reference)
            && tenant
                .as_deref()
                .is_none_or(|tenant| self.puller.reached(tenant, reference, &digest))
            && let Some(module) = self.puller.cached(&digest, limit)
        {
            return Ok(Pulled { digest, module });
        }
        let key = pull_key(source).unwrap_or_default();
        let now = tokio::time::Instant::now();
        let inputs: PullInputs = (limit, identity.map(|identity| identity.user().to_owned()));
        if let Some(attempt) = self
            .pulls
            .get_mut(&key)
            .and_then(|pull| pull.by_tenant.get_mut(&tenant))
        {
            if let Some(refused) = attempt.refused(&inputs) {
                return Err(Unknown::Refused(Refusal::Pull(refused)));
            }
            match attempt.task.take() {
                Some(task) if !task.is_finished() => {
                    attempt.task = Some(task);
                    return Err(Unknown::retrying(reference, attempt.failed.clone()));
                }
                Some(task) => {
                    let result = task.await.unwrap_or_else(|error| {
                        Err(PullError::Unavailable {
                            reference: reference.clone(),
                            error: format!("the pull ended: {error}"),
                        })
                    });
                    match result {
                        Ok(pulled) => {
                            if let Some(tenant) = &tenant {
                                self.puller.reach(tenant, reference, &pulled.digest);
                            }
                            if let Some(pull) = self.pulls.get_mut(&key) {
                                pull.by_tenant.remove(&tenant);
                            }
                            return Ok(pulled);
                        }
                        Err(error) => return Err(attempt.fail(reference, error, now)),
                    }
                }
                None if now < attempt.retry_at && attempt.failed.as_ref().is_some_and(PullError::is_transient) => {
                    return Err(Unknown::retrying(reference, attempt.failed.clone()));
                }
                None => {}
            }
        }
        let credentials = match self.credentials(reference, pull_secret.as_ref(), identity).await {
            Ok(credentials) => credentials,
            Err(Unknown::Refused(Refusal::Pull(error))) if error.is_transient() => {
                let attempt = self.pulls.entry(key).or_default().attempt(&tenant, &inputs, now);
                return Err(attempt.fail(reference, error, now));
            }
            Err(other) => return Err(other),
        };
        let cached = if tenant.is_some() {
            oci::Cached::Check
        } else {
            oci::Cached::Take
        };
        let puller = self.puller.clone();
        let task_reference = reference.clone();
        let task = tokio::spawn(async move { puller.pull(&task_reference, &credentials, limit, cached).await });
        tracing::info!(reference = %reference, "pulling a Handler's module");
        let attempt = self.pulls.entry(key).or_default().attempt(&tenant, &inputs, now);
        attempt.task = Some(task);
        Err(Unknown::retrying(reference, attempt.failed.clone()))
    }

    /// The registry credentials of `pull_secret` (namespace and name) for
    /// `reference`'s registry; anonymous without one. The Secret is read as
    /// `identity` (a Handler's ServiceAccount) when there is one, so a tenant
    /// names only what its own account may read.
    async fn credentials(
        &self,
        reference: &str,
        pull_secret: Option<&(String, String)>,
        identity: Option<&Identity>,
    ) -> Result<Credentials, Unknown> {
        let Some((namespace, name)) = pull_secret else {
            return Ok(Credentials::Anonymous);
        };
        let registry = oci::registry_of(reference).map_err(Refusal::Pull)?;
        let where_ = format!("spec.module.pullSecret: Secret {namespace}/{name}");
        let missing = |why: &str| Unknown::Refused(Refusal::Pull(PullError::Credentials(format!("{where_} {why}"))));
        let mut request = kube::core::Request::new(format!("/api/v1/namespaces/{namespace}/secrets"))
            .get(name, &kube::api::GetParams::default())
            .map_err(|error| missing(&format!("cannot be asked for: {error}")))?;
        if let Some(identity) = identity {
            identity
                .impersonate(&mut request)
                .map_err(|_| missing(&format!("cannot be read as {}", identity.user())))?;
        }
        let secret: Secret = match self.client.request(request).await {
            Ok(secret) => secret,
            Err(kube::Error::Api(status)) if status.code == 404 => return Err(missing("not found")),
            Err(kube::Error::Api(status)) if status.code == 403 => {
                return Err(missing(&format!("is not readable: {}", status.message)));
            }
            Err(error) => {
                return Err(Unknown::Unavailable(format!("{where_}: {}", crate::one_line(&error))));
            }
        };
        if secret.type_.as_deref() != Some("kubernetes.io/dockerconfigjson") {
            return Err(missing("is not of type kubernetes.io/dockerconfigjson"));
        }
        let config = secret
            .data
            .and_then(|mut data| data.remove(".dockerconfigjson"))
            .ok_or_else(|| missing("has no .dockerconfigjson"))?;
        Credentials::from_docker_config(&config.0, &registry)
            .map_err(|error| Unknown::Refused(Refusal::Pull(PullError::Credentials(format!("{where_}: {error}")))))
    }

    async fn config_map_bytes(&self, module: &spec::ModuleRef, limit: u64) -> Result<Vec<u8>, Unknown> {
        let where_ = format!("ConfigMap {}/{}", module.namespace, module.name);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &module.namespace);
        let config_map = api
            .get_opt(&module.name)
            .await
            .map_err(|error| Unknown::Unavailable(format!("{where_}: {}", crate::one_line(&error))))?
            .ok_or_else(|| Refusal::Module(format!("{where_} not found")))?;
        let bytes = config_map
            .binary_data
            .and_then(|mut data| data.remove(&module.key))
            .ok_or_else(|| Refusal::Module(format!("{where_} has no binaryData key {}", module.key)))?
            .0;
        if bytes.len() as u64 > limit {
            return Err(Unknown::Refused(Refusal::Module(format!(
                "{where_} key {}: the module is {} bytes, over its limits.moduleMib ({} bytes)",
                module.key,
                bytes.len(),
                limit
            ))));
        }
        Ok(bytes)
    }

    /// Patches `object`'s status when it changed, with an Event when its
    /// reason did.
    async fn report(&mut self, key: &Key, object: &DynamicObject, generation: i64) {
        let Some(tracked) = self.tracked.get_mut(key) else {
            return;
        };
        let observed = match (&tracked.refusal, &tracked.running, &tracked.pulling) {
            (Some(refusal), _, _) => Observed::refused(refusal),
            (None, Some((digest, _)), _) => Observed::of_plugin(self.plugins.status(&tracked.plugin).as_ref(), digest),
            (None, None, Some((_, Some(error)))) => Observed::pull_failed(error),
            (None, None, Some((reference, None))) => Observed::pulling(reference),
            (None, None, None) => return,
        };
        let now = k8s_openapi::jiff::Timestamp::now()
            .round(k8s_openapi::jiff::Unit::Second)
            .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now());
        let status = observed.status(&tracked.plugin, generation, &tracked.status, &now.to_string());
        // Compared with what the object holds as the server stores it, not
        // with what was last written: a status someone else wrote (a tenant
        // may write its Handler's) is written over.
        let stored = object.data.get("status");
        let Some(patch) = status::merge_patch(stored, &status) else {
            tracked.status = status;
            return;
        };
        let instant = tokio::time::Instant::now();
        if let Some((at, over)) = &tracked.written {
            // The watch has not shown the last write yet: what was read is
            // older than what was written.
            let unseen = over.is_some() && *over == object.metadata.resource_version;
            let interval = if status::changed_beyond_counts(stored, &status) {
                PERIOD
            } else {
                COUNTS_INTERVAL
            };
            if (unseen && tracked.status == status) || instant.duration_since(*at) < interval {
                return;
            }
        }
        if !self.writes.try_take(instant) {
            tracing::debug!(plugin = %tracked.plugin, "the host's budget of status writes is spent; writing next time");
            return;
        }
        tracked.written = Some((instant, object.metadata.resource_version.clone()));
        let resource = key.0.resource();
        let name = key.2.as_str();
        let api: Api<DynamicObject> = match &key.1 {
            Some(namespace) => Api::namespaced_with(self.client.clone(), namespace, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        };
        // Only over the version it was made from: a Handler changed since is
        // looked at again at the next period.
        let patch = Patch::Merge(json!({
            "metadata": {"resourceVersion": object.metadata.resource_version},
            "status": patch,
        }));
        match api.patch_status(name, &PatchParams::default(), &patch).await {
            Ok(_) => {}
            Err(kube::Error::Api(error)) if error.code == 409 => {
                tracing::debug!(plugin = %tracked.plugin, "a Handler changed under its status; writing it again next time");
                return;
            }
            Err(error) => {
                tracing::warn!(plugin = %tracked.plugin, error = %crate::one_line(&error), "cannot patch a Handler's status");
                return;
            }
        }
        tracked.status = status;
        if tracked.reason == observed.reason {
            return;
        }
        tracked.reason = observed.reason;
        let repeated = tracked
            .events
            .get(observed.reason)
            .is_some_and(|sent| instant.duration_since(*sent) < EVENT_REPEAT);
        if repeated || !self.writes.try_take(instant) {
            tracing::debug!(plugin = %tracked.plugin, reason = observed.reason, "an Event held back: sent lately, or the budget is spent");
            return;
        }
        tracked.events.insert(observed.reason, instant);
        let event = Event {
            type_: if observed.degraded {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: observed.reason.to_owned(),
            note: Some(observed.message.clone()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        let reference = kube::Resource::object_ref(object, &resource);
        if let Err(error) = self.recorder.publish(&event, &reference).await {
            tracing::warn!(plugin = %tracked.plugin, error = %crate::one_line(&error), "cannot record a Handler's Event");
        }
    }
}

/// The plugin name of a Handler: `NAMESPACE.NAME`, or a ClusterHandler's
/// `NAME`.
fn plugin_name(key: &Key) -> Result<String, Refusal> {
    let name = match &key.1 {
        Some(namespace) => format!("{namespace}.{}", key.2),
        None if key.2.contains('.') => {
            return Err(Refusal::Confinement(format!(
                "a ClusterHandler's name holds no dot ({}): Handlers are named NAMESPACE.NAME",
                key.2
            )));
        }
        None => key.2.clone(),
    };
    if crate::rollout::next_of(&name).is_some() {
        return Err(Refusal::Confinement(format!(
            "the name {name} ends in {}, which names a plugin's next version",
            crate::rollout::NEXT_SUFFIX
        )));
    }
    Ok(name)
}

/// What a pull is known by: an OCI module's reference and pull secret.
fn pull_key(source: &ModuleSource) -> Option<String> {
    match source {
        ModuleSource::Oci { reference, pull_secret } => Some(match pull_secret {
            Some((namespace, name)) => format!("{reference} {namespace}/{name}"),
            None => reference.clone(),
        }),
        ModuleSource::ConfigMap(_) => None,
    }
}

/// Whether the API server serves `apiVersion/Kind` cluster-scoped.
async fn cluster_scoped(client: &kube::Client, kind: &str) -> Result<bool, kube::Error> {
    let (api_version, kind) = kind.rsplit_once('/').unwrap_or(("", kind));
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let (_, capabilities) = kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind)).await?;
    Ok(capabilities.scope == kube::discovery::Scope::Cluster)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handlers_of_one_name_in_two_namespaces_are_two_plugins_and_next_is_never_a_name() {
        let key = |namespace: Option<&str>, name: &str| (Kind::Handler, namespace.map(str::to_owned), name.to_owned());
        assert_eq!(plugin_name(&key(Some("shop"), "logger")).unwrap(), "shop.logger");
        assert_eq!(
            plugin_name(&key(Some("payments"), "logger")).unwrap(),
            "payments.logger"
        );
        assert!(plugin_name(&key(Some("shop"), "next")).is_err());
        assert!(plugin_name(&key(None, "shop.logger")).is_err());
        assert_eq!(plugin_name(&key(None, "audit")).unwrap(), "audit");
    }

    #[test]
    fn the_crds_are_two_documents_with_a_status_subresource() {
        let documents: Vec<Value> = CRDS
            .split("\n---\n")
            .map(|document| serde_yaml::from_str(document).unwrap())
            .collect();
        let names: Vec<&str> = documents
            .iter()
            .map(|crd| crd["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["handlers.kinformer.dev", "clusterhandlers.kinformer.dev"]);
        for crd in &documents {
            assert_eq!(crd["spec"]["versions"][0]["subresources"]["status"], json!({}));
        }
    }
}
