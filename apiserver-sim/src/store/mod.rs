//! The object store: every resource's objects, one cluster-wide resourceVersion and an event log per resource.
//!
//! Watches replay the event log and compaction trims it. All verbs follow the API
//! server's rules: server-set metadata, optimistic concurrency on
//! `metadata.resourceVersion`, finalizers delaying deletion, status written only
//! through the `status` subresource, and lists or watches from a resourceVersion
//! older than the compaction window answered with 410 Gone.
//!
//! Writes take [`WriteOptions`] (dry run, field manager, force) through a
//! [`Transaction`], which also lets a controller read and write in one step that
//! no other writer interleaves with; the plain [`Store`] verbs are writes with
//! default options.
//!
//! The verbs are in `write` and `delete`, list queries in `list` (with `filter`
//! for selectors and `continue_token` for paging), field ownership and
//! server-side apply in `managed_fields`, the `scale` subresource in `scale`,
//! CustomResourceDefinitions in `crd` (and their schemas in `schema`), server-set names, uids and timestamps in
//! `meta`, and paths to fields in `field_path`.

mod continue_token;
mod crd;
mod defaulting;
mod delete;
mod field_path;
mod filter;
mod list;
mod managed_fields;
mod meta;
mod rules;
mod scale;
mod schema;
mod strategic;
mod write;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

pub use delete::Preconditions;
pub use filter::Filter;
pub(crate) use filter::label_selector_string;
pub use list::{ListOptions, ListPage};
pub use meta::{now_rfc3339, rfc3339_in};
pub(crate) use strategic::patch_strategy;
pub use write::{Part, PatchType, WriteOptions};

use crate::conversion::Conversion;
use crate::metrics::Metrics;
use crate::resources::ResourceDef;
use crate::status::{ApiError, Result};

/// One stored object: its JSON value, its serialized bytes and the metadata that
/// filters need.
#[derive(Debug)]
pub struct StoredObject {
    /// `namespace/name`, or `name` when cluster-scoped.
    pub key: String,
    /// The namespace, for namespaced resources.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.labels`.
    pub labels: BTreeMap<String, String>,
    /// `metadata.resourceVersion`.
    pub resource_version: u64,
    /// The object.
    pub value: Value,
    /// The object serialized as JSON in kube-apiserver's field order, as get,
    /// list and watch responses carry it.
    pub json: Bytes,
    /// The uid of the owner that controls it (the `ownerReferences` entry with
    /// `controller: true`), as the store indexes it.
    pub controller_uid: Option<String>,
}

impl StoredObject {
    fn new(value: Value, resource_version: u64) -> Self {
        let metadata = &value["metadata"];
        let name = metadata["name"].as_str().unwrap_or_default().to_owned();
        let namespace = metadata["namespace"].as_str().map(str::to_owned);
        let labels = metadata["labels"]
            .as_object()
            .map(|labels| {
                labels
                    .iter()
                    .filter_map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned())))
                    .collect()
            })
            .unwrap_or_default();
        let controller_uid = metadata["ownerReferences"]
            .as_array()
            .and_then(|owners| owners.iter().find(|owner| owner["controller"].as_bool() == Some(true)))
            .and_then(|owner| owner["uid"].as_str())
            .map(str::to_owned);
        let json = Bytes::from(crate::encoding::to_vec(&value));
        Self {
            key: object_key(namespace.as_deref(), &name),
            namespace,
            name,
            labels,
            resource_version,
            value,
            json,
            controller_uid,
        }
    }
}

impl StoredObject {
    /// The object as a resource served from its resource's storage shows it
    /// (see [`Conversion`]); itself without a conversion.
    pub(crate) fn converted(self: &Arc<Self>, conversion: Option<Conversion>) -> Arc<Self> {
        match conversion {
            Some(conversion) => Arc::new(Self::new(conversion.served(&self.value), self.resource_version)),
            None => Arc::clone(self),
        }
    }

    /// The object's metadata as a `meta.k8s.io/v1` `PartialObjectMetadata`, as
    /// the API server answers a client that asks for metadata only.
    #[must_use]
    pub fn partial_metadata_json(&self) -> Bytes {
        let partial = json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": self.value["metadata"],
        });
        Bytes::from(crate::encoding::to_vec(&partial))
    }
}

