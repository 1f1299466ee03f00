//! `kinformer run`: the plugins of a directory against a cluster.

use std::path::PathBuf;
use std::time::Duration;

use kinformer::handlers::oci::PullConfig;
use kinformer::leader::LeaderElectionConfig;
use kinformer::{PluginState, Runtime, RuntimeConfig};

use super::{EngineArgs, cluster, duration};

/// Run the plugins of a directory against a Kubernetes cluster.
///
/// Each NAME.wasm runs with the grant, limits and config of its manifest
/// NAME.toml, if any (without one: every resource but Secrets, in every
/// namespace, with default limits). The directory is watched: adding,
/// replacing or removing a file (or a manifest) loads, swaps or unloads
/// the plugin without a restart.
#[derive(Debug, clap::Args)]
pub(crate) struct Run {
    /// Directory of plugin components (*.wasm) and their manifests (*.toml).
    #[arg(long)]
    plugins: PathBuf,
    /// The kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Confine every plugin and informer to these namespaces (repeat the
    /// flag or separate them by commas); each is listed and watched on its
    /// own, so RoleBindings in them are all the host needs.
    #[arg(long, value_delimiter = ',')]
    namespace: Vec<String>,
    /// Also run the cluster's Handlers and ClusterHandlers as plugins
    /// (install their CRDs first: `kinformer crds | kubectl apply -f -`).
    #[arg(long)]
    handlers: bool,
    /// The platform team's bounds on tenants' Handlers: the HTTP they may
    /// reach, their highest limits, how many run per namespace (a TOML file;
    /// see docs/tenants.md). Without it, no Handler reaches outside the
    /// cluster.
    #[arg(long, requires = "handlers")]
    tenant_policy: Option<PathBuf>,
    /// Let a Handler's `spec.module.oci` name a tag, resolved to a digest at
    /// each pull (default: digests only, `REPOSITORY@sha256:...`).
    #[arg(long, requires = "handlers")]
    allow_tags: bool,
    /// Pull Handlers' modules from this registry (HOST:PORT) over plain
    /// HTTP; repeat for several.
    #[arg(long, requires = "handlers")]
    insecure_registry: Vec<String>,
    /// The longest one module pull may take.
    #[arg(long, default_value = "30s", value_parser = duration, requires = "handlers")]
    pull_timeout: Duration,
    #[command(flatten)]
    election: ElectionArgs,
    #[command(flatten)]
    engine: EngineArgs,
}

impl Run {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        super::tokio()?.block_on(async {
            // A stop signal is answered from here on, even while a plugin
            // compiles: the shutdown ends or abandons the compile.
            let stop = kinformer_cli::stop_signal();
            let tenant_policy = match &self.tenant_policy {
                Some(path) => kinformer::handlers::TenantPolicy::load(path)?,
                None => kinformer::handlers::TenantPolicy::default(),
            };
            let cluster = cluster(self.kubeconfig.as_deref()).await?;
            // Plugins' HTTP never reaches the API server, whatever their grant.
            let mut config = self
                .engine
                .apply(RuntimeConfig::new(self.plugins))
                .instance(instance())
                .api_server(&cluster.cluster_url)
                .handlers(self.handlers)
                .tenant_policy(tenant_policy)
                .pull(
                    self.insecure_registry
                        .into_iter()
                        .fold(PullConfig::default(), PullConfig::insecure_registry)
                        .allow_tags(self.allow_tags)
                        .timeout(self.pull_timeout),
                );
            let client = kube::Client::try_from(cluster)?;
            if let Some(election) = self.election.config(self.namespace.first().map(String::as_str)) {
                config = config.leader_election(election);
            }
            for namespace in self.namespace {
                config = config.namespace(namespace);
            }
            if let Some(address) = self.engine.status_addr {
                config = config.status_address(address);
            }
            let runtime = Runtime::launch(client, config).await?;
            kinformer_cli::serve(&runtime, stop).await;
            let status = runtime.shutdown().await;
            if !status.is_empty() && status.iter().all(|status| status.state == PluginState::Failed) {
                anyhow::bail!("no plugin could start");
            }
            Ok(0)
        })
    }
}

/// Leader election among replicas, as Kubernetes controllers do it.
#[derive(Debug, clap::Args)]
struct ElectionArgs {
    /// Take part in leader election: plugins that can write (a write grant,
    /// or the controller world) run only on the replica that leads them; the
    /// others run on every replica. The identity is $POD_NAME, or the host
    /// name and process id.
    #[arg(long)]
    leader_elect: bool,
    /// `per-plugin`: each writing plugin has its own Lease (`NAME-PLUGIN`)
    /// and the replicas share the writers; `single`: one Lease (`NAME`), its
    /// holder runs every writer.
    #[arg(long, value_enum, default_value_t = LeaderMode::PerPlugin, requires = "leader_elect")]
    leader_elect_mode: LeaderMode,
    /// The Lease's name; per plugin, the prefix of the Leases' names.
    #[arg(long, default_value = "kinformer", requires = "leader_elect")]
    lease_name: String,
    /// The Lease's namespace (default: $POD_NAMESPACE, the first --namespace, or
    /// `default`).
    #[arg(long, requires = "leader_elect")]
    lease_namespace: Option<String>,
    /// How long a Lease holds after its last renewal.
    #[arg(long, default_value = "15s", value_parser = duration, requires = "leader_elect")]
    leader_elect_lease_duration: Duration,
    /// How long the leader leads without renewing before it stops its
    /// writing plugins (shorter than the lease duration).
    #[arg(long, default_value = "10s", value_parser = duration, requires = "leader_elect")]
    leader_elect_renew_deadline: Duration,
    /// How often to try to take or renew the Lease.
    #[arg(long, default_value = "2s", value_parser = duration, requires = "leader_elect")]
    leader_elect_retry_period: Duration,
}

impl ElectionArgs {
    fn config(&self, namespace: Option<&str>) -> Option<LeaderElectionConfig> {
        if !self.leader_elect {
            return None;
        }
        let lease_namespace = self
            .lease_namespace
            .clone()
            .or_else(|| env("POD_NAMESPACE"))
            .or_else(|| namespace.map(str::to_owned))
            .unwrap_or_else(|| "default".to_owned());
        let identity = env("POD_NAME").unwrap_or_else(|| format!("{}_{}", host_name(), std::process::id()));
        Some(
            LeaderElectionConfig::new(&self.lease_name, lease_namespace, identity)
                .durations(
                    self.leader_elect_lease_duration,
                    self.leader_elect_renew_deadline,
                    self.leader_elect_retry_period,
                )
                .per_plugin(self.leader_elect_mode == LeaderMode::PerPlugin),
        )
    }
}

/// How the replicas share the writing plugins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LeaderMode {
    /// A Lease per writing plugin: the replicas share the writers.
    PerPlugin,
    /// One Lease: its holder runs every writer.
    Single,
}

/// A variable of the environment, when set and not empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// The machine's host name (a pod's name, in Kubernetes).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| env("HOSTNAME"))
        .unwrap_or_else(|| "kinformer".to_owned())
}

/// This host's name in the Events its plugins record: the pod's name, or the
/// host name.
fn instance() -> String {
    env("POD_NAME").unwrap_or_else(host_name)
}
