//! The Indexer: a thread-safe object cache keyed `namespace/name`, with named indexes.
//!
//! [`indexer`] returns the two halves: [`IndexerWriter`], the single owner that
//! applies changes, and [`Indexer`], a cheap-to-clone read handle for everyone
//! else (plugins' cache queries above all). Objects are [`CachedObject`]s shared
//! through `Arc`: the cache, the deltas and the plugin queues hold the same bytes.
//!
//! Built-in indexes: `namespace`, `owner` (by owner uid) and `label:<key>` for every
//! label key. More are added with [`IndexerWriter::add_index`], naming a field
//! path, and are back-filled from what is already cached.
//!
//! A read handle may be narrowed to a [`Scope`] of namespaces
//! ([`Indexer::scoped`]): every answer it gives then leaves out namespaced
//! objects outside the scope, index values included. Plugins granted some
//! namespaces read through such handles.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::Recover as _;
use crate::index::{FieldPath, IndexError, LABEL_INDEX_PREFIX, NAMESPACE_INDEX, OWNER_INDEX, check_definition};
use crate::object::CachedObject;
use crate::scope::Scope;
use crate::selector::Selector;

/// How an index computes an object's values.
#[derive(Debug, Clone, PartialEq, Eq)]
enum IndexFunc {
    Namespace,
    Owner,
    Field(FieldPath),
}

impl IndexFunc {
    fn values(&self, object: &CachedObject) -> Vec<String> {
        match self {
            Self::Namespace => object.namespace().map(str::to_owned).into_iter().collect(),
            Self::Owner => object.owner_uids().map(str::to_owned).collect(),
            Self::Field(path) => path.values_in(object.json()),
        }
    }
}

type Keys = BTreeSet<Arc<str>>;

#[derive(Debug)]
struct Index {
    func: IndexFunc,
    values: BTreeMap<String, Keys>,
    /// What a field index holds of each object, so that replacing or removing
    /// it needs no second parse of the JSON it had.
    held: HashMap<Arc<str>, Vec<String>>,
}

impl Index {
    fn new(func: IndexFunc) -> Self {
        Self {
            func,
            values: BTreeMap::new(),
            held: HashMap::new(),
        }
    }

    /// An index of `func` over `objects`.
    fn over<'a>(func: IndexFunc, objects: impl IntoIterator<Item = (&'a Arc<str>, &'a Arc<CachedObject>)>) -> Self {
        let mut index = Self::new(func);
        for (key, object) in objects {
            index.insert(key, object);
        }
        index
    }

    fn insert(&mut self, key: &Arc<str>, object: &CachedObject) {
        let values = self.func.values(object);
        self.insert_values(key, values);
    }

    fn insert_values(&mut self, key: &Arc<str>, values: Vec<String>) {
        for value in &values {
            self.values.entry(value.clone()).or_default().insert(key.clone());
        }
        if matches!(self.func, IndexFunc::Field(_)) && !values.is_empty() {
            self.held.insert(key.clone(), values);
        }
    }

    /// Moves `key` from what `old` holds to what `new` does; most changes to
    /// an object leave its index values as they were, and then this is a
    /// comparison only.
    fn update(&mut self, key: &Arc<str>, old: &CachedObject, new: &CachedObject) {
        let values = match &self.func {
            // The namespace is part of the key.
            IndexFunc::Namespace => return,
            IndexFunc::Owner if old.owner_uids().eq(new.owner_uids()) => return,
            IndexFunc::Owner => self.func.values(new),
            IndexFunc::Field(path) => {
                let values = path.values_in(new.json());
                if self.held.get(key).map_or(values.is_empty(), |held| *held == values) {
                    return;
                }
                values
            }
        };
        self.remove(key, old);
        self.insert_values(key, values);
    }

    fn remove(&mut self, key: &Arc<str>, object: &CachedObject) {
        let values = match self.func {
            IndexFunc::Field(_) => self.held.remove(key).unwrap_or_default(),
            _ => self.func.values(object),
        };
        for value in &values {
            remove_key(&mut self.values, value, key);
        }
    }

    fn clear(&mut self) {
        self.values.clear();
        self.held.clear();
    }
}

#[derive(Debug, Default)]
struct Inner {
    objects: BTreeMap<Arc<str>, Arc<CachedObject>>,
    indexes: HashMap<String, Index>,
    /// label key → label value → object keys: serves `label:<key>` and selectors.
    labels: HashMap<String, BTreeMap<String, Keys>>,
    /// Leased indexes ([`Indexer::lease_index`]) → how many leases hold each.
    leases: HashMap<String, usize>,
}

