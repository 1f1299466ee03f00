//! The data of a plugin's store, and the host functions it serves: `cache`
//! queries and `log` (`cluster` writes are in the `cluster` module, outbound
//! HTTP in [`crate::outbound`]).
//!
//! Every argument comes from untrusted guest code: lengths, keys, selectors and
//! index names are validated and bounded, and a bad one is an error value for the
//! plugin, never a host panic.

use std::sync::Arc;

use kube::api::GroupVersionKind;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::kinformer::plugin::{cache, log, types};
use super::budget::CpuBudget;
use super::deadline::DeadlineCredit;
use super::inputs::{Answer, SharedInputs};
use super::lean_deltas;
use super::limiter::{Limiter, MAX_RESOURCES};
use super::log::PluginLog;
use crate::apiserver::Writer;
use crate::caches::Caches;
use crate::grant::Grant;
use crate::index::IndexError;
use crate::indexer::{Indexer, Listing};
use crate::limits::Limits;
use crate::object::CachedObject;
use crate::outbound::{AddressPolicy, HttpGrant, Outbound};
use crate::selector::Selector;

use super::PluginOptions;

/// The longest key, namespace, index name or value a plugin may pass.
const MAX_ARGUMENT_LEN: usize = 512;
/// The longest label selector a plugin may pass.
const MAX_SELECTOR_LEN: usize = 4096;
/// The most bytes one set of header fields a plugin builds may hold.
const FIELDS_BYTES: usize = 64 * 1024;
/// The data of one plugin's store.
pub(crate) struct HostState {
    name: String,
    caches: Caches,
    grant: Grant,
    limits: Limits,
    pub(crate) log: PluginLog,
    /// Where its writes go; `None` denies them all.
    pub(super) writer: Option<Writer>,
    /// The current call's deadline, with the time it waited given back.
    pub(super) deadline: DeadlineCredit,
    /// The plugin's share of CPU.
    pub(super) budget: CpuBudget,
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    /// Where its outbound requests go.
    outbound: Outbound,
    /// Its memory, against `limits.memory-mib`.
    pub(crate) store_limits: Limiter,
    /// Set when a WASI or `wasi:http` host function was handed the resource
    /// table: what it holds is measured when the call returns.
    resources_touched: bool,
    /// The current call's inputs, when they are shared with a shadow.
    pub(crate) inputs: Option<SharedInputs>,
    /// The old objects of the 0.2.0 batch being handled, by index.
    pub(super) old_objects: Vec<Option<Arc<CachedObject>>>,
}

impl HostState {
    pub(crate) fn new(name: String, caches: Caches, options: PluginOptions) -> Self {
        let PluginOptions {
            limits,
            grant,
            log_sink,
            writer,
            outbound,
            env,
        } = options;
        let log = PluginLog::new(&name, limits.log_lines_per_second, log_sink);
        // A minimal WASI: clocks and random, the environment the manifest
        // gives; no files or sockets; what the plugin prints goes to its log.
        let wasi = WasiCtxBuilder::new()
            .stdout(log.output(tracing::Level::INFO))
            .stderr(log.output(tracing::Level::WARN))
            .envs(&env)
            .build();
        let outbound = outbound
            .unwrap_or_else(|| Outbound::new(&name, HttpGrant::default(), AddressPolicy::default(), &limits, None));
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        let mut http = WasiHttpCtx::new();
        // Header fields a plugin builds stay well inside its budget, one by one.
        http.set_field_size_limit(FIELDS_BYTES);
        Self {
            name,
            caches,
            grant,
            limits,
            log,
            writer,
            deadline: DeadlineCredit::default(),
            budget: CpuBudget::new(limits.cpu_millicores),
            wasi,
            table,
            http,
            outbound,
            store_limits: Limiter::new(limits.memory_bytes),
            resources_touched: false,
            inputs: None,
            old_objects: Vec::new(),
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
            0 => self.limits.query_objects,
            n => (n as usize).min(self.limits.query_objects),
        }
    }

