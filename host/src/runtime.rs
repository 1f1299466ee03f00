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
//!
//! The runtime follows the directory ([`notify`], debounced with a maximum
//! wait): a new file is loaded, a changed file or manifest is loaded beside the
//! running version (compiled, or taken from the disk cache; started; its
//! caches synced) and swapped in between two batches, a removed file is drained
//! and unloaded. The new version first receives, flagged initial-list, exactly
//! the state the old one had been handed, then the same queue goes on: every
//! delta reaches exactly one version. A file that does not load leaves the old
//! version serving and is not retried until it changes; a new version that keeps
//! failing right after its swap is rolled back to the previous one.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::caches::Caches;
use crate::delta::Delta;
use crate::indexer::Scope;
use crate::informer::{InformerKey, SharedIndexInformer, SharedInformerFactory};
use crate::manifest::{MAX_RESTART_BACKOFF, Manifest, OnError};
use crate::one_line;
use crate::plugin::{
    EngineOptions, LogLine, LogSink, PluginComponent, PluginEngine, PluginInstance, PluginOptions, Registration,
    digest, plugin_name,
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
#[derive(Clone)]
pub struct RuntimeConfig {
    /// The plugin directory.
    pub plugins: PathBuf,
    /// Confine every plugin (and every informer) to this namespace.
    pub namespace: Option<String>,
    /// How the engine compiles and allocates.
    pub engine: EngineOptions,
    /// Where every plugin's log lines go, besides `tracing`.
    pub log_sink: Option<LogSink>,
    /// Called with each batch just before a plugin's `handle` is entered (not
    /// again for retries), on the plugin's worker thread: for metrics and
    /// benchmarks. Keep it cheap.
    pub observer: Option<BatchObserver>,
    /// Watch the directory and reload plugins as their files change.
    pub watch: bool,
    /// A change is applied once the directory was quiet this long...
    pub quiet: Duration,
    /// ...or at the latest this long after the first change, so a file written
    /// continuously cannot starve reloading.
    pub max_wait: Duration,
}

impl std::fmt::Debug for RuntimeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeConfig")
            .field("plugins", &self.plugins)
            .field("namespace", &self.namespace)
            .field("engine", &self.engine)
            .field("log_sink", &self.log_sink.is_some())
            .field("observer", &self.observer.is_some())
            .field("watch", &self.watch)
            .field("quiet", &self.quiet)
            .field("max_wait", &self.max_wait)
            .finish()
    }
}

impl RuntimeConfig {
    /// The plugins of `dir`, watched for changes, with a pool of 64 instances
    /// and no disk cache.
    #[must_use]
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            plugins: dir.into(),
            engine: EngineOptions {
                cache_dir: None,
                pooled_instances: Some(64),
            },
            namespace: None,
            log_sink: None,
            observer: None,
            watch: true,
            quiet: Duration::from_millis(200),
            max_wait: Duration::from_secs(2),
        }
    }

    /// Sets [`RuntimeConfig::watch`].
    #[must_use]
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
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

    /// Sets [`RuntimeConfig::observer`].
    #[must_use]
    pub fn observer(mut self, observer: BatchObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Sets [`RuntimeConfig::log_sink`].
    #[must_use]
    pub fn log_sink(mut self, sink: LogSink) -> Self {
        self.log_sink = Some(sink);
        self
    }
}

/// Sees each batch a plugin is about to handle, with the plugin's name.
pub type BatchObserver = Arc<dyn Fn(&str, &[Delta]) + Send + Sync>;

/// Where a plugin is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PluginState {
    /// Compiling, starting or waiting for its caches to sync.
    Starting,
    /// Handling deltas.
    Running,
    /// Waiting to start a fresh instance after a failure.
    Restarting,
    /// Failed too often; no longer run.
    Quarantined,
    /// Could not be loaded (broken file or manifest, refused `init`), and no
    /// earlier version runs.
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
    /// The SHA-256 digest of the file as last read from the directory.
    pub desired_digest: Option<String>,
    /// The digest of the version handling deltas; `None` until one does.
    pub running_digest: Option<String>,
    /// A digest that failed to load or was rolled back; not retried until the
    /// file changes.
    pub rejected_digest: Option<String>,
    /// Where it is.
    pub state: PluginState,
    /// What the running version registered.
    pub registration: Option<Registration>,
    /// Subscriptions and indexes refused by its grant, and why.
    pub refused: Vec<String>,
    /// Why the last load or reload failed, if it did.
    pub load_error: Option<String>,
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
    /// New versions (file or manifest) swapped in.
    pub reloads: u64,
    /// New versions replaced by the previous one after failing.
    pub rollbacks: u64,
    /// The last error of a running version, if any.
    pub last_error: Option<String>,
    /// The plugin's most recent log lines, across restarts, oldest first.
    pub recent_logs: VecDeque<LogLine>,
}