impl Inner {
    /// Caches `objects` (after what was there was taken out into `old`);
    /// returns the objects of `old` not among them: those gone.
    fn refill(
        &mut self,
        objects: impl IntoIterator<Item = Arc<CachedObject>>,
        mut old: BTreeMap<Arc<str>, Arc<CachedObject>>,
    ) -> Vec<Arc<CachedObject>> {
        for object in objects {
            let key = Arc::clone(object.shared_key());
            old.remove(&key);
            self.insert_into_indexes(&key, &object);
            self.objects.insert(key, object);
        }
        old.into_values().collect()
    }

    fn insert_into_indexes(&mut self, key: &Arc<str>, object: &CachedObject) {
        for index in self.indexes.values_mut() {
            index.insert(key, object);
        }
        self.insert_labels(key, object);
    }

    fn remove_from_indexes(&mut self, key: &Arc<str>, object: &CachedObject) {
        for index in self.indexes.values_mut() {
            index.remove(key, object);
        }
        self.remove_labels(key, object);
    }

    /// Moves `key` in the indexes from what `old` holds to what `new` does.
    fn reindex(&mut self, key: &Arc<str>, old: &CachedObject, new: &CachedObject) {
        for index in self.indexes.values_mut() {
            index.update(key, old, new);
        }
        if !old.labels().iter().eq(new.labels().iter()) {
            self.remove_labels(key, old);
            self.insert_labels(key, new);
        }
    }

    fn insert_labels(&mut self, key: &Arc<str>, object: &CachedObject) {
        for (label, value) in object.labels().iter() {
            if !self.labels.contains_key(label) {
                self.labels.insert(label.to_owned(), BTreeMap::new());
            }
            let Some(values) = self.labels.get_mut(label) else {
                continue;
            };
            match values.get_mut(value) {
                Some(keys) => {
                    keys.insert(key.clone());
                }
                None => {
                    values.insert(value.to_owned(), Keys::from([key.clone()]));
                }
            }
        }
    }

    fn remove_labels(&mut self, key: &Arc<str>, object: &CachedObject) {
        for (label, value) in object.labels().iter() {
            if let Some(values) = self.labels.get_mut(label) {
                remove_key(values, value, key);
                if values.is_empty() {
                    self.labels.remove(label);
                }
            }
        }
    }

    /// The keys index `name` holds under `value`; `None` when there is no such index.
    fn index_keys(&self, name: &str, value: &str) -> Result<Option<&Keys>, IndexError> {
        if let Some(label) = name.strip_prefix(LABEL_INDEX_PREFIX) {
            return Ok(self.labels.get(label).and_then(|values| values.get(value)));
        }
        let index = self
            .indexes
            .get(name)
            .ok_or_else(|| IndexError::Unknown(name.to_owned()))?;
        Ok(index.values.get(value))
    }
}

fn remove_key(values: &mut BTreeMap<String, Keys>, value: &str, key: &Arc<str>) {
    if let Some(keys) = values.get_mut(value) {
        keys.remove(key);
        if keys.is_empty() {
            values.remove(value);
        }
    }
}

/// Creates an empty cache with the built-in indexes: the read handle and the writer.
///
/// # Examples
///
/// ```
/// use kinformer_informers::indexer::indexer;
/// use kinformer_informers::object::CachedObject;
/// use std::sync::Arc;
///
/// let (reader, writer) = indexer();
/// let pod = CachedObject::from_json(r#"{"metadata":{"name":"web-0","namespace":"shop","labels":{"app":"web"}}}"#)?;
/// writer.apply(Arc::new(pod));
/// assert_eq!(reader.by_index("label:app", "web", 10)?.objects.len(), 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn indexer() -> (Indexer, IndexerWriter) {
    let mut inner = Inner::default();
    for (name, func) in [(NAMESPACE_INDEX, IndexFunc::Namespace), (OWNER_INDEX, IndexFunc::Owner)] {
        inner.indexes.insert(name.to_owned(), Index::new(func));
    }
    let inner = Arc::new(RwLock::new(inner));
    (
        Indexer {
            inner: Arc::clone(&inner),
            scope: Scope::all(),
            aliases: None,
        },
        IndexerWriter { inner },
    )
}

/// A bounded answer: the objects, ordered by key, and whether more matched.
#[derive(Debug, Default, Clone)]
pub struct Listing {
    /// The matching objects, at most the limit asked for.
    pub objects: Vec<Arc<CachedObject>>,
    /// True when more objects matched than were returned.
    pub truncated: bool,
}

