//! SharedIndexInformer and SharedInformerFactory: one watch and one cache per
//! (resource, namespace, selectors), shared by every subscriber.
//!
//! [`SharedInformerFactory::informer`] returns the running informer for a key or
//! starts one: a Reflector filling an Indexer, and a SharedProcessor fanning its
//! deltas out to listeners. Clones of a [`SharedIndexInformer`] are subscriptions;
//! when the last one is dropped, the watch stops and the cache is freed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use kube::api::GroupVersionKind;

use crate::Recover as _;
use crate::index::IndexError;
use crate::indexer::{Indexer, indexer};
use crate::object::Transform;
use crate::processor::{Listener, ListenerOptions, SharedProcessor};
use crate::reflector::{Reflector, ReflectorConfig, ReflectorStatus, WatchErrorHook};

/// Why an informer could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The API server does not serve the resource.
    #[error("cannot resolve {group}/{version} {kind} on the API server")]
    Discovery {
        /// The group.
        group: String,
        /// The version.
        version: String,
        /// The kind.
        kind: String,
        /// What the client reported.
        #[source]
        source: kube::Error,
    },
}

/// What one informer watches: the resource, and the server-side filters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct InformerKey {
    /// The resource type.
    pub gvk: GroupVersionKind,
    /// Only this namespace; all when `None` (and `namespaces` is empty).
    pub namespace: Option<String>,
    /// Only these namespaces, each listed and watched on its own into one
    /// cache: what a host may do whose credentials cannot list across
    /// namespaces. Empty unless there are two or more; see
    /// [`InformerKey::namespaces`].
    pub namespaces: std::collections::BTreeSet<String>,
    /// A label selector.
    pub label_selector: Option<String>,
    /// A field selector.
    pub field_selector: Option<String>,
}

impl InformerKey {
    /// Every object of `gvk`.
    #[must_use]
    pub fn new(gvk: GroupVersionKind) -> Self {
        Self {
            gvk,
            namespace: None,
            namespaces: std::collections::BTreeSet::new(),
            label_selector: None,
            field_selector: None,
        }
    }

    /// Only `namespace`.
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self.namespaces.clear();
        self
    }

    /// Only these namespaces: one list and watch each (as
    /// [`InformerKey::namespace`] for one), all of them in one cache.
    #[must_use]
    pub fn namespaces(mut self, namespaces: impl IntoIterator<Item = impl Into<String>>) -> Self {
        let mut namespaces: std::collections::BTreeSet<String> = namespaces.into_iter().map(Into::into).collect();
        if namespaces.len() == 1 {
            self.namespace = namespaces.pop_first();
        } else {
            self.namespace = None;
            self.namespaces = namespaces;
        }
        self
    }

    /// The namespaces listed, one list and watch each; `[None]` for one
    /// across all namespaces.
    fn watched(&self) -> Vec<Option<String>> {
        if self.namespaces.is_empty() {
            vec![self.namespace.clone()]
        } else {
            self.namespaces.iter().cloned().map(Some).collect()
        }
    }

    /// What it lists, for logs and metrics: `(all)`, a namespace, or several
    /// joined by commas.
    #[must_use]
    pub fn namespace_label(&self) -> String {
        match (&self.namespace, self.namespaces.is_empty()) {
            (Some(namespace), _) => namespace.clone(),
            (None, true) => "(all)".to_owned(),
            (None, false) => self.namespaces.iter().cloned().collect::<Vec<_>>().join(","),
        }
    }

    /// Only objects matching `selector`.
    #[must_use]
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.label_selector = Some(selector.into());
        self
    }
}

#[derive(Debug)]
struct Running {
    key: InformerKey,
    cache: Indexer,
    processor: Arc<SharedProcessor>,
    /// One reflector per namespace listed (one for all namespaces).
    reflectors: Vec<(Arc<ReflectorStatus>, tokio::task::JoinHandle<()>)>,
}

impl Running {
    fn has_synced(&self) -> bool {
        self.reflectors.iter().all(|(status, _)| status.has_synced())
    }