    /// The listing's JSON, cut at the byte limit.
    fn to_object_list(&self, listing: Listing) -> cache::ObjectList {
        let mut objects = Vec::with_capacity(listing.objects.len());
        let mut bytes = 0;
        let mut truncated = listing.truncated;
        for object in listing.objects {
            bytes += object.json().len();
            if bytes > self.limits.query_bytes {
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

impl HostState {
    /// The store's resource table (WASI's streams and pollables).
    pub(super) fn table(&mut self) -> &mut ResourceTable {
        self.resources_touched = true;
        &mut self.table
    }

    /// After every host call: when it may have made resources, measures
    /// them against the memory budget; over it, the call traps.
    pub(super) fn after_host_call(&mut self) -> wasmtime::Result<()> {
        if !std::mem::take(&mut self.resources_touched) {
            return Ok(());
        }
        self.store_limits.measure(&mut self.table)
    }

    /// True when the plugin's manifest grants outbound HTTP.
    pub(super) fn http_granted(&self) -> bool {
        self.outbound.is_granted()
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.resources_touched = true;
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        // A request sent now may not outlast the call it is sent in.
        self.outbound.set_call(self.deadline.remaining(), self.inputs.as_ref());
        self.resources_touched = true;
        WasiHttpCtxView {
            hooks: &mut self.outbound,
            table: &mut self.table,
            ctx: &mut self.http,
        }
    }
}

impl types::Host for HostState {}

impl lean_deltas::Host for HostState {
    fn old_object(&mut self, index: u32) -> Option<String> {
        let old = self.old_objects.get(usize::try_from(index).ok()?)?;
        old.as_ref().map(|old| old.json().to_owned())
    }
}

impl cache::Host for HostState {
    fn get(&mut self, gvk: types::GroupVersionKind, key: String) -> Result<Option<String>, cache::CacheError> {
        let query = format!("get {}/{}/{} {key}", gvk.group, gvk.version, gvk.kind);
        self.shared(query, Answer::Object, Answer::object, |this| this.cache_get(gvk, key))
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
            this.cache_list(gvk, query)
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
            this.cache_by_index(gvk, index, value, limit)
        })
    }

    fn index_values(&mut self, gvk: types::GroupVersionKind, index: String) -> Result<Vec<String>, cache::CacheError> {
        let query = format!("index-values {}/{}/{} {index:?}", gvk.group, gvk.version, gvk.kind);
        self.shared(query, Answer::Values, Answer::values, |this| {
            this.cache_index_values(gvk, index)
        })
    }
}

impl HostState {
    /// Answers a host call that reads: as `read` does, unless the call's
    /// inputs are shared with a shadow ([`SharedInputs`]): then the running
    /// version records the answer, and the shadow is answered the running
    /// version's for the same query (the wait is given back to its deadline).
    pub(super) fn shared<T: Clone>(
        &mut self,
        query: String,
        wrap: fn(T) -> Answer,
        unwrap: fn(Answer) -> Option<T>,
        read: impl FnOnce(&mut Self) -> T,
    ) -> T {
        match self.inputs.clone() {
            None => read(self),
            Some(SharedInputs::Record(call)) => {
                let answer = read(self);
                call.record(query, wrap(answer.clone()));
                answer
            }
            Some(SharedInputs::Replay(call)) => {
                let started = std::time::Instant::now();
                let found = call.answer(&query, self.limits.call_timeout);
                self.deadline.waited(started.elapsed());
                found.and_then(unwrap).unwrap_or_else(|| read(self))
            }
        }
    }
}

/// The cache queries, as the plugin's calls of `cache` reach them (through
/// [`HostState::shared`]).
impl HostState {
    fn cache_get(&mut self, gvk: types::GroupVersionKind, key: String) -> Result<Option<String>, cache::CacheError> {
        check_argument("key", &key)?;
        if key.is_empty() {
            return Err(cache::CacheError::InvalidArgument("empty key".into()));
        }
        if let Some((namespace, _)) = key.split_once('/') {
            self.check_namespace(namespace)?;
        }
        let indexer = self.indexer(&gvk)?;
        let _span = tracing::trace_span!("cache.get", plugin = %self.name, key = %key).entered();
        Ok(indexer.get(&key).map(|object| object.json().to_string()))
    }

    fn cache_list(
        &mut self,
        gvk: types::GroupVersionKind,
        query: cache::ListQuery,
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
        let indexer = self.indexer(&gvk)?;
        let listing = indexer.list(query.namespace.as_deref(), &selector, self.object_limit(query.limit));
        Ok(self.to_object_list(listing))
    }

    fn cache_by_index(
        &mut self,
        gvk: types::GroupVersionKind,
        index: String,
        value: String,
        limit: u32,
    ) -> Result<cache::ObjectList, cache::CacheError> {
        check_argument("index", &index)?;
        check_argument("value", &value)?;
        let indexer = self.indexer(&gvk)?;
        let listing = indexer
            .by_index(&index, &value, self.object_limit(limit))
            .map_err(index_error)?;
        Ok(self.to_object_list(listing))
    }

    fn cache_index_values(
        &mut self,
        gvk: types::GroupVersionKind,
        index: String,
    ) -> Result<Vec<String>, cache::CacheError> {
        check_argument("index", &index)?;
        let indexer = self.indexer(&gvk)?;
        indexer
            .index_values(&index, self.limits.query_objects)
            .map_err(index_error)
    }
}

impl log::Host for HostState {
    fn log(&mut self, level: log::Level, message: String) {
        let level = match level {
            log::Level::Trace => tracing::Level::TRACE,
            log::Level::Debug => tracing::Level::DEBUG,
            log::Level::Info => tracing::Level::INFO,
            log::Level::Warn => tracing::Level::WARN,
            log::Level::Error => tracing::Level::ERROR,
        };
        self.log.write(level, &message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::indexer::indexer;
    use crate::object::CachedObject;
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
        let mut state = state(1, Limits::default());
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
        let mut state = state(50, limits);
        let capped = state.list_objects(pods(), query(Some("app=web"), 0)).unwrap();
        assert_eq!((capped.objects.len(), capped.truncated), (10, true));
        let asked = state.list_objects(pods(), query(None, 3)).unwrap();
        assert_eq!((asked.objects.len(), asked.truncated), (3, true));
        assert_eq!(state.index_values(pods(), "label:app".into()).unwrap(), ["web"]);

        let one_object_bytes = capped.objects[0].len();
        let mut small = self::state(
            50,
            Limits {
                query_objects: 100,
                query_bytes: one_object_bytes * 4,
                ..Limits::default()
            },
        );
        let by_bytes = small.by_index(pods(), "namespace".into(), "a".into(), 0).unwrap();
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
        let mut state = HostState::new("test".into(), caches, PluginOptions::default().grant(grant));
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