impl Listing {
    fn collect<'a>(objects: impl Iterator<Item = &'a Arc<CachedObject>>, limit: usize) -> Self {
        let mut listing = Self::default();
        for object in objects {
            if listing.objects.len() == limit {
                listing.truncated = true;
                break;
            }
            listing.objects.push(Arc::clone(object));
        }
        listing
    }
}

/// The read half of the cache; clone it freely.
///
/// Each call sees a consistent snapshot, which may already be stale when it
/// returns: the writer goes on applying changes.
#[derive(Debug, Clone)]
pub struct Indexer {
    inner: Arc<RwLock<Inner>>,
    scope: Scope,
    /// With aliases ([`Indexer::aliased`]), the index names this handle
    /// knows beside the built-in ones, and the indexes they stand for.
    aliases: Option<Arc<HashMap<String, String>>>,
}

impl Indexer {
    fn read(&self) -> RwLockReadGuard<'_, Inner> {
        self.inner.read().recover()
    }

    /// A handle on the same cache that sees only what is in `scope` (and in this
    /// handle's own scope).
    #[must_use]
    pub fn scoped(&self, scope: &Scope) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            scope: self.scope.intersect(scope),
            aliases: self.aliases.clone(),
        }
    }

    /// A handle on the same cache that knows only the built-in indexes and
    /// `aliases` (name → an index of the cache, such as a lease's): one
    /// plugin's names for the indexes it declared, which no other plugin's
    /// names can collide with.
    #[must_use]
    pub fn aliased(&self, aliases: HashMap<String, String>) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            scope: self.scope.clone(),
            aliases: Some(Arc::new(aliases)),
        }
    }

    /// The index of the cache that `index` names through this handle.
    fn resolve<'a>(&'a self, index: &'a str) -> Result<&'a str, IndexError> {
        let Some(aliases) = &self.aliases else {
            return Ok(index);
        };
        if index == NAMESPACE_INDEX || index == OWNER_INDEX || index.starts_with(LABEL_INDEX_PREFIX) {
            return Ok(index);
        }
        aliases
            .get(index)
            .map(String::as_str)
            .ok_or_else(|| IndexError::Unknown(index.to_owned()))
    }

    /// Holds an index of the cache by `field_path`, adding it if no lease
    /// holds one yet; the index is dropped when its last lease is. Leases of
    /// the same field path share one index, whoever named it what
    /// ([`Indexer::aliased`]).
    ///
    /// # Errors
    ///
    /// [`IndexError::InvalidFieldPath`] when the path is malformed.
    pub fn lease_index(&self, field_path: &str) -> Result<IndexLease, IndexError> {
        let path = crate::index::FieldPath::parse(field_path)?;
        let name = format!("field:{field_path}");
        let mut inner = self.inner.write().recover();
        if !inner.indexes.contains_key(&name) {
            let index = Index::over(IndexFunc::Field(path), &inner.objects);
            inner.indexes.insert(name.clone(), index);
        }
        *inner.leases.entry(name.clone()).or_default() += 1;
        Ok(IndexLease {
            inner: Arc::clone(&self.inner),
            name,
        })
    }

    /// The namespaces this handle sees.
    #[must_use]
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The object with this key.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        if !self.scope.contains_key(key) {
            return None;
        }
        self.read().objects.get(key).cloned()
    }

    /// How many objects are cached (in scope).
    #[must_use]
    pub fn len(&self) -> usize {
        let inner = self.read();
        if self.scope.is_all() {
            inner.objects.len()
        } else {
            inner.objects.keys().filter(|key| self.scope.contains_key(key)).count()
        }
    }

    /// True when nothing is cached (in scope).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every object (in scope), ordered by key.
    #[must_use]
    pub fn list_all(&self) -> Vec<Arc<CachedObject>> {
        self.read()
            .objects
            .values()
            .filter(|object| self.scope.contains(object))
            .cloned()
            .collect()
    }

    /// At most `limit` objects in `namespace` (all namespaces for `None`) that match
    /// `selector`, ordered by key.
    ///
    /// An equality or `in` requirement of the selector is answered from the label
    /// index, and a namespace (or the handle's scope) from the namespace index; only
    /// the candidates they yield are checked against the rest of the selector.
    #[must_use]
    pub fn list(&self, namespace: Option<&str>, selector: &Selector, limit: usize) -> Listing {
        if namespace.is_some_and(|namespace| !self.scope.allows(namespace)) {
            return Listing::default();
        }
        let inner = self.read();
        let in_namespace = |object: &CachedObject| namespace.is_none_or(|ns| object.namespace() == Some(ns));
        let keep = |object: &&Arc<CachedObject>| {
            in_namespace(object) && self.scope.contains(object) && selector.matches(&object.labels())
        };

        // The narrowest pinned label requirement, if any, bounds the candidates.
        let narrowest = selector
            .requirements()
            .iter()
            .filter_map(|requirement| requirement.required_values())
            .map(|(label, values)| {
                let index = inner.labels.get(label);
                let keys: Vec<&Keys> = values.iter().filter_map(|value| index?.get(value)).collect();
                (keys.iter().map(|keys| keys.len()).sum::<usize>(), keys)
            })
            .min_by_key(|(count, _)| *count);
        if let Some((_, key_sets)) = narrowest {
            let keys: BTreeSet<&Arc<str>> = key_sets.into_iter().flatten().collect();
            let objects = keys.into_iter().filter_map(|key| inner.objects.get(key));
            return Listing::collect(objects.filter(keep), limit);
        }
        let by_namespace = inner.indexes.get(NAMESPACE_INDEX).map(|index| &index.values);
        let namespaces: Option<Vec<&str>> = match (namespace, self.scope.namespaces()) {
            (Some(namespace), _) => Some(vec![namespace]),
            // A scoped handle on namespaced objects reads its namespaces only.
            (None, Some(scope)) if by_namespace.is_some_and(|values| !values.is_empty()) => {
                Some(scope.iter().map(String::as_str).collect())
            }
            (None, _) => None,
        };
        if let Some(namespaces) = namespaces {
            let keys: BTreeSet<&Arc<str>> = namespaces
                .into_iter()
                .filter_map(|namespace| by_namespace?.get(namespace))
                .flatten()
                .collect();
            let objects = keys.into_iter().filter_map(|key| inner.objects.get(key));
            return Listing::collect(objects.filter(keep), limit);
        }
        Listing::collect(inner.objects.values().filter(keep), limit)
    }

    /// At most `limit` objects (in scope) whose index `index` holds `value`,
    /// ordered by key.
    ///
    /// # Errors
    ///
    /// [`IndexError::Unknown`] when there is no such index.
    pub fn by_index(&self, index: &str, value: &str, limit: usize) -> Result<Listing, IndexError> {
        let index = self.resolve(index)?;
        let inner = self.read();
        let keys = inner.index_keys(index, value)?;
        let objects = keys
            .into_iter()
            .flatten()
            .filter(|key| self.scope.contains_key(key))
            .filter_map(|key| inner.objects.get(key));
        Ok(Listing::collect(objects, limit))
    }

    /// The values index `index` holds for objects in scope, sorted, at most `limit`.
    ///
    /// # Errors
    ///
    /// [`IndexError::Unknown`] when there is no such index.
    pub fn index_values(&self, index: &str, limit: usize) -> Result<Vec<String>, IndexError> {
        let index = self.resolve(index)?;
        let inner = self.read();
        let values = if let Some(label) = index.strip_prefix(LABEL_INDEX_PREFIX) {
            inner.labels.get(label)
        } else {
            let index = inner
                .indexes
                .get(index)
                .ok_or_else(|| IndexError::Unknown(index.to_owned()))?;
            Some(&index.values)
        };
        let visible = |keys: &Keys| self.scope.is_all() || keys.iter().any(|key| self.scope.contains_key(key));
        Ok(values
            .into_iter()
            .flatten()
            .filter(|(_, keys)| visible(keys))
            .take(limit)
            .map(|(value, _)| value.clone())
            .collect())
    }

    /// Adds an index, as [`IndexerWriter::add_index`] does: indexes may be declared
    /// by any holder of the cache (plugins register theirs at runtime).
    ///
    /// # Errors
    ///
    /// As [`IndexerWriter::add_index`].
    pub fn add_index(&self, name: &str, field_path: &str) -> Result<(), IndexError> {
        add_index(&self.inner, name, field_path)
    }

    /// The names of the declared indexes (the `label:<key>` indexes are implicit).
    #[must_use]
    pub fn index_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.read().indexes.keys().cloned().collect();
        names.sort();
        names
    }
}

