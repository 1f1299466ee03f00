//! A kube-rs program that adds Wasm plugins to itself: its own handler and a
//! plugin watch pods through one shared informer, and one Prometheus registry
//! holds its metrics and the plugins'.
//!
//! Run it against the cluster your kubeconfig points at (or `kinformer sim`'s
//! emulation), with any plugin component and, optionally, its manifest beside
//! it (`NAME.toml` next to `NAME.wasm`):
//!
//! ```sh
//! cargo build -p plugin-artifacts   # builds plugins/ into components
//! cargo run -p kinformer-examples --example embed -- \
//!     target/wasm-plugins/wasm32-wasip2/wasm-plugin/delta_logger.wasm 127.0.0.1:9464
//! curl -s 127.0.0.1:9464/metrics | grep -e embed_pod -e kinformer_plugin_deltas
//! ```
//!
//! Ctrl-C stops it: the plugin finishes its call, then the program exits.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use kinformer::informer::{InformerKey, SharedIndexInformer};
use kinformer::kube::api::GroupVersionKind;
use kinformer::processor::ListenerOptions;
use kinformer::prometheus_client::metrics::counter::Counter;
use kinformer::prometheus_client::registry::Registry;
use kinformer::{EmbeddedPlugin, Runtime, RuntimeConfig, SharedInformerFactory};

/// The embedding program: its own pod handler and the plugin runtime, on one
/// informer factory, with one metrics registry.
struct Program {
    runtime: Runtime,
    registry: Arc<Registry>,
    /// Pod deltas the program's own handler saw.
    pod_deltas: Counter,
    /// Held while the program watches pods: the informer stops with the last
    /// holder.
    _pods: SharedIndexInformer,
    handler: tokio::task::JoinHandle<()>,
}

impl Program {
    async fn start(client: kinformer::kube::Client, plugin: EmbeddedPlugin) -> anyhow::Result<Self> {
        // 1. One informer factory for the whole program.
        let factory = SharedInformerFactory::new(client);

        // 2. The program's own logic: a handler on the shared pod informer.
        //    A plugin that watches pods too reads the same cache and watch.
        let pods = factory
            .informer(InformerKey::new(GroupVersionKind::gvk("", "v1", "Pod")))
            .await?;
        let mut listener = pods.add_listener("embedder", &ListenerOptions::default());
        let pod_deltas = Counter::default();
        let counted = pod_deltas.clone();
        let handler = tokio::spawn(async move {
            while let Some(batch) = listener.next_batch(64).await {
                counted.inc_by(batch.len() as u64);
                for delta in &batch {
                    tracing::debug!(key = %delta.object.key(), kind = ?delta.delta_type, "pod delta");
                }
            }
        });

        // 3. The plugin runtime, on the same factory: no plugin directory,
        //    the plugin given in code.
        let runtime = Runtime::start_with(factory, RuntimeConfig::default().plugin(plugin)).await?;

        // 4. One registry for the program's metrics and the runtime's.
        let mut registry = Registry::default();
        registry.register(
            "embed_pod_deltas",
            "Pod deltas the program's own handler saw",
            pod_deltas.clone(),
        );
        runtime.register_metrics(&mut registry);

        Ok(Self {
            runtime,
            registry: Arc::new(registry),
            pod_deltas,
            _pods: pods,
            handler,
        })
    }

    async fn shutdown(self) {
        self.handler.abort();
        for status in self.runtime.shutdown().await {
            tracing::info!(plugin = %status.name, deltas = status.deltas, "stopped");
        }
    }
}

/// A registry in Prometheus' text format.
fn encode(registry: &Registry) -> Result<String, std::fmt::Error> {
    let mut text = String::new();
    kinformer::prometheus_client::encoding::text::encode(&mut text, registry)?;
    Ok(text)
}