    fn sum(&self, count: impl Fn(&ReflectorStatus) -> u64) -> u64 {
        self.reflectors.iter().map(|(status, _)| count(status)).sum()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        tracing::info!(resource = %self.key.gvk.kind, "last subscriber gone: informer stopped");
        for (_, task) in &self.reflectors {
            task.abort();
        }
    }
}

/// What one informer has done.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InformerStats {
    /// What it watches.
    pub key: InformerKey,
    /// Objects in its cache.
    pub objects: usize,
    /// Its first list is in the cache.
    pub synced: bool,
    /// Lists completed (the first and every relist).
    pub lists: u64,
    /// Watch errors survived (each followed by a re-watch or relist).
    pub watch_errors: u64,
    /// Of those, 410 Gone.
    pub gone: u64,
    /// When the last list completed.
    pub last_sync: Option<std::time::SystemTime>,
    /// Its reflector task still runs.
    pub alive: bool,
}

impl InformerStats {
    /// An informer of `key` that has done nothing yet.
    #[must_use]
    pub fn new(key: InformerKey) -> Self {
        Self {
            key,
            objects: 0,
            synced: false,
            lists: 0,
            watch_errors: 0,
            gone: 0,
            last_sync: None,
            alive: true,
        }
    }
}

/// A running informer; each clone is a subscription keeping it alive.
#[derive(Debug, Clone)]
pub struct SharedIndexInformer {
    running: Arc<Running>,
}

impl SharedIndexInformer {
    /// What it watches.
    #[must_use]
    pub fn key(&self) -> &InformerKey {
        &self.running.key
    }

    /// A read handle on its cache.
    #[must_use]
    pub fn cache(&self) -> Indexer {
        self.running.cache.clone()
    }

    /// True once the first list is in the cache.
    #[must_use]
    pub fn has_synced(&self) -> bool {
        self.running.has_synced()
    }

    /// The last watch error (see [`ReflectorStatus::last_error`]).
    #[must_use]
    pub fn last_error(&self) -> Option<String> {
        self.running
            .reflectors
            .iter()
            .find_map(|(status, _)| status.last_error())
    }

    /// Watch errors the informer survived.
    #[must_use]
    pub fn watch_errors(&self) -> u64 {
        self.running.sum(ReflectorStatus::watch_errors)
    }

    /// Adds a listener; it gets the cache as an initial list, then live deltas.
    #[must_use]
    pub fn add_listener(&self, name: &str, options: &ListenerOptions) -> Listener {
        self.running.processor.add_listener(name, options)
    }

    /// Adds a field index to the cache, back-filled.
    ///
    /// # Errors
    ///
    /// When the name or path is invalid, or the name is taken.
    pub fn add_index(&self, name: &str, field_path: &str) -> Result<(), IndexError> {
        self.running.cache.add_index(name, field_path)
    }
}

/// Starts informers, and shares a running one with every later subscriber.
pub struct SharedInformerFactory {
    client: kube::Client,
    transform: Transform,
    watch_error_hook: Option<WatchErrorHook>,
    informers: Mutex<HashMap<InformerKey, Weak<Running>>>,
}

impl std::fmt::Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedInformerFactory")
            .field("running", &self.running_count())
            .finish_non_exhaustive()
    }
}