impl PluginStatus {
    fn new(file: &Path) -> Self {
        Self {
            name: plugin_name(file),
            file: file.to_owned(),
            desired_digest: None,
            running_digest: None,
            rejected_digest: None,
            state: PluginState::Starting,
            registration: None,
            refused: Vec::new(),
            load_error: None,
            deltas: 0,
            batches: 0,
            errors: 0,
            retries: 0,
            skipped: 0,
            traps: 0,
            restarts: 0,
            reloads: 0,
            rollbacks: 0,
            last_error: None,
            recent_logs: VecDeque::new(),
        }
    }

    /// The status as JSON, for the status endpoint (without the log lines).
    #[must_use]
    pub fn to_json(&self) -> serde_json::Value {
        let short = |digest: &Option<String>| {
            digest
                .as_deref()
                .map(|digest| digest[..12.min(digest.len())].to_owned())
        };
        serde_json::json!({
            "name": self.name,
            "file": self.file.display().to_string(),
            "state": format!("{:?}", self.state),
            "desiredDigest": short(&self.desired_digest),
            "runningDigest": short(&self.running_digest),
            "rejectedDigest": short(&self.rejected_digest),
            "version": self.registration.as_ref().map(|registration| registration.version.clone()),
            "refused": self.refused,
            "loadError": self.load_error,
            "lastError": self.last_error,
            "deltas": self.deltas,
            "batches": self.batches,
            "errors": self.errors,
            "retries": self.retries,
            "skipped": self.skipped,
            "traps": self.traps,
            "restarts": self.restarts,
            "reloads": self.reloads,
            "rollbacks": self.rollbacks,
        })
    }
}

type SharedStatus = Arc<Mutex<PluginStatus>>;

fn update<R>(status: &SharedStatus, f: impl FnOnce(&mut PluginStatus) -> R) -> R {
    f(&mut status.lock().unwrap_or_else(PoisonError::into_inner))
}

/// The versions of a plugin's file and manifest: what the directory holds, or
/// what was last applied.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Version {
    digest: String,
    manifest: Option<String>,
}

/// A plugin the runtime knows.
struct Slot {
    status: SharedStatus,
    /// The version last tried, whether it loaded or not: not tried again until
    /// the directory holds another.
    applied: Option<Version>,
    /// The compiled component of the last file that compiled, for
    /// manifest-only changes.
    component: Option<PluginComponent>,
    /// The worker, while one runs.
    worker: Option<WorkerHandle>,
}

struct WorkerHandle {
    commands: tokio::sync::mpsc::UnboundedSender<Command>,
    thread: JoinHandle<()>,
}

impl WorkerHandle {
    fn alive(&self) -> bool {
        !self.thread.is_finished() && !self.commands.is_closed()
    }
}

/// What a worker is told between two batches.
enum Command {
    /// Swap in a new version.
    Swap(Box<Generation>),
    /// Handle what is queued, then stop.
    Unload,
}

/// The shared part of a runtime.
struct Inner {
    engine: PluginEngine,
    factory: SharedInformerFactory,
    dir: PathBuf,
    scope: Scope,
    namespace: Option<String>,
    log_sink: Option<LogSink>,
    observer: Option<BatchObserver>,
    slots: Mutex<BTreeMap<String, Slot>>,
    /// Held while the directory is reconciled: one reconciliation at a time.
    reconciling: tokio::sync::Mutex<()>,
    stop: tokio::sync::watch::Sender<bool>,
}

