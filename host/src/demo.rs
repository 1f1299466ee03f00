//! `kinformer demo`: the plugin path end to end on a built-in scenario.
//!
//! The demo loads every plugin of a directory (by default the example plugins,
//! written to a temporary directory), gives each the caches it registered for,
//! and plays a scripted workload: a deployment whose pods heat up and cool down
//! under a HorizontalPodAutoscaler. Each change is applied to the cache and
//! delivered as a delta to the plugins that subscribed to it, exactly as the
//! informers deliver changes from an API server.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::api::GroupVersionKind;
use serde_json::{Value, json};

use crate::caches::Caches;
use crate::delta::{Delta, DeltaType};
use crate::indexer::{IndexerWriter, indexer};
use crate::object::CachedObject;
use crate::plugin::{PluginEngine, PluginInstance, PluginOptions, Registration, Subscription};
use crate::selector::Selector;

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin directory could not be read or written.
    #[error("plugin directory {path}")]
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
}

/// Settings of the demo.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The plugin directory.
    pub plugins: PathBuf,
    /// The pause between two steps of the scenario, so a person can follow it.
    pub step_delay: Duration,
}

impl DemoConfig {
    /// A demo of the plugins in `plugins`, pausing 300 ms between steps.
    #[must_use]
    pub fn new(plugins: impl Into<PathBuf>) -> Self {
        Self {
            plugins: plugins.into(),
            step_delay: Duration::from_millis(300),
        }
    }

