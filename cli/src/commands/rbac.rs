//! `kinformer rbac`: the RBAC that `kinformer run` needs, as YAML.

use std::path::PathBuf;

use kinformer_cli::rbac::RbacOptions;

/// Print the Role, ClusterRole and bindings that `kinformer run` needs
/// for the plugins of a directory, as YAML for `kubectl apply -f -`: list
/// and watch on what their informers cache, each write verb their grants
/// allow, the Service and EndpointSlices of the API server in `default`
/// (to refuse plugins its addresses), and Leases for leader election.
#[derive(Debug, clap::Args)]
pub(crate) struct Rbac {
    /// Directory of plugin components (*.wasm) and their manifests (*.toml).
    #[arg(long)]
    plugins: PathBuf,
    /// The namespaces `kinformer run --namespace` confines the host to
    /// (repeat the flag or separate them by commas).
    #[arg(long, value_delimiter = ',')]
    namespace: Vec<String>,
    /// Add what leader election needs (`kinformer run --leader-elect`).
    #[arg(long)]
    leader_elect: bool,
    /// The Lease's namespace (default: the service account's).
    #[arg(long, requires = "leader_elect")]
    lease_namespace: Option<String>,
    /// Add what `kinformer run --handlers` needs: Handlers, their status,
    /// the ConfigMaps of their modules, Events, and impersonation of the
    /// tenants' ServiceAccounts.
    #[arg(long)]
    handlers: bool,
    /// The namespaces whose Handlers the host impersonates (repeat the flag
    /// or separate them by commas): their ServiceAccounts and groups are
    /// named; without it, every ServiceAccount.
    #[arg(long, value_delimiter = ',', requires = "handlers")]
    tenant_namespace: Vec<String>,
    /// The ServiceAccount the host runs as.
    #[arg(long, default_value = "kinformer")]
    service_account: String,
    /// Its namespace.
    #[arg(long, default_value = "kinformer")]
    service_account_namespace: String,
    /// Where compiled plugins are cached.
    #[arg(long, env = "KINFORMER_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
}

impl Rbac {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        let options = RbacOptions {
            namespaces: self.namespace,
            lease_namespace: self.leader_elect.then(|| {
                self.lease_namespace
                    .unwrap_or_else(|| self.service_account_namespace.clone())
            }),
            service_account: self.service_account,
            service_account_namespace: self.service_account_namespace,
            cache_dir: self.cache_dir,
            handlers: self.handlers.then_some(self.tenant_namespace),
            ..RbacOptions::default()
        };
        print!("{}", kinformer_cli::rbac::rbac(&self.plugins, &options)?);
        Ok(0)
    }
}