/// The running plugins of one directory.
pub struct Runtime {
    inner: Arc<Inner>,
    watcher: Option<tokio::task::JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Starts every plugin of the directory against the cluster `client` talks
    /// to, then (with [`RuntimeConfig::watch`]) follows the directory. A plugin
    /// that cannot start is logged and shows as [`PluginState::Failed`] in
    /// [`Runtime::status`].
    ///
    /// # Errors
    ///
    /// When the engine cannot be set up, or the directory cannot be read or
    /// watched.
    pub async fn start(client: kube::Client, config: RuntimeConfig) -> Result<Self, Error> {
        let engine = PluginEngine::with_options(&config.engine)?;
        let scope = config
            .namespace
            .as_ref()
            .map_or_else(Scope::all, |ns| Scope::only([ns]));
        let (stop, _) = tokio::sync::watch::channel(false);
        let inner = Arc::new(Inner {
            engine,
            factory: SharedInformerFactory::new(client),
            dir: config.plugins.clone(),
            scope,
            namespace: config.namespace,
            log_sink: config.log_sink,
            observer: config.observer,
            slots: Mutex::new(BTreeMap::new()),
            reconciling: tokio::sync::Mutex::new(()),
            stop,
        });
        // Fail early on a directory that cannot be read.
        if plugin_files(&inner.dir)?.is_empty() {
            tracing::warn!(dir = %inner.dir.display(), "no plugins (*.wasm) in the plugin directory");
        }
        // Watch before the first scan, so no change slips between the two.
        let watcher = if config.watch {
            Some(watch_directory(&inner, config.quiet, config.max_wait)?)
        } else {
            None
        };
        inner.reconcile().await;
        Ok(Self { inner, watcher })
    }

    /// Brings the running plugins in line with the directory now: loads new
    /// files, reloads changed files and manifests, unloads removed files. The
    /// directory watch does this by itself; call it to apply a change at once.
    pub async fn reconcile(&self) {
        self.inner.reconcile().await;
    }

    /// The status of every plugin, by name.
    #[must_use]
    pub fn status(&self) -> Vec<PluginStatus> {
        self.inner.status()
    }

    /// True when every plugin handles deltas (none starting, restarting,
    /// quarantined or failed).
    #[must_use]
    pub fn all_running(&self) -> bool {
        self.status().iter().all(|status| status.state == PluginState::Running)
    }

    /// How many plugin instances (stores) are alive.
    #[must_use]
    pub fn live_instances(&self) -> usize {
        self.inner.engine.live_instances()
    }

    /// How many informers run for the plugins.
    #[must_use]
    pub fn running_informers(&self) -> usize {
        self.inner.factory.running_count()
    }

    /// Serves the plugins' status as JSON at `GET /plugins` on `address`; returns
    /// the address bound (pass port 0 for any free one).
    ///
    /// # Errors
    ///
    /// When the address cannot be bound.
    pub async fn serve_status(&self, address: std::net::SocketAddr) -> std::io::Result<std::net::SocketAddr> {
        let listener = tokio::net::TcpListener::bind(address).await?;
        let bound = listener.local_addr()?;
        let inner = Arc::downgrade(&self.inner);
        let app = axum::Router::new().route(
            "/plugins",
            axum::routing::get(move || {
                let inner = inner.clone();
                async move {
                    let plugins: Vec<serde_json::Value> = inner
                        .upgrade()
                        .map(|inner| inner.status().iter().map(PluginStatus::to_json).collect())
                        .unwrap_or_default();
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        serde_json::Value::Array(plugins).to_string(),
                    )
                }
            }),
        );
        let mut stopped = self.inner.stop.subscribe();
        tokio::spawn(async move {
            let shutdown = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            if let Err(error) = axum::serve(listener, app).with_graceful_shutdown(shutdown).await {
                tracing::warn!(%error, "status endpoint stopped");
            }
        });
        tracing::info!(address = %bound, "plugin status at http://{bound}/plugins");
        Ok(bound)
    }

    /// Stops every plugin (each finishes the call it is in) and returns their
    /// final status.
    pub async fn shutdown(mut self) -> Vec<PluginStatus> {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        let _ = self.inner.stop.send(true);
        let threads: Vec<JoinHandle<()>> = self
            .inner
            .lock_slots()
            .values_mut()
            .filter_map(|slot| slot.worker.take().map(|worker| worker.thread))
            .collect();
        let _ = tokio::task::spawn_blocking(move || {
            for thread in threads {
                let _ = thread.join();
            }
        })
        .await;
        self.inner.status()
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(watcher) = self.watcher.take() {
            watcher.abort();
        }
        let _ = self.inner.stop.send(true);
    }
}

