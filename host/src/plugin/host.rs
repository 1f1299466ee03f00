//! The host functions a plugin imports: `cache` queries and `log`.
//!
//! Every argument comes from untrusted guest code: lengths, keys, selectors and
//! index names are validated and bounded, and a bad one is an error value for the
//! plugin, never a host panic.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use kube::api::GroupVersionKind;
use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::kinformer::plugin::{cache, log, types};
use crate::caches::Caches;
use crate::indexer::{IndexError, Indexer, Listing};
use crate::manifest::Grant;
use crate::selector::Selector;

/// The longest key, namespace, index name or value a plugin may pass.
const MAX_ARGUMENT_LEN: usize = 512;
/// The longest label selector a plugin may pass.
const MAX_SELECTOR_LEN: usize = 4096;
/// The longest log line kept; longer lines are cut.
const MAX_LOG_LINE_LEN: usize = 4096;
/// How many recent log lines an instance keeps for status and tests.
const RECENT_LOG_LINES: usize = 256;

/// Bounds on one cache query's answer.
#[derive(Debug, Clone, Copy)]
pub struct QueryLimits {
    /// The most objects one call returns.
    pub max_objects: usize,
    /// The most bytes of JSON one call returns.
    pub max_bytes: usize,
}

impl Default for QueryLimits {
    fn default() -> Self {
        Self {
            max_objects: 1000,
            max_bytes: 16 << 20,
        }
    }
}

/// One line a plugin logged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Its severity.
    pub level: tracing::Level,
    /// The text, with control characters replaced.
    pub message: String,
}

/// Receives every log line of a plugin that passed its rate limit, with the
/// plugin's name: for status pages, tests and log shipping.
pub type LogSink = Arc<dyn Fn(&str, &LogLine) + Send + Sync>;

/// A plugin's log: its `log` import and its stdout and stderr end here. Lines are
/// sanitised, rate-limited, sent to `tracing` with the plugin's name, and the
/// recent ones kept.
#[derive(Clone)]
pub(crate) struct PluginLog {
    name: Arc<str>,
    state: Arc<Mutex<LogState>>,
    sink: Option<LogSink>,
}

struct LogState {
    budget: TokenBucket,
    recent: VecDeque<LogLine>,
    dropped: u64,
}

