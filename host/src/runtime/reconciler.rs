//! The directory reconciler: brings the running plugins in line with what the
//! plugin directory holds — loads new files, prepares changed ones beside the
//! running version and hands them to its worker, unloads removed ones.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::directory::{self, Fingerprint, PluginFiles};
use super::status::{PluginState, PluginStatus, STATUS_LOG_LINES, SharedStatus, update};
use super::version::{Context, Version, blocking};
use super::worker::{Command, Worker, WorkerHandle};
use super::{BatchObserver, Error};
use crate::cluster::Cluster;
use crate::grant::Scope;
use crate::informer::SharedInformerFactory;
use crate::plugin::{LogLine, LogSink, PluginComponent, PluginEngine};

/// A plugin the reconciler knows, by name.
struct Plugin {
    status: SharedStatus,
    /// The version last tried, whether it loaded or not: not tried again until
    /// the directory holds another.
    applied: Option<Fingerprint>,
    /// The compiled component of the last file that compiled, for
    /// manifest-only changes.
    component: Option<PluginComponent>,
    /// The worker, while one runs.
    worker: Option<WorkerHandle>,
}

/// The runtime's shared part: what every plugin of the directory runs with, and
/// the plugins themselves.
pub(super) struct Reconciler {
    pub(super) engine: PluginEngine,
    pub(super) factory: SharedInformerFactory,
    pub(super) cluster: Cluster,
    pub(super) dir: PathBuf,
    pub(super) scope: Scope,
    pub(super) namespace: Option<String>,
    pub(super) log_sink: Option<LogSink>,
    pub(super) observer: Option<BatchObserver>,
    plugins: Mutex<BTreeMap<String, Plugin>>,
    /// Held while the directory is reconciled: one reconciliation at a time.
    reconciling: tokio::sync::Mutex<()>,
    pub(super) stop: tokio::sync::watch::Sender<bool>,
}

impl Reconciler {
    pub(super) fn new(
        engine: PluginEngine,
        factory: SharedInformerFactory,
        dir: PathBuf,
        namespace: Option<String>,
        log_sink: Option<LogSink>,
        observer: Option<BatchObserver>,
    ) -> Self {
        let scope = namespace.as_ref().map_or_else(Scope::all, |ns| Scope::only([ns]));
        Self {
            engine,
            cluster: Cluster::new(factory.client().clone()),
            factory,
            dir,
            scope,
            namespace,
            log_sink,
            observer,
            plugins: Mutex::new(BTreeMap::new()),
            reconciling: tokio::sync::Mutex::new(()),
            stop: tokio::sync::watch::channel(false).0,
        }
    }

