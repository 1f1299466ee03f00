//! `kinformer demo`: the whole data path against the embedded API server emulation.
//!
//! The demo starts an emulated Kubernetes API server with a seeded synthetic
//! workload (deployments whose pods churn, HPAs, configmaps), writes a kubeconfig
//! for it so a person can poke it with `kubectl`, loads every plugin of a
//! directory, and runs one Reflector per resource the plugins registered for,
//! through the real kube-rs client over HTTP. Every delta reaches the plugins that
//! subscribed to it, in order, in batches.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use tokio::sync::mpsc;

use crate::caches::Caches;
use crate::delta::Delta;
use crate::indexer::indexer;
use crate::plugin::{PluginEngine, PluginInstance, PluginOptions, Registration, Subscription};
use crate::reflector::{Reflector, ReflectorConfig, ReflectorStatus};
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
    /// The parsed selector of each subscription, in order.
    selectors: Vec<Selector>,
}

fn subscribes_to(subscription: &Subscription, selector: &Selector, delta: &Delta) -> bool {
    subscription.deliver
        && subscription.gvk == *delta.gvk
        && subscription
            .namespace
            .as_deref()
            .is_none_or(|namespace| delta.object.namespace() == Some(namespace))
        && selector.matches(delta.object.labels())
}

/// Where a plugin's deltas go: its worker's queue, and what it subscribed to.
struct Route {
    queue: mpsc::Sender<Delta>,
    subscriptions: Vec<(Subscription, Selector)>,
}

impl Route {
    fn wants(&self, delta: &Delta) -> bool {
        self.subscriptions
            .iter()
            .any(|(subscription, selector)| subscribes_to(subscription, selector, delta))
    }
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

    // One cache and one Reflector per resource any plugin registered for.
    let (deltas_tx, mut deltas_rx) = mpsc::channel::<Delta>(4096);
    let mut reflectors = Vec::new();
    let mut statuses: Vec<Arc<ReflectorStatus>> = Vec::new();
    let mut writers = HashMap::new();
    for plugin in &plugins {
        for subscription in &plugin.registration.subscriptions {
            if writers.contains_key(&subscription.gvk) {
                continue;
            }
            let (reader, writer) = indexer();
            caches.insert(subscription.gvk.clone(), reader);
            writers.insert(subscription.gvk.clone(), writer);
        }
    }
    for plugin in &plugins {
        for index in &plugin.registration.indexes {
            let writer = writers.get(&index.gvk).ok_or_else(|| Error::Registration {
                plugin: plugin.instance.name().to_owned(),
                reason: format!("index {:?} on a resource it does not watch", index.name),
            })?;
            writer
                .add_index(&index.name, &index.field_path)
                .map_err(|error| Error::Registration {
                    plugin: plugin.instance.name().to_owned(),
                    reason: error.to_string(),
                })?;
        }
    }
    for (gvk, writer) in writers {
        let (resource, _) = kube::discovery::pinned_kind(&client, &gvk).await.map_err(Error::Kube)?;
        let reflector = Reflector::new(client.clone(), resource, ReflectorConfig::default(), writer);
        statuses.push(reflector.status());
        reflectors.push(tokio::spawn(reflector.run(deltas_tx.clone())));
    }
    drop(deltas_tx);

    // One worker thread per plugin, fed through its own queue.
    let mut routes = Vec::new();
    let mut workers = Vec::new();
    for plugin in plugins {
        let (queue, received) = mpsc::channel(1024);
        let subscriptions = plugin
            .registration
            .subscriptions
            .iter()
            .cloned()
            .zip(plugin.selectors.iter().cloned())
            .collect();
        routes.push(Route { queue, subscriptions });
        let name = plugin.instance.name().to_owned();
        let worker = std::thread::Builder::new()
            .name(format!("plugin-{name}"))
            .spawn(move || work(plugin.instance, received))
            .map_err(|source| Error::Io {
                path: name.into(),
                source,
            })?;
        workers.push(worker);
    }
    let dispatcher = tokio::spawn(async move {
        while let Some(delta) = deltas_rx.recv().await {
            for route in routes.iter().filter(|route| route.wants(&delta)) {
                let _ = route.queue.send(delta.clone()).await;
            }
        }
    });

    match config.duration {
        Some(duration) => tokio::time::sleep(duration).await,
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
    tracing::info!(
        synced = statuses.iter().all(|status| status.has_synced()),
        "demo stopping"
    );
    workload.abort();
    for reflector in reflectors {
        reflector.abort();
    }
    let _ = dispatcher.await;
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

/// Loads, instantiates and initialises one plugin.
fn load(engine: &PluginEngine, caches: &Caches, path: &Path) -> Result<Loaded, Error> {
    let component = engine.load_file(path)?;
    let mut instance = component.instantiate(caches.clone(), PluginOptions::default())?;
    let registration = instance.init("")?;
    let selectors = registration
        .subscriptions
        .iter()
        .map(|subscription| Selector::parse(subscription.label_selector.as_deref().unwrap_or_default()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| Error::Registration {
            plugin: component.name().to_owned(),
            reason: error.to_string(),
        })?;
    tracing::info!(
        plugin = component.name(),
        name = %registration.name,
        version = %registration.version,
        subscriptions = registration.subscriptions.len(),
        "plugin started"
    );
    Ok(Loaded {
        instance,
        registration,
        selectors,
    })
}

/// A plugin's worker: takes what is queued (up to [`MAX_BATCH`]) and hands it over
/// in one call, until the queue closes.
fn work(mut instance: PluginInstance, mut queue: mpsc::Receiver<Delta>) -> PluginInstance {
    while let Some(first) = queue.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(delta) => batch.push(delta),
                Err(_) => break,
            }
        }
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
