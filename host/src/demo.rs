//! `kinformer demo`: the whole data path against the embedded API server emulation.
//!
//! The demo starts an emulated Kubernetes API server with a seeded synthetic
//! workload (deployments whose pods churn, HPAs, configmaps), writes a kubeconfig
//! for it so a person can poke it with `kubectl`, loads every plugin of a
//! directory, and runs one Reflector per resource the plugins registered for,
//! through the real kube-rs client over HTTP. Every delta reaches the plugins that
//! subscribed to it, in order, in batches.

use std::path::{Path, PathBuf};
use std::time::Duration;

use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};

use crate::caches::Caches;
use crate::delta::Delta;
use crate::informer::{InformerKey, SharedIndexInformer, SharedInformerFactory};
use crate::plugin::{PluginEngine, PluginInstance, PluginOptions, Registration};
use crate::processor::{Handler, HandlerOptions};
use crate::selector::Selector;

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be read or written.
    #[error("{path}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A plugin failed to load or start.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::Error),
    /// A plugin registered an invalid subscription or index.
    #[error("{plugin}: {reason}")]
    Registration {
        /// The plugin.
        plugin: String,
        /// What is wrong.
        reason: String,
    },
    /// The directory holds no `.wasm` file.
    #[error("no plugins (*.wasm) in {0}")]
    NoPlugins(PathBuf),
    /// The emulated cluster refused the workload.
    #[error("the emulated cluster refused the workload")]
    Workload(#[source] apiserver_sim::status::ApiError),
    /// The client could not talk to the emulated cluster.
    #[error("talking to the emulated cluster")]
    Kube(#[source] kube::Error),
}

/// Settings of the demo.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The plugin directory.
    pub plugins: PathBuf,
    /// Where to write the emulated cluster's kubeconfig.
    pub kubeconfig: PathBuf,
    /// The workload the emulated cluster runs.
    pub workload: Workload,
    /// Stop after this long; run until Ctrl-C when `None`.
    pub duration: Option<Duration>,
}

impl DemoConfig {
    /// A demo of the plugins in `plugins`, writing its kubeconfig to `kubeconfig`,
    /// with a small workload of 2 namespaces of 2 deployments of 3 pods changing
    /// 10 times a second.
    #[must_use]
    pub fn new(plugins: impl Into<PathBuf>, kubeconfig: impl Into<PathBuf>) -> Self {
        Self {
            plugins: plugins.into(),
            kubeconfig: kubeconfig.into(),
            workload: Workload::default().size(2, 2, 3).changes_per_second(10.0),
            duration: None,
        }
    }

    /// Sets [`DemoConfig::duration`].
    #[must_use]
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = Some(duration);
        self
    }

    /// Sets [`DemoConfig::workload`].
    #[must_use]
    pub fn workload(mut self, workload: Workload) -> Self {
        self.workload = workload;
        self
    }
}

/// Writes the given plugin files into `dir` (created if missing).
///
/// # Errors
///
/// When the directory or a file cannot be written.
pub fn write_plugins(dir: &Path, plugins: &[(&str, &[u8])]) -> Result<(), Error> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    for (name, bytes) in plugins {
        let path = dir.join(name);
        std::fs::write(&path, bytes).map_err(io(&path))?;
    }
    Ok(())
}

/// A loaded plugin and what it registered.
struct Loaded {
    instance: PluginInstance,
    registration: Registration,
}

/// The most deltas handed to a plugin in one call.
const MAX_BATCH: usize = 64;

