//! The plugin runtime: every plugin of a directory, fed by shared informers,
//! each in its own sandbox and its own worker thread.
//!
//! [`Runtime::start`] loads each `NAME.wasm` with its manifest `NAME.toml`
//! ([`crate::manifest`]), runs its `init`, checks the registration against the
//! grant, starts (or shares) the informers it asked for and hands the plugin to
//! a worker. A plugin that fails to load is reported and left out; the others
//! run.
//!
//! The worker owns the plugin's wasmtime `Store`. It waits until every cache the
//! plugin registered for has synced, then takes batches from the plugin's
//! handler queues and calls `handle`: one delta when the plugin keeps up, up to
//! the manifest's `max-batch` when it falls behind. Deltas of one object arrive
//! in order. When `handle` returns an error the batch is retried with backoff or
//! skipped, as the manifest says. When the plugin traps, overruns its deadline or
//! hits its memory limit, its store is dropped and a fresh instance is started
//! after a backoff; it runs `init` again and receives the current cache as an
//! initial list. Too many traps within the window quarantine the plugin. None of
//! this delays another plugin: each has its own thread and its own queues.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::caches::Caches;
use crate::delta::Delta;
use crate::indexer::Scope;
use crate::informer::{InformerKey, SharedIndexInformer, SharedInformerFactory};
use crate::manifest::{FailurePolicy, MAX_RESTART_BACKOFF, Manifest, OnError};
use crate::one_line;
use crate::plugin::{
    EngineOptions, LogLine, LogSink, PluginComponent, PluginEngine, PluginInstance, PluginOptions, Registration,
};
use crate::processor::{Handler, HandlerOptions};
use crate::selector::Selector;

/// Why the runtime or one plugin could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin directory could not be read.
    #[error("{path}: cannot read the plugin directory")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The plugin's manifest is broken.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::Error),
    /// The plugin failed to compile, link or start.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::Error),
    /// An informer the plugin needs could not start.
    #[error("{plugin}: {source}")]
    Informer {
        /// The plugin.
        plugin: String,
        /// Why.
        #[source]
        source: Box<crate::informer::Error>,
    },
    /// The plugin registered an index it cannot have.
    #[error("{plugin}: {reason}")]
    Registration {
        /// The plugin.
        plugin: String,
        /// What is wrong.
        reason: String,
    },
    /// The worker thread could not be started.
    #[error("{plugin}: cannot start its worker thread")]
    Thread {
        /// The plugin.
        plugin: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Settings of the runtime.
#[derive(Clone, Default)]
pub struct RuntimeConfig {
    /// The plugin directory.
    pub plugins: PathBuf,
    /// Confine every plugin (and every informer) to this namespace.
    pub namespace: Option<String>,
    /// How the engine compiles and allocates.
    pub engine: EngineOptions,
    /// Where every plugin's log lines go, besides `tracing`.
    pub log_sink: Option<LogSink>,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("plugins", &self.plugins)
            .field("namespace", &self.namespace)
            .field("engine", &self.engine)
            .field("log_sink", &self.log_sink.is_some())
            .finish()
    }
}

impl RuntimeConfig {
    /// The plugins of `dir`, with a pool of 64 instances and no disk cache.
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            plugins: dir.into(),
            engine: EngineOptions {
                cache_dir: None,
                pooled_instances: Some(64),
            },
            ..Self::default()
        }
    }

    /// Sets [`RuntimeConfig::namespace`].
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Sets [`EngineOptions::cache_dir`].
    #[must_use]
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.engine.cache_dir = Some(dir.into());
        self
    }

    /// Sets [`RuntimeConfig::log_sink`].
    #[must_use]
    pub fn log_sink(mut self, sink: LogSink) -> Self {
        self.log_sink = Some(sink);
        self
    }
}

