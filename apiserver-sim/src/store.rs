//! The object store: every resource's objects, one cluster-wide resourceVersion,
//! and an event log per resource that watches replay and compaction trims.
//!
//! All verbs follow the API server's rules: server-set metadata, optimistic
//! concurrency on `metadata.resourceVersion`, finalizers delaying deletion, status
//! written only through the `status` subresource, and lists or watches from a
//! resourceVersion older than the compaction window answered with 410 Gone.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use bytes::Bytes;
use kinformer_selector::Selector;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

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
    /// The object serialized as JSON, as list and watch responses carry it.
    pub json: Bytes,
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
        let json = Bytes::from(serde_json::to_vec(&value).expect("a JSON value serializes"));
        Self {
            key: object_key(namespace.as_deref(), &name),
            namespace,
            name,
            labels,
            resource_version,
            value,
            json,
        }
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

/// Which objects a list, watch or deletecollection selects.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// The label selector.
    pub labels: Selector,
    /// The field selector: (field path, equal?, value).
    pub fields: Vec<(String, bool, String)>,
}

impl Filter {
    /// Parses a `fieldSelector` (`metadata.name=x,metadata.namespace!=y`).
    ///
    /// # Errors
    ///
    /// 400 for a malformed selector or an unsupported field.
    pub fn parse_fields(&mut self, selector: &str, kind: &str) -> Result<()> {
        for term in selector.split(',').map(str::trim).filter(|term| !term.is_empty()) {
            let (field, equal, value) = if let Some((field, value)) = term.split_once("!=") {
                (field, false, value)
            } else if let Some((field, value)) = term.split_once("==").or_else(|| term.split_once('=')) {
                (field, true, value)
            } else {
                return Err(ApiError::bad_request(format!("invalid field selector: {term:?}")));
            };
            let supported = matches!(field, "metadata.name" | "metadata.namespace")
                || (kind == "Pod" && matches!(field, "spec.nodeName" | "status.phase"));
            if !supported {
                return Err(ApiError::bad_request(format!("field label not supported: {field}")));
            }
            self.fields.push((field.to_owned(), equal, value.to_owned()));
        }
        Ok(())
    }

    /// Whether the object is selected.
    #[must_use]
    pub fn matches(&self, object: &StoredObject) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|namespace| object.namespace.as_deref() == Some(namespace))
            && self.labels.matches(&object.labels)
            && self.fields.iter().all(|(field, equal, value)| {
                let actual = field
                    .split('.')
                    .try_fold(&object.value, |value, segment| value.get(segment))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                (actual == value) == *equal
            })
    }
}

