//! One version of a plugin: its component and manifest, started (`init` run,
//! registration reviewed, informers started and synced) and ready to take
//! deltas; and the listener queues a version reads them from.

use std::collections::VecDeque;

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::LoadError;
use super::prepare::{self, PrepareError};
use super::status::{SharedStatus, update};
use crate::apiserver::{Cluster, WriteObserver, WriteRecord};
use crate::caches::Caches;
use crate::delta::Delta;
use crate::grant::Refusal;
use crate::indexer::{IndexLease, Indexer};
use crate::informer::{InformerKey, SharedIndexInformer, SharedInformerFactory};
use crate::manifest::Manifest;
use crate::outbound::{AddressPolicy, HttpObserver, HttpRecord, Outbound, Resolver};
use crate::plugin::{LogSink, PluginComponent, PluginInstance, PluginOptions};
use crate::processor::{Listener, ListenerOptions};
use crate::registration::{ControllerSpec, Registration};
use crate::scope::Scope;
use kinformer_informers::Recover as _;

/// The writes of one call kept for a rollout's comparison; a call that
/// writes more is compared on its first ones.
const WRITES_KEPT_PER_CALL: usize = 256;

/// A version of a plugin, started and registered.
pub(super) struct Version {
    pub(super) component: PluginComponent,
    pub(super) manifest: Manifest,
    options: PluginOptions,
    caches: Caches,
    informers: Vec<(SharedIndexInformer, bool)>,
    /// The indexes it declared, dropped with it when no other plugin holds them.
    _indexes: Vec<IndexLease>,
    listener_options: ListenerOptions,
    pub(super) registration: Registration,
    pub(super) refused: Vec<Refusal>,
    /// True when it gets no delta at all ([`crate::grant::Review::handles_nothing`]).
    pub(super) handles_nothing: bool,
    /// For a controller: what it reconciles, and its primary objects as it may
    /// see them.
    pub(super) controller: Option<(ControllerSpec, Indexer)>,
    /// The instance `init` ran in, until the worker takes it.
    pub(super) instance: Option<PluginInstance>,
    /// The writes of the call running now, for a rollout's comparison.
    written: Arc<std::sync::Mutex<Vec<WriteRecord>>>,
}

/// Where a version runs: the host's informers and limits, and where its log goes.
pub(super) struct Context<'a> {
    pub(super) factory: &'a SharedInformerFactory,
    /// The plugin's environment, its `[env]` resolved.
    pub(super) env: Vec<(String, String)>,
    /// The namespaces the host itself is confined to.
    pub(super) scope: &'a Scope,
    pub(super) log_sink: LogSink,
    /// Where the plugin's writes go.
    pub(super) cluster: &'a Cluster,
    /// Where its outbound HTTP may not connect.
    pub(super) addresses: &'a AddressPolicy,
    /// How its outbound HTTP looks names up.
    pub(super) resolver: &'a Resolver,
    /// A rollout's shadow: it acts on nothing outside (its writes are dry
    /// runs, its requests answered with the running version's responses).
    pub(super) shadow: bool,
    /// The plugin's status, which counts its writes.
    pub(super) status: &'a SharedStatus,
    /// Counts the deltas its grant's namespaces hide from it.
    pub(super) outside_grant: Arc<std::sync::atomic::AtomicU64>,
}

