//! Plugin components: compiling, instantiating and calling them.
//!
//! A [`PluginEngine`] compiles `.wasm` files into [`PluginComponent`]s; a
//! component is instantiated into a [`PluginInstance`] with its own wasmtime
//! `Store`, bound to the host's [`Caches`] for its `cache` imports. The instance
//! runs `init` and `handle` under a time limit (epoch deadlines) and a memory limit
//! (store limits).
//!
//! # Examples
//!
//! ```no_run
//! use kinformer::caches::Caches;
//! use kinformer::plugin::{PluginEngine, PluginOptions};
//!
//! let engine = PluginEngine::new()?;
//! let component = engine.load_file("plugins/delta-logger.wasm".as_ref())?;
//! let mut instance = component.instantiate(Caches::new(), PluginOptions::default())?;
//! let registration = instance.init("v1/Pod")?;
//! println!("{} watches {} resources", registration.name, registration.subscriptions.len());
//! # Ok::<(), kinformer::plugin::Error>(())
//! ```

mod host;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use kube::api::GroupVersionKind;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, Store, StoreLimits, StoreLimitsBuilder};

use crate::caches::Caches;
use crate::delta::{Delta, DeltaType};
use crate::manifest::Grant;

use host::{HostState, PluginLog};
pub use host::{LogLine, LogSink, QueryLimits};

/// The WIT world a plugin implements, with its version.
pub const WORLD: &str = "kinformer:plugin/plugin@0.1.0";

mod bindings {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "plugin",
    });
}

use bindings::kinformer::plugin::types as wit;

/// Why a plugin could not be loaded or called.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The engine could not be configured.
    #[error("failed to set up the wasm engine")]
    Engine(#[source] wasmtime::Error),
    /// The file is not a WebAssembly component (or could not be read).
    #[error("{path}: not a loadable WebAssembly component")]
    Compile {
        /// The plugin file.
        path: PathBuf,
        /// What wasmtime reported.
        #[source]
        source: wasmtime::Error,
    },
    /// The component does not implement the plugin world.
    #[error("{plugin}: the component does not implement {WORLD}")]
    Link {
        /// The plugin's name.
        plugin: String,
        /// What wasmtime reported: the missing import or export.
        #[source]
        source: wasmtime::Error,
    },
    /// The plugin trapped, ran over its deadline or hit its memory limit. Its
    /// instance must not be called again.
    #[error("{plugin}: trapped in {call}")]
    Trap {
        /// The plugin's name.
        plugin: String,
        /// The export that trapped.
        call: &'static str,
        /// The trap, with the guest backtrace when available.
        #[source]
        source: wasmtime::Error,
    },
    /// The plugin returned an error from `init` or `handle`.
    #[error("{plugin}: {call} returned an error: {message}")]
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// The export that failed.
        call: &'static str,
        /// The plugin's message.
        message: String,
    },
    /// The instance trapped earlier and cannot be called any more.
    #[error("{0}: the instance is poisoned by an earlier trap")]
    Poisoned(String),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Limits and settings of one plugin instance.
#[derive(Clone)]
pub struct PluginOptions {
    /// The longest one call (`init` or `handle`) may run.
    pub call_timeout: Duration,
    /// The most linear memory the instance may grow to, in bytes.
    pub max_memory_bytes: usize,
    /// Bounds on each cache query's answer.
    pub query_limits: QueryLimits,
    /// Log lines per second the plugin may write before lines are dropped.
    pub log_lines_per_second: u32,
    /// What the plugin may read from the cache.
    pub grant: Grant,
    /// Where the plugin's log lines go, besides `tracing`.
    pub log_sink: Option<LogSink>,
}

impl Default for PluginOptions {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(1),
            max_memory_bytes: 64 << 20,
            query_limits: QueryLimits::default(),
            log_lines_per_second: 200,
            grant: Grant::default(),
            log_sink: None,
        }
    }
}

impl std::fmt::Debug for PluginOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginOptions")
            .field("call_timeout", &self.call_timeout)
            .field("max_memory_bytes", &self.max_memory_bytes)
            .field("query_limits", &self.query_limits)
            .field("log_lines_per_second", &self.log_lines_per_second)
            .field("grant", &self.grant)
            .field("log_sink", &self.log_sink.is_some())
            .finish()
    }
}

impl PluginOptions {
    /// Sets [`PluginOptions::call_timeout`].
    #[must_use]
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets [`PluginOptions::max_memory_bytes`].
    #[must_use]
    pub fn max_memory_bytes(mut self, bytes: usize) -> Self {
        self.max_memory_bytes = bytes;
        self
    }