    fn plugins(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Plugin>> {
        self.plugins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Every plugin's status, by name.
    pub(super) fn status(&self) -> Vec<PluginStatus> {
        self.plugins()
            .values()
            .map(|plugin| plugin.status.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .collect()
    }

    /// Takes every worker's thread, to join them at shutdown.
    pub(super) fn take_threads(&self) -> Vec<std::thread::JoinHandle<()>> {
        self.plugins()
            .values_mut()
            .filter_map(|plugin| plugin.worker.take().map(|worker| worker.thread))
            .collect()
    }

    /// Brings the plugins in line with the directory.
    pub(super) async fn reconcile(&self) {
        let _one_at_a_time = self.reconciling.lock().await;
        let wanted = match directory::scan(&self.dir) {
            Ok(wanted) => wanted,
            Err(error) => {
                tracing::warn!(error = %super::error_text(&error), "cannot scan the plugin directory");
                BTreeMap::new()
            }
        };

        // Removed files: drain and unload.
        let removed: Vec<Plugin> = {
            let mut plugins = self.plugins();
            let gone: Vec<String> = plugins
                .keys()
                .filter(|name| !wanted.contains_key(*name))
                .cloned()
                .collect();
            gone.iter().filter_map(|name| plugins.remove(name)).collect()
        };
        for plugin in removed {
            let name = update(&plugin.status, |status| status.name.clone());
            tracing::info!(plugin = %name, "plugin file removed: draining and unloading");
            if let Some(worker) = plugin.worker {
                let _ = worker.commands.send(Command::Unload);
                drop(tokio::task::spawn_blocking(move || worker.thread.join()));
            }
        }

        for (name, files) in wanted {
            let (status, applied, component) = {
                let mut plugins = self.plugins();
                let plugin = plugins.entry(name.clone()).or_insert_with(|| Plugin {
                    status: Arc::new(Mutex::new(PluginStatus::new(&files.file))),
                    applied: None,
                    component: None,
                    worker: None,
                });
                (
                    Arc::clone(&plugin.status),
                    plugin.applied.clone(),
                    plugin.component.clone(),
                )
            };
            update(&status, |status| {
                status.desired_digest = Some(files.fingerprint.digest.clone());
            });
            if applied.as_ref() == Some(&files.fingerprint) {
                continue;
            }
            self.apply(&name, files, &status, component).await;
        }
    }

    /// Loads a new version of a plugin and hands it to its worker (or starts one).
    async fn apply(&self, name: &str, files: PluginFiles, status: &SharedStatus, component: Option<PluginComponent>) {
        let reload = self.plugins().get(name).is_some_and(|plugin| plugin.applied.is_some());
        let started = Instant::now();
        let PluginFiles {
            file,
            bytes,
            fingerprint,
            manifest,
            stamp,
        } = files;
        let manifest = match manifest {
            Ok(manifest) => manifest,
            Err(error) => {
                self.reject(name, &fingerprint, status, &Error::Manifest(error), reload);
                return;
            }
        };
        let bytes = match bytes {
            Ok(bytes) => bytes,
            Err(source) => {
                let error = Error::File { path: file, source };
                self.reject(name, &fingerprint, status, &error, reload);
                return;
            }
        };
        let component = match component.filter(|component| component.digest() == fingerprint.digest) {
            Some(component) => component,
            None => {
                let engine = self.engine.clone();
                let compiling = file.clone();
                match blocking(move || engine.load_file_bytes(&compiling, &bytes)).await {
                    Ok(component) => component,
                    Err(error) => {
                        // A file still being written fails to compile: wait for it.
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        if directory::stamp(&file) != stamp {
                            tracing::info!(plugin = %name, "plugin file still changing; waiting for it to settle");
                            return;
                        }
                        self.reject(name, &fingerprint, status, &Error::Plugin(error), reload);
                        return;
                    }
                }
            }
        };
        self.plugins()
            .entry(name.to_owned())
            .and_modify(|plugin| plugin.component = Some(component.clone()));
        let context = Context {
            factory: &self.factory,
            scope: &self.scope,
            namespace: self.namespace.as_deref(),
            log_sink: self.status_sink(status),
            cluster: &self.cluster,
            status,
        };
        let version = match Version::prepare(name, component, manifest, context).await {
            Ok(version) => version,
            Err(error) => {
                self.reject(name, &fingerprint, status, &error, reload);
                return;
            }
        };

        let mut plugins = self.plugins();
        let Some(plugin) = plugins.get_mut(name) else { return };
        plugin.applied = Some(fingerprint.clone());
        update(status, |status| status.load_error = None);
        let version = match plugin.worker.as_ref().filter(|worker| worker.alive()) {
            Some(worker) => match worker.commands.send(Command::Swap(Box::new(version))) {
                Ok(()) => {
                    tracing::info!(
                        plugin = %name,
                        digest = &fingerprint.digest[..12],
                        prepare_ms = started.elapsed().as_millis() as u64,
                        "new version ready; swapping it in between two batches"
                    );
                    return;
                }
                Err(tokio::sync::mpsc::error::SendError(Command::Swap(version))) => *version,
                Err(_) => return,
            },
            None => version,
        };
        match Worker::spawn(name, status, version, self.stop.subscribe(), self.observer.clone()) {
            Ok(worker) => plugin.worker = Some(worker),
            Err(error) => {
                drop(plugins);
                self.reject(name, &fingerprint, status, &error, reload);
            }
        }
    }

    /// Records a version that could not load; an earlier version keeps running.
    fn reject(&self, name: &str, fingerprint: &Fingerprint, status: &SharedStatus, error: &Error, reload: bool) {
        let message = super::error_text(error);
        if reload {
            tracing::error!(plugin = %name, error = %message, "new version rejected; the running version keeps serving");
        } else {
            tracing::error!(plugin = %name, error = %message, "plugin not started");
        }
        if let Some(plugin) = self.plugins().get_mut(name) {
            plugin.applied = Some(fingerprint.clone());
        }
        update(status, |status| {
            status.load_error = Some(message);
            status.rejected_digest = Some(fingerprint.digest.clone());
            if status.running_digest.is_none() {
                status.state = PluginState::Failed;
            }
        });
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