/// Runs the demo until its duration ends (or Ctrl-C); returns the plugins'
/// instances so the caller can inspect what they did.
///
/// # Errors
///
/// When the directory holds no loadable plugin, a plugin fails to start, or the
/// emulated cluster cannot be started or reached.
pub async fn run(config: &DemoConfig) -> Result<Vec<PluginInstance>, Error> {
    let engine = PluginEngine::new()?;
    let caches = Caches::new();
    let mut plugins = Vec::new();
    for path in plugin_files(&config.plugins)? {
        plugins.push(load(&engine, &caches, &path)?);
    }

    // The emulated cluster, its kubeconfig, and its workload.
    let server = ApiServer::start(SimConfig::default())
        .await
        .map_err(|source| Error::Io {
            path: "127.0.0.1".into(),
            source,
        })?;
    server
        .write_kubeconfig(&config.kubeconfig)
        .map_err(|source| Error::Io {
            path: config.kubeconfig.clone(),
            source,
        })?;
    tracing::info!(
        kubeconfig = %config.kubeconfig.display(),
        "emulated cluster running: try `kubectl --kubeconfig {} get pods -A`",
        config.kubeconfig.display()
    );
    let workload = server.start_workload(&config.workload).map_err(Error::Workload)?;
    let client = kube::Client::try_from(server.client_config()).map_err(Error::Kube)?;
    let factory = SharedInformerFactory::new(client);

    // One shared informer per (resource, namespace, selector) the plugins registered
    // for; each plugin is a handler of the informers whose deltas it wants.
    let mut informers: Vec<SharedIndexInformer> = Vec::new();
    let mut workers = Vec::new();
    let mut pumps = Vec::new();
    for plugin in plugins {
        let name = plugin.instance.name().to_owned();
        let mut handlers = Vec::new();
        let mut own = Vec::new();
        for subscription in &plugin.registration.subscriptions {
            let mut key = InformerKey::new(subscription.gvk.clone());
            key.namespace.clone_from(&subscription.namespace);
            key.label_selector.clone_from(&subscription.label_selector);
            let informer = factory.informer(key).await.map_err(|error| Error::Registration {
                plugin: name.clone(),
                reason: error.to_string(),
            })?;
            if caches.get(&subscription.gvk).is_none() {
                caches.insert(subscription.gvk.clone(), informer.cache());
            }
            if subscription.deliver {
                handlers.push(informer.add_handler(&name, &HandlerOptions::default()));
            }
            own.push(informer.clone());
            informers.push(informer);
        }
        for index in &plugin.registration.indexes {
            let informer = informers
                .iter()
                .find(|informer| informer.key().gvk == index.gvk)
                .ok_or_else(|| Error::Registration {
                    plugin: name.clone(),
                    reason: format!("index {:?} on a resource it does not watch", index.name),
                })?;
            informer
                .add_index(&index.name, &index.field_path)
                .map_err(|error| Error::Registration {
                    plugin: name.clone(),
                    reason: error.to_string(),
                })?;
        }
        // The pump takes batches from the plugin's handlers; the worker thread
        // calls the plugin. The rendezvous between them holds one batch at a time,
        // so a busy plugin backs up into its own handler queues only.
        let (batches, received) = std::sync::mpsc::sync_channel::<Vec<Delta>>(0);
        pumps.push(tokio::spawn(pump(name.clone(), own, handlers, batches)));
        let worker = std::thread::Builder::new()
            .name(format!("plugin-{name}"))
            .spawn(move || work(plugin.instance, &received))
            .map_err(|source| Error::Io {
                path: name.into(),
                source,
            })?;
        workers.push(worker);
    }

    match config.duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!(
        synced = informers.iter().all(SharedIndexInformer::has_synced),
        "demo stopping"
    );
    workload.abort();
    for pump in pumps {
        pump.abort();
        let _ = pump.await;
    }
    drop(informers);
    let instances = tokio::task::spawn_blocking(move || {
        workers
            .into_iter()
            .filter_map(|worker| worker.join().ok())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    server.shutdown();
    Ok(instances)
}

/// Moves batches from a plugin's handlers to its worker thread, waiting on
/// whichever handler has deltas. Like client-go's WaitForCacheSync, nothing is
/// delivered before every cache the plugin registered for has synced, so its
/// first deltas can rely on its cache queries.
async fn pump(
    plugin: String,
    informers: Vec<SharedIndexInformer>,
    mut handlers: Vec<Handler>,
    batches: std::sync::mpsc::SyncSender<Vec<Delta>>,
) {
    if handlers.is_empty() {
        return;
    }
    let mut waited = Duration::ZERO;
    while !informers.iter().all(SharedIndexInformer::has_synced) {
        tokio::time::sleep(Duration::from_millis(10)).await;
        waited += Duration::from_millis(10);
        if waited.as_millis().is_multiple_of(10_000) {
            let pending: Vec<&str> = informers
                .iter()
                .filter(|informer| !informer.has_synced())
                .map(|informer| informer.key().gvk.kind.as_str())
                .collect();
            tracing::info!(plugin, ?pending, "waiting for caches to sync");
        }
    }
    drop(informers);
    loop {
        let next = handlers
            .iter_mut()
            .map(|handler| Box::pin(handler.next_batch(MAX_BATCH)));
        let (batch, _, _) = futures::future::select_all(next).await;
        let Some(batch) = batch else { return };
        let batches = batches.clone();
        let sent = tokio::task::spawn_blocking(move || batches.send(batch).is_ok()).await;
        if !matches!(sent, Ok(true)) {
            return;
        }
    }
}

/// Loads, instantiates and initialises one plugin.
fn load(engine: &PluginEngine, caches: &Caches, path: &Path) -> Result<Loaded, Error> {
    let component = engine.load_file(path)?;
    let mut instance = component.instantiate(caches.clone(), PluginOptions::default())?;
    let registration = instance.init("")?;
    // Selectors go to the API server; a malformed one is refused here, naming it.
    for subscription in &registration.subscriptions {
        if let Some(selector) = &subscription.label_selector {
            Selector::parse(selector).map_err(|error| Error::Registration {
                plugin: component.name().to_owned(),
                reason: error.to_string(),
            })?;
        }
    }
    tracing::info!(
        plugin = component.name(),
        name = %registration.name,
        version = %registration.version,
        subscriptions = registration.subscriptions.len(),
        "plugin started"
    );
    Ok(Loaded { instance, registration })
}

/// A plugin's worker: calls the plugin with each batch until the pump stops.
fn work(mut instance: PluginInstance, batches: &std::sync::mpsc::Receiver<Vec<Delta>>) -> PluginInstance {
    while let Ok(batch) = batches.recv() {
        let _span = tracing::debug_span!("handle", plugin = instance.name(), deltas = batch.len()).entered();
        if let Err(error) = instance.handle(&batch) {
            tracing::warn!(plugin = instance.name(), %error, "batch not handled");
            if matches!(
                error,
                crate::plugin::Error::Trap { .. } | crate::plugin::Error::Poisoned(_)
            ) {
                break;
            }
        }
    }
    instance
}

/// The `.wasm` files of `dir`, sorted.
fn plugin_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(Error::NoPlugins(dir.to_owned()));
    }
    Ok(files)
}