/// The write half of the cache. There is one per cache, or one per namespace
/// when each namespace is listed on its own; it is not `Clone`.
#[derive(Debug)]
pub struct IndexerWriter {
    inner: Arc<RwLock<Inner>>,
}

impl IndexerWriter {
    fn write(&self) -> RwLockWriteGuard<'_, Inner> {
        self.inner.write().recover()
    }

    /// Another writer of this cache, for an informer that fills it with one
    /// reflector per namespace: each writer keeps to its own namespace
    /// (relisting with [`IndexerWriter::replace_in`]).
    pub(crate) fn for_namespace(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }

    /// A read handle on this cache.
    #[must_use]
    pub fn reader(&self) -> Indexer {
        Indexer {
            inner: Arc::clone(&self.inner),
            scope: Scope::all(),
            aliases: None,
        }
    }

    /// Inserts or replaces the object under its key; returns the previous one.
    pub fn apply(&self, object: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        self.apply_with(Arc::clone(object.shared_key()), |_| object).1
    }

    /// Like [`IndexerWriter::apply`], for an object no one holds yet: it
    /// takes the key the cache holds for the object it replaces, so that key
    /// stays the one allocation of it. Returns the object as cached, and the
    /// previous one.
    pub fn apply_new(&self, object: CachedObject) -> (Arc<CachedObject>, Option<Arc<CachedObject>>) {
        self.apply_with(Arc::clone(object.shared_key()), |key| {
            Arc::new(object.with_shared_key(key))
        })
    }

    fn apply_with(
        &self,
        key: Arc<str>,
        object: impl FnOnce(&Arc<str>) -> Arc<CachedObject>,
    ) -> (Arc<CachedObject>, Option<Arc<CachedObject>>) {
        let mut inner = self.write();
        // The map and the indexes keep the key they hold for an object that
        // was cached already.
        let entry = inner.objects.entry(key);
        let key = Arc::clone(entry.key());
        let object = object(&key);
        let previous = match entry {
            Entry::Occupied(mut slot) => Some(slot.insert(Arc::clone(&object))),
            Entry::Vacant(slot) => {
                slot.insert(Arc::clone(&object));
                None
            }
        };
        match &previous {
            Some(previous) => inner.reindex(&key, previous, &object),
            None => inner.insert_into_indexes(&key, &object),
        }
        (object, previous)
    }

    /// Removes the object with this key; returns it.
    pub fn delete(&self, key: &str) -> Option<Arc<CachedObject>> {
        let mut inner = self.write();
        let (key, previous) = inner.objects.remove_entry(key)?;
        inner.remove_from_indexes(&key, &previous);
        Some(previous)
    }

    /// Adds the index `name` over the values at `field_path`, back-filled from what
    /// is cached. Adding the same definition again is a no-op.
    ///
    /// # Errors
    ///
    /// When the name is invalid or taken by another definition, or the path is
    /// malformed.
    pub fn add_index(&self, name: &str, field_path: &str) -> Result<(), IndexError> {
        add_index(&self.inner, name, field_path)
    }

    /// Replaces what is cached in `namespace` (after a relist of that namespace
    /// alone, by one of several reflectors filling one cache); returns the
    /// objects there that are gone. Other namespaces' objects stay.
    pub fn replace_in(
        &self,
        namespace: &str,
        objects: impl IntoIterator<Item = Arc<CachedObject>>,
    ) -> Vec<Arc<CachedObject>> {
        use std::ops::Bound;
        let mut inner = self.write();
        let prefix = format!("{namespace}/");
        let keys: Vec<Arc<str>> = inner
            .objects
            .range::<str, _>((Bound::Included(prefix.as_str()), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(&prefix))
            .map(|(key, _)| Arc::clone(key))
            .collect();
        let mut old = BTreeMap::new();
        for key in keys {
            if let Some(previous) = inner.objects.remove(&key) {
                inner.remove_from_indexes(&key, &previous);
                old.insert(key, previous);
            }
        }
        inner.refill(objects, old)
    }

    /// Replaces the whole content (after a relist); returns the objects that are
    /// gone.
    pub fn replace(&self, objects: impl IntoIterator<Item = Arc<CachedObject>>) -> Vec<Arc<CachedObject>> {
        let mut inner = self.write();
        let old = std::mem::take(&mut inner.objects);
        inner.labels.clear();
        for index in inner.indexes.values_mut() {
            index.clear();
        }
        inner.refill(objects, old)
    }
}

