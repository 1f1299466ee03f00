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

use kinformer::runtime::{PluginStatus, Runtime, RuntimeConfig};

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
/// demo grants them beyond the default (hpa-controller's writes).
pub const EXAMPLE_MANIFESTS: &[(&str, &str)] = &[(
    "hpa-controller.toml",
    include_str!("../../plugins/hpa-controller/manifest.toml"),
)];

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
    let client = kube::Client::try_from(server.client_config()).map_err(Error::Kube)?;

    let mut runtime_config = config.runtime.clone();
    if let Some(address) = config.status_addr {
        runtime_config = runtime_config.status_address(address);
    }
    let runtime = Runtime::start(client, runtime_config).await?;
    crate::serve(&runtime, config.duration).await;
    workload.abort();
    let status = runtime.shutdown().await;
    server.shutdown();
    Ok(status)
}
