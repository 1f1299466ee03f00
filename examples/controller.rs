//! A kube-rs controller whose reconcile step is a Wasm plugin.
//!
//! kube-runtime's `Controller` does what it always does: it watches the
//! primary resource, queues each key that changes, and backs off and
//! requeues as each reconcile says. Only the reconcile is the plugin's: a
//! component of the `controller` world (Rust, Python or JavaScript), written
//! by another team, run in its own sandbox under the grant of its manifest,
//! reading kinformer's indexed cache and writing through the host.
//!
//! Run it against the cluster your kubeconfig points at (or `kinformer sim`'s
//! emulation), with any controller component and its manifest beside it:
//!
//! ```sh
//! cargo build -p plugin-artifacts   # builds the plugins into components
//! cargo run -p kinformer-examples --example controller -- \
//!     target/wasm-plugins/wasm32-wasip2/wasm-plugin/reconciler.wasm
//! ```
//!
//! Ctrl-C stops it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use kinformer::apiserver::Cluster;
use kinformer::caches::Caches;
use kinformer::informers::Recover as _;
use kinformer::kube::api::{Api, DynamicObject, GroupVersionKind};
use kinformer::kube::runtime::controller::{Action, Controller};
use kinformer::kube::runtime::watcher;
use kinformer::kube::{Client, ResourceExt as _};
use kinformer::plugin::{LogSink, PluginEngine, PluginInstance, PluginOptions};
use kinformer::{InformerKey, Manifest, SharedIndexInformer, SharedInformerFactory};

/// What every reconcile needs: the plugin, one call at a time.
struct Context {
    plugin: Mutex<PluginInstance>,
}

/// Why a reconcile failed: the plugin's error or trap, on one line.
#[derive(Debug)]
struct ReconcileError(String);

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReconcileError {}

/// The controller: the plugin, the informers its cache reads from, and the
/// primary resource kube-runtime watches.
struct PluginController {
    context: Arc<Context>,
    primary: GroupVersionKind,
    /// Held while the controller runs: the plugin's cache stays fed.
    _informers: Vec<SharedIndexInformer>,
}

impl PluginController {
    /// Loads the plugin at `path` (its manifest beside it), runs its `init`,
    /// and starts an informer for each resource it registered, its cache
    /// the plugin reads.
    async fn start(client: &Client, path: &std::path::Path, log_sink: Option<LogSink>) -> anyhow::Result<Self> {
        // 1. Compile the component and read the operator's manifest.
        let manifest = Manifest::for_plugin(path)?;
        let engine = PluginEngine::new()?;
        let component = engine.load_file(path)?;
        anyhow::ensure!(
            component.is_controller(),
            "{}: not a controller (the `controller` world)",
            path.display()
        );

        // 2. Its sandbox: the caches it may read (filled below), its writes
        //    through the host under its grant, its limits.
        let caches = Caches::new();
        let writer = Cluster::new(client.clone()).writer(
            component.name(),
            manifest.grant.clone(),
            &manifest.limits,
            manifest.mode,
            None,
        );
        let mut options = PluginOptions::with_limits(manifest.limits)
            .grant(manifest.grant.clone())
            .writer(writer);
        if let Some(sink) = log_sink {
            options = options.log_sink(sink);
        }
        let mut instance = tokio::task::block_in_place(|| component.instantiate(caches.clone(), options))?;
        let registration = tokio::task::block_in_place(|| instance.init(&manifest.config))?;
        let primary = registration
            .controller
            .as_ref()
            .map(|controller| controller.primary.clone())
            .context("the plugin registered no primary resource")?;

        // 3. One informer per resource it registered: its cache is what the
        //    plugin's cache queries answer from.
        let factory = SharedInformerFactory::new(client.clone());
        let mut informers = Vec::new();
        for subscription in &registration.subscriptions {
            let informer = factory.informer(InformerKey::new(subscription.gvk.clone())).await?;
            caches.insert(subscription.gvk.clone(), informer.cache());
            informers.push(informer);
        }
        // kube-runtime's first reconciles may come at once: the plugin's
        // caches are synced first, as the host does before any call.
        while !informers.iter().all(SharedIndexInformer::has_synced) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Self {
            context: Arc::new(Context {
                plugin: Mutex::new(instance),
            }),
            primary,
            _informers: informers,
        })
    }

    /// Runs kube-runtime's controller on the primary resource until `stop`
    /// is sent (or dropped).
    async fn run(self, client: Client, stop: tokio::sync::oneshot::Receiver<()>) -> anyhow::Result<()> {
        let (resource, _) = kinformer::kube::discovery::pinned_kind(&client, &self.primary).await?;
        let api: Api<DynamicObject> = Api::all_with(client, &resource);
        Controller::new_with(api, watcher::Config::default(), resource)
            .graceful_shutdown_on(async move {
                let _ = stop.await;
            })
            .run(reconcile, error_policy, self.context)
            .for_each(|result| async move {
                if let Err(error) = result {
                    tracing::warn!("{error}");
                }
            })
            .await;
        Ok(())
    }
}

