//! The shared wasmtime engine: configuration, the epoch ticker that drives call
//! deadlines (see `epoch`), and compiling component files.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

use super::component::{Layout, Pre};
use super::epoch::Ticker;
use super::interfaces::{self, HostState};
use super::{Error, PluginComponent, Result, digest, plugin_name, v0_1, v0_2};
use kinformer_informers::Recover as _;

/// The shared wasmtime engine: compiles components and drives call deadlines.
///
/// Clone it freely; clones share the engine and its epoch ticker, which stops
/// when the last clone is dropped.
#[derive(Clone)]
pub struct PluginEngine {
    pub(super) engine: Engine,
    options: Arc<EngineOptions>,
    linker: Arc<Linker<HostState>>,
    pub(super) live_instances: Arc<std::sync::atomic::AtomicUsize>,
    /// Instances alive per plugin name, across its versions.
    per_plugin: Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<std::sync::atomic::AtomicUsize>>>>,
    pub(super) ticker: Arc<Ticker>,
    /// Set when the host shuts down: compile processes are ended.
    ending: Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for PluginEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginEngine").finish_non_exhaustive()
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
    /// mmap calls. The slots are shared by every plugin, so one plugin's
    /// instances can take what another needs; `None` allocates on demand.
    pub pooled_instances: Option<u32>,
    /// Compile each component not compiled before in a short-lived process
    /// running this program, into the compile cache, and load it from there:
    /// the compiler's memory goes with the process (see
    /// [`run_compile_process`](super::run_compile_process)). Needs
    /// `cache_dir`; without it components compile in the host's process.
    pub compile_process: Option<PathBuf>,
}