    /// Sets [`PluginOptions::query_limits`].
    #[must_use]
    pub fn query_limits(mut self, limits: QueryLimits) -> Self {
        self.query_limits = limits;
        self
    }
}

/// How often the epoch ticks; call deadlines are counted in ticks.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// The shared wasmtime engine: compiles components and drives call deadlines.
///
/// Clone it freely; clones share the engine and its epoch ticker, which stops
/// when the last clone is dropped.
#[derive(Clone)]
pub struct PluginEngine {
    engine: Engine,
    linker: Arc<Linker<HostState>>,
    live_instances: Arc<std::sync::atomic::AtomicUsize>,
    _ticker: Arc<Ticker>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine").finish_non_exhaustive()
    }
}

/// A thread that advances the engine's epoch every [`EPOCH_TICK`].
struct Ticker {
    stop: std::sync::mpsc::Sender<()>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How the engine compiles and allocates.
#[derive(Debug, Clone, Default)]
pub struct EngineOptions {
    /// Keep compiled artifacts in this directory, keyed by the digest of the
    /// component and the engine's settings: a plugin compiled once loads in
    /// milliseconds afterwards, across restarts of the host.
    pub cache_dir: Option<PathBuf>,
    /// Preallocate slots for this many live plugin instances (wasmtime's pooling
    /// allocator): instantiation, and so restarts and reloads, then cost no
    /// mmap calls. `None` allocates on demand.
    pub pooled_instances: Option<u32>,
}

impl PluginEngine {
    /// Creates the engine with the Component Model and epoch interruption,
    /// allocating on demand and without a disk cache.
    ///
    /// # Errors
    ///
    /// When wasmtime rejects the configuration or the ticker thread cannot start.
    pub fn new() -> Result<Self> {
        Self::with_options(&EngineOptions::default())
    }

    /// Creates the engine with these options.
    ///
    /// # Errors
    ///
    /// When wasmtime rejects the configuration, the cache directory cannot be
    /// used, or the ticker thread cannot start.
    pub fn with_options(options: &EngineOptions) -> Result<Self> {
        let mut config = Config::new();
        // Plugins are wasm32-wasip2 components: the Component Model and the
        // features Rust's wasm32 targets emit; nothing experimental.
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .wasm_memory64(false)
            .wasm_tail_call(false);
        if let Some(dir) = &options.cache_dir {
            let mut cache = wasmtime::CacheConfig::new();
            cache.with_directory(dir);
            config.cache(Some(wasmtime::Cache::new(cache).map_err(Error::Engine)?));
        }
        if let Some(instances) = options.pooled_instances {
            let mut pool = wasmtime::PoolingAllocationConfig::new();
            pool.total_component_instances(instances)
                .total_core_instances(instances.saturating_mul(8))
                .total_memories(instances.saturating_mul(2))
                .total_tables(instances.saturating_mul(4))
                .max_memory_size((crate::manifest::MAX_MEMORY_MIB << 20) as usize);
            config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        }
        let engine = Engine::new(&config).map_err(Error::Engine)?;

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(Error::Engine)?;
        bindings::Plugin::add_to_linker::<_, wasmtime::component::HasSelf<_>>(&mut linker, |state| state)
            .map_err(Error::Engine)?;

        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let ticking = engine.weak();
        let thread = std::thread::Builder::new()
            .name("kinformer-epoch".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EPOCH_TICK) {
                    match ticking.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|error| Error::Engine(error.into()))?;
        Ok(Self {
            engine,
            linker: Arc::new(linker),
            live_instances: Arc::default(),
            _ticker: Arc::new(Ticker {
                stop,
                thread: Some(thread),
            }),
        })
    }

    /// How many plugin instances (each with its own store) are alive.
    #[must_use]
    pub fn live_instances(&self) -> usize {
        self.live_instances.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Compiles the component in `path`; the plugin is named after the file stem.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] when the file cannot be read or is not a component, and
    /// [`Error::Link`] when it does not implement the plugin world.
    pub fn load_file(&self, path: &Path) -> Result<PluginComponent> {
        let bytes = std::fs::read(path).map_err(|error| Error::Compile {
            path: path.to_owned(),
            source: error.into(),
        })?;
        self.load_file_bytes(path, &bytes)
    }

