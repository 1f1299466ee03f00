//! One load: a version of a plugin read, compiled (or its last compile
//! reused), its `[env]` resolved and started ([`Version::prepare`]), then
//! handed to the plugin's worker. Every way it can fail is a [`LoadError`],
//! which [`Supervisor::apply`] reports once.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::directory::{self, Fingerprint, PluginFiles};
use super::super::status::{PluginState, STATUS_LOG_LINES, SharedStatus, update};
use super::super::version::{Context, Version, blocking};
use super::super::worker::{Command, Worker};
use super::super::{LoadError, error_text};
use super::{Load, Supervisor};
use crate::manifest::Manifest;
use crate::plugin::{LogLine, LogSink, PluginComponent};
use crate::rollout::{RolloutMode, next_of};

impl Supervisor {
    /// Loads a version of plugin `name` and hands it to its worker (or
    /// starts one). A version that cannot load is reported here, once; a
    /// running version keeps serving.
    pub(super) async fn apply(&self, name: &str, files: PluginFiles, load: Load) {
        let reload = self.plugins().get(name).is_some_and(|plugin| plugin.applied.is_some());
        let started = Instant::now();
        let fingerprint = files.fingerprint.clone();
        let status = Arc::clone(&load.status);
        let loaded = match self.load(name, files, load).await {
            Ok(Some(version)) => self.hand_over(name, &fingerprint, &status, version, started),
            Ok(None) => Ok(()),
            Err(error) => Err(error),
        };
        if let Err(error) = loaded {
            self.reject(name, &fingerprint, &status, &error, reload);
        }
    }

