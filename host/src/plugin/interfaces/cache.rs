//! The `cache` interface: a plugin's queries of the host's caches, within
//! its read grant and bounded by its query limits (and `types`, which only
//! declares types).

use kube::api::GroupVersionKind;
use wasmtime::component::Linker;

use super::{HostState, View, Viewed};
use crate::caches::Caches;
use crate::grant::Grant;
use crate::index::IndexError;
use crate::indexer::{Indexer, Listing};
use crate::limits::Limits;
use crate::plugin::inputs::Answer;
use crate::plugin::v0_1::kinformer::plugin::{cache, types};
use crate::selector::Selector;

/// The longest key, namespace, index name or value a plugin may pass.
const MAX_ARGUMENT_LEN: usize = 512;
/// The longest label selector a plugin may pass.
const MAX_SELECTOR_LEN: usize = 4096;

/// What a plugin's cache queries read, and how much they may answer.
pub(crate) struct Cache {
    /// The plugin's name, for the queries' spans.
    name: String,
    caches: Caches,
    grant: Grant,
    /// `limits.query-objects`.
    query_objects: usize,
    /// `limits.query-bytes`.
    query_bytes: usize,
}

/// The store's `cache` part, with the call, for the host functions.
fn view(state: &mut HostState) -> View<'_, Cache> {
    View {
        state: &mut state.cache,
        call: &mut state.call,
    }
}

/// Adds `types` and `cache` to the linker.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    types::add_to_linker::<_, Viewed<Cache>>(linker, view)?;
    cache::add_to_linker::<_, Viewed<Cache>>(linker, view)
}

impl Cache {
    pub(crate) fn new(name: String, caches: Caches, grant: Grant, limits: &Limits) -> Self {
        Self {
            name,
            caches,
            grant,
            query_objects: limits.query_objects,
            query_bytes: limits.query_bytes,
        }
    }

    fn indexer(&self, gvk: &types::GroupVersionKind) -> Result<Indexer, cache::CacheError> {
        for part in [&gvk.group, &gvk.version, &gvk.kind] {
            check_argument("resource", part)?;
        }
        let key = GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind);
        if !self.grant.allows_resource(&key) {
            return Err(cache::CacheError::Denied(format!(
                "{} {} is not granted to this plugin",
                key.api_version(),
                key.kind
            )));
        }
        self.caches
            .get(&key)
            .map(|indexer| indexer.scoped(self.grant.namespaces()))
            .ok_or_else(|| {
                cache::CacheError::NotCached(format!(
                    "no cache of {}/{} {}: subscribe to it in the registration",
                    gvk.group, gvk.version, gvk.kind
                ))
            })
    }

    /// Refuses a namespace outside the grant.
    fn check_namespace(&self, namespace: &str) -> Result<(), cache::CacheError> {
        if self.grant.namespaces().allows(namespace) {
            Ok(())
        } else {
            Err(cache::CacheError::Denied(format!(
                "namespace {namespace:?} is not granted to this plugin"
            )))
        }
    }

    /// The effective object limit: the plugin's, capped by the host's.
    fn object_limit(&self, requested: u32) -> usize {
        match requested {
            0 => self.query_objects,
            n => (n as usize).min(self.query_objects),
        }
    }

    /// The listing's JSON, cut at the byte limit.
    fn to_object_list(&self, listing: Listing) -> cache::ObjectList {
        let mut objects = Vec::with_capacity(listing.objects.len());
        let mut bytes = 0;
        let mut truncated = listing.truncated;
        for object in listing.objects {
            bytes += object.json().len();
            if bytes > self.query_bytes {
                truncated = true;
                break;
            }
            objects.push(object.json().to_string());
        }
        cache::ObjectList { objects, truncated }
    }
}

fn check_argument(what: &str, value: &str) -> Result<(), cache::CacheError> {
    if value.len() > MAX_ARGUMENT_LEN {
        return Err(cache::CacheError::InvalidArgument(format!(
            "{what} is {} bytes, the limit is {MAX_ARGUMENT_LEN}",
            value.len()
        )));
    }
    Ok(())
}

fn index_error(error: IndexError) -> cache::CacheError {
    match error {
        IndexError::Unknown(_) => cache::CacheError::UnknownIndex(error.to_string()),
        other => cache::CacheError::InvalidArgument(other.to_string()),
    }
}

impl types::Host for View<'_, Cache> {}