/// The wasmtime configuration for these options; a compile process builds
/// the same, so that the host finds what it compiled in the cache.
pub(super) fn engine_config(options: &EngineOptions) -> wasmtime::Result<Config> {
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
        // wasmtime takes only absolute cache paths; a path as the user typed
        // it is taken relative to the working directory, as everywhere else.
        cache.with_directory(std::path::absolute(dir)?);
        config.cache(Some(wasmtime::Cache::new(cache)?));
    }
    if let Some(instances) = options.pooled_instances {
        let mut pool = wasmtime::PoolingAllocationConfig::new();
        pool.total_component_instances(instances)
            .total_core_instances(instances.saturating_mul(8))
            .total_memories(instances.saturating_mul(2))
            .total_tables(instances.saturating_mul(4))
            .max_memory_size((crate::limits::MAX_MEMORY_MIB << 20) as usize);
        config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
    }
    Ok(config)
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
        let config = engine_config(options).map_err(Error::Engine)?;
        let engine = Engine::new(&config).map_err(Error::Engine)?;

        let linker = linker(&engine).map_err(Error::Engine)?;
        let ticker = Ticker::start(&engine).map_err(|error| Error::Engine(error.into()))?;
        Ok(Self {
            engine,
            options: Arc::new(options.clone()),
            linker: Arc::new(linker),
            live_instances: Arc::default(),
            per_plugin: Arc::default(),
            ticker: Arc::new(ticker),
            ending: Arc::default(),
        })
    }

    /// Ends the compile processes running now and refuses to start more, so
    /// a host shutting down does not wait for a long compile. A compile in
    /// this process (without [`EngineOptions::compile_process`]) cannot be
    /// ended: the caller abandons it.
    pub fn end_compiles(&self) {
        self.ending.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// True when `component` was compiled by this engine (or a clone of it):
    /// only such a component can be instantiated by it.
    #[must_use]
    pub fn compiled(&self, component: &PluginComponent) -> bool {
        Engine::same(&self.engine, &component.engine.engine)
    }

    /// How many plugin instances (each with its own store) are alive.
    #[must_use]
    pub fn live_instances(&self) -> usize {
        self.live_instances.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The count of live instances of plugin `name`.
    pub(super) fn plugin_instances(&self, name: &str) -> Arc<std::sync::atomic::AtomicUsize> {
        let mut counts = self.per_plugin.lock().recover();
        Arc::clone(counts.entry(name.to_owned()).or_default())
    }

    /// Compiles the component in `path` (at most the default
    /// [`Limits::module_bytes`](crate::limits::Limits::module_bytes)); the
    /// plugin is named after the file stem.
    ///
    /// # Errors
    ///
    /// [`Error::Compile`] when the file cannot be read or is not a component, and
    /// [`Error::Link`] when it does not implement the plugin world.
    pub fn load_file(&self, path: &Path) -> Result<PluginComponent> {
        let bytes =
            crate::file::read_regular(path, crate::limits::Limits::default().module_bytes).map_err(|error| {
                Error::Compile {
                    path: path.to_owned(),
                    source: error.into(),
                }
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
        self.load_file_bytes_within(path, bytes, crate::limits::Limits::default().compile_timeout)
    }

    /// As [`PluginEngine::load_file_bytes`], allowing a compile process (see
    /// [`EngineOptions::compile_process`]) `limit` before it gives up.
    ///
    /// # Errors
    ///
    /// As [`PluginEngine::load_file`].
    pub fn load_file_bytes_within(&self, path: &Path, bytes: &[u8], limit: Duration) -> Result<PluginComponent> {
        self.compile(&plugin_name(path), bytes, limit)
            .map_err(|error| match error {
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
        self.compile(name, bytes, crate::limits::Limits::default().compile_timeout)
    }

    fn compile(&self, name: &str, bytes: &[u8], limit: Duration) -> Result<PluginComponent> {
        let digest = digest(bytes);
        let compile_error = |source| Error::Compile {
            path: PathBuf::from(name),
            source,
        };
        let started = std::time::Instant::now();
        let marker = self
            .options
            .cache_dir
            .as_deref()
            .map(|dir| super::compile::marker(dir, &digest, &self.engine));
        let compiled_before = marker.as_deref().is_some_and(Path::exists);
        // A compile process needs the cache to hand its work over.
        let child = match (&self.options.compile_process, &self.options.cache_dir) {
            (Some(program), Some(cache_dir)) if !compiled_before => Some((program, cache_dir)),
            _ => None,
        };
        if let Some((program, cache_dir)) = child {
            tracing::info!(
                plugin = name,
                bytes = bytes.len(),
                digest = &digest[..12],
                "compiling plugin in a separate process"
            );
            let child = super::compile::Child {
                program,
                cache_dir,
                pooled_instances: self.options.pooled_instances,
                ending: &self.ending,
            };
            child.compile(bytes, limit).map_err(compile_error)?;
        } else if !compiled_before {
            tracing::info!(
                plugin = name,
                bytes = bytes.len(),
                digest = &digest[..12],
                "compiling plugin"
            );
        }
        let component = Component::new(&self.engine, bytes).map_err(compile_error);
        if !compiled_before && child.is_none() {
            super::memory::release_free_memory();
        }
        let component = component?;
        if let (Some(marker), false) = (&marker, compiled_before) {
            super::compile::mark(marker);
        }
        tracing::info!(
            plugin = name,
            elapsed_ms = started.elapsed().as_millis() as u64,
            cached = compiled_before,
            "compiled plugin"
        );
        let link_error = |source| Error::Link {
            plugin: name.to_owned(),
            source,
        };
        let pre = world(self.linker.instantiate_pre(&component).map_err(link_error)?).map_err(link_error)?;
        let sealed = interfaces::http::sealed(&self.linker, &component, &self.engine)
            .and_then(|linker| linker.instantiate_pre(&component))
            .and_then(world)
            .map_err(link_error)?;
        Ok(PluginComponent {
            name: name.to_owned(),
            digest,
            engine: self.clone(),
            linked: Arc::new(super::component::Linked { granted: pre, sealed }),
        })
    }
}

/// One linker for every plugin: each interface of the contract, both
/// versions side by side. A component of 0.1.0 imports the interfaces it
/// knows; one of 0.2.0 `deltas` besides.
fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(engine);
    interfaces::wasi::add_to_linker(&mut linker)?;
    // For a plugin whose manifest grants no HTTP, these functions are
    // replaced by ones that trap (`http::sealed`); for the others, each
    // request is checked against the plugin's own allow-list.
    interfaces::http::add_to_linker(&mut linker)?;
    interfaces::cache::add_to_linker(&mut linker)?;
    interfaces::log::add_to_linker(&mut linker)?;
    interfaces::writes::add_to_linker(&mut linker)?;
    interfaces::reads::add_to_linker(&mut linker)?;
    interfaces::deltas::add_to_linker(&mut linker)?;
    Ok(linker)
}

/// Which world `pre` implements, from its exports: the newest handler world
/// it matches, or the controller world.
fn world(pre: wasmtime::component::InstancePre<HostState>) -> wasmtime::Result<Pre> {
    if v0_2::WriterPre::new(pre.clone()).is_ok() {
        return Ok(Pre::Handler(pre, Layout::Lean));
    }
    match v0_1::WriterPre::new(pre.clone()) {
        Ok(_) => Ok(Pre::Handler(pre, Layout::Records)),
        Err(not_handler) => v0_1::controller::ControllerPre::new(pre)
            .map(Pre::Controller)
            .map_err(|_| not_handler),
    }
}