impl Version {
    /// Starts a version: runs `init`, reviews the registration against the
    /// grant, and starts (or shares) its informers, waiting for them to sync.
    /// Everything but handing it deltas.
    pub(super) async fn prepare(
        name: &str,
        component: PluginComponent,
        manifest: Manifest,
        context: Context<'_>,
    ) -> Result<Self, LoadError> {
        let grant = manifest.grant.clone().within(context.scope);
        let caches = Caches::new();
        let status = Arc::clone(context.status);
        let written: Arc<std::sync::Mutex<Vec<WriteRecord>>> = Arc::default();
        let call_writes = Arc::clone(&written);
        let observer: WriteObserver = Arc::new(move |record: &WriteRecord| {
            update(&status, |status| status.record_write(record));
            let mut writes = call_writes.lock().recover();
            if writes.len() < WRITES_KEPT_PER_CALL {
                writes.push(record.clone());
            }
        });
        let cluster = match &manifest.identity {
            Some(identity) => context.cluster.clone().impersonating(identity.clone()),
            None => context.cluster.clone(),
        };
        let writer = cluster.writer(name, grant.clone(), &manifest.limits, manifest.mode, Some(observer));
        let http_status = Arc::clone(context.status);
        let call_requests = Arc::clone(&written);
        let shadow = context.shadow;
        let http_observer: HttpObserver = Arc::new(move |record: &HttpRecord| {
            update(&http_status, |status| status.record_http(record));
            // Compared with the other version's, as its writes are.
            if let Some(intent) = &record.intent {
                let mut requests = call_requests.lock().recover();
                if requests.len() < WRITES_KEPT_PER_CALL {
                    requests.push(WriteRecord::of_request(intent, record.outcome, shadow));
                }
            }
        });
        let outbound = Outbound::with_resolver(
            name,
            grant.http().clone(),
            context.addresses.clone(),
            context.resolver.clone(),
            &manifest.limits,
            Some(http_observer),
        );
        let outbound = if shadow { outbound.shadow() } else { outbound };
        let options = PluginOptions::with_limits(manifest.limits)
            .grant(grant.clone())
            .log_sink(context.log_sink)
            .writer(writer)
            .outbound(outbound)
            .env(context.env);
        let (starting, config, instance_options) = (component.clone(), manifest.config.clone(), options.clone());
        let instance_caches = caches.clone();
        let (instance, registration) = blocking(move || {
            let mut instance = starting.instantiate(instance_caches, instance_options)?;
            let registration = instance.init(&config)?;
            Ok((instance, registration))
        })
        .await
        .map_err(LoadError::Init)?;
        tracing::info!(
            plugin = %name,
            name = %registration.name,
            version = %registration.version,
            digest = &component.digest()[..12],
            "plugin initialised"
        );

        let registration_error = |source: PrepareError| LoadError::Registration {
            plugin: name.to_owned(),
            source,
        };
        let review = prepare::review(name, &grant, &registration, &manifest.limits).map_err(registration_error)?;
        if review.handles_nothing() {
            tracing::warn!(
                plugin = %name,
                "it subscribes to nothing it may watch, so it will handle no delta: does its config name a \
                 resource, and does its grant hold it?"
            );
        }
        let mut informers: Vec<(SharedIndexInformer, bool)> = Vec::new();
        for subscription in &review.subscriptions {
            // A plugin granted some namespaces (or on a host confined to some)
            // lists those alone, one list and watch each, as credentials bound
            // by RoleBindings in those namespaces allow.
            let mut key = match (&subscription.namespace, grant.namespaces().namespaces()) {
                (Some(namespace), _) => InformerKey::new(subscription.gvk.clone()).namespace(namespace.clone()),
                (None, Some(namespaces)) => {
                    InformerKey::new(subscription.gvk.clone()).namespaces(namespaces.iter().cloned())
                }
                (None, None) => InformerKey::new(subscription.gvk.clone()),
            };
            key.label_selector.clone_from(&subscription.label_selector);
            let informer = context
                .factory
                .informer(key)
                .await
                .map_err(|source| LoadError::Informer {
                    plugin: name.to_owned(),
                    source: Box::new(source),
                })?;
            informers.push((informer, subscription.deliver));
        }
        // One informer per subscription, in the review's order.
        let wiring = prepare::wire(&registration, &review, &grant, &caches, |position, _| {
            informers[position].0.cache()
        })
        .map_err(registration_error)?;
        wait_for_sync(name, &informers, manifest.limits.sync_timeout).await?;
        let listener_options = ListenerOptions::default()
            .queue_capacity(manifest.limits.queue_capacity)
            .count_outside_scope(context.outside_grant)
            .scope(grant.namespaces().clone());
        Ok(Self {
            component,
            manifest,
            options,
            caches,
            informers,
            _indexes: wiring.indexes,
            listener_options,
            registration,
            handles_nothing: review.handles_nothing(),
            refused: review.refused,
            controller: wiring.controller,
            instance: Some(instance),
            written,
        })
    }