/// How a list picks the resourceVersion it is served at.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// At most this many items; the rest come with a continue token.
    pub limit: Option<usize>,
    /// A continue token from a previous page.
    pub continue_token: Option<String>,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`: `Exact` or `NotOlderThan`.
    pub resource_version_match: Option<String>,
}

/// One page of a list.
#[derive(Debug)]
pub struct ListPage {
    /// The items, ordered by key.
    pub items: Vec<Arc<StoredObject>>,
    /// The resourceVersion the list was served at.
    pub resource_version: u64,
    /// The token for the next page, when there is one.
    pub continue_token: Option<String>,
}

/// `DeleteOptions.preconditions`.
#[derive(Debug, Clone, Default)]
pub struct Preconditions {
    /// The object must have this uid.
    pub uid: Option<String>,
    /// The object must be at this resourceVersion.
    pub resource_version: Option<String>,
}

/// How a patch body is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// RFC 6902 JSON patch.
    Json,
    /// RFC 7386 JSON merge patch.
    Merge,
    /// Strategic merge patch, applied as a merge patch.
    Strategic,
    /// Server-side apply, applied as a merge patch that creates when missing.
    Apply,
}

impl PatchType {
    /// The patch type of a `Content-Type`.
    ///
    /// # Errors
    ///
    /// 415 for any other media type.
    pub fn from_content_type(content_type: &str) -> Result<Self> {
        match content_type.split(';').next().unwrap_or_default().trim() {
            "application/json-patch+json" => Ok(Self::Json),
            "application/merge-patch+json" => Ok(Self::Merge),
            "application/strategic-merge-patch+json" => Ok(Self::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Ok(Self::Apply),
            other => Err(ApiError::unsupported_media_type(other)),
        }
    }
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
    log: VecDeque<Arc<Event>>,
    /// Events at or below this resourceVersion are gone from the log.
    compacted: u64,
}

impl Collection {
    fn new(def: ResourceDef, compacted: u64) -> Self {
        Self {
            def: Arc::new(def),
            objects: BTreeMap::new(),
            log: VecDeque::new(),
            compacted,
        }
    }

    /// The state at `rv` differs from the current one for the keys changed after
    /// it: each maps to its state at `rv` (`None`: absent then).
    fn changed_since(&self, rv: u64) -> BTreeMap<&str, Option<&Arc<StoredObject>>> {
        let start = self.log.partition_point(|event| event.resource_version <= rv);
        let mut then = BTreeMap::new();
        for event in self.log.range(start..) {
            then.entry(event.object.key.as_str()).or_insert(event.previous.as_ref());
        }
        then
    }
}

struct State {
    resource_version: u64,
    collections: HashMap<ResourceId, Collection>,
    window: usize,
}

/// The store shared by the HTTP handlers, the watches and the workload.
pub struct Store {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

/// The keys, besides `metadata`, that do not count as a spec change.
const NOT_SPEC: [&str; 4] = ["metadata", "status", "apiVersion", "kind"];

impl Store {
    /// A store serving `defs`, keeping at most `window` events per resource.
    #[must_use]
    pub fn new(defs: Vec<ResourceDef>, window: usize) -> Self {
        let collections = defs
            .into_iter()
            .map(|def| (ResourceId::of(&def), Collection::new(def, 0)))
            .collect();
        let (changed, _) = watch::channel(0);
        Self {
            state: Mutex::new(State {
                resource_version: 0,
                collections,
                window: window.max(1),
            }),
            changed,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes to the cluster-wide resourceVersion, which moves on every write.
    #[must_use]
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
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
        state
            .collections
            .entry(ResourceId::of(&def))
            .or_insert_with(|| Collection::new(def, rv));
    }

    /// Every served resource type.
    #[must_use]
    pub fn defs(&self) -> Vec<Arc<ResourceDef>> {
        let state = self.lock();
        let mut defs: Vec<_> = state.collections.values().map(|c| Arc::clone(&c.def)).collect();
        defs.sort_by(|a, b| (&a.group, &a.version, &a.plural).cmp(&(&b.group, &b.version, &b.plural)));
        defs
    }

    /// The resource type behind a path's group, version and plural.
    #[must_use]
    pub fn def(&self, id: &ResourceId) -> Option<Arc<ResourceDef>> {
        self.lock().collections.get(id).map(|c| Arc::clone(&c.def))
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

    /// One page of the objects `filter` selects.
    ///
    /// # Errors
    ///
    /// 410 for a continue token or exact resourceVersion older than the
    /// compaction window, 504 for a resourceVersion from the future, 400 for a
    /// malformed token.
    pub fn list(&self, id: &ResourceId, filter: &Filter, options: &ListOptions) -> Result<ListPage> {
        let state = self.lock();
        let collection = collection(&state, id)?;
        let current = state.resource_version;
        let requested = options
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty())
            .map(parse_rv)
            .transpose()?;
        let (at, after_key) = match &options.continue_token {
            Some(token) => {
                let (rv, key) = decode_continue(token)?;
                if rv < collection.compacted {
                    return Err(ApiError::expired(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some(key))
            }
            None => match (requested, options.resource_version_match.as_deref()) {
                (Some(rv), _) if rv > current => return Err(ApiError::too_large_resource_version(rv, current)),
                (Some(rv), Some("Exact")) => {
                    if rv < collection.compacted {
                        return Err(ApiError::expired(format!(
                            "too old resource version: {rv} ({})",
                            collection.compacted
                        )));
                    }
                    (rv, None)
                }
                (None, Some(_)) => {
                    return Err(ApiError::bad_request(
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                _ => (current, None),
            },
        };

        let then = if at < current {
            collection.changed_since(at)
        } else {
            BTreeMap::new()
        };
        let lower = after_key.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let now = collection
            .objects
            .range::<str, _>((lower, Bound::Unbounded))
            .map(|(key, object)| (key.as_str(), Some(object)));
        let past = then
            .range::<str, _>((lower, Bound::Unbounded))
            .map(|(key, object)| (*key, *object));
        let limit = options.limit.filter(|limit| *limit > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut more = false;
        for (_, object) in merge_overlay(now, past) {
            let Some(object) = object else { continue };
            if !filter.matches(object) {
                continue;
            }
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(Arc::clone(object));
        }
        let continue_token = more.then(|| encode_continue(at, &items.last().expect("a full page").key));
        Ok(ListPage {
            items,
            resource_version: at,
            continue_token,
        })
    }

    /// The objects `filter` selects now, with the resourceVersion they are at.
    ///
    /// # Errors
    ///
    /// 404 when the resource does not exist.
    pub fn snapshot(&self, id: &ResourceId, filter: &Filter) -> Result<(Vec<Arc<StoredObject>>, u64)> {
        let state = self.lock();
        let collection = collection(&state, id)?;
        let objects = collection
            .objects
            .values()
            .filter(|o| filter.matches(o))
            .cloned()
            .collect();
        Ok((objects, state.resource_version))
    }

    /// At most `max` events of the resource after resourceVersion `after`, and
    /// the cluster-wide resourceVersion they are current up to.
    ///
    /// # Errors
    ///
    /// 410 when events after `after` were compacted away.
    pub fn events_after(&self, id: &ResourceId, after: u64, max: usize) -> Result<(Vec<Arc<Event>>, u64)> {
        let state = self.lock();
        let collection = collection(&state, id)?;
        if after < collection.compacted {
            return Err(ApiError::expired(format!(
                "too old resource version: {after} ({})",
                collection.compacted
            )));
        }
        let start = collection.log.partition_point(|event| event.resource_version <= after);
        let events: Vec<_> = collection.log.range(start..).take(max).cloned().collect();
        Ok((events, state.resource_version))
    }

    /// How many objects a resource holds.
    #[must_use]
    pub fn count(&self, id: &ResourceId) -> usize {
        self.lock().collections.get(id).map_or(0, |c| c.objects.len())
    }

    /// Creates an object.
    ///
    /// # Errors
    ///
    /// 409 when it exists, 422 when invalid, 404 when its namespace does not
    /// exist, 400 when its kind or namespace contradicts the path.
    pub fn create(&self, id: &ResourceId, namespace: Option<&str>, mut body: Value) -> Result<Arc<StoredObject>> {
        let mut state = self.lock();
        let def = Arc::clone(&collection(&state, id)?.def);
        check_type(&def, &body)?;
        let metadata = metadata_mut(&mut body, &def)?;
        let name = match metadata.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => match metadata.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => format!("{prefix}{}", random_suffix()),
                _ => {
                    return Err(ApiError::invalid(
                        &def.group,
                        &def.plural,
                        "",
                        "metadata.name: Required value: name or generateName is required",
                    ));
                }
            },
        };
        check_name(&def, &name)?;
        let namespace = resolve_namespace(&state, &def, namespace, metadata)?;
        let key = object_key(namespace.as_deref(), &name);
        if collection(&state, id)?.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&def.group, &def.plural, &name));
        }
        metadata.insert("name".into(), json!(name));
        match &namespace {
            Some(namespace) => metadata.insert("namespace".into(), json!(namespace)),
            None => metadata.remove("namespace"),
        };
        metadata.insert("uid".into(), json!(new_uid()));
        metadata.insert("creationTimestamp".into(), json!(now_rfc3339()));
        metadata.insert("generation".into(), json!(1));
        metadata.remove("deletionTimestamp");
        metadata.remove("deletionGracePeriodSeconds");
        if def.status_subresource {
            // As the API server does: status is written through the subresource only.
            body.as_object_mut().expect("checked to be an object").remove("status");
        }
        if def.kind == "CustomResourceDefinition" {
            establish_crd(&mut body);
        }
        let object = self.commit(&mut state, id, EventType::Added, body, None);
        if def.kind == "CustomResourceDefinition" {
            register_crd(&mut state, &object.value);
        }
        Ok(object)
    }

    /// Replaces an object (or, with `status`, only its status).
    ///
    /// # Errors
    ///
    /// 404 when it does not exist, 409 on a stale resourceVersion, 400 when the
    /// body names another object.
    pub fn update(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        body: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        let mut state = self.lock();
        self.update_locked(&mut state, id, namespace, name, body, status)
    }

    /// Applies a patch to an object (or, with `status`, to its status).
    ///
    /// # Errors
    ///
    /// As [`Store::update`], and 422 for a patch that does not apply.
    pub fn patch(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        patch_type: PatchType,
        patch: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        let mut state = self.lock();
        let (def, existing) = lookup(&state, id, namespace, name)?;
        let Some(existing) = existing else {
            if patch_type == PatchType::Apply && !status {
                drop(state);
                let mut body = patch;
                if let Some(metadata) = body.get_mut("metadata").and_then(Value::as_object_mut) {
                    metadata.insert("name".into(), json!(name));
                }
                return self.create(id, namespace, body);
            }
            return Err(ApiError::not_found(&def.group, &def.plural, name));
        };
        let mut patched = existing.value.clone();
        match patch_type {
            PatchType::Json => {
                let operations: json_patch::Patch = serde_json::from_value(patch)
                    .map_err(|error| ApiError::bad_request(format!("invalid JSON patch: {error}")))?;
                json_patch::patch(&mut patched, &operations)
                    .map_err(|error| ApiError::invalid(&def.group, &def.plural, name, &error.to_string()))?;
            }
            PatchType::Merge | PatchType::Strategic | PatchType::Apply => {
                if !patch.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                json_patch::merge(&mut patched, &patch);
            }
        }
        self.update_locked(&mut state, id, namespace, name, patched, status)
    }

    fn update_locked(
        &self,
        state: &mut State,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        mut body: Value,
        status: bool,
    ) -> Result<Arc<StoredObject>> {
        let (def, existing) = existing(state, id, namespace, name)?;
        if status && !def.status_subresource {
            return Err(ApiError::no_route(&format!("{}/status", def.plural)));
        }
        check_type(&def, &body)?;
        let metadata = metadata_mut(&mut body, &def)?;
        if metadata.get("name").and_then(Value::as_str).is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                metadata["name"].as_str().unwrap_or_default()
            )));
        }
        if let Some(rv) = metadata
            .get("resourceVersion")
            .and_then(Value::as_str)
            .filter(|rv| !rv.is_empty())
            && rv != existing.resource_version.to_string()
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }

        let mut next = if status {
            let mut next = existing.value.clone();
            next["status"] = body.get("status").cloned().unwrap_or(Value::Null);
            next
        } else {
            if def.status_subresource {
                match existing.value.get("status") {
                    Some(status) => body["status"] = status.clone(),
                    None => {
                        body.as_object_mut().expect("checked to be an object").remove("status");
                    }
                }
            }
            body
        };
        let old_meta = existing.value["metadata"].as_object().cloned().unwrap_or_default();
        let spec_changed = !status && spec_of(&next) != spec_of(&existing.value);
        let meta = next["metadata"].as_object_mut().expect("checked to be an object");
        for field in [
            "uid",
            "creationTimestamp",
            "namespace",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            match old_meta.get(field) {
                Some(value) => meta.insert(field.into(), value.clone()),
                None => meta.remove(field),
            };
        }
        meta.insert("name".into(), json!(name));
        let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
        meta.insert("generation".into(), json!(generation + i64::from(spec_changed)));
        meta.insert("resourceVersion".into(), json!(existing.resource_version.to_string()));
        let finalized = meta.contains_key("deletionTimestamp")
            && meta
                .get("finalizers")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty);
        if next == existing.value {
            // Nothing changed: no new resourceVersion, no event.
            return Ok(existing);
        }
        if finalized {
            let object = self.commit(state, id, EventType::Deleted, next, Some(existing));
            return Ok(object);
        }
        Ok(self.commit(state, id, EventType::Modified, next, Some(existing)))
    }

    /// Deletes an object, or marks it deleted while finalizers remain.
    ///
    /// # Errors
    ///
    /// 404 when it does not exist, 409 when a precondition fails.
    pub fn delete(
        &self,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<Arc<StoredObject>> {
        let mut state = self.lock();
        self.delete_locked(&mut state, id, namespace, name, preconditions)
    }

    fn delete_locked(
        &self,
        state: &mut State,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
        preconditions: &Preconditions,
    ) -> Result<Arc<StoredObject>> {
        let (def, existing) = existing(state, id, namespace, name)?;
        let metadata = &existing.value["metadata"];
        if let Some(uid) = &preconditions.uid
            && metadata["uid"].as_str() != Some(uid)
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "Precondition failed: UID mismatch",
            ));
        }
        if let Some(rv) = &preconditions.resource_version
            && *rv != existing.resource_version.to_string()
        {
            return Err(ApiError::conflict(
                &def.group,
                &def.plural,
                name,
                "Precondition failed: ResourceVersion mismatch",
            ));
        }
        let mut last = existing.value.clone();
        let has_finalizers = metadata["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        if has_finalizers {
            if metadata.get("deletionTimestamp").is_some() {
                return Ok(existing);
            }
            last["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
            last["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            return Ok(self.commit(state, id, EventType::Modified, last, Some(existing)));
        }
        if def.kind == "Namespace" {
            // Namespace deletion takes its contents with it.
            let contained: Vec<(ResourceId, String)> = state
                .collections
                .iter()
                .filter(|(_, c)| c.def.namespaced)
                .flat_map(|(id, c)| {
                    c.objects
                        .values()
                        .filter(|o| o.namespace.as_deref() == Some(name))
                        .map(|o| (id.clone(), o.name.clone()))
                        .collect::<Vec<_>>()
                })
                .collect();
            for (id, object) in contained {
                let mut forced = collection(state, &id)?.objects[&object_key(Some(name), &object)]
                    .value
                    .clone();
                forced["metadata"]["finalizers"] = json!([]);
                forced["metadata"]["deletionTimestamp"] = json!(now_rfc3339());
                let previous = collection(state, &id)?
                    .objects
                    .get(&object_key(Some(name), &object))
                    .cloned();
                self.commit(state, &id, EventType::Deleted, forced, previous);
            }
        }
        if def.kind == "CustomResourceDefinition" {
            unregister_crd(state, &existing.value);
        }
        Ok(self.commit(state, id, EventType::Deleted, last, Some(existing)))
    }

    /// Deletes every object `filter` selects; returns them.
    ///
    /// # Errors
    ///
    /// 404 when the resource does not exist.
    pub fn delete_collection(&self, id: &ResourceId, filter: &Filter) -> Result<Vec<Arc<StoredObject>>> {
        let mut state = self.lock();
        let selected: Vec<(Option<String>, String)> = collection(&state, id)?
            .objects
            .values()
            .filter(|object| filter.matches(object))
            .map(|object| (object.namespace.clone(), object.name.clone()))
            .collect();
        let mut deleted = Vec::with_capacity(selected.len());
        for (namespace, name) in selected {
            deleted.push(self.delete_locked(&mut state, id, namespace.as_deref(), &name, &Preconditions::default())?);
        }
        Ok(deleted)
    }

    /// Writes a change: a new resourceVersion, the stored object, the logged event.
    fn commit(
        &self,
        state: &mut State,
        id: &ResourceId,
        event_type: EventType,
        mut value: Value,
        previous: Option<Arc<StoredObject>>,
    ) -> Arc<StoredObject> {
        state.resource_version += 1;
        let rv = state.resource_version;
        let window = state.window;
        value["metadata"]["resourceVersion"] = json!(rv.to_string());
        let object = Arc::new(StoredObject::new(value, rv));
        let collection = state.collections.get_mut(id).expect("the caller checked the resource");
        if event_type == EventType::Deleted {
            collection.objects.remove(&object.key);
        } else {
            collection.objects.insert(object.key.clone(), Arc::clone(&object));
        }
        collection.log.push_back(Arc::new(Event {
            resource_version: rv,
            event_type,
            object: Arc::clone(&object),
            previous,
        }));
        while collection.log.len() > window {
            let dropped = collection.log.pop_front().expect("the log is not empty");
            collection.compacted = dropped.resource_version;
        }
        self.changed.send_replace(rv);
        object
    }
}

fn collection<'a>(state: &'a State, id: &ResourceId) -> Result<&'a Collection> {
    state
        .collections
        .get(id)
        .ok_or_else(|| ApiError::no_route(&format!("{}/{}/{}", id.group, id.version, id.plural)))
}

/// The resource's definition and the object under `namespace/name`, if any.
fn lookup(
    state: &State,
    id: &ResourceId,
    namespace: Option<&str>,
    name: &str,
) -> Result<(Arc<ResourceDef>, Option<Arc<StoredObject>>)> {
    let collection = collection(state, id)?;
    let key = object_key(namespace.filter(|_| collection.def.namespaced), name);
    Ok((Arc::clone(&collection.def), collection.objects.get(&key).cloned()))
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

/// Merges the current objects with the overlay of past states, both ordered by key;
/// the overlay wins.
fn merge_overlay<'a>(
    now: impl Iterator<Item = (&'a str, Option<&'a Arc<StoredObject>>)>,
    past: impl Iterator<Item = (&'a str, Option<&'a Arc<StoredObject>>)>,
) -> impl Iterator<Item = (&'a str, Option<&'a Arc<StoredObject>>)> {
    let mut now = now.peekable();
    let mut past = past.peekable();
    std::iter::from_fn(move || match (now.peek(), past.peek()) {
        (Some((a, _)), Some((b, _))) if a < b => now.next(),
        (Some((a, _)), Some((b, _))) if a == b => {
            now.next();
            past.next()
        }
        (Some(_), Some(_)) | (None, Some(_)) => past.next(),
        (Some(_), None) => now.next(),
        (None, None) => None,
    })
}

fn spec_of(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(key, _)| !NOT_SPEC.contains(&key.as_str()))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn check_type(def: &ResourceDef, body: &Value) -> Result<()> {
    let Some(object) = body.as_object() else {
        return Err(ApiError::bad_request("the request body is not a JSON object"));
    };
    if let Some(api_version) = object.get("apiVersion").and_then(Value::as_str)
        && api_version != def.api_version()
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(kind) = object.get("kind").and_then(Value::as_str)
        && kind != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            def.kind
        )));
    }
    Ok(())
}

/// The body's metadata, with `apiVersion` and `kind` filled in.
fn metadata_mut<'a>(body: &'a mut Value, def: &ResourceDef) -> Result<&'a mut Map<String, Value>> {
    let object = body
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("the request body is not a JSON object"))?;
    object.insert("apiVersion".into(), json!(def.api_version()));
    object.insert("kind".into(), json!(def.kind));
    let metadata = object.entry("metadata").or_insert_with(|| json!({}));
    metadata
        .as_object_mut()
        .ok_or_else(|| ApiError::bad_request("metadata is not a JSON object"))
}

fn resolve_namespace(
    state: &State,
    def: &ResourceDef,
    from_path: Option<&str>,
    metadata: &Map<String, Value>,
) -> Result<Option<String>> {
    if !def.namespaced {
        return Ok(None);
    }
    let in_body = metadata
        .get("namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty());
    let namespace = match (from_path, in_body) {
        (Some(path), Some(body)) if path != body => {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        (Some(namespace), _) | (None, Some(namespace)) => namespace,
        (None, None) => return Err(ApiError::bad_request("a namespaced object needs a namespace")),
    };
    let namespaces = ResourceId::new("", "v1", "namespaces");
    if !collection(state, &namespaces)?.objects.contains_key(namespace) {
        return Err(ApiError::not_found("", "namespaces", namespace));
    }
    Ok(Some(namespace.to_owned()))
}

/// A DNS subdomain: at most 253 lowercase alphanumerics, `-` and `.`.
fn check_name(def: &ResourceDef, name: &str) -> Result<()> {
    let valid = name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &def.group,
            &def.plural,
            name,
            "metadata.name: Invalid value: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
        ))
    }
}

fn parse_rv(rv: &str) -> Result<u64> {
    rv.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version {rv:?}")))
}

fn encode_continue(rv: u64, key: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json!({"rv": rv, "start": key}).to_string())
}

fn decode_continue(token: &str) -> Result<(u64, String)> {
    use base64::Engine as _;
    let invalid = || ApiError::bad_request("continue key is not valid");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| invalid())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| invalid())?;
    let rv = value["rv"].as_u64().ok_or_else(invalid)?;
    let key = value["start"].as_str().ok_or_else(invalid)?.to_owned();
    Ok((rv, key))
}

/// Marks a new CRD `Established`, as the apiextensions controller does.
fn establish_crd(body: &mut Value) {
    body["status"] = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}
        ],
        "acceptedNames": body["spec"]["names"].clone(),
    });
}

/// The resource types a CRD serves: one per served version.
fn crd_defs(crd: &Value) -> Vec<ResourceDef> {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let (Some(group), Some(kind), Some(plural)) =
        (spec["group"].as_str(), names["kind"].as_str(), names["plural"].as_str())
    else {
        return Vec::new();
    };
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|version| version["served"].as_bool().unwrap_or(true))
        .filter_map(|version| {
            let mut def = ResourceDef::new(group, version["name"].as_str()?, kind, plural);
            def.namespaced = spec["scope"].as_str() != Some("Cluster");
            def.status_subresource = version["subresources"].get("status").is_some();
            if let Some(singular) = names["singular"].as_str() {
                def.singular = singular.to_owned();
            }
            def.short_names = names["shortNames"]
                .as_array()
                .map(|names| names.iter().filter_map(|n| Some(n.as_str()?.to_owned())).collect())
                .unwrap_or_default();
            Some(def)
        })
        .collect()
}

fn register_crd(state: &mut State, crd: &Value) {
    let rv = state.resource_version;
    for def in crd_defs(crd) {
        state
            .collections
            .entry(ResourceId::of(&def))
            .or_insert_with(|| Collection::new(def, rv));
    }
}

fn unregister_crd(state: &mut State, crd: &Value) {
    for def in crd_defs(crd) {
        state.collections.remove(&ResourceId::of(&def));
    }
}

fn new_uid() -> String {
    let bits: u128 = rand::random();
    let bits = (bits & !(0xf << 76) | (0x4 << 76)) & !(0x3 << 62) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

/// The current time as Kubernetes writes timestamps: `2026-01-02T03:04:05Z`.
#[must_use]
pub fn now_rfc3339() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::built_in;

    fn store() -> (Store, ResourceId) {
        let store = Store::new(built_in(), 1000);
        store
            .create(
                &ResourceId::new("", "v1", "namespaces"),
                None,
                json!({"metadata": {"name": "a"}}),
            )
            .unwrap();
        (store, ResourceId::new("", "v1", "configmaps"))
    }

    #[test]
    fn json_patches_apply_and_a_failing_test_operation_is_invalid() {
        let (store, configmaps) = store();
        store
            .create(
                &configmaps,
                Some("a"),
                json!({"metadata": {"name": "cm"}, "data": {"k": "v"}}),
            )
            .unwrap();
        let patch =
            json!([{"op": "replace", "path": "/data/k", "value": "w"}, {"op": "add", "path": "/data/n", "value": "1"}]);
        let patched = store
            .patch(&configmaps, Some("a"), "cm", PatchType::Json, patch, false)
            .unwrap();
        assert_eq!(patched.value["data"], json!({"k": "w", "n": "1"}));
        let failing = json!([{"op": "test", "path": "/data/k", "value": "nope"}]);
        let error = store
            .patch(&configmaps, Some("a"), "cm", PatchType::Json, failing, false)
            .unwrap_err();
        assert_eq!(error.code, 422);
    }

    #[test]
    fn deletecollection_deletes_what_the_selector_selects() {
        let (store, configmaps) = store();
        for (name, app) in [("x", "web"), ("y", "web"), ("z", "db")] {
            store
                .create(
                    &configmaps,
                    Some("a"),
                    json!({"metadata": {"name": name, "labels": {"app": app}}}),
                )
                .unwrap();
        }
        let filter = Filter {
            labels: Selector::parse("app=web").unwrap(),
            ..Filter::default()
        };
        let deleted = store.delete_collection(&configmaps, &filter).unwrap();
        assert_eq!(deleted.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(store.count(&configmaps), 1);
    }

    #[test]
    fn an_exact_list_serves_the_state_at_that_resource_version() {
        let (store, configmaps) = store();
        store
            .create(
                &configmaps,
                Some("a"),
                json!({"metadata": {"name": "x"}, "data": {"v": "1"}}),
            )
            .unwrap();
        let then = store.resource_version();
        store
            .patch(
                &configmaps,
                Some("a"),
                "x",
                PatchType::Merge,
                json!({"data": {"v": "2"}}),
                false,
            )
            .unwrap();
        store
            .create(&configmaps, Some("a"), json!({"metadata": {"name": "y"}}))
            .unwrap();
        let options = ListOptions {
            resource_version: Some(then.to_string()),
            resource_version_match: Some("Exact".into()),
            ..ListOptions::default()
        };
        let page = store.list(&configmaps, &Filter::default(), &options).unwrap();
        assert_eq!(page.resource_version, then);
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].value["data"]["v"], "1");
        store.compact();
        assert_eq!(
            store.list(&configmaps, &Filter::default(), &options).unwrap_err().code,
            410
        );
    }
}