/// Adds a field index; see [`IndexerWriter::add_index`].
fn add_index(inner: &RwLock<Inner>, name: &str, field_path: &str) -> Result<(), IndexError> {
    let func = IndexFunc::Field(check_definition(name, field_path)?);
    let mut inner = inner.write().recover();
    if let Some(existing) = inner.indexes.get(name) {
        return if existing.func == func {
            Ok(())
        } else {
            Err(IndexError::Conflict(name.to_owned()))
        };
    }
    let index = Index::over(func, &inner.objects);
    inner.indexes.insert(name.to_owned(), index);
    Ok(())
}

/// An index of a cache held by one user ([`Indexer::lease_index`]); dropping
/// the last lease of an index drops the index.
#[derive(Debug)]
pub struct IndexLease {
    inner: Arc<RwLock<Inner>>,
    name: String,
}

impl IndexLease {
    /// The name of the index in the cache, for [`Indexer::aliased`].
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for IndexLease {
    fn drop(&mut self) {
        let mut inner = self.inner.write().recover();
        let Some(users) = inner.leases.get_mut(&self.name) else {
            return;
        };
        *users -= 1;
        if *users == 0 {
            inner.leases.remove(&self.name);
            inner.indexes.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(namespace: &str, name: &str, labels: serde_json::Value, node: &str) -> Arc<CachedObject> {
        let value = json!({
            "metadata": {"name": name, "namespace": namespace, "labels": labels,
                         "ownerReferences": [{"uid": format!("owner-{}", &name[..1])}]},
            "spec": {"nodeName": node, "containers": [{"image": "a"}, {"image": "b"}]}
        });
        Arc::new(CachedObject::from_value(&value).unwrap())
    }

    fn keys(listing: &Listing) -> Vec<&str> {
        listing.objects.iter().map(|object| object.key()).collect()
    }

    #[test]
    fn built_in_indexes_follow_apply_update_and_delete() {
        let (reader, writer) = indexer();
        writer.apply(pod("a", "web-0", json!({"app": "web"}), "n1"));
        writer.apply(pod("b", "db-0", json!({"app": "db"}), "n1"));
        assert_eq!(keys(&reader.by_index("namespace", "a", 10).unwrap()), ["a/web-0"]);
        assert_eq!(keys(&reader.by_index("owner", "owner-d", 10).unwrap()), ["b/db-0"]);
        assert_eq!(reader.index_values("label:app", 10).unwrap(), ["db", "web"]);

        // An update moves the object between index values.
        writer.apply(pod("a", "web-0", json!({"app": "api"}), "n1"));
        assert!(reader.by_index("label:app", "web", 10).unwrap().objects.is_empty());
        assert_eq!(reader.index_values("label:app", 10).unwrap(), ["api", "db"]);

        assert!(writer.delete("b/db-0").is_some());
        assert_eq!(reader.index_values("namespace", 10).unwrap(), ["a"]);
        assert!(writer.delete("b/db-0").is_none());
    }

    #[test]
    fn leased_indexes_are_shared_by_field_path_named_per_holder_and_dropped_with_the_last_lease() {
        let (reader, writer) = indexer();
        writer.apply(pod("a", "web-0", json!({"app": "web"}), "n1"));
        writer.apply(pod("a", "web-1", json!({"app": "web"}), "n2"));
        let first = reader.lease_index("spec.nodeName").unwrap();
        let second = reader.lease_index("spec.nodeName").unwrap();
        assert_eq!(first.name(), second.name());
        let other = reader.lease_index("metadata.name").unwrap();

        // Two holders call their indexes `node`, on different fields.
        let by_node = reader.aliased(HashMap::from([("node".to_owned(), first.name().to_owned())]));
        let by_name = reader.aliased(HashMap::from([("node".to_owned(), other.name().to_owned())]));
        assert_eq!(keys(&by_node.by_index("node", "n2", 10).unwrap()), ["a/web-1"]);
        assert_eq!(keys(&by_name.by_index("node", "web-0", 10).unwrap()), ["a/web-0"]);
        // A holder knows its own names and the built-in ones, nothing else.
        assert!(matches!(
            by_node.by_index(first.name(), "n2", 10),
            Err(IndexError::Unknown(_))
        ));
        assert_eq!(by_node.index_values("namespace", 10).unwrap(), ["a"]);
        // The index follows changes while held.
        writer.apply(pod("a", "web-2", json!({}), "n2"));
        assert_eq!(by_node.by_index("node", "n2", 10).unwrap().objects.len(), 2);

        let name = first.name().to_owned();
        drop(first);
        assert!(reader.index_names().contains(&name), "still held by the second lease");
        drop(second);
        assert!(!reader.index_names().contains(&name), "dropped with its last lease");
        assert_eq!(reader.index_names(), ["field:metadata.name", "namespace", "owner"]);
        drop(other);
    }

    #[test]
    fn a_scoped_reader_sees_nothing_outside_its_namespaces() {
        let (reader, writer) = indexer();
        writer.add_index("node", "spec.nodeName").unwrap();
        writer.apply(pod("a", "web-0", json!({"app": "web", "team": "x"}), "n1"));
        writer.apply(pod("b", "web-1", json!({"app": "web", "team": "y"}), "n2"));
        writer.apply(pod("c", "db-0", json!({"app": "db"}), "n2"));
        let a = reader.scoped(&Scope::only(["a"]));
        let all = Selector::default();

        assert!(a.get("a/web-0").is_some());
        assert!(a.get("b/web-1").is_none());
        assert_eq!((a.len(), a.list_all().len()), (1, 1));
        assert_eq!(keys(&a.list(None, &all, 10)), ["a/web-0"]);
        assert_eq!(
            keys(&a.list(None, &Selector::parse("app=web").unwrap(), 10)),
            ["a/web-0"]
        );
        assert_eq!(
            keys(&a.list(None, &Selector::parse("app!=db").unwrap(), 10)),
            ["a/web-0"]
        );
        assert!(a.list(Some("b"), &all, 10).objects.is_empty());
        assert!(a.by_index("node", "n2", 10).unwrap().objects.is_empty());
        assert!(a.by_index("namespace", "b", 10).unwrap().objects.is_empty());
        assert_eq!(a.index_values("namespace", 10).unwrap(), ["a"]);
        assert_eq!(a.index_values("node", 10).unwrap(), ["n1"]);
        assert_eq!(a.index_values("label:team", 10).unwrap(), ["x"]);
        // Narrowing again can only take away.
        let none = a.scoped(&Scope::only(["b"]));
        assert!(none.list(None, &all, 10).objects.is_empty());
        assert_eq!(reader.scoped(&Scope::only(["a", "c"])).len(), 2);

        // Cluster-scoped objects are in every scope.
        let (nodes, node_writer) = indexer();
        let node = CachedObject::from_value(&json!({"metadata": {"name": "n1"}})).unwrap();
        node_writer.apply(Arc::new(node));
        let scoped_nodes = nodes.scoped(&Scope::only(["a"]));
        assert_eq!(keys(&scoped_nodes.list(None, &all, 10)), ["n1"]);
        assert!(scoped_nodes.get("n1").is_some());
    }

    #[test]
    fn a_new_state_shares_the_key_the_cache_holds() {
        let (reader, writer) = indexer();
        let first = pod("a", "web-0", json!({"app": "web"}), "n1");
        writer.apply(Arc::clone(&first));
        let next = CachedObject::clone(&pod("a", "web-0", json!({"app": "api"}), "n1"));
        assert!(!Arc::ptr_eq(next.shared_key(), first.shared_key()));
        let (cached, previous) = writer.apply_new(next);
        assert!(Arc::ptr_eq(&previous.unwrap(), &first));
        assert!(Arc::ptr_eq(cached.shared_key(), first.shared_key()));
        assert!(Arc::ptr_eq(&reader.get("a/web-0").unwrap(), &cached));
        assert_eq!(reader.index_values("label:app", 10).unwrap(), ["api"]);
    }

    #[test]
    fn field_indexes_are_back_filled_and_maintained() {
        let (reader, writer) = indexer();
        writer.apply(pod("a", "web-0", json!({}), "n1"));
        writer.add_index("node", "spec.nodeName").unwrap();
        writer.add_index("image", "spec.containers.image").unwrap();
        assert_eq!(keys(&reader.by_index("node", "n1", 10).unwrap()), ["a/web-0"]);
        assert_eq!(reader.index_values("image", 10).unwrap(), ["a", "b"]);
        writer.apply(pod("a", "web-1", json!({}), "n2"));
        assert_eq!(reader.index_values("node", 10).unwrap(), ["n1", "n2"]);
        // An update that moves a field value, and one that moves none.
        writer.apply(pod("a", "web-0", json!({}), "n2"));
        writer.apply(pod("a", "web-1", json!({}), "n2"));
        assert_eq!(reader.index_values("node", 10).unwrap(), ["n2"]);
        assert_eq!(
            keys(&reader.by_index("node", "n2", 10).unwrap()),
            ["a/web-0", "a/web-1"]
        );
        assert_eq!(writer.add_index("node", "spec.nodeName"), Ok(()));
        assert_eq!(
            writer.add_index("node", "spec.other"),
            Err(IndexError::Conflict("node".into()))
        );
        assert!(matches!(
            writer.add_index("namespace", "x"),
            Err(IndexError::InvalidName(..))
        ));
        assert!(matches!(
            writer.add_index("bad", "a..b"),
            Err(IndexError::InvalidFieldPath(_))
        ));
        assert_eq!(
            reader.by_index("nope", "x", 1).unwrap_err(),
            IndexError::Unknown("nope".into())
        );
    }

    #[test]
    fn list_filters_by_namespace_and_selector_and_is_bounded() {
        let (reader, writer) = indexer();
        for (ns, name, app) in [
            ("a", "w-0", "web"),
            ("a", "w-1", "web"),
            ("b", "w-2", "web"),
            ("a", "d-0", "db"),
        ] {
            writer.apply(pod(ns, name, json!({"app": app}), "n"));
        }
        let web = Selector::parse("app=web").unwrap();
        assert_eq!(keys(&reader.list(Some("a"), &web, 10)), ["a/w-0", "a/w-1"]);
        assert_eq!(keys(&reader.list(None, &web, 10)), ["a/w-0", "a/w-1", "b/w-2"]);
        let not_web = Selector::parse("app!=web").unwrap();
        assert_eq!(keys(&reader.list(None, &not_web, 10)), ["a/d-0"]);
        let bounded = reader.list(None, &Selector::default(), 2);
        assert_eq!((bounded.objects.len(), bounded.truncated), (2, true));
        assert!(!reader.list(Some("a"), &Selector::default(), 3).truncated);
    }

    #[test]
    fn replace_returns_what_vanished_and_rebuilds_indexes() {
        let (reader, writer) = indexer();
        writer.apply(pod("a", "w-0", json!({"app": "web"}), "n"));
        writer.apply(pod("a", "w-1", json!({"app": "web"}), "n"));
        let gone = writer.replace([pod("a", "w-1", json!({"app": "db"}), "n")]);
        assert_eq!(gone.iter().map(|o| o.key()).collect::<Vec<_>>(), ["a/w-0"]);
        assert_eq!(reader.index_values("label:app", 10).unwrap(), ["db"]);
        assert_eq!(reader.len(), 1);
    }

    #[test]
    fn index_queries_agree_with_a_brute_force_scan_on_random_data() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};

        let mut rng = StdRng::seed_from_u64(3);
        let (reader, writer) = indexer();
        writer.add_index("node", "spec.nodeName").unwrap();
        let apps = ["web", "db", "cache"];
        let tiers = ["a", "b"];
        for step in 0..2000 {
            let name = format!("p{}", rng.random_range(0..150));
            let namespace = ["x", "y", "z"][rng.random_range(0..3)];
            if rng.random_range(0..5) == 0 {
                writer.delete(&format!("{namespace}/{name}"));
                continue;
            }
            let mut labels = serde_json::Map::new();
            labels.insert("app".into(), json!(apps[rng.random_range(0..3)]));
            if rng.random_bool(0.5) {
                labels.insert("tier".into(), json!(tiers[rng.random_range(0..2)]));
            }
            let value = json!({
                "metadata": {"name": name, "namespace": namespace, "resourceVersion": step.to_string(),
                             "labels": labels, "ownerReferences": [{"uid": format!("o{}", rng.random_range(0..5))}]},
                "spec": {"nodeName": format!("n{}", rng.random_range(0..4))}
            });
            writer.apply(Arc::new(CachedObject::from_value(&value).unwrap()));
        }
        let all = reader.list_all();
        let brute = |keep: &dyn Fn(&CachedObject) -> bool| -> Vec<String> {
            all.iter().filter(|o| keep(o)).map(|o| o.key().to_owned()).collect()
        };
        let selectors = [
            "app=web",
            "app in (web,db),tier=a",
            "tier",
            "!tier",
            "app!=db,tier notin (b)",
            "",
        ];
        for selector_text in selectors {
            let selector = Selector::parse(selector_text).unwrap();
            for namespace in [None, Some("x"), Some("z")] {
                let listed: Vec<String> = reader
                    .list(namespace, &selector, usize::MAX)
                    .objects
                    .iter()
                    .map(|o| o.key().to_owned())
                    .collect();
                let expected =
                    brute(&|o| namespace.is_none_or(|ns| o.namespace() == Some(ns)) && selector.matches(&o.labels()));
                assert_eq!(listed, expected, "{selector_text:?} in {namespace:?}");
            }
        }
        for (index, values, field) in [
            ("node", vec!["n0", "n3"], "node"),
            ("owner", vec!["o1", "o4"], "owner"),
            ("label:app", vec!["web", "cache"], "app"),
            ("namespace", vec!["y"], "namespace"),
        ] {
            for value in values {
                let found: Vec<String> = reader
                    .by_index(index, value, usize::MAX)
                    .unwrap()
                    .objects
                    .iter()
                    .map(|o| o.key().to_owned())
                    .collect();
                let expected = brute(&|o| match field {
                    "node" => o.json().contains(&format!("\"nodeName\":\"{value}\"")),
                    "owner" => o.owner_uids().any(|uid| uid == value),
                    "app" => o.labels().get("app") == Some(value),
                    _ => o.namespace() == Some(value),
                });
                assert_eq!(found, expected, "{index}={value}");
            }
        }
    }
}