/// Watches the directory and reconciles after each burst of changes.
fn watch_directory(
    inner: &Arc<Inner>,
    quiet: Duration,
    max_wait: Duration,
) -> Result<tokio::task::JoinHandle<()>, Error> {
    use notify::Watcher as _;
    let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Any change in the directory, hidden entries included (a ConfigMap
        // mount swaps its `..data` link), leads to a scan; the scan decides.
        if event.is_ok() {
            let _ = changed.send(());
        }
    })
    .and_then(|mut watcher| {
        watcher.watch(&inner.dir, notify::RecursiveMode::NonRecursive)?;
        Ok(watcher)
    })
    .map_err(|error| Error::Directory {
        path: inner.dir.clone(),
        source: std::io::Error::other(error),
    })?;
    let inner = Arc::downgrade(inner);
    Ok(tokio::spawn(async move {
        // The watch lasts as long as this task.
        let _watcher = watcher;
        while changes.recv().await.is_some() {
            // Debounce: wait for a quiet spell, but never longer than max_wait.
            let first = tokio::time::Instant::now();
            loop {
                let left = max_wait.saturating_sub(first.elapsed());
                if left.is_zero() {
                    break;
                }
                match tokio::time::timeout(quiet.min(left), changes.recv()).await {
                    Ok(Some(())) => {}
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            let Some(inner) = inner.upgrade() else { return };
            inner.reconcile().await;
        }
    }))
}

/// What the directory holds for one plugin.
struct Desired {
    file: PathBuf,
    bytes: Vec<u8>,
    version: Version,
    modified: Option<(u64, std::time::SystemTime)>,
}

fn file_stamp(path: &Path) -> Option<(u64, std::time::SystemTime)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.len(), metadata.modified().ok()?))
}