/// Serves the program's registry at `GET /metrics`.
async fn serve_metrics(address: SocketAddr, program: &Program) -> anyhow::Result<()> {
    let registry = Arc::clone(&program.registry);
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || async move {
            match encode(&registry) {
                Ok(text) => (axum::http::StatusCode::OK, text),
                Err(_) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, String::new()),
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(address).await?;
    tracing::info!("metrics at http://{}/metrics", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_target(false).init();
    let mut args = std::env::args().skip(1);
    let path = args.next().context("usage: embed PLUGIN.wasm [METRICS-ADDRESS]")?;
    let client = kinformer::kube::Client::try_default().await?;
    let program = Program::start(client, kinformer_examples::plugin_from_file(path.as_ref())?).await?;
    if let Some(address) = args.next() {
        serve_metrics(address.parse()?, &program).await?;
    }
    tokio::signal::ctrl_c().await?;
    tracing::info!(pod_deltas = program.pod_deltas.get(), "stopping");
    program.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use apiserver_sim::workload::Workload;
    use apiserver_sim::{ApiServer, SimConfig};
    use kinformer::Manifest;

    use super::*;

    async fn until(what: &str, mut done: impl FnMut() -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_program_and_its_plugin_share_one_pod_watch_and_one_registry() {
        let server = ApiServer::start(SimConfig::default())
            .await
            .expect("the emulation starts");
        let churn = server
            .start_workload(&Workload::default())
            .expect("the workload starts");
        let client = kinformer::kube::Client::try_from(server.client_config()).expect("a client");
        let (_, bytes) = plugin_artifacts::ALL
            .iter()
            .find(|(file, _)| *file == "delta-logger.wasm")
            .expect("delta-logger is an example plugin");
        let program = Program::start(client, EmbeddedPlugin::from_bytes("delta-logger", bytes.to_vec()))
            .await
            .expect("the program starts");

        let deltas = |program: &Program| {
            program
                .runtime
                .status()
                .iter()
                .find(|status| status.name == "delta-logger")
                .map_or(0, |status| status.deltas)
        };
        until("the plugin and the program's handler both see pod deltas", || {
            deltas(&program) > 0 && program.pod_deltas.get() > 0
        })
        .await;
        // One pod informer, so one list and one watch, for both.
        assert_eq!(program.runtime.informers().running_count(), 1);
        assert_eq!(server.stats().watches_opened.get("pods"), Some(&1));

        let metrics = encode(&program.registry).expect("the registry encodes");
        assert!(metrics.contains("embed_pod_deltas_total "), "{metrics}");
        assert!(
            metrics
                .lines()
                .any(|line| line.starts_with("kinformer_plugin_deltas_total{") && line.contains("delta-logger")),
            "the runtime's metrics are in the program's registry: {metrics}"
        );

        // A second version given in code is swapped in as a changed file
        // is: this one, compiled by the runtime's engine, watches config
        // maps too.
        let component = program
            .runtime
            .engine()
            .load_bytes("delta-logger", bytes)
            .expect("the example compiles");
        let manifest = Manifest::parse(Path::new("delta-logger.toml"), "config = \"v1/Pod,v1/ConfigMap\"\n")
            .expect("the manifest parses");
        program
            .runtime
            .add_plugin(EmbeddedPlugin::from_component(component).manifest(manifest))
            .await
            .expect("a component of the runtime's engine is taken");
        until("the new version watches config maps", || {
            program.runtime.informers().running_count() == 2
                && program.runtime.status().iter().all(|status| status.reloads == 1)
        })
        .await;

        // A component of another engine is refused, and nothing changes.
        let foreign = kinformer::PluginEngine::new()
            .and_then(|engine| engine.load_bytes("stranger", bytes))
            .expect("the example compiles");
        let refused = program
            .runtime
            .add_plugin(EmbeddedPlugin::from_component(foreign))
            .await;
        assert!(refused.is_err(), "a foreign engine's component must be refused");
        assert_eq!(program.runtime.status().len(), 1);

        assert!(program.runtime.remove_plugin("delta-logger").await);
        until("the plugin is unloaded", || program.runtime.status().is_empty()).await;
        program.shutdown().await;
        churn.abort();
    }
}