fn object_key(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_owned(),
    }
}

/// What happened in an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

impl EventType {
    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// One change, as logged for watches.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the change.
    pub resource_version: u64,
    /// What happened.
    pub event_type: EventType,
    /// The object after the change (for a deletion: its last state, at the
    /// deletion's resourceVersion).
    pub object: Arc<StoredObject>,
    /// The object before the change; `None` for an addition.
    pub previous: Option<Arc<StoredObject>>,
}

/// The resource a request addresses: group, version and plural.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceId {
    /// API group.
    pub group: String,
    /// Version.
    pub version: String,
    /// Plural name.
    pub plural: String,
}

impl ResourceId {
    /// `group`, `version`, `plural`.
    #[must_use]
    pub fn new(group: &str, version: &str, plural: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
        }
    }

    fn of(def: &ResourceDef) -> Self {
        Self::new(&def.group, &def.version, &def.plural)
    }
}

struct Collection {
    def: Arc<ResourceDef>,
    objects: BTreeMap<String, Arc<StoredObject>>,
    /// The keys of the objects each owner uid controls.
    controlled: HashMap<String, BTreeSet<String>>,
    log: VecDeque<Arc<Event>>,
    /// Events at or below this resourceVersion are gone from the log.
    compacted: u64,
}

impl Collection {
    fn new(def: ResourceDef, compacted: u64) -> Self {
        Self {
            def: Arc::new(def),
            objects: BTreeMap::new(),
            controlled: HashMap::new(),
            log: VecDeque::new(),
            compacted,
        }
    }
}

struct State {
    resource_version: u64,
    collections: HashMap<ResourceId, Collection>,
    /// The resources served from another's collection, converted
    /// ([`ResourceDef::stored_as`]).
    views: HashMap<ResourceId, Arc<ResourceDef>>,
    window: usize,
}

/// The store shared by the HTTP handlers, the watches and the workload.
///
/// Beside the objects it holds the pods' resource usage ([`Store::metrics`]):
/// no part of any object, as in a cluster, but dropped in the same write that
/// deletes its pod.
pub struct Store {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    feeds: Mutex<Vec<Feed>>,
    metrics: Metrics,
}

/// A follower of every change of some resources; see [`Store::feed`].
struct Feed {
    ids: Vec<ResourceId>,
    events: mpsc::UnboundedSender<Arc<Event>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// A store serving `defs`, keeping at most `window` events per resource.
    #[must_use]
    pub fn new(defs: Vec<ResourceDef>, window: usize) -> Self {
        let (views, stored): (Vec<_>, Vec<_>) = defs.into_iter().partition(|def| def.stored_as.is_some());
        let collections = stored
            .into_iter()
            .map(|def| (ResourceId::of(&def), Collection::new(def, 0)))
            .collect();
        let views = views
            .into_iter()
            .map(|def| (ResourceId::of(&def), Arc::new(def)))
            .collect();
        let (changed, _) = watch::channel(0);
        Self {
            state: Mutex::new(State {
                resource_version: 0,
                collections,
                views,
                window: window.max(1),
            }),
            changed,
            feeds: Mutex::new(Vec::new()),
            metrics: Metrics::default(),
        }
    }