    /// The writes made since the last time this was asked.
    pub(super) fn take_written(&self) -> Vec<WriteRecord> {
        std::mem::take(&mut *self.written.lock().recover())
    }

    /// The digest of its component.
    pub(super) fn digest(&self) -> &str {
        self.component.digest()
    }

    /// A new instance of this version, `init` run.
    pub(super) fn fresh_instance(&self) -> Result<PluginInstance, crate::plugin::Error> {
        let mut instance = self.component.instantiate(self.caches.clone(), self.options.clone())?;
        instance.init(&self.manifest.config)?;
        Ok(instance)
    }

    /// The listener queues this version reads from: those of `previous` that
    /// deliver the same stream are kept, with a replay of what they handed out
    /// (so this version starts exactly where the running one stopped); the others
    /// are new and start with the cache as an initial list.
    pub(super) fn attach(&self, name: &str, mut previous: Vec<Feed>) -> (Vec<Feed>, VecDeque<Delta>) {
        let mut feeds = Vec::new();
        let mut replay = VecDeque::new();
        let options = (
            self.listener_options.scope.clone(),
            self.listener_options.queue_capacity,
        );
        for (informer, deliver) in &self.informers {
            if !deliver {
                continue;
            }
            let key = informer.key().clone();
            if let Some(position) = previous.iter().position(|old| old.key == key && old.options == options) {
                let kept = previous.swap_remove(position);
                replay.extend(kept.listener.replay());
                feeds.push(kept);
            } else {
                feeds.push(Feed {
                    key,
                    options: options.clone(),
                    listener: informer.add_listener(name, &self.listener_options),
                });
            }
        }
        (feeds, replay)
    }
}

/// A listener queue a worker takes deltas from, and the stream it was made for.
pub(super) struct Feed {
    key: InformerKey,
    options: (Scope, usize),
    pub(super) listener: Listener,
}

/// Like client-go's `WaitForCacheSync`: nothing is delivered before every cache
/// the plugin registered for has synced, so its first deltas can rely on its
/// cache queries; a running older version serves meanwhile. A cache that has
/// not synced within `limit` fails the version with what the server answered.
async fn wait_for_sync(
    name: &str,
    informers: &[(SharedIndexInformer, bool)],
    limit: Duration,
) -> Result<(), LoadError> {
    let waiting = Instant::now();
    let mut reported = Duration::ZERO;
    let pending = || informers.iter().filter(|(informer, _)| !informer.has_synced());
    while pending().next().is_some() {
        if waiting.elapsed() >= limit {
            let detail: Vec<String> = pending()
                .map(|(informer, _)| {
                    let kind = &informer.key().gvk.kind;
                    match informer.last_error() {
                        Some(error) => error,
                        None => format!("{kind}: no answer yet"),
                    }
                })
                .collect();
            return Err(LoadError::Timeout {
                plugin: name.to_owned(),
                step: "syncing its caches",
                limit,
                key: "limits.sync-timeout-ms",
                detail: format!(": {}", detail.join("; ")),
            });
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        if waiting.elapsed() >= reported + Duration::from_secs(10) {
            reported = waiting.elapsed();
            let kinds: Vec<&str> = pending()
                .map(|(informer, _)| informer.key().gvk.kind.as_str())
                .collect();
            tracing::info!(plugin = %name, pending = ?kinds, waited_s = reported.as_secs(), "waiting for caches to sync");
        }
    }
    Ok(())
}

/// Runs blocking plugin work (compiling, `init`) off the async threads.
pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::plugin::Error> + Send + 'static,
) -> Result<T, crate::plugin::Error> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}