    /// Reads, compiles and starts one version of plugin `name`. `None` when
    /// there is nothing to run now and nothing to report: it writes and
    /// stands by until this replica leads it, or its file is still being
    /// written (the next change loads it).
    async fn load(&self, name: &str, files: PluginFiles, load: Load) -> Result<Option<Version>, LoadError> {
        let Load {
            status,
            component,
            compiling,
            outside_grant,
        } = load;
        let status = &status;
        let PluginFiles {
            file,
            bytes,
            fingerprint,
            manifest,
            stamp,
            component: given,
        } = files;
        let mut manifest = manifest?;
        // A next version's rollout; a shadow's writes persist nothing, and
        // its requests are never sent.
        let rollout = next_of(name).map(|_| manifest.rollout.unwrap_or_default());
        let shadow = matches!(rollout, Some(policy) if policy.mode == RolloutMode::Shadow);
        match rollout {
            Some(policy) if policy.mode == RolloutMode::Shadow => manifest.mode = crate::grant::WriteMode::DryRun,
            None if manifest.rollout.is_some() => {
                tracing::warn!(plugin = %name, "[rollout] applies to a next version only (NAME.next.toml); ignored");
            }
            _ => {}
        }
        let bytes = bytes.map_err(|source| LoadError::File {
            path: file.clone(),
            source,
        })?;
        let component = match given.or(component.filter(|component| component.digest() == fingerprint.digest)) {
            Some(component) => component,
            None => match self.compile(name, &file, bytes, &manifest, compiling).await {
                Err(LoadError::Compile(error)) => {
                    // A file still being written fails to compile: wait for it.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if stamp.is_some() && directory::stamp(&file) != stamp {
                        tracing::info!(plugin = %name, "plugin file still changing; waiting for it to settle");
                        return Ok(None);
                    }
                    return Err(LoadError::Compile(error));
                }
                compiled => compiled?,
            },
        };
        let writes = writes(&manifest, &component);
        {
            let mut plugins = self.plugins();
            plugins.entry(name.to_owned()).and_modify(|plugin| {
                plugin.component = Some(component.clone());
                plugin.writes = writes;
            });
            self.offer_writers(&plugins);
        }
        if writes && self.stand_by(&mut self.plugins(), name, &fingerprint, status) {
            return Ok(None);
        }
        let env = self.env.resolve(&manifest.env).map_err(|source| LoadError::Env {
            plugin: name.to_owned(),
            source: Box::new(source),
        })?;
        let context = Context {
            factory: &self.factory,
            env,
            scope: &self.scope,
            log_sink: self.status_sink(status),
            cluster: &self.cluster,
            addresses: &self.addresses,
            resolver: &self.resolver,
            shadow,
            status,
            outside_grant,
        };
        Version::prepare(name, component, manifest, context).await.map(Some)
    }

    /// Compiles the plugin file, one compile per plugin at a time, within
    /// the manifest's `limits.compile-timeout-ms`.
    async fn compile(
        &self,
        name: &str,
        file: &Path,
        bytes: Vec<u8>,
        manifest: &Manifest,
        compiling: Arc<tokio::sync::Mutex<()>>,
    ) -> Result<PluginComponent, LoadError> {
        let engine = self.engine.clone();
        let path = file.to_owned();
        // The lock goes with the compile, which cannot be interrupted,
        // until it returns.
        let turn = compiling.lock_owned().await;
        let limit = manifest.limits.compile_timeout;
        let compile = blocking(move || {
            let _turn = turn;
            engine.load_file_bytes_within(&path, &bytes, limit)
        });
        let Ok(compiled) = tokio::time::timeout(limit, compile).await else {
            return Err(LoadError::Timeout {
                plugin: name.to_owned(),
                step: "compiling the plugin file",
                limit,
                key: "limits.compile-timeout-ms",
                detail: String::new(),
            });
        };
        compiled.map_err(LoadError::Compile)
    }

    /// Hands a started version to the plugin's worker, swapped in between
    /// two batches, or starts a worker for it; then puts a next version
    /// beside the plugin it is the next version of.
    fn hand_over(
        &self,
        name: &str,
        fingerprint: &Fingerprint,
        status: &SharedStatus,
        version: Version,
        started: Instant,
    ) -> Result<(), LoadError> {
        let writes = writes(&version.manifest, &version.component);
        let rollout = next_of(name).map(|running| (running, version.manifest.rollout.unwrap_or_default()));
        let mut plugins = self.plugins();
        // Leading may have ended while it loaded.
        if writes && self.stand_by(&mut plugins, name, fingerprint, status) {
            return Ok(());
        }
        let Some(plugin) = plugins.get_mut(name) else {
            return Ok(());
        };
        // A load that a later rescan dropped (its file changed again, or
        // back) after its last await swaps nothing in.
        if plugin
            .loading
            .as_ref()
            .is_none_or(|loading| &loading.fingerprint != fingerprint)
        {
            tracing::debug!(plugin = %name, "a dropped load finished; its version is discarded");
            return Ok(());
        }
        plugin.applied = Some(fingerprint.clone());
        // The same file may load now that its env or manifest changed.
        update(status, |status| {
            status.load_error = None;
            if status.rejected_digest.as_ref() == Some(&fingerprint.digest) {
                status.rejected_digest = None;
            }
        });
        let swapped = match plugin.worker.as_ref().filter(|worker| worker.alive()) {
            Some(worker) => match worker.commands.send(Command::Swap(Box::new(version))) {
                Ok(()) => {
                    tracing::info!(
                        plugin = %name,
                        digest = &fingerprint.digest[..12],
                        prepare_ms = started.elapsed().as_millis() as u64,
                        "next version ready; swapping it in between two batches"
                    );
                    None
                }
                Err(tokio::sync::mpsc::error::SendError(Command::Swap(version))) => Some(*version),
                Err(_) => return Ok(()),
            },
            None => Some(version),
        };
        if let Some(version) = swapped {
            plugin.worker = Some(Worker::spawn(
                &self.pool,
                name,
                status,
                version,
                self.stop.subscribe(),
                self.observer.clone(),
                Arc::clone(&plugin.slot),
            )?);
        }
        drop(plugins);
        if let Some((running, policy)) = rollout {
            self.start_rollout(running, name, policy, &fingerprint.digest);
        }
        Ok(())
    }

    /// Records a version that could not load; an earlier version keeps running.
    fn reject(&self, name: &str, fingerprint: &Fingerprint, status: &SharedStatus, error: &LoadError, reload: bool) {
        let message = error_text(error);
        if reload {
            tracing::error!(plugin = %name, error = %message, "next version rejected; the running version keeps serving");
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

/// True when a version can write to the cluster (a write grant, or the
/// controller world): it runs only while this replica leads it.
fn writes(manifest: &Manifest, component: &PluginComponent) -> bool {
    !manifest.grant.writes().is_empty() || component.is_controller()
}