    /// Compiles the bytes already read from the file `path`: named and reported
    /// as [`PluginEngine::load_file`] does.
    ///
    /// # Errors
    ///
    /// As [`PluginEngine::load_file`].
    pub fn load_file_bytes(&self, path: &Path, bytes: &[u8]) -> Result<PluginComponent> {
        self.load_bytes(&plugin_name(path), bytes).map_err(|error| match error {
            Error::Compile { source, .. } => Error::Compile {
                path: path.to_owned(),
                source,
            },
            other => other,
        })
    }

    /// Compiles a component from its bytes, naming the plugin `name`.
    ///
    /// # Errors
    ///
    /// As [`PluginEngine::load_file`].
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<PluginComponent> {
        let digest = digest(bytes);
        tracing::info!(
            plugin = name,
            bytes = bytes.len(),
            digest = &digest[..12],
            "compiling plugin"
        );
        let started = std::time::Instant::now();
        let component = Component::new(&self.engine, bytes).map_err(|source| Error::Compile {
            path: PathBuf::from(name),
            source,
        })?;
        tracing::info!(
            plugin = name,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "compiled plugin"
        );
        let pre = self.linker.instantiate_pre(&component).map_err(|source| Error::Link {
            plugin: name.to_owned(),
            source,
        })?;
        let pre = bindings::PluginPre::new(pre).map_err(|source| Error::Link {
            plugin: name.to_owned(),
            source,
        })?;
        Ok(PluginComponent {
            name: name.to_owned(),
            digest,
            engine: self.clone(),
            pre,
        })
    }
}

/// A plugin's name: its file's stem (`shop-policy.wasm` → `shop-policy`).
#[must_use]
pub fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "plugin".into(), |stem| stem.to_string_lossy().into_owned())
}

/// The SHA-256 digest of a plugin file, in hex.
#[must_use]
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// A compiled and linked plugin, ready to instantiate any number of times.
#[derive(Clone)]
pub struct PluginComponent {
    name: String,
    digest: String,
    engine: PluginEngine,
    pre: bindings::PluginPre<HostState>,
}

impl std::fmt::Debug for PluginComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginComponent")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl PluginComponent {
    /// The plugin's name (from its file name).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The SHA-256 digest of the component's bytes, in hex.
    #[must_use]
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// Creates a fresh instance in its own store, reading from `caches`.
    ///
    /// # Errors
    ///
    /// [`Error::Trap`] when the component's start-up code traps or breaks a limit.
    pub fn instantiate(&self, caches: Caches, options: PluginOptions) -> Result<PluginInstance> {
        let limits: StoreLimits = StoreLimitsBuilder::new()
            .memory_size(options.max_memory_bytes)
            .instances(16)
            .tables(16)
            .memories(4)
            .trap_on_grow_failure(true)
            .build();
        let log = PluginLog::new(&self.name, options.log_lines_per_second, options.log_sink);
        let state = HostState::new(
            self.name.clone(),
            caches,
            options.grant,
            options.query_limits,
            log,
            limits,
        );
        let mut store = Store::new(&self.engine.engine, state);
        store.limiter(|state| &mut state.limits);
        let deadline_ticks = ticks(options.call_timeout);
        store.set_epoch_deadline(deadline_ticks);
        let plugin = self.pre.instantiate(&mut store).map_err(|source| Error::Trap {
            plugin: self.name.clone(),
            call: "instantiate",
            source,
        })?;
        Ok(PluginInstance {
            name: self.name.clone(),
            _live: LiveInstance::new(&self.engine.live_instances),
            store,
            plugin,
            deadline_ticks,
            poisoned: false,
        })
    }
}

fn ticks(timeout: Duration) -> u64 {
    (timeout.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64
}

/// What a plugin asked for in `init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// The plugin's own name.
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The resources whose deltas (or cache) it wants.
    pub subscriptions: Vec<Subscription>,
    /// Extra indexes it queries.
    pub indexes: Vec<IndexSpec>,
}

/// A resource a plugin wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    /// The resource type.
    pub gvk: GroupVersionKind,
    /// Only this namespace, when set.
    pub namespace: Option<String>,
    /// Only objects matching this label selector, when set.
    pub label_selector: Option<String>,
    /// False: keep it cached for queries, deliver no deltas.
    pub deliver: bool,
}

/// An index a plugin wants on a resource's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSpec {
    /// The resource type.
    pub gvk: GroupVersionKind,
    /// The index name.
    pub name: String,
    /// The dotted field path whose values are indexed.
    pub field_path: String,
}

