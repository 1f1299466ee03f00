//! `kinformer demo`: the whole data path against the embedded API server emulation.
//!
//! The demo starts an emulated Kubernetes API server with a seeded synthetic
//! workload (deployments whose pods churn, HPAs, configmaps), writes a kubeconfig
//! for it so a person can poke it with `kubectl`, and runs the plugin
//! [`Runtime`] on a directory against it, through the real kube-rs client over
//! HTTP: the same path as `kinformer run` against a real cluster.

use std::path::{Path, PathBuf};
use std::time::Duration;

use apiserver_sim::workload::{Load, Workload};
use apiserver_sim::{ApiServer, SimConfig};

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kinformer::runtime::{PluginStatus, Runtime, RuntimeConfig};
use kube::api::{ObjectMeta, PostParams};

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
    /// The plugin runtime could not start.
    #[error(transparent)]
    Runtime(#[from] kinformer::runtime::Error),
    /// The directory holds no `.wasm` file.
    #[error("no plugins (*.wasm) in {0}")]
    NoPlugins(PathBuf),
    /// The emulated cluster refused the workload.
    #[error("the emulated cluster refused the workload")]
    Workload(#[source] apiserver_sim::status::ApiError),
    /// The demo's tenant objects do not parse (a defect of the demo).
    #[error("the demo's tenant: {0}")]
    Tenant(String),
    /// The client could not talk to the emulated cluster.
    #[error("talking to the emulated cluster")]
    Kube(#[source] kube::Error),
}

/// Settings of the demo.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The plugin directory and how the plugins run.
    pub runtime: RuntimeConfig,
    /// Where to write the emulated cluster's kubeconfig.
    pub kubeconfig: PathBuf,
    /// The workload the emulated cluster runs.
    pub workload: Workload,
    /// Stop after this long; run until Ctrl-C when `None`.
    pub duration: Option<Duration>,
    /// Serve the plugins' status here.
    pub status_addr: Option<std::net::SocketAddr>,
}

impl DemoConfig {
    /// A demo of the plugins in `plugins`, writing its kubeconfig to `kubeconfig`,
    /// with a small workload of 2 namespaces of 2 deployments of 3 pods changing
    /// 10 times a second, each deployment's load rising and falling over two
    /// minutes.
    #[must_use]
    pub fn new(plugins: impl Into<PathBuf>, kubeconfig: impl Into<PathBuf>) -> Self {
        Self {
            runtime: RuntimeConfig::new(plugins),
            kubeconfig: kubeconfig.into(),
            workload: Workload::default()
                .size(2, 2, 3)
                .changes_per_second(10.0)
                .crash_loops(true)
                .load(Load::Phases {
                    period: Duration::from_secs(120),
                }),
            duration: None,
            status_addr: None,
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

/// The operator's manifests of the example plugins that need one: what the
/// demo grants them beyond the default (the HPA plugins' metrics reads,
/// hpa-controller's writes).
pub const EXAMPLE_MANIFESTS: &[(&str, &str)] = &[
    (
        "hpa-advisor.toml",
        include_str!("../../plugins/hpa-advisor/manifest.toml"),
    ),
    (
        "hpa-controller.toml",
        include_str!("../../plugins/hpa-controller/manifest.toml"),
    ),
    ("notifier.toml", NOTIFIER_MANIFEST),
];

/// notifier's manifest for a real cluster: Slack's webhooks, the URL in
/// Secret `monitoring/slack`.
const NOTIFIER_MANIFEST: &str = include_str!("../../plugins/notifier/manifest.toml");

/// The line of [`NOTIFIER_MANIFEST`] the demo points at its own webhook.
const NOTIFIER_ALLOW: &str = "allow = [\"https://hooks.slack.com/services/\"]";

/// Writes the given plugin files into `dir` (created if missing), with the
/// example manifests of those that have one.
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
        let manifest = Path::new(name).with_extension("toml");
        if let Some((file, text)) = EXAMPLE_MANIFESTS.iter().find(|(file, _)| Path::new(file) == manifest) {
            let path = dir.join(file);
            std::fs::write(&path, text).map_err(io(&path))?;
        }
    }
    Ok(())
}

/// Runs the demo until its duration ends (or Ctrl-C); returns the plugins'
/// final status, recent log lines included.
///
/// # Errors
///
/// When the directory holds no plugin, or the emulated cluster cannot be
/// started or reached.
pub async fn run(config: &DemoConfig) -> Result<Vec<PluginStatus>, Error> {
    if let Some(dir) = &config.runtime.plugins
        && kinformer::runtime::plugin_files(dir)?.is_empty()
    {
        return Err(Error::NoPlugins(dir.clone()));
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
    let cluster = server.client_config();
    let mut runtime_config = config.runtime.clone().api_server(&cluster.cluster_url);
    let client = kube::Client::try_from(cluster).map_err(Error::Kube)?;

    if let Some(address) = config.status_addr {
        runtime_config = runtime_config.status_address(address);
    }
    let webhook = match &config.runtime.plugins {
        Some(dir) => webhook_for_notifier(dir, &client).await?,
        None => None,
    };
    if let Some(dir) = &config.runtime.plugins
        && tenant_for_logger(dir, &client).await?
    {
        runtime_config = runtime_config.handlers(true);
    }
    let signal = config.duration.is_none().then(crate::stop_signal);
    let runtime = Runtime::launch(client, runtime_config).await?;
    match (config.duration, signal) {
        (Some(duration), _) => {
            // A bounded run counts its time from when the plugins are loaded.
            runtime.rescan().await;
            crate::serve(&runtime, tokio::time::sleep(duration)).await;
        }
        (None, Some(signal)) => crate::serve(&runtime, signal).await,
        (None, None) => {}
    }
    workload.abort();
    let status = runtime.shutdown().await;
    if let Some(webhook) = webhook {
        webhook.abort();
    }
    server.shutdown();
    Ok(status)
}

/// When `dir` holds notifier with its example manifest: starts a webhook
/// on loopback that prints what it is sent, lets notifier reach it (the
/// manifest's allow-list names its address) and puts its URL in the Secret
/// the manifest names, as an operator would.
async fn webhook_for_notifier(dir: &Path, client: &kube::Client) -> Result<Option<tokio::task::JoinHandle<()>>, Error> {
    let manifest_path = dir.join("notifier.toml");
    if !dir.join("notifier.wasm").is_file()
        || std::fs::read_to_string(&manifest_path).ok().as_deref() != Some(NOTIFIER_MANIFEST)
    {
        return Ok(None);
    }
    let io = |path: &str| {
        let path = PathBuf::from(path);
        move |source| Error::Io { path, source }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(io("127.0.0.1"))?;
    let address = listener.local_addr().map_err(io("127.0.0.1"))?;
    let app = axum::Router::new().fallback(axum::routing::post(|body: axum::body::Bytes| async move {
        let text = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|message| message["text"].as_str().map(str::to_owned));
        match text {
            Some(text) => {
                tracing::info!("webhook received: {text}");
                axum::http::StatusCode::OK
            }
            None => axum::http::StatusCode::BAD_REQUEST,
        }
    }));
    let served = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::warn!(%error, "the demo's webhook stopped");
        }
    });
    let base = format!("http://{address}/services/");
    std::fs::write(
        &manifest_path,
        NOTIFIER_MANIFEST.replace(
            NOTIFIER_ALLOW,
            // Loopback is refused unless the grant opens it.
            &format!("allow = [\"{base}\"]\nnetworks = [\"{}/32\"]", address.ip()),
        ),
    )
    .map_err(|source| Error::Io {
        path: manifest_path.clone(),
        source,
    })?;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some("monitoring".into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some("slack".into()),
            namespace: Some("monitoring".into()),
            ..ObjectMeta::default()
        },
        data: Some(std::collections::BTreeMap::from([(
            "url".to_owned(),
            k8s_openapi::ByteString(format!("{base}demo").into_bytes()),
        )])),
        ..Secret::default()
    };
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), "monitoring");
    let create = PostParams::default();
    namespaces.create(&create, &namespace).await.map_err(Error::Kube)?;
    secrets.create(&create, &secret).await.map_err(Error::Kube)?;
    tracing::info!(url = %base, "notifier posts to the demo's webhook; it logs each message it receives");
    Ok(Some(served))
}