impl Inner {
    fn lock_slots(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn status(&self) -> Vec<PluginStatus> {
        self.lock_slots()
            .values()
            .map(|slot| slot.status.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect()
    }

    /// Reads what the directory holds; a file that vanished or changed while
    /// being read is left for the next scan.
    fn scan(&self) -> BTreeMap<String, Desired> {
        let files = match plugin_files(&self.dir) {
            Ok(files) => files,
            Err(error) => {
                tracing::warn!(error = %one_line(&error), "cannot scan the plugin directory");
                return BTreeMap::new();
            }
        };
        let mut desired = BTreeMap::new();
        for file in files {
            let before = file_stamp(&file);
            let Ok(bytes) = std::fs::read(&file) else { continue };
            let manifest = match std::fs::read_to_string(Manifest::path_for(&file)) {
                Ok(text) => Some(text),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
                Err(_) => continue,
            };
            let modified = file_stamp(&file);
            if before != modified {
                continue;
            }
            let version = Version {
                digest: digest(&bytes),
                manifest,
            };
            desired.insert(
                plugin_name(&file),
                Desired {
                    file,
                    bytes,
                    version,
                    modified,
                },
            );
        }
        desired
    }

    async fn reconcile(&self) {
        let _one_at_a_time = self.reconciling.lock().await;
        let desired = self.scan();

        // Removed files: drain and unload.
        let removed: Vec<Slot> = {
            let mut slots = self.lock_slots();
            let gone: Vec<String> = slots
                .keys()
                .filter(|name| !desired.contains_key(*name))
                .cloned()
                .collect();
            gone.iter().filter_map(|name| slots.remove(name)).collect()
        };
        for slot in removed {
            let name = update(&slot.status, |status| status.name.clone());
            tracing::info!(plugin = %name, "plugin file removed: draining and unloading");
            if let Some(worker) = slot.worker {
                let _ = worker.commands.send(Command::Unload);
                drop(tokio::task::spawn_blocking(move || worker.thread.join()));
            }
        }

        for (name, desired) in desired {
            let (status, applied, component) = {
                let mut slots = self.lock_slots();
                let slot = slots.entry(name.clone()).or_insert_with(|| Slot {
                    status: Arc::new(Mutex::new(PluginStatus::new(&desired.file))),
                    applied: None,
                    component: None,
                    worker: None,
                });
                (Arc::clone(&slot.status), slot.applied.clone(), slot.component.clone())
            };
            update(&status, |status| {
                status.desired_digest = Some(desired.version.digest.clone())
            });
            if applied.as_ref() == Some(&desired.version) {
                continue;
            }
            self.apply(&name, &desired, &status, component).await;
        }
    }

    /// Loads a new version of a plugin and hands it to its worker (or starts one).
    async fn apply(&self, name: &str, desired: &Desired, status: &SharedStatus, component: Option<PluginComponent>) {
        let reload = self.lock_slots().get(name).is_some_and(|slot| slot.applied.is_some());
        let started = Instant::now();
        let component = match component.filter(|component| component.digest() == desired.version.digest) {
            Some(component) => component,
            None => {
                let engine = self.engine.clone();
                let (bytes, file) = (desired.bytes.clone(), desired.file.clone());
                let compiled = blocking(move || engine.load_file_bytes(&file, &bytes)).await;
                match compiled {
                    Ok(component) => component,
                    Err(error) => {
                        // A file still being written fails to compile: wait for it.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        if file_stamp(&desired.file) != desired.modified {
                            tracing::info!(plugin = %name, "plugin file still changing; waiting for it to settle");
                            return;
                        }
                        self.reject(name, desired, status, &Error::Plugin(error), reload);
                        return;
                    }
                }
            }
        };
        self.lock_slots()
            .entry(name.to_owned())
            .and_modify(|slot| slot.component = Some(component.clone()));
        let generation = match self.prepare(name, &desired.file, component, status).await {
            Ok(generation) => generation,
            Err(error) => {
                self.reject(name, desired, status, &error, reload);
                return;
            }
        };

        let mut slots = self.lock_slots();
        let Some(slot) = slots.get_mut(name) else { return };
        slot.applied = Some(desired.version.clone());
        update(status, |status| status.load_error = None);
        let generation = match slot.worker.as_ref().filter(|worker| worker.alive()) {
            Some(worker) => match worker.commands.send(Command::Swap(Box::new(generation))) {
                Ok(()) => {
                    tracing::info!(
                        plugin = %name,
                        digest = &desired.version.digest[..12],
                        prepare_ms = started.elapsed().as_millis() as u64,
                        "new version ready; swapping it in between two batches"
                    );
                    return;
                }
                Err(tokio::sync::mpsc::error::SendError(Command::Swap(generation))) => *generation,
                Err(_) => return,
            },
            None => generation,
        };
        match Worker::spawn(name, status, generation, self.stop.subscribe(), self.observer.clone()) {
            Ok(worker) => slot.worker = Some(worker),
            Err(error) => {
                drop(slots);
                self.reject(name, desired, status, &error, reload);
            }
        }
    }

    /// Records a version that could not load; an earlier version keeps running.
    fn reject(&self, name: &str, desired: &Desired, status: &SharedStatus, error: &Error, reload: bool) {
        let message = one_line(error);
        if reload {
            tracing::error!(plugin = %name, error = %message, "new version rejected; the running version keeps serving");
        } else {
            tracing::error!(plugin = %name, error = %message, "plugin not started");
        }
        if let Some(slot) = self.lock_slots().get_mut(name) {
            slot.applied = Some(desired.version.clone());
        }
        update(status, |status| {
            status.load_error = Some(message);
            status.rejected_digest = Some(desired.version.digest.clone());
            if status.running_digest.is_none() {
                status.state = PluginState::Failed;
            }
        });
    }

    /// Starts a version of a plugin: runs `init`, checks the registration
    /// against the grant, and starts (or shares) its informers, waiting for
    /// them to sync. Everything but handing it deltas.
    async fn prepare(
        &self,
        name: &str,
        file: &Path,
        component: PluginComponent,
        status: &SharedStatus,
    ) -> Result<Generation, Error> {
        let manifest = Manifest::for_plugin(file)?;
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
            Ok((instance, registration))
        })
        .await?;
        tracing::info!(
            plugin = %name,
            name = %registration.name,
            version = %registration.version,
            digest = &component.digest()[..12],
            "plugin initialised"
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
                plugin: name.to_owned(),
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
                    plugin: name.to_owned(),
                    reason: error.to_string(),
                })?;
        }

        // Like client-go's WaitForCacheSync: nothing is delivered before every
        // cache the plugin registered for has synced, so its first deltas can
        // rely on its cache queries; a running older version serves meanwhile.
        let waiting = Instant::now();
        let mut reported = Duration::ZERO;
        while !informers.iter().all(|(informer, _)| informer.has_synced()) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if waiting.elapsed() >= reported + Duration::from_secs(10) {
                reported = waiting.elapsed();
                let pending: Vec<&str> = informers
                    .iter()
                    .filter(|(informer, _)| !informer.has_synced())
                    .map(|(informer, _)| informer.key().gvk.kind.as_str())
                    .collect();
                tracing::info!(plugin = %name, ?pending, waited_s = reported.as_secs(), "waiting for caches to sync");
            }
        }
        let handler_options = HandlerOptions::default()
            .queue_capacity(manifest.limits.queue_capacity)
            .scope(grant.namespaces().clone());
        Ok(Generation {
            component,
            manifest,
            options,
            caches,
            informers,
            handler_options,
            registration,
            refused,
            instance: Some(instance),
        })
    }

    /// A log sink that keeps the plugin's recent lines in its status, across
    /// restarts and reloads, and passes them on to the runtime's sink.
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
                        reloads = status.reloads,
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