/// 4. The reconcile step: the plugin's `reconcile` of the object's key, on
///    a thread that may block (its writes wait for the API server).
async fn reconcile(object: Arc<DynamicObject>, context: Arc<Context>) -> Result<Action, ReconcileError> {
    let key = match object.namespace() {
        Some(namespace) => format!("{namespace}/{}", object.name_any()),
        None => object.name_any(),
    };
    let requeue = tokio::task::spawn_blocking(move || context.plugin.lock().recover().reconcile(&key))
        .await
        .map_err(|error| ReconcileError(error.to_string()))?
        .map_err(|error| ReconcileError(kinformer::one_line(&error)))?;
    Ok(match requeue {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// A failed reconcile is retried after a pause, as kube-runtime's examples do.
fn error_policy(_object: Arc<DynamicObject>, error: &ReconcileError, _context: Arc<Context>) -> Action {
    tracing::warn!("reconcile failed: {error}");
    Action::requeue(Duration::from_secs(5))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_target(false).init();
    let path = std::env::args().nth(1).context("usage: controller PLUGIN.wasm")?;
    let client = Client::try_default().await?;
    let controller = PluginController::start(&client, path.as_ref(), None).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        let _ = stop.send(());
    });
    controller.run(client, stopped).await
}

#[cfg(test)]
mod tests {
    use apiserver_sim::{ApiServer, SimConfig};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_change_of_a_primary_object_is_reconciled_by_the_plugin() {
        let server = ApiServer::start(SimConfig::default())
            .await
            .expect("the emulation starts");
        let client = Client::try_from(server.client_config()).expect("a client");
        let dir = tempfile::tempdir().expect("a temporary directory");
        let dir = dir.path();
        let plugin = dir.join("configs.wasm");
        std::fs::write(&plugin, plugin_artifacts::test_plugin("reconciler.wasm")).expect("the plugin is written");
        std::fs::write(
            dir.join("configs.toml"),
            "config = \"ex,primary=v1/ConfigMap\"\n[grant]\nresources = [\"v1/ConfigMap\", \"v1/Pod\"]\n",
        )
        .expect("the manifest is written");
        let lines: Arc<Mutex<Vec<String>>> = Arc::default();
        let kept = Arc::clone(&lines);
        let sink: LogSink = Arc::new(move |_plugin, line| kept.lock().recover().push(line.message.clone()));
        let controller = PluginController::start(&client, &plugin, Some(sink))
            .await
            .expect("the controller starts");
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(controller.run(client.clone(), stopped));

        let config_map: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "settings", "namespace": "default"},
            "data": {"level": "info"},
        }))
        .expect("a config map");
        let resource =
            kinformer::kube::api::ApiResource::erase::<kinformer::k8s_openapi::api::core::v1::ConfigMap>(&());
        let created = Api::<DynamicObject>::namespaced_with(client, "default", &resource)
            .create(&Default::default(), &config_map)
            .await
            .expect("the config map is created");
        let version = created.resource_version().expect("a resourceVersion");
        let expected = format!("ex reconcile default/settings {version}/0");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !lines.lock().recover().contains(&expected) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the plugin never reconciled the new config map: {:?}",
                lines.lock().recover()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = stop.send(());
        running
            .await
            .expect("the controller task")
            .expect("the controller ends");
    }
}