    /// Sets [`DemoConfig::step_delay`].
    #[must_use]
    pub fn step_delay(mut self, delay: Duration) -> Self {
        self.step_delay = delay;
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
struct Running {
    instance: PluginInstance,
    registration: Registration,
    /// The parsed selector of each subscription, in order.
    selectors: Vec<Selector>,
}

impl Running {
    fn wants(&self, delta: &Delta) -> bool {
        self.registration
            .subscriptions
            .iter()
            .zip(&self.selectors)
            .any(|(subscription, selector)| subscribes_to(subscription, selector, delta))
    }
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

/// Runs the demo to the end of its scenario; returns the plugins' instances so
/// the caller can inspect what they did.
///
/// # Errors
///
/// When the directory holds no loadable plugin, or a plugin fails to start.
pub fn run(config: &DemoConfig) -> Result<Vec<PluginInstance>, Error> {
    let engine = PluginEngine::new()?;
    let caches = Caches::new();
    let mut writers: HashMap<GroupVersionKind, IndexerWriter> = HashMap::new();
    let mut plugins = Vec::new();

    for path in plugin_files(&config.plugins)? {
        let _span = tracing::info_span!("load", plugin = %path.display()).entered();
        let component = engine.load_file(&path)?;
        let mut instance = component.instantiate(caches.clone(), PluginOptions::default())?;
        let registration = instance.init("")?;
        let registration_error = |reason: String| Error::Registration {
            plugin: component.name().to_owned(),
            reason,
        };
        let selectors = registration
            .subscriptions
            .iter()
            .map(|subscription| Selector::parse(subscription.label_selector.as_deref().unwrap_or_default()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| registration_error(error.to_string()))?;
        for subscription in &registration.subscriptions {
            writers.entry(subscription.gvk.clone()).or_insert_with(|| {
                let (reader, writer) = indexer();
                caches.insert(subscription.gvk.clone(), reader);
                writer
            });
        }
        for index in &registration.indexes {
            let writer = writers
                .get(&index.gvk)
                .ok_or_else(|| registration_error(format!("index {:?} on a resource it does not watch", index.name)))?;
            writer
                .add_index(&index.name, &index.field_path)
                .map_err(|error| registration_error(error.to_string()))?;
        }
        tracing::info!(
            plugin = component.name(),
            name = %registration.name,
            version = %registration.version,
            subscriptions = registration.subscriptions.len(),
            "plugin started"
        );
        plugins.push(Running {
            instance,
            registration,
            selectors,
        });
    }

    for (step, (what, change)) in scenario().into_iter().enumerate() {
        tracing::info!(step = step + 1, "{what}");
        for (gvk, change) in change {
            let Some(writer) = writers.get(&gvk) else {
                continue;
            };
            let delta = apply(writer, Arc::new(gvk), change);
            let _span = tracing::info_span!("delta", key = %delta.key(), kind = %delta.gvk.kind).entered();
            for plugin in plugins.iter_mut().filter(|plugin| plugin.wants(&delta)) {
                if let Err(error) = plugin.instance.handle(std::slice::from_ref(&delta)) {
                    tracing::warn!(plugin = plugin.instance.name(), %error, "delta not handled");
                }
            }
        }
        std::thread::sleep(config.step_delay);
    }
    Ok(plugins.into_iter().map(|plugin| plugin.instance).collect())
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

/// One change of the scenario: an object's new state, or a deletion.
enum Change {
    Apply(Value),
    Delete(&'static str),
}

/// Applies a change to the cache and returns the delta it makes.
fn apply(writer: &IndexerWriter, gvk: Arc<GroupVersionKind>, change: Change) -> Delta {
    match change {
        Change::Apply(value) => {
            let object = Arc::new(CachedObject::from_value(&value).expect("the scenario's objects are valid"));
            match writer.apply(Arc::clone(&object)) {
                Some(old) => Delta::updated(gvk, old, object),
                None => Delta::new(DeltaType::Added, gvk, object),
            }
        }
        Change::Delete(key) => {
            let object = writer.delete(key).expect("the scenario deletes what it created");
            Delta::new(DeltaType::Deleted, gvk, object)
        }
    }
}

fn pods_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "Pod")
}

fn deployments_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("apps", "v1", "Deployment")
}

fn hpas_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("autoscaling", "v2", "HorizontalPodAutoscaler")
}

type Step = (&'static str, Vec<(GroupVersionKind, Change)>);

/// The scripted workload: a deployment `shop/web` of three pods under an HPA
/// targeting 50% CPU, whose load rises, then a pod goes, then the load falls.
fn scenario() -> Vec<Step> {
    let mut rv = 0_u64;
    let mut next_rv = move || {
        rv += 1;
        rv.to_string()
    };
    let deployment = |rv: String, replicas: u32| {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "deploy-web", "resourceVersion": rv,
                         "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}
        })
    };
    let pod = |rv: String, index: u32, cpu_millicores: u32| {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("web-{index}"), "namespace": "shop", "uid": format!("pod-web-{index}"),
                         "resourceVersion": rv, "labels": {"app": "web"},
                         "annotations": {"metrics.kinformer.dev/cpu-millicores": cpu_millicores.to_string()},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "uid": "rs-web"}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "web", "image": "nginx",
                     "resources": {"requests": {"cpu": "200m"}}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        })
    };
    let hpa = |rv: String, observed_generation: u32| {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "shop", "uid": "hpa-web", "resourceVersion": rv},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 2, "maxReplicas": 10,
                     "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                  "target": {"type": "Utilization", "averageUtilization": 50}}}]},
            "status": {"observedGeneration": observed_generation, "currentReplicas": 3, "desiredReplicas": 3}
        })
    };
    let load = |next_rv: &mut dyn FnMut() -> String, cpu: [u32; 3]| -> Vec<(GroupVersionKind, Change)> {
        (0..3)
            .map(|i| (pods_gvk(), Change::Apply(pod(next_rv(), i, cpu[i as usize]))))
            .collect()
    };

    let mut steps: Vec<Step> = vec![(
        "a deployment shop/web with three pods",
        vec![(deployments_gvk(), Change::Apply(deployment(next_rv(), 3)))],
    )];
    steps.push(("its pods start, lightly loaded", load(&mut next_rv, [80, 90, 100])));
    steps.push((
        "an HPA targets it at 50% CPU",
        vec![(hpas_gvk(), Change::Apply(hpa(next_rv(), 1)))],
    ));
    steps.push(("load rises", load(&mut next_rv, [180, 190, 200])));
    steps.push((
        "the HPA controller observes it",
        vec![(hpas_gvk(), Change::Apply(hpa(next_rv(), 2)))],
    ));
    steps.push(("pod web-2 is deleted", vec![(pods_gvk(), Change::Delete("shop/web-2"))]));
    let mut cooled = load(&mut next_rv, [20, 30, 0]);
    cooled.truncate(2);
    steps.push(("load falls on the remaining pods", cooled));
    steps.push((
        "the HPA controller observes it",
        vec![(hpas_gvk(), Change::Apply(hpa(next_rv(), 3)))],
    ));
    steps.push(("the HPA is deleted", vec![(hpas_gvk(), Change::Delete("shop/web"))]));
    steps
}