/// The plugin files of `dir`: `*.wasm`, sorted, without hidden and temporary
/// files (editors' and `kubectl cp`'s scratch files, ConfigMap mounts' `..data`).
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
            let name = path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
            !name.starts_with('.') && !name.starts_with('#') && !name.starts_with('~')
        })
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// One version of a plugin, started and registered, ready to take deltas.
struct Generation {
    component: PluginComponent,
    manifest: Manifest,
    options: PluginOptions,
    caches: Caches,
    informers: Vec<(SharedIndexInformer, bool)>,
    handler_options: HandlerOptions,
    registration: Registration,
    refused: Vec<String>,
    instance: Option<PluginInstance>,
}

impl Generation {
    fn digest(&self) -> &str {
        self.component.digest()
    }

    /// A new instance of this version, `init` run.
    fn fresh_instance(&self) -> Result<PluginInstance, crate::plugin::Error> {
        let mut instance = self.component.instantiate(self.caches.clone(), self.options.clone())?;
        instance.init(&self.manifest.config)?;
        Ok(instance)
    }
}

/// A handler queue the worker takes deltas from, and what it was made for.
struct Attached {
    key: InformerKey,
    options: (Scope, usize),
    handler: Handler,
}

/// The handler queues of `generation`: the ones of `previous` that deliver the
/// same stream are kept, with a replay of what they handed out (so the new
/// version starts exactly where the old one stopped); the others are new and
/// start with the cache as an initial list.
fn attach(name: &str, generation: &Generation, mut previous: Vec<Attached>) -> (Vec<Attached>, VecDeque<Delta>) {
    let mut attached = Vec::new();
    let mut replay = VecDeque::new();
    let options = |generation: &Generation| {
        (
            generation.handler_options.scope.clone(),
            generation.handler_options.queue_capacity,
        )
    };
    for (informer, deliver) in &generation.informers {
        if !deliver {
            continue;
        }
        let wanted = (informer.key().clone(), options(generation));
        if let Some(position) = previous
            .iter()
            .position(|old| old.key == wanted.0 && old.options == wanted.1)
        {
            let kept = previous.swap_remove(position);
            replay.extend(kept.handler.replay());
            attached.push(kept);
        } else {
            attached.push(Attached {
                key: wanted.0,
                options: wanted.1,
                handler: informer.add_handler(name, &generation.handler_options),
            });
        }
    }
    (attached, replay)
}

/// `base` doubled `doublings` times, at most [`MAX_RESTART_BACKOFF`].
fn doubled(base: Duration, doublings: u32) -> Duration {
    base.saturating_mul(1 << doublings.min(16)).min(MAX_RESTART_BACKOFF)
}

/// How long after a swap a failing new version is rolled back.
const PROBATION: Duration = Duration::from_secs(30);
/// Failures within the probation that roll a new version back.
const PROBATION_FAILURES: u32 = 2;

/// What the worker does next.
enum Work {
    Batch(Vec<Delta>),
    Command(Command),
    Stop,
}

/// How delivering a batch ended.
enum Delivery {
    Done,
    Stopped,
    Failed(String),
}

/// One plugin's worker thread: owns its instance and serves it deltas.
struct Worker {
    name: String,
    status: SharedStatus,
    stopped: tokio::sync::watch::Receiver<bool>,
    commands: tokio::sync::mpsc::UnboundedReceiver<Command>,
    runtime: tokio::runtime::Handle,
    live: Generation,
    /// The version before the live one, for a rollback while on probation.
    previous: Option<Generation>,
    swapped_at: Option<Instant>,
    observer: Option<BatchObserver>,
}

impl Worker {
    fn spawn(
        name: &str,
        status: &SharedStatus,
        generation: Generation,
        stopped: tokio::sync::watch::Receiver<bool>,
        observer: Option<BatchObserver>,
    ) -> Result<WorkerHandle, Error> {
        let (commands, received) = tokio::sync::mpsc::unbounded_channel();
        let worker = Self {
            name: name.to_owned(),
            status: Arc::clone(status),
            stopped,
            commands: received,
            runtime: tokio::runtime::Handle::current(),
            live: generation,
            previous: None,
            swapped_at: None,
            observer,
        };
        let thread = std::thread::Builder::new()
            .name(format!("plugin-{name}"))
            .spawn(move || worker.run())
            .map_err(|source| Error::Thread {
                plugin: name.to_owned(),
                source,
            })?;
        Ok(WorkerHandle { commands, thread })
    }