impl SharedInformerFactory {
    /// A factory using `client`, with the default transform.
    #[must_use]
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            transform: Transform::default(),
            watch_error_hook: None,
            informers: Mutex::new(HashMap::new()),
        }
    }

    /// The client its informers list and watch with.
    #[must_use]
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Sets the transform of informers started from now on.
    #[must_use]
    pub fn transform(mut self, transform: Transform) -> Self {
        self.transform = transform;
        self
    }

    /// Calls `hook` with the resource's kind and the error whenever a watch of an
    /// informer started from now on fails (each failure is also logged and counted,
    /// and the watch backs off and resumes by itself).
    #[must_use]
    pub fn on_watch_error(
        mut self,
        hook: impl Fn(&str, &kube::runtime::watcher::Error) + Send + Sync + 'static,
    ) -> Self {
        self.watch_error_hook = Some(WatchErrorHook(Arc::new(hook)));
        self
    }

    /// The informer for `key`: the running one, or a new one (which needs a Tokio
    /// runtime and asks the server's discovery for the resource).
    ///
    /// # Errors
    ///
    /// When the server does not serve the resource.
    pub async fn informer(&self, key: InformerKey) -> Result<SharedIndexInformer, Error> {
        if let Some(running) = self.running(&key) {
            return Ok(SharedIndexInformer { running });
        }
        let gvk = &key.gvk;
        let (resource, capabilities) = kube::discovery::pinned_kind(&self.client, gvk)
            .await
            .map_err(|source| Error::Discovery {
                group: gvk.group.clone(),
                version: gvk.version.clone(),
                kind: gvk.kind.clone(),
                source,
            })?;
        // A cluster-scoped resource has no namespaces to list it in.
        let mut key = key;
        if capabilities.scope == kube::discovery::Scope::Cluster {
            key.namespace = None;
            key.namespaces.clear();
        }
        let gvk = &key.gvk;
        let mut informers = self.informers.lock().recover();
        // Another subscriber may have started it while discovery ran.
        if let Some(running) = informers.get(&key).and_then(Weak::upgrade) {
            return Ok(SharedIndexInformer { running });
        }
        let (cache, writer) = indexer();
        let processor = Arc::new(SharedProcessor::new(gvk.clone(), cache.clone()));
        tracing::info!(
            resource = %gvk.kind,
            namespace = %key.namespace_label(),
            selector = key.label_selector.as_deref().unwrap_or("(none)"),
            "informer starting"
        );
        let reflectors = key
            .watched()
            .into_iter()
            .map(|namespace| {
                let config = ReflectorConfig {
                    namespace,
                    label_selector: key.label_selector.clone(),
                    field_selector: key.field_selector.clone(),
                    transform: self.transform.clone(),
                    watch_error_hook: self.watch_error_hook.clone(),
                    ..ReflectorConfig::default()
                };
                let reflector = Reflector::new(self.client.clone(), resource.clone(), config, writer.for_namespace());
                let status = reflector.status();
                (status, tokio::spawn(reflector.run(Arc::clone(&processor))))
            })
            .collect();
        let running = Arc::new(Running {
            key: key.clone(),
            cache,
            processor,
            reflectors,
        });
        informers.retain(|_, informer| informer.strong_count() > 0);
        informers.insert(key, Arc::downgrade(&running));
        Ok(SharedIndexInformer { running })
    }

    fn running(&self, key: &InformerKey) -> Option<Arc<Running>> {
        let informers = self.informers.lock().recover();
        informers.get(key).and_then(Weak::upgrade)
    }

    /// What each running informer has done, for metrics and readiness.
    #[must_use]
    pub fn stats(&self) -> Vec<InformerStats> {
        let running: Vec<Arc<Running>> = {
            let informers = self.informers.lock().recover();
            informers.values().filter_map(Weak::upgrade).collect()
        };
        running
            .iter()
            .map(|running| InformerStats {
                key: running.key.clone(),
                objects: running.cache.len(),
                synced: running.has_synced(),
                lists: running.sum(ReflectorStatus::lists),
                watch_errors: running.sum(ReflectorStatus::watch_errors),
                gone: running.sum(ReflectorStatus::gone),
                last_sync: running
                    .reflectors
                    .iter()
                    .filter_map(|(status, _)| status.last_sync())
                    .min(),
                alive: running.reflectors.iter().all(|(_, task)| !task.is_finished()),
            })
            .collect()
    }

    /// How many informers are running.
    #[must_use]
    pub fn running_count(&self) -> usize {
        let informers = self.informers.lock().recover();
        informers
            .values()
            .filter(|informer| informer.strong_count() > 0)
            .count()
    }
}