/// Where a plugin is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginState {
    /// Compiling, starting or waiting for its caches to sync.
    Starting,
    /// Handling deltas.
    Running,
    /// Waiting to start a fresh instance after a failure.
    Restarting,
    /// Failed too often; no longer run.
    Quarantined,
    /// Could not be loaded (broken file or manifest, refused `init`).
    Failed,
    /// Stopped by the host.
    Stopped,
}

/// How recent log lines a status keeps.
const STATUS_LOG_LINES: usize = 256;

/// What one plugin is doing and has done.
#[derive(Debug, Clone)]
pub struct PluginStatus {
    /// The plugin's name (its file stem).
    pub name: String,
    /// Its file.
    pub file: PathBuf,
    /// The SHA-256 digest of the running component, once compiled.
    pub digest: Option<String>,
    /// Where it is.
    pub state: PluginState,
    /// What it registered, once `init` ran.
    pub registration: Option<Registration>,
    /// Subscriptions and indexes refused by its grant, and why.
    pub refused: Vec<String>,
    /// Deltas handled.
    pub deltas: u64,
    /// `handle` calls that succeeded.
    pub batches: u64,
    /// `handle` calls that returned an error.
    pub errors: u64,
    /// Batches delivered again after an error.
    pub retries: u64,
    /// Deltas skipped after errors.
    pub skipped: u64,
    /// Traps, deadline overruns and memory-limit hits.
    pub traps: u64,
    /// Fresh instances started after a failure.
    pub restarts: u64,
    /// The last error, if any.
    pub last_error: Option<String>,
    /// The plugin's most recent log lines, across restarts, oldest first.
    pub recent_logs: VecDeque<LogLine>,
}

impl PluginStatus {
    fn new(file: &Path) -> Self {
        Self {
            name: plugin_name(file),
            file: file.to_owned(),
            digest: None,
            state: PluginState::Starting,
            registration: None,
            refused: Vec::new(),
            deltas: 0,
            batches: 0,
            errors: 0,
            retries: 0,
            skipped: 0,
            traps: 0,
            restarts: 0,
            last_error: None,
            recent_logs: VecDeque::new(),
        }
    }
}

fn plugin_name(file: &Path) -> String {
    file.file_stem()
        .map_or_else(|| "plugin".into(), |stem| stem.to_string_lossy().into_owned())
}

type SharedStatus = Arc<Mutex<PluginStatus>>;

fn update<R>(status: &SharedStatus, f: impl FnOnce(&mut PluginStatus) -> R) -> R {
    f(&mut status.lock().unwrap_or_else(PoisonError::into_inner))
}

/// A plugin the runtime knows: its status and, while it runs, its worker.
struct Slot {
    status: SharedStatus,
    stop: tokio::sync::watch::Sender<bool>,
    worker: Option<JoinHandle<()>>,
}