    /// Records that the live version handles deltas from now on.
    fn went_live(&self) {
        update(&self.status, |status| {
            status.state = PluginState::Running;
            status.running_digest = Some(self.live.digest().to_owned());
            status.registration = Some(self.live.registration.clone());
            status.refused.clone_from(&self.live.refused);
        });
    }

    /// Serves the plugin until it is stopped or unloaded: delivers batches,
    /// restarts failed instances, swaps versions, rolls back failing ones.
    fn run(mut self) {
        let mut instance = self.live.instance.take();
        let (mut handlers, _) = attach(&self.name, &self.live, Vec::new());
        let mut pending: VecDeque<Delta> = VecDeque::new();
        let mut failures: VecDeque<Instant> = VecDeque::new();
        let mut probation_failures = 0;
        let mut quarantined = false;
        self.went_live();
        loop {
            if instance.is_none() && !quarantined {
                let policy = self.live.manifest.failures;
                let now = Instant::now();
                while failures
                    .front()
                    .is_some_and(|first| now.duration_since(*first) > policy.restart_window)
                {
                    failures.pop_front();
                }
                if failures.len() > policy.max_restarts as usize {
                    tracing::error!(
                        plugin = %self.name,
                        failures = failures.len(),
                        window_s = policy.restart_window.as_secs(),
                        "plugin quarantined: it failed too often; change its file or manifest to try again"
                    );
                    update(&self.status, |status| status.state = PluginState::Quarantined);
                    quarantined = true;
                    handlers.clear();
                    pending.clear();
                    continue;
                }
                let doublings = u32::try_from(failures.len().saturating_sub(1)).unwrap_or(u32::MAX);
                let backoff = doubled(policy.restart_backoff, doublings);
                update(&self.status, |status| status.state = PluginState::Restarting);
                tracing::warn!(plugin = %self.name, backoff_ms = backoff.as_millis() as u64, "restarting the plugin after a failure");
                if self.sleep(backoff) {
                    break;
                }
                match self.live.fresh_instance() {
                    Ok(fresh) => {
                        instance = Some(fresh);
                        // A fresh instance starts from the cache as an initial list.
                        (handlers, _) = attach(&self.name, &self.live, Vec::new());
                        pending.clear();
                        update(&self.status, |status| status.restarts += 1);
                        self.went_live();
                    }
                    Err(error) => {
                        let error = one_line(&error);
                        tracing::warn!(plugin = %self.name, %error, "restart failed");
                        update(&self.status, |status| status.last_error = Some(error));
                        failures.push_back(Instant::now());
                    }
                }
                continue;
            }

            let serving = instance.is_some();
            match self.next_work(&mut handlers, &mut pending, serving) {
                Work::Stop => break,
                Work::Batch(batch) => {
                    let Some(current) = instance.as_mut() else { continue };
                    match self.deliver(current, &batch) {
                        Delivery::Done => {}
                        Delivery::Stopped => break,
                        Delivery::Failed(error) => {
                            instance = None;
                            failures.push_back(Instant::now());
                            let on_probation = self.swapped_at.is_some_and(|at| at.elapsed() < PROBATION);
                            if on_probation && self.previous.is_some() {
                                probation_failures += 1;
                                if probation_failures >= PROBATION_FAILURES {
                                    instance = self.roll_back(&error);
                                    (handlers, pending) = attach(&self.name, &self.live, std::mem::take(&mut handlers));
                                    failures.clear();
                                    probation_failures = 0;
                                }
                            }
                        }
                    }
                }
                Work::Command(Command::Swap(generation)) => {
                    let mut generation = *generation;
                    let fresh = generation.instance.take();
                    (handlers, pending) = attach(&self.name, &generation, std::mem::take(&mut handlers));
                    let old = std::mem::replace(&mut self.live, generation);
                    tracing::info!(
                        plugin = %self.name,
                        from = &old.digest()[..12],
                        to = &self.live.digest()[..12],
                        replayed = pending.len(),
                        "swapped in the new version"
                    );
                    self.previous = Some(old);
                    self.swapped_at = Some(Instant::now());
                    instance = fresh;
                    failures.clear();
                    probation_failures = 0;
                    quarantined = false;
                    update(&self.status, |status| status.reloads += 1);
                    self.went_live();
                }
                Work::Command(Command::Unload) => {
                    if let Some(current) = instance.as_mut() {
                        self.drain(current, &mut handlers, &mut pending);
                    }
                    break;
                }
            }
        }
        if !quarantined {
            update(&self.status, |status| status.state = PluginState::Stopped);
        }
    }