/// Counts an instance as alive until it is dropped.
struct LiveInstance(Arc<std::sync::atomic::AtomicUsize>);

impl LiveInstance {
    fn new(count: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Self(Arc::clone(count))
    }
}

impl Drop for LiveInstance {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A running plugin: one instance in its own store.
pub struct PluginInstance {
    name: String,
    _live: LiveInstance,
    store: Store<HostState>,
    plugin: bindings::Plugin,
    deadline_ticks: u64,
    poisoned: bool,
}

impl std::fmt::Debug for PluginInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginInstance")
            .field("name", &self.name)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl PluginInstance {
    /// The plugin's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's most recent log lines, oldest first.
    #[must_use]
    pub fn recent_logs(&self) -> Vec<LogLine> {
        self.store.data().log.recent()
    }

    /// Log lines dropped by the rate limit so far.
    #[must_use]
    pub fn dropped_log_lines(&self) -> u64 {
        self.store.data().log.dropped()
    }

    /// Calls `init` with the config string and returns the registration.
    ///
    /// # Errors
    ///
    /// [`Error::Plugin`] when the plugin refuses to start, [`Error::Trap`] when it
    /// trapped or broke a limit.
    pub fn init(&mut self, config: &str) -> Result<Registration> {
        let registration = self.call("init", |plugin, store| plugin.call_init(store, config))?;
        Ok(Registration {
            name: registration.name,
            version: registration.version,
            subscriptions: registration
                .subscriptions
                .into_iter()
                .map(|subscription| Subscription {
                    gvk: from_wit_gvk(subscription.gvk),
                    namespace: subscription.namespace,
                    label_selector: subscription.label_selector,
                    deliver: subscription.deliver,
                })
                .collect(),
            indexes: registration
                .indexes
                .into_iter()
                .map(|index| IndexSpec {
                    gvk: from_wit_gvk(index.gvk),
                    name: index.name,
                    field_path: index.field_path,
                })
                .collect(),
        })
    }

    /// Delivers a batch of deltas, in order.
    ///
    /// # Errors
    ///
    /// [`Error::Plugin`] when the plugin reports an error for the batch (deliver
    /// it again or skip it), [`Error::Trap`] when it trapped or broke a limit.
    pub fn handle(&mut self, batch: &[Delta]) -> Result<()> {
        let batch: Vec<wit::Delta> = batch.iter().map(to_wit_delta).collect();
        self.call("handle", |plugin, store| plugin.call_handle(store, &batch))
    }

    fn call<T>(
        &mut self,
        call: &'static str,
        f: impl FnOnce(&bindings::Plugin, &mut Store<HostState>) -> wasmtime::Result<Result<T, wit::Error>>,
    ) -> Result<T> {
        if self.poisoned {
            return Err(Error::Poisoned(self.name.clone()));
        }
        self.store.set_epoch_deadline(self.deadline_ticks);
        match f(&self.plugin, &mut self.store) {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => Err(Error::Plugin {
                plugin: self.name.clone(),
                call,
                message: error.message,
            }),
            Err(source) => {
                // After a trap the instance's state is undefined: never call it again.
                self.poisoned = true;
                Err(Error::Trap {
                    plugin: self.name.clone(),
                    call,
                    source,
                })
            }
        }
    }
}

fn from_wit_gvk(gvk: wit::GroupVersionKind) -> GroupVersionKind {
    GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind)
}

fn to_wit_gvk(gvk: &GroupVersionKind) -> wit::GroupVersionKind {
    wit::GroupVersionKind {
        group: gvk.group.clone(),
        version: gvk.version.clone(),
        kind: gvk.kind.clone(),
    }
}

fn to_wit_delta(delta: &Delta) -> wit::Delta {
    wit::Delta {
        type_: match delta.delta_type {
            DeltaType::Added => wit::DeltaType::Added,
            DeltaType::Updated => wit::DeltaType::Updated,
            DeltaType::Deleted => wit::DeltaType::Deleted,
            DeltaType::Replaced => wit::DeltaType::Replaced,
            DeltaType::Sync => wit::DeltaType::Sync,
        },
        gvk: to_wit_gvk(&delta.gvk),
        key: delta.object.key().to_owned(),
        resource_version: delta.object.resource_version().to_owned(),
        object: delta.object.json().to_string(),
        old_object: delta.old.as_ref().map(|old| old.json().to_string()),
        initial_list: delta.initial_list,
    }
}