impl cache::Host for View<'_, Cache> {
    fn get(&mut self, gvk: types::GroupVersionKind, key: String) -> Result<Option<String>, cache::CacheError> {
        let query = format!("get {}/{}/{} {key}", gvk.group, gvk.version, gvk.kind);
        self.shared(query, Answer::Object, Answer::object, |this| this.state.get(&gvk, &key))
    }

    fn list_objects(
        &mut self,
        gvk: types::GroupVersionKind,
        query: cache::ListQuery,
    ) -> Result<cache::ObjectList, cache::CacheError> {
        let asked = format!(
            "list {}/{}/{} {:?} {:?} {}",
            gvk.group, gvk.version, gvk.kind, query.namespace, query.label_selector, query.limit
        );
        self.shared(asked, Answer::Objects, Answer::objects, |this| {
            this.state.list(&gvk, &query)
        })
    }

    fn by_index(
        &mut self,
        gvk: types::GroupVersionKind,
        index: String,
        value: String,
        limit: u32,
    ) -> Result<cache::ObjectList, cache::CacheError> {
        let query = format!(
            "by-index {}/{}/{} {index:?} {value:?} {limit}",
            gvk.group, gvk.version, gvk.kind
        );
        self.shared(query, Answer::Objects, Answer::objects, |this| {
            this.state.by_index(&gvk, &index, &value, limit)
        })
    }

    fn index_values(&mut self, gvk: types::GroupVersionKind, index: String) -> Result<Vec<String>, cache::CacheError> {
        let query = format!("index-values {}/{}/{} {index:?}", gvk.group, gvk.version, gvk.kind);
        self.shared(query, Answer::Values, Answer::values, |this| {
            this.state.index_values(&gvk, &index)
        })
    }
}

/// The cache queries, as the plugin's calls of `cache` reach them (through
/// [`View::shared`]).
impl Cache {
    fn get(&self, gvk: &types::GroupVersionKind, key: &str) -> Result<Option<String>, cache::CacheError> {
        check_argument("key", key)?;
        if key.is_empty() {
            return Err(cache::CacheError::InvalidArgument("empty key".into()));
        }
        if let Some((namespace, _)) = key.split_once('/') {
            self.check_namespace(namespace)?;
        }
        let indexer = self.indexer(gvk)?;
        let _span = tracing::trace_span!("cache.get", plugin = %self.name, key = %key).entered();
        Ok(indexer.get(key).map(|object| object.json().to_string()))
    }

    fn list(
        &self,
        gvk: &types::GroupVersionKind,
        query: &cache::ListQuery,
    ) -> Result<cache::ObjectList, cache::CacheError> {
        if let Some(namespace) = &query.namespace {
            check_argument("namespace", namespace)?;
            self.check_namespace(namespace)?;
        }
        let selector = match &query.label_selector {
            Some(selector) if selector.len() > MAX_SELECTOR_LEN => {
                return Err(cache::CacheError::InvalidArgument(format!(
                    "label selector is {} bytes, the limit is {MAX_SELECTOR_LEN}",
                    selector.len()
                )));
            }
            Some(selector) => {
                Selector::parse(selector).map_err(|error| cache::CacheError::InvalidArgument(error.to_string()))?
            }
            None => Selector::default(),
        };
        let indexer = self.indexer(gvk)?;
        let listing = indexer.list(query.namespace.as_deref(), &selector, self.object_limit(query.limit));
        Ok(self.to_object_list(listing))
    }

    fn by_index(
        &self,
        gvk: &types::GroupVersionKind,
        index: &str,
        value: &str,
        limit: u32,
    ) -> Result<cache::ObjectList, cache::CacheError> {
        check_argument("index", index)?;
        check_argument("value", value)?;
        let indexer = self.indexer(gvk)?;
        let listing = indexer
            .by_index(index, value, self.object_limit(limit))
            .map_err(index_error)?;
        Ok(self.to_object_list(listing))
    }