    /// The pods' resource usage, as metrics-server serves it.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes to the cluster-wide resourceVersion, which moves on every write.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Every change of the `ids` resources from now on, for the emulation's own
    /// controllers. Unlike the event log that watches read, a feed is never
    /// compacted: what a controller has not handled yet waits for it.
    pub(crate) fn feed(&self, ids: Vec<ResourceId>) -> mpsc::UnboundedReceiver<Arc<Event>> {
        let (events, receiver) = mpsc::unbounded_channel();
        self.feeds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Feed { ids, events });
        receiver
    }

    /// The current cluster-wide resourceVersion.
    #[must_use]
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    /// Serves another resource type (a custom resource); replaces nothing that
    /// exists.
    pub fn register(&self, def: ResourceDef) {
        let mut state = self.lock();
        let rv = state.resource_version;
        if state.views.contains_key(&ResourceId::of(&def)) {
            return;
        }
        state
            .collections
            .entry(ResourceId::of(&def))
            .or_insert_with(|| Collection::new(def, rv));
    }

    /// Every served resource type.
    #[must_use]
    pub fn defs(&self) -> Vec<Arc<ResourceDef>> {
        let state = self.lock();
        let mut defs: Vec<_> = state
            .collections
            .values()
            .map(|c| &c.def)
            .chain(state.views.values())
            .cloned()
            .collect();
        defs.sort_by(|a, b| (&a.group, &a.version, &a.plural).cmp(&(&b.group, &b.version, &b.plural)));
        defs
    }

    /// The resource type behind a path's group, version and plural.
    #[must_use]
    pub fn def(&self, id: &ResourceId) -> Option<Arc<ResourceDef>> {
        served_def(&self.lock(), id).ok()
    }

    /// Drops every logged event: any older resourceVersion now answers 410.
    pub fn compact(&self) {
        let mut state = self.lock();
        let rv = state.resource_version;
        for collection in state.collections.values_mut() {
            collection.log.clear();
            collection.compacted = rv;
        }
    }

    /// The object, if it exists.
    ///
    /// # Errors
    ///
    /// 404 when the resource or object does not exist.
    pub fn get(&self, id: &ResourceId, namespace: Option<&str>, name: &str) -> Result<Arc<StoredObject>> {
        let (_, object) = existing(&self.lock(), id, namespace, name)?;
        Ok(object)
    }

    /// At most `max` events of the resource after resourceVersion `after`, and
    /// the cluster-wide resourceVersion they are current up to. A resource
    /// served from another's storage logs that one's events, converted.
    ///
    /// # Errors
    ///
    /// 410 when events after `after` were compacted away.
    pub fn events_after(&self, id: &ResourceId, after: u64, max: usize) -> Result<(Vec<Arc<Event>>, u64)> {
        let state = self.lock();
        let conversion = conversion(&state, id);
        let collection = collection(&state, id)?;
        if after < collection.compacted {
            return Err(ApiError::expired(format!(
                "too old resource version: {after} ({})",
                collection.compacted
            )));
        }
        let start = collection.log.partition_point(|event| event.resource_version <= after);
        let events = collection.log.range(start..).take(max);
        let events = match conversion {
            None => events.cloned().collect(),
            Some(_) => events
                .map(|event| {
                    Arc::new(Event {
                        resource_version: event.resource_version,
                        event_type: event.event_type,
                        object: event.object.converted(conversion),
                        previous: event.previous.as_ref().map(|previous| previous.converted(conversion)),
                    })
                })
                .collect(),
        };
        Ok((events, state.resource_version))
    }

    /// How many objects a resource holds.
    #[must_use]
    pub fn count(&self, id: &ResourceId) -> usize {
        collection(&self.lock(), id).map_or(0, |c| c.objects.len())
    }

    /// Locks the store for a sequence of reads and writes that no other writer
    /// interleaves with, as one step of a controller needs. Writes follow `options`.
    ///
    /// Each write takes effect when it is made: a later failure rolls nothing back.
    /// Hold the transaction briefly; every other request waits for it.
    #[must_use]
    pub fn transaction(&self, options: WriteOptions) -> Transaction<'_> {
        Transaction {
            store: self,
            state: self.lock(),
            options,
        }
    }
}

/// The store locked for reads and writes that no other writer interleaves with;
/// see [`Store::transaction`]. The lock is released when it is dropped.
pub struct Transaction<'a> {
    store: &'a Store,
    state: MutexGuard<'a, State>,
    options: WriteOptions,
}