    /// Replaces the live version by the previous one, which starts afresh.
    fn roll_back(&mut self, error: &str) -> Option<PluginInstance> {
        let previous = self.previous.take()?;
        let failed = std::mem::replace(&mut self.live, previous);
        tracing::error!(
            plugin = %self.name,
            failed = &failed.digest()[..12],
            restored = &self.live.digest()[..12],
            %error,
            "the new version keeps failing: rolled back to the previous one"
        );
        update(&self.status, |status| {
            status.rollbacks += 1;
            status.rejected_digest = Some(failed.digest().to_owned());
        });
        self.swapped_at = None;
        match self.live.fresh_instance() {
            Ok(instance) => {
                self.went_live();
                Some(instance)
            }
            Err(error) => {
                update(&self.status, |status| status.last_error = Some(one_line(&error)));
                None
            }
        }
    }

    /// The next thing to do: replayed deltas first, then whichever comes first of
    /// a batch, a command and the stop signal.
    fn next_work(&mut self, handlers: &mut [Attached], pending: &mut VecDeque<Delta>, serving: bool) -> Work {
        let max_batch = self.live.manifest.limits.max_batch;
        if serving && !pending.is_empty() {
            let take = pending.len().min(max_batch);
            return Work::Batch(pending.drain(..take).collect());
        }
        let (stopped, commands) = (&mut self.stopped, &mut self.commands);
        self.runtime.block_on(async {
            let batches = async {
                if serving && !handlers.is_empty() {
                    let next = handlers
                        .iter_mut()
                        .map(|attached| Box::pin(attached.handler.next_batch(max_batch)));
                    futures::future::select_all(next).await.0
                } else {
                    std::future::pending().await
                }
            };
            tokio::select! {
                biased;
                _ = stopped.wait_for(|stop| *stop) => Work::Stop,
                command = commands.recv() => command.map_or(Work::Stop, Work::Command),
                batch = batches => batch.map_or(Work::Stop, Work::Batch),
            }
        })
    }

    /// Handles what is queued now (not what arrives meanwhile), before unloading.
    fn drain(&mut self, instance: &mut PluginInstance, handlers: &mut [Attached], pending: &mut VecDeque<Delta>) {
        let max_batch = self.live.manifest.limits.max_batch;
        let mut batches: Vec<Vec<Delta>> = Vec::new();
        while !pending.is_empty() {
            let take = pending.len().min(max_batch);
            batches.push(pending.drain(..take).collect());
        }
        for attached in handlers.iter_mut() {
            let mut left = attached.handler.stats().queued;
            while left > 0 {
                let Some(batch) = attached.handler.try_next_batch(left.min(max_batch)) else {
                    break;
                };
                left = left.saturating_sub(batch.len());
                batches.push(batch);
            }
        }
        let drained: usize = batches.iter().map(Vec::len).sum();
        for batch in batches {
            if !matches!(self.deliver(instance, &batch), Delivery::Done) {
                break;
            }
        }
        tracing::info!(plugin = %self.name, deltas = drained, "drained and unloaded");
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

    /// Hands one batch to the plugin, retrying or skipping it when the plugin
    /// rejects it.
    fn deliver(&mut self, instance: &mut PluginInstance, batch: &[Delta]) -> Delivery {
        let count = batch.len() as u64;
        let policy = self.live.manifest.failures;
        let mut attempt = 0_u32;
        if let Some(observer) = &self.observer {
            observer(&self.name, batch);
        }
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
                    return Delivery::Done;
                }
                Err(crate::plugin::Error::Plugin { message, .. }) => {
                    update(&self.status, |status| {
                        status.errors += 1;
                        status.last_error = Some(message.clone());
                    });
                    if policy.on_error == OnError::Skip || attempt >= policy.retries {
                        tracing::warn!(plugin = %self.name, deltas = count, %message, "batch skipped after the plugin rejected it");
                        update(&self.status, |status| status.skipped += count);
                        return Delivery::Done;
                    }
                    let backoff = doubled(policy.retry_backoff, attempt);
                    attempt += 1;
                    tracing::info!(plugin = %self.name, attempt, %message, "batch rejected; retrying");
                    update(&self.status, |status| status.retries += 1);
                    if self.sleep(backoff) {
                        return Delivery::Stopped;
                    }
                }
                Err(error) => {
                    let error = one_line(&error);
                    tracing::warn!(plugin = %self.name, %error, "plugin failed; its instance is dropped");
                    update(&self.status, |status| {
                        status.traps += 1;
                        status.last_error = Some(error.clone());
                    });
                    return Delivery::Failed(error);
                }
            }
        }
    }
}