    fn index_values(&self, gvk: &types::GroupVersionKind, index: &str) -> Result<Vec<String>, cache::CacheError> {
        check_argument("index", index)?;
        let indexer = self.indexer(gvk)?;
        indexer.index_values(index, self.query_objects).map_err(index_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::indexer::indexer;
    use crate::object::CachedObject;
    use crate::plugin::PluginOptions;
    use cache::Host as _;

    fn pods() -> types::GroupVersionKind {
        types::GroupVersionKind {
            group: String::new(),
            version: "v1".into(),
            kind: "Pod".into(),
        }
    }

    /// A store's data whose pod cache holds `count` pods labelled `app=web`.
    fn state(count: usize, limits: Limits) -> HostState {
        let caches = Caches::new();
        let (reader, writer) = indexer();
        for i in 0..count {
            let json = format!(r#"{{"metadata":{{"name":"web-{i:03}","namespace":"a","labels":{{"app":"web"}}}}}}"#);
            writer.apply(Arc::new(CachedObject::from_json(json).unwrap()));
        }
        caches.insert(GroupVersionKind::gvk("", "v1", "Pod"), reader);
        HostState::new("test".into(), caches, PluginOptions::with_limits(limits))
    }

    fn query(selector: Option<&str>, limit: u32) -> cache::ListQuery {
        cache::ListQuery {
            namespace: None,
            label_selector: selector.map(str::to_owned),
            limit,
        }
    }

    #[test]
    fn nonsense_arguments_are_error_values() {
        let mut store = state(1, Limits::default());
        let mut state = view(&mut store);
        fn invalid<T>(result: Result<T, cache::CacheError>) -> bool {
            matches!(result, Err(cache::CacheError::InvalidArgument(_)))
        }
        assert!(invalid(state.get(pods(), "k".repeat(100_000))));
        assert!(invalid(state.get(pods(), String::new())));
        assert!(invalid(state.list_objects(pods(), query(Some("app in (web"), 0))));
        assert!(invalid(state.by_index(
            pods(),
            "namespace".into(),
            "\0".repeat(1000),
            0
        )));
        let mut huge_kind = pods();
        huge_kind.kind = "K".repeat(1 << 20);
        assert!(invalid(state.index_values(huge_kind, "namespace".into())));
        assert!(matches!(
            state.by_index(pods(), "no-such-index".into(), "x".into(), 0),
            Err(cache::CacheError::UnknownIndex(_))
        ));
        let mut services = pods();
        services.kind = "Service".into();
        assert!(matches!(
            state.get(services, "a/b".into()),
            Err(cache::CacheError::NotCached(_))
        ));
        assert!(state.get(pods(), "a/web-000".into()).unwrap().is_some());
    }

    #[test]
    fn answers_are_bounded_by_count_and_bytes() {
        let limits = Limits {
            query_objects: 10,
            query_bytes: 1000,
            ..Limits::default()
        };
        let mut store = state(50, limits);
        let mut state = view(&mut store);
        let capped = state.list_objects(pods(), query(Some("app=web"), 0)).unwrap();
        assert_eq!((capped.objects.len(), capped.truncated), (10, true));
        let asked = state.list_objects(pods(), query(None, 3)).unwrap();
        assert_eq!((asked.objects.len(), asked.truncated), (3, true));
        assert_eq!(state.index_values(pods(), "label:app".into()).unwrap(), ["web"]);

        let one_object_bytes = capped.objects[0].len();
        let mut small_store = self::state(
            50,
            Limits {
                query_objects: 100,
                query_bytes: one_object_bytes * 4,
                ..Limits::default()
            },
        );
        let by_bytes = view(&mut small_store)
            .by_index(pods(), "namespace".into(), "a".into(), 0)
            .unwrap();
        assert_eq!((by_bytes.objects.len(), by_bytes.truncated), (4, true));
    }

    #[test]
    fn outside_the_grant_everything_is_denied_or_invisible() {
        let (reader, writer) = indexer();
        for (namespace, name) in [("a", "web-0"), ("b", "web-1")] {
            let json =
                format!(r#"{{"metadata":{{"name":"{name}","namespace":"{namespace}","labels":{{"app":"web"}}}}}}"#);
            writer.apply(Arc::new(CachedObject::from_json(json).unwrap()));
        }
        let caches = Caches::new();
        caches.insert(GroupVersionKind::gvk("", "v1", "Pod"), reader);
        let grant = Grant::new(["v1/Pod"], ["a"]).unwrap();
        let mut store = HostState::new("test".into(), caches, PluginOptions::default().grant(grant));
        let mut state = view(&mut store);
        fn denied<T>(result: Result<T, cache::CacheError>) -> bool {
            matches!(result, Err(cache::CacheError::Denied(_)))
        }
        assert!(state.get(pods(), "a/web-0".into()).unwrap().is_some());
        assert!(denied(state.get(pods(), "b/web-1".into())));
        let all = state.list_objects(pods(), query(Some("app=web"), 0)).unwrap();
        assert_eq!(all.objects.len(), 1);
        assert!(all.objects[0].contains("web-0"));
        let mut in_b = query(None, 0);
        in_b.namespace = Some("b".into());
        assert!(denied(state.list_objects(pods(), in_b)));
        assert!(
            state
                .by_index(pods(), "namespace".into(), "b".into(), 0)
                .unwrap()
                .objects
                .is_empty()
        );
        assert_eq!(state.index_values(pods(), "namespace".into()).unwrap(), ["a"]);
        let mut secrets = pods();
        secrets.kind = "Secret".into();
        assert!(denied(state.get(secrets, "a/token".into())));
    }
}