impl std::fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Transaction<'_> {
    /// The options its writes follow.
    #[must_use]
    pub fn options(&self) -> &WriteOptions {
        &self.options
    }

    /// The pods' resource usage; see [`Store::metrics`].
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.store.metrics
    }

    /// The object, if it exists.
    ///
    /// # Errors
    ///
    /// 404 when the resource or object does not exist.
    pub fn get(&self, id: &ResourceId, namespace: Option<&str>, name: &str) -> Result<Arc<StoredObject>> {
        let (_, object) = existing(&self.state, id, namespace, name)?;
        Ok(object)
    }

    /// The objects `filter` selects, ordered by key.
    ///
    /// # Errors
    ///
    /// 404 when the resource does not exist.
    pub fn select(&self, id: &ResourceId, filter: &Filter) -> Result<Vec<Arc<StoredObject>>> {
        let conversion = conversion(&self.state, id);
        let collection = collection(&self.state, id)?;
        let objects = match filter.namespace.as_deref() {
            // Keys start with the namespace: read only its range.
            Some(namespace) => {
                let start = format!("{namespace}/");
                collection
                    .objects
                    .range(start.clone()..)
                    .take_while(|(key, _)| key.starts_with(&start))
                    .map(|(_, object)| object)
                    .filter(|object| filter.matches(object))
                    .map(|object| object.converted(conversion))
                    .collect()
            }
            None => collection
                .objects
                .values()
                .filter(|object| filter.matches(object))
                .map(|object| object.converted(conversion))
                .collect(),
        };
        Ok(objects)
    }

    /// The objects the owner with this uid controls, ordered by key.
    ///
    /// # Errors
    ///
    /// 404 when the resource does not exist.
    pub fn controlled_by(&self, id: &ResourceId, owner_uid: &str) -> Result<Vec<Arc<StoredObject>>> {
        let conversion = conversion(&self.state, id);
        let collection = collection(&self.state, id)?;
        Ok(collection
            .controlled
            .get(owner_uid)
            .into_iter()
            .flatten()
            .filter_map(|key| collection.objects.get(key))
            .map(|object| object.converted(conversion))
            .collect())
    }

    /// Writes a change: a new resourceVersion, the stored object, the logged event.
    /// `value` and `previous` are of the resource `id` names; one served from
    /// another's storage is converted to that one's objects, and the answer
    /// back.
    ///
    /// A dry run stores and logs nothing: it answers the object as it would be,
    /// at the resourceVersion it has (none, for a creation), as the API server does.
    fn commit(
        &mut self,
        id: &ResourceId,
        event_type: EventType,
        mut value: Value,
        previous: Option<Arc<StoredObject>>,
    ) -> Arc<StoredObject> {
        if self.options.dry_run {
            let rv = previous.as_ref().map_or(0, |previous| previous.resource_version);
            match &previous {
                Some(previous) => value["metadata"]["resourceVersion"] = json!(previous.resource_version.to_string()),
                None => {
                    if let Some(metadata) = value["metadata"].as_object_mut() {
                        metadata.remove("resourceVersion");
                    }
                }
            }
            return Arc::new(StoredObject::new(value, rv));
        }
        let Some(conversion) = conversion(&self.state, id) else {
            return self.commit_stored(id, event_type, value, previous);
        };
        let storage = conversion.storage();
        let previous = previous.and_then(|previous| {
            let stored = self.state.collections.get(&storage)?;
            stored.objects.get(&previous.key).cloned()
        });
        let stored = self.commit_stored(&storage, event_type, conversion.stored(&value), previous);
        stored.converted(Some(conversion))
    }

    /// [`Transaction::commit`] of an object of a resource's own collection.
    fn commit_stored(
        &mut self,
        id: &ResourceId,
        event_type: EventType,
        mut value: Value,
        previous: Option<Arc<StoredObject>>,
    ) -> Arc<StoredObject> {
        let state = &mut *self.state;
        state.resource_version += 1;
        let rv = state.resource_version;
        let window = state.window;
        value["metadata"]["resourceVersion"] = json!(rv.to_string());
        let object = Arc::new(StoredObject::new(value, rv));
        let collection = state.collections.get_mut(id).expect("the caller checked the resource");
        if let Some(owner) = previous.as_ref().and_then(|previous| previous.controller_uid.as_ref())
            && let Some(keys) = collection.controlled.get_mut(owner)
        {
            keys.remove(&object.key);
            if keys.is_empty() {
                collection.controlled.remove(owner);
            }
        }
        if event_type == EventType::Deleted {
            collection.objects.remove(&object.key);
            if id.group.is_empty() && id.plural == "pods" {
                self.store
                    .metrics
                    .forget_pod(object.namespace.as_deref().unwrap_or_default(), &object.name);
            }
        } else {
            if let Some(owner) = &object.controller_uid {
                collection
                    .controlled
                    .entry(owner.clone())
                    .or_default()
                    .insert(object.key.clone());
            }
            collection.objects.insert(object.key.clone(), Arc::clone(&object));
        }
        let event = Arc::new(Event {
            resource_version: rv,
            event_type,
            object: Arc::clone(&object),
            previous,
        });
        collection.log.push_back(Arc::clone(&event));
        while collection.log.len() > window {
            let dropped = collection.log.pop_front().expect("the log is not empty");
            collection.compacted = dropped.resource_version;
        }
        let mut feeds = self.store.feeds.lock().unwrap_or_else(PoisonError::into_inner);
        feeds.retain(|feed| !feed.ids.contains(id) || feed.events.send(Arc::clone(&event)).is_ok());
        drop(feeds);
        self.store.changed.send_replace(rv);
        object
    }
}