impl PluginLog {
    pub(crate) fn new(name: &str, lines_per_second: u32, sink: Option<LogSink>) -> Self {
        Self {
            name: name.into(),
            state: Arc::new(Mutex::new(LogState {
                budget: TokenBucket::new(lines_per_second),
                recent: VecDeque::new(),
                dropped: 0,
            })),
            sink,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LogState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn recent(&self) -> Vec<LogLine> {
        self.state().recent.iter().cloned().collect()
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.state().dropped
    }

    /// Logs one line, unless the rate limit drops it.
    pub(crate) fn write(&self, level: tracing::Level, message: &str) {
        let mut state = self.state();
        if !state.budget.take() {
            state.dropped += 1;
            return;
        }
        let message = sanitize(message);
        let plugin = &*self.name;
        match level {
            tracing::Level::TRACE => tracing::trace!(plugin, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(plugin, "{message}"),
            tracing::Level::INFO => tracing::info!(plugin, "{message}"),
            tracing::Level::WARN => tracing::warn!(plugin, "{message}"),
            tracing::Level::ERROR => tracing::error!(plugin, "{message}"),
        }
        let line = LogLine { level, message };
        if let Some(sink) = &self.sink {
            sink(plugin, &line);
        }
        if state.recent.len() == RECENT_LOG_LINES {
            state.recent.pop_front();
        }
        state.recent.push_back(line);
    }

    /// A stream for the plugin's stdout (`INFO`) or stderr (`WARN`): each line
    /// written becomes a log line.
    pub(crate) fn output(&self, level: tracing::Level) -> OutputLines {
        OutputLines {
            log: self.clone(),
            level,
            partial: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

/// A WASI output stream that turns what the plugin prints into log lines.
#[derive(Clone)]
pub(crate) struct OutputLines {
    log: PluginLog,
    level: tracing::Level,
    partial: Arc<Mutex<Vec<u8>>>,
}

impl OutputLines {
    fn push(&self, bytes: &[u8]) {
        let mut partial = self.partial.lock().unwrap_or_else(PoisonError::into_inner);
        for &byte in bytes {
            if byte == b'\n' {
                self.log.write(self.level, &String::from_utf8_lossy(&partial));
                partial.clear();
            } else if partial.len() < MAX_LOG_LINE_LEN {
                partial.push(byte);
            }
        }
    }
}

impl wasmtime_wasi::cli::IsTerminal for OutputLines {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl wasmtime_wasi::cli::StdoutStream for OutputLines {
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl wasmtime_wasi::p2::Pollable for OutputLines {
    async fn ready(&mut self) {}
}

impl wasmtime_wasi::p2::OutputStream for OutputLines {
    fn write(&mut self, bytes: bytes::Bytes) -> Result<(), wasmtime_wasi::p2::StreamError> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), wasmtime_wasi::p2::StreamError> {
        Ok(())
    }

    fn check_write(&mut self) -> Result<usize, wasmtime_wasi::p2::StreamError> {
        Ok(64 * 1024)
    }
}

impl tokio::io::AsyncWrite for OutputLines {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        bytes: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.push(bytes);
        std::task::Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The data of one plugin's store.
pub(crate) struct HostState {
    name: String,
    caches: Caches,
    grant: Grant,
    query_limits: QueryLimits,
    pub(crate) log: PluginLog,
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: StoreLimits,
}

impl HostState {
    pub(crate) fn new(
        name: String,
        caches: Caches,
        grant: Grant,
        query_limits: QueryLimits,
        log: PluginLog,
        limits: StoreLimits,
    ) -> Self {
        // A minimal WASI: clocks and random; no files, sockets or environment;
        // what the plugin prints goes to its log.
        let wasi = WasiCtxBuilder::new()
            .stdout(log.output(tracing::Level::INFO))
            .stderr(log.output(tracing::Level::WARN))
            .build();
        Self {
            name,
            caches,
            grant,
            query_limits,
            log,
            wasi,
            table: ResourceTable::new(),
            limits,
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
            0 => self.query_limits.max_objects,
            n => (n as usize).min(self.query_limits.max_objects),
        }
    }

    /// The listing's JSON, cut at the byte limit.
    fn to_object_list(&self, listing: Listing) -> cache::ObjectList {
        let mut objects = Vec::with_capacity(listing.objects.len());
        let mut bytes = 0;
        let mut truncated = listing.truncated;
        for object in listing.objects {
            bytes += object.json().len();
            if bytes > self.query_limits.max_bytes {
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

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for HostState {}

impl cache::Host for HostState {
    fn get(&mut self, gvk: types::GroupVersionKind, key: String) -> Result<Option<String>, cache::CacheError> {
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

    fn list_objects(
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

    fn by_index(
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

    fn index_values(&mut self, gvk: types::GroupVersionKind, index: String) -> Result<Vec<String>, cache::CacheError> {
        check_argument("index", &index)?;
        let indexer = self.indexer(&gvk)?;
        indexer
            .index_values(&index, self.query_limits.max_objects)
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

/// The line with control characters (terminal escapes, newlines that would forge
/// log lines) replaced by `�`, cut to [`MAX_LOG_LINE_LEN`] bytes.
fn sanitize(message: &str) -> String {
    let mut clean = String::with_capacity(message.len().min(MAX_LOG_LINE_LEN));
    for c in message.chars() {
        if clean.len() + c.len_utf8() > MAX_LOG_LINE_LEN {
            clean.push('…');
            break;
        }
        clean.push(if c.is_control() { '\u{fffd}' } else { c });
    }
    clean
}

/// A token bucket: `rate` tokens per second, bursts of up to `rate`.
struct TokenBucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    fn new(rate: u32) -> Self {
        let rate = f64::from(rate.max(1));
        Self {
            rate,
            tokens: rate,
            last: Instant::now(),
        }
    }

    fn take(&mut self) -> bool {
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * self.rate).min(self.rate);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    fn state(count: usize, query_limits: QueryLimits) -> HostState {
        let caches = Caches::new();
        let (reader, writer) = indexer();
        for i in 0..count {
            let json = format!(r#"{{"metadata":{{"name":"web-{i:03}","namespace":"a","labels":{{"app":"web"}}}}}}"#);
            writer.apply(Arc::new(CachedObject::from_json(json).unwrap()));
        }
        caches.insert(GroupVersionKind::gvk("", "v1", "Pod"), reader);
        HostState::new(
            "test".into(),
            caches,
            Grant::default(),
            query_limits,
            PluginLog::new("test", 10, None),
            StoreLimits::default(),
        )
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
        let mut state = state(1, QueryLimits::default());
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
        let limits = QueryLimits {
            max_objects: 10,
            max_bytes: 1000,
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
            QueryLimits {
                max_objects: 100,
                max_bytes: one_object_bytes * 4,
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
        let log = PluginLog::new("test", 10, None);
        let mut state = HostState::new(
            "test".into(),
            caches,
            grant,
            QueryLimits::default(),
            log,
            StoreLimits::default(),
        );
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

    #[test]
    fn printed_lines_become_log_lines() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&lines);
        let sink: LogSink = Arc::new(move |plugin, line| {
            seen.lock().unwrap().push((plugin.to_owned(), line.clone()));
        });
        let log = PluginLog::new("printer", 100, Some(sink));
        let stdout = log.output(tracing::Level::INFO);
        stdout.push(b"hello, ");
        stdout.push(b"world\nsecond\x1b");
        log.output(tracing::Level::WARN).push(b"oops\n");
        stdout.push(b"\n");
        let info = |message: &str| LogLine {
            level: tracing::Level::INFO,
            message: message.into(),
        };
        let expected = vec![
            info("hello, world"),
            LogLine {
                level: tracing::Level::WARN,
                message: "oops".into(),
            },
            info("second\u{fffd}"),
        ];
        assert_eq!(log.recent(), expected);
        let sunk: Vec<LogLine> = lines.lock().unwrap().iter().map(|(_, line)| line.clone()).collect();
        assert_eq!(sunk, expected);
        assert!(lines.lock().unwrap().iter().all(|(plugin, _)| plugin == "printer"));
    }

    #[test]
    fn control_characters_are_replaced_and_long_lines_cut() {
        assert_eq!(sanitize("ok\n\u{1b}[31mred"), "ok\u{fffd}\u{fffd}[31mred");
        let long = sanitize(&"é".repeat(MAX_LOG_LINE_LEN));
        assert!(long.len() <= MAX_LOG_LINE_LEN + '…'.len_utf8());
        assert!(long.ends_with('…'));
    }

    #[test]
    fn the_log_budget_refuses_a_flood() {
        let mut bucket = TokenBucket::new(10);
        let granted = (0..1000).filter(|_| bucket.take()).count();
        // The burst is 10; a few more may refill while the loop runs.
        assert!((10..20).contains(&granted), "granted {granted}");
    }
}