/// When `dir` holds delta-logger: a tenant, as a team would set itself up
/// (docs/tenants.md) — namespace `shop` with a Deployment, its ServiceAccount
/// `shop-handlers`, and a `Handler` `pod-logger` running delta-logger from a
/// ConfigMap of `shop` on the namespace's pods. Installs the Handler CRDs
/// first; true when the tenant is there.
async fn tenant_for_logger(dir: &Path, client: &kube::Client) -> Result<bool, Error> {
    let Ok(module) = std::fs::read(dir.join("delta-logger.wasm")) else {
        return Ok(false);
    };
    let create = PostParams::default();
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    for document in kinformer::handlers::CRDS.split("\n---\n") {
        let crd: CustomResourceDefinition =
            serde_yaml::from_str(document).map_err(|error| Error::Tenant(error.to_string()))?;
        crds.create(&create, &crd).await.map_err(Error::Kube)?;
    }
    let objects: [(&str, serde_json::Value); 5] = [
        ("v1/Namespace", serde_json::json!({"metadata": {"name": "shop"}})),
        (
            "v1/ServiceAccount",
            serde_json::json!({"metadata": {"name": "shop-handlers", "namespace": "shop"}}),
        ),
        (
            "v1/ConfigMap",
            serde_json::json!({"metadata": {"name": "pod-logger", "namespace": "shop"},
                "binaryData": {"plugin.wasm": k8s_openapi::ByteString(module)}}),
        ),
        (
            "apps/v1/Deployment",
            serde_json::json!({"metadata": {"name": "storefront", "namespace": "shop"},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "storefront"}},
                    "template": {"metadata": {"labels": {"app": "storefront"}},
                        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}}),
        ),
        (
            "kinformer.dev/v1alpha1/Handler",
            serde_json::json!({"metadata": {"name": "pod-logger", "namespace": "shop"},
                "spec": {"module": {"configMap": {"name": "pod-logger", "key": "plugin.wasm"}},
                    "serviceAccountName": "shop-handlers", "grant": {"resources": ["v1/Pod"]}}}),
        ),
    ];
    for (kind, mut object) in objects {
        let (api_version, kind) = kind.rsplit_once('/').unwrap_or_default();
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        object["apiVersion"] = api_version.into();
        object["kind"] = kind.into();
        let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(group, version, kind));
        let api: kube::Api<kube::api::DynamicObject> = match object["metadata"]["namespace"].as_str() {
            Some(namespace) => kube::Api::namespaced_with(client.clone(), namespace, &resource),
            None => kube::Api::all_with(client.clone(), &resource),
        };
        let object: kube::api::DynamicObject =
            serde_json::from_value(object).map_err(|error| Error::Tenant(error.to_string()))?;
        api.create(&create, &object).await.map_err(Error::Kube)?;
    }
    tracing::info!(
        "tenant `shop` runs delta-logger as Handler pod-logger: try `kubectl get handlers -A` and \
         `kubectl -n shop describe handler pod-logger`"
    );
    Ok(true)
}