/// The running plugins of one directory.
pub struct Runtime {
    engine: PluginEngine,
    factory: SharedInformerFactory,
    scope: Scope,
    namespace: Option<String>,
    log_sink: Option<LogSink>,
    slots: Vec<Slot>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("plugins", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts every plugin of the directory against the cluster `client` talks
    /// to. A plugin that cannot start is logged and shows as
    /// [`PluginState::Failed`] in [`Runtime::status`].
    ///
    /// # Errors
    ///
    /// When the engine cannot be set up or the directory cannot be read.
    pub async fn start(client: kube::Client, config: RuntimeConfig) -> Result<Self, Error> {
        let engine = PluginEngine::with_options(&config.engine)?;
        let scope = config
            .namespace
            .as_ref()
            .map_or_else(Scope::all, |ns| Scope::only([ns]));
        let mut runtime = Self {
            engine,
            factory: SharedInformerFactory::new(client),
            scope,
            namespace: config.namespace,
            log_sink: config.log_sink,
            slots: Vec::new(),
        };
        let files = plugin_files(&config.plugins)?;
        if files.is_empty() {
            tracing::warn!(dir = %config.plugins.display(), "no plugins (*.wasm) in the plugin directory");
        }
        for file in files {
            runtime.load(&file).await;
        }
        Ok(runtime)
    }

    /// The status of every plugin, in file order.
    #[must_use]
    pub fn status(&self) -> Vec<PluginStatus> {
        self.slots
            .iter()
            .map(|slot| slot.status.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect()
    }

    /// True once every plugin that runs has received its initial lists.
    #[must_use]
    pub fn all_running(&self) -> bool {
        self.status()
            .iter()
            .all(|status| !matches!(status.state, PluginState::Starting | PluginState::Restarting))
    }

    /// Stops every plugin (each finishes the call it is in) and returns their
    /// final status.
    pub async fn shutdown(mut self) -> Vec<PluginStatus> {
        for slot in &self.slots {
            let _ = slot.stop.send(true);
        }
        let workers: Vec<JoinHandle<()>> = self.slots.iter_mut().filter_map(|slot| slot.worker.take()).collect();
        let _ = tokio::task::spawn_blocking(move || {
            for worker in workers {
                let _ = worker.join();
            }
        })
        .await;
        self.status()
    }

    /// Loads one plugin file and starts its worker; a failure is logged and
    /// recorded in its status.
    async fn load(&mut self, file: &Path) {
        let status = Arc::new(Mutex::new(PluginStatus::new(file)));
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let name = plugin_name(file);
        let worker = match self.prepare(file, &status, stopped).await {
            Ok(worker) => std::thread::Builder::new()
                .name(format!("plugin-{name}"))
                .spawn(move || worker.run())
                .map_err(|source| Error::Thread {
                    plugin: name.clone(),
                    source,
                }),
            Err(error) => Err(error),
        };
        let worker = match worker {
            Ok(worker) => Some(worker),
            Err(error) => {
                tracing::error!(plugin = %name, error = %one_line(&error), "plugin not started");
                update(&status, |status| {
                    status.state = PluginState::Failed;
                    status.last_error = Some(one_line(&error));
                });
                None
            }
        };
        self.slots.push(Slot { status, stop, worker });
    }

    /// Compiles, starts and registers a plugin: everything but its worker thread.
    async fn prepare(
        &self,
        file: &Path,
        status: &SharedStatus,
        stopped: tokio::sync::watch::Receiver<bool>,
    ) -> Result<Worker, Error> {
        let manifest = Manifest::for_plugin(file)?;
        let name = plugin_name(file);
        let engine = self.engine.clone();
        let path = file.to_owned();
        let component = blocking(move || engine.load_file(&path)).await?;
        update(status, |status| status.digest = Some(component.digest().to_owned()));

        let grant = manifest.grant.clone().within(&self.scope);
        let caches = Caches::new();
        let options = PluginOptions {
            grant: grant.clone(),
            log_sink: Some(self.status_sink(status)),
            ..manifest.limits.plugin_options()
        };
        let (starting, config, instance_options) = (component.clone(), manifest.config.clone(), options.clone());
        let instance_caches = caches.clone();
        let (instance, registration) = blocking(move || {
            let mut instance = starting.instantiate(instance_caches, instance_options)?;
            let registration = instance.init(&config)?;
            Ok::<_, crate::plugin::Error>((instance, registration))
        })
        .await?;
        tracing::info!(
            plugin = %name,
            name = %registration.name,
            version = %registration.version,
            digest = &component.digest()[..12],
            "plugin started"
        );

        // The registration, as far as the grant allows.
        let mut refused = Vec::new();
        let mut informers: Vec<(SharedIndexInformer, bool)> = Vec::new();
        for subscription in &registration.subscriptions {
            let resource = format!("{} {}", subscription.gvk.api_version(), subscription.gvk.kind);
            let refusal = if !grant.allows_resource(&subscription.gvk) {
                Some(format!("{resource}: not granted"))
            } else if let Some(namespace) = subscription
                .namespace
                .as_deref()
                .filter(|ns| !grant.namespaces().allows(ns))
            {
                Some(format!("{resource} in namespace {namespace}: not granted"))
            } else if let Some(Err(error)) = subscription.label_selector.as_deref().map(Selector::parse) {
                Some(format!("{resource}: {error}"))
            } else {
                None
            };
            if let Some(refusal) = refusal {
                tracing::warn!(plugin = %name, subscription = %refusal, "subscription refused");
                refused.push(refusal);
                continue;
            }
            let mut key = InformerKey::new(subscription.gvk.clone());
            key.namespace = subscription.namespace.clone().or_else(|| self.namespace.clone());
            key.label_selector.clone_from(&subscription.label_selector);
            let informer = self.factory.informer(key).await.map_err(|source| Error::Informer {
                plugin: name.clone(),
                source: Box::new(source),
            })?;
            if caches.get(&subscription.gvk).is_none() {
                caches.insert(subscription.gvk.clone(), informer.cache());
            }
            informers.push((informer, subscription.deliver));
        }
        for index in &registration.indexes {
            let Some((informer, _)) = informers.iter().find(|(informer, _)| informer.key().gvk == index.gvk) else {
                let refusal = format!(
                    "index {} on {} {}: the resource is not watched or not granted",
                    index.name,
                    index.gvk.api_version(),
                    index.gvk.kind
                );
                tracing::warn!(plugin = %name, index = %refusal, "index refused");
                refused.push(refusal);
                continue;
            };
            informer
                .add_index(&index.name, &index.field_path)
                .map_err(|error| Error::Registration {
                    plugin: name.clone(),
                    reason: error.to_string(),
                })?;
        }
        update(status, |status| {
            status.registration = Some(registration);
            status.refused = refused;
        });
        Ok(Worker {
            name,
            component,
            config: manifest.config,
            options,
            caches,
            handler_options: HandlerOptions::default()
                .queue_capacity(manifest.limits.queue_capacity)
                .scope(grant.namespaces().clone()),
            max_batch: manifest.limits.max_batch,
            failures: manifest.failures,
            informers,
            instance: Some(instance),
            status: Arc::clone(status),
            stopped,
            runtime: tokio::runtime::Handle::current(),
        })
    }

    /// A log sink that keeps the plugin's recent lines in its status, across
    /// restarts, and passes them on to the runtime's sink.
    fn status_sink(&self, status: &SharedStatus) -> LogSink {
        let status = Arc::clone(status);
        let next = self.log_sink.clone();
        Arc::new(move |plugin: &str, line: &LogLine| {
            update(&status, |status| {
                if status.recent_logs.len() == STATUS_LOG_LINES {
                    status.recent_logs.pop_front();
                }
                status.recent_logs.push_back(line.clone());
            });
            if let Some(next) = &next {
                next(plugin, line);
            }
        })
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for slot in &self.slots {
            let _ = slot.stop.send(true);
        }
    }
}

/// Serves until `duration` passes (or Ctrl-C when `None`), logging each
/// plugin's progress every 30 seconds.
pub async fn serve(runtime: &Runtime, duration: Option<Duration>) {
    let end = async {
        match duration {
            Some(duration) => tokio::time::sleep(duration).await,
            None => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    };
    tokio::pin!(end);
    let mut report = tokio::time::interval(Duration::from_secs(30));
    report.tick().await;
    loop {
        tokio::select! {
            () = &mut end => break,
            _ = report.tick() => {
                for status in runtime.status() {
                    tracing::info!(
                        plugin = %status.name,
                        state = ?status.state,
                        deltas = status.deltas,
                        errors = status.errors,
                        restarts = status.restarts,
                        "plugin progress"
                    );
                }
            }
        }
    }
    tracing::info!("stopping");
}

/// Runs blocking plugin work (compiling, `init`) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, crate::plugin::Error> + Send + 'static,
) -> Result<T, crate::plugin::Error> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
}

/// The `.wasm` files of `dir`, sorted; hidden files are skipped.
///
/// # Errors
///
/// When the directory cannot be read.
pub fn plugin_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Directory {
        path: dir.to_owned(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
        .filter(|path| {
            !path
                .file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with('.'))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// How a stretch of serving one instance ended.
enum Outcome {
    /// The host stopped the plugin (or its informers went away).
    Stopped,
    /// The instance trapped or broke a limit; it must be replaced.
    Failed(String),
}

/// One plugin's worker: owns its instance and serves it deltas.
struct Worker {
    name: String,
    component: PluginComponent,
    config: String,
    options: PluginOptions,
    caches: Caches,
    handler_options: HandlerOptions,
    max_batch: usize,
    failures: FailurePolicy,
    informers: Vec<(SharedIndexInformer, bool)>,
    instance: Option<PluginInstance>,
    status: SharedStatus,
    stopped: tokio::sync::watch::Receiver<bool>,
    runtime: tokio::runtime::Handle,
}

impl Worker {
    /// Serves the plugin until it is stopped or quarantined, restarting it after
    /// failures.
    fn run(mut self) {
        let mut failures: VecDeque<Instant> = VecDeque::new();
        // The instance `init` ran on at load time serves first.
        let mut instance = self.instance.take();
        loop {
            let outcome = match instance.as_mut() {
                Some(instance) => self.serve(instance),
                None => Outcome::Failed(String::new()),
            };
            let error = match outcome {
                Outcome::Stopped => break,
                Outcome::Failed(error) => error,
            };
            instance = None;
            let now = Instant::now();
            failures.push_back(now);
            while failures
                .front()
                .is_some_and(|first| now.duration_since(*first) > self.failures.restart_window)
            {
                failures.pop_front();
            }
            if failures.len() > self.failures.max_restarts as usize {
                tracing::error!(
                    plugin = %self.name,
                    failures = failures.len(),
                    window_s = self.failures.restart_window.as_secs(),
                    last_error = %error,
                    "plugin quarantined: it failed too often; replace its file to try again"
                );
                update(&self.status, |status| status.state = PluginState::Quarantined);
                return;
            }
            let exponent = u32::try_from(failures.len().saturating_sub(1))
                .unwrap_or(u32::MAX)
                .min(16);
            let backoff = self
                .failures
                .restart_backoff
                .saturating_mul(1 << exponent)
                .min(MAX_RESTART_BACKOFF);
            update(&self.status, |status| status.state = PluginState::Restarting);
            tracing::warn!(plugin = %self.name, backoff_ms = backoff.as_millis() as u64, "restarting the plugin after a failure");
            if self.sleep(backoff) {
                break;
            }
            match self.fresh_instance() {
                Ok(fresh) => {
                    update(&self.status, |status| status.restarts += 1);
                    instance = Some(fresh);
                }
                Err(error) => {
                    let error = one_line(&error);
                    tracing::warn!(plugin = %self.name, %error, "restart failed");
                    update(&self.status, |status| status.last_error = Some(error));
                }
            }
        }
        update(&self.status, |status| status.state = PluginState::Stopped);
    }

    /// A new instance of the same component, `init` run.
    fn fresh_instance(&self) -> Result<PluginInstance, crate::plugin::Error> {
        let mut instance = self.component.instantiate(self.caches.clone(), self.options.clone())?;
        instance.init(&self.config)?;
        Ok(instance)
    }

    /// Sleeps, unless stopped first: true when stopped.
    fn sleep(&mut self, duration: Duration) -> bool {
        let stopped = &mut self.stopped;
        self.runtime.block_on(async {
            tokio::select! {
                () = tokio::time::sleep(duration) => false,
                _ = stopped.wait_for(|stop| *stop) => true,
            }
        })
    }

    /// Delivers deltas to one instance: the initial lists first (once the caches
    /// synced), then live deltas, until it fails or the plugin is stopped.
    fn serve(&mut self, instance: &mut PluginInstance) -> Outcome {
        let mut handlers: Vec<Handler> = self
            .informers
            .iter()
            .filter(|(_, deliver)| *deliver)
            .map(|(informer, _)| informer.add_handler(&self.name, &self.handler_options))
            .collect();
        let mut waited = Duration::ZERO;
        while !self.informers.iter().all(|(informer, _)| informer.has_synced()) {
            if self.sleep(Duration::from_millis(10)) {
                return Outcome::Stopped;
            }
            waited += Duration::from_millis(10);
            if waited.as_millis().is_multiple_of(10_000) {
                let pending: Vec<&str> = self
                    .informers
                    .iter()
                    .filter(|(informer, _)| !informer.has_synced())
                    .map(|(informer, _)| informer.key().gvk.kind.as_str())
                    .collect();
                tracing::info!(plugin = %self.name, ?pending, "waiting for caches to sync");
            }
        }
        update(&self.status, |status| status.state = PluginState::Running);
        if handlers.is_empty() {
            // Cache-only: nothing to deliver until stopped.
            let stopped = &mut self.stopped;
            self.runtime.block_on(async {
                let _ = stopped.wait_for(|stop| *stop).await;
            });
            return Outcome::Stopped;
        }
        loop {
            let max_batch = self.max_batch;
            let stopped = &mut self.stopped;
            let batch = self.runtime.block_on(async {
                let next = handlers
                    .iter_mut()
                    .map(|handler| Box::pin(handler.next_batch(max_batch)));
                tokio::select! {
                    (batch, _, _) = futures::future::select_all(next) => batch,
                    _ = stopped.wait_for(|stop| *stop) => None,
                }
            });
            let Some(batch) = batch else {
                return Outcome::Stopped;
            };
            if let Some(outcome) = self.deliver(instance, &batch) {
                return outcome;
            }
        }
    }

    /// Hands one batch to the plugin, retrying or skipping it when the plugin
    /// rejects it. `None` when the plugin can go on.
    fn deliver(&mut self, instance: &mut PluginInstance, batch: &[Delta]) -> Option<Outcome> {
        let count = batch.len() as u64;
        let mut attempt = 0_u32;
        loop {
            let _span = tracing::debug_span!(
                "handle",
                plugin = %self.name,
                deltas = batch.len(),
                first = %batch.first().map_or("", |delta| delta.key())
            )
            .entered();
            for delta in batch {
                tracing::trace!(
                    key = %delta.key(),
                    delta = ?delta.delta_type,
                    rv = %delta.object.resource_version(),
                    "delivering"
                );
            }
            match instance.handle(batch) {
                Ok(()) => {
                    update(&self.status, |status| {
                        status.deltas += count;
                        status.batches += 1;
                    });
                    return None;
                }
                Err(crate::plugin::Error::Plugin { message, .. }) => {
                    update(&self.status, |status| {
                        status.errors += 1;
                        status.last_error = Some(message.clone());
                    });
                    if self.failures.on_error == OnError::Skip || attempt >= self.failures.retries {
                        tracing::warn!(plugin = %self.name, deltas = count, %message, "batch skipped after the plugin rejected it");
                        update(&self.status, |status| status.skipped += count);
                        return None;
                    }
                    let backoff = self
                        .failures
                        .retry_backoff
                        .saturating_mul(1 << attempt.min(16))
                        .min(MAX_RESTART_BACKOFF);
                    attempt += 1;
                    tracing::info!(plugin = %self.name, attempt, %message, "batch rejected; retrying");
                    update(&self.status, |status| status.retries += 1);
                    if self.sleep(backoff) {
                        return Some(Outcome::Stopped);
                    }
                }
                Err(error) => {
                    let error = one_line(&error);
                    tracing::warn!(plugin = %self.name, %error, "plugin failed; its instance is dropped");
                    update(&self.status, |status| {
                        status.traps += 1;
                        status.last_error = Some(error.clone());
                    });
                    return Some(Outcome::Failed(error));
                }
            }
        }
    }
}