/// Drops the metadata maps and lists a write emptied (`labels: {}`,
/// `finalizers: []`, …): kube-apiserver's Go types leave an empty one out.
pub(super) fn drop_empty_metadata(object: &mut Value) {
    if let Some(metadata) = object["metadata"].as_object_mut() {
        for field in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
        ] {
            let empty = match metadata.get(field) {
                Some(Value::Object(map)) => map.is_empty(),
                Some(Value::Array(list)) => list.is_empty(),
                Some(Value::Null) => true,
                _ => false,
            };
            if empty {
                metadata.remove(field);
            }
        }
    }
}

/// The collection holding a resource's objects: its own, or the one of the
/// resource it is served from.
fn collection<'a>(state: &'a State, id: &ResourceId) -> Result<&'a Collection> {
    let storage = conversion(state, id).map(Conversion::storage);
    state
        .collections
        .get(storage.as_ref().unwrap_or(id))
        .ok_or_else(|| ApiError::no_route(&format!("{}/{}/{}", id.group, id.version, id.plural)))
}

/// The conversion from the objects a resource is served from, when they are
/// another resource's.
fn conversion(state: &State, id: &ResourceId) -> Option<Conversion> {
    state.views.get(id).and_then(|def| def.stored_as)
}

/// The definition of a served resource.
fn served_def(state: &State, id: &ResourceId) -> Result<Arc<ResourceDef>> {
    match state.views.get(id) {
        Some(def) => Ok(Arc::clone(def)),
        None => Ok(Arc::clone(&collection(state, id)?.def)),
    }
}

/// The resource's definition and the object under `namespace/name`, if any.
fn lookup(
    state: &State,
    id: &ResourceId,
    namespace: Option<&str>,
    name: &str,
) -> Result<(Arc<ResourceDef>, Option<Arc<StoredObject>>)> {
    let def = served_def(state, id)?;
    let key = object_key(namespace.filter(|_| def.namespaced), name);
    let object = collection(state, id)?.objects.get(&key);
    let object = object.map(|object| object.converted(conversion(state, id)));
    Ok((def, object))
}

/// Like [`lookup`], with 404 when the object does not exist.
fn existing(
    state: &State,
    id: &ResourceId,
    namespace: Option<&str>,
    name: &str,
) -> Result<(Arc<ResourceDef>, Arc<StoredObject>)> {
    let (def, object) = lookup(state, id, namespace, name)?;
    let object = object.ok_or_else(|| ApiError::not_found(&def.group, &def.plural, name))?;
    Ok((def, object))
}

/// A store of the built-in resources with namespace `a`, and the id of
/// ConfigMaps: what the store's unit tests start from.
#[cfg(test)]
pub(crate) fn test_store() -> (Store, ResourceId) {
    let store = Store::new(crate::resources::built_in(), 1000);
    store
        .create(
            &ResourceId::new("", "v1", "namespaces"),
            None,
            serde_json::json!({"metadata": {"name": "a"}}),
        )
        .unwrap();
    (store, ResourceId::new("", "v1", "configmaps"))
}
