//! `kinformer sim`: the embedded API emulation alone.

use std::path::PathBuf;
use std::time::Duration;

use apiserver_sim::{ApiServer, SimConfig};

use super::WorkloadArgs;

/// Run only the embedded Kubernetes API emulation, for experiments with
/// kubectl and plugins.
#[derive(Debug, clap::Args)]
pub(crate) struct Sim {
    /// The loopback port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Where to write the kubeconfig.
    #[arg(long, default_value = "kinformer-sim.kubeconfig")]
    kubeconfig: PathBuf,
    /// Inject a fault (dropped watches, a 410, a burst of 429s, in turn)
    /// every this many seconds.
    #[arg(long)]
    chaos_seconds: Option<u64>,
    /// Answer 403 Forbidden for a resource, as RBAC does: `v1/ConfigMap`
    /// (or `configmaps`) everywhere, `v1/ConfigMap@ns-1` in one namespace
    /// (and across all namespaces); repeatable.
    #[arg(long, value_name = "RESOURCE[@NAMESPACE]")]
    forbid: Vec<String>,
    #[command(flatten)]
    workload: WorkloadArgs,
}

impl Sim {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        super::tokio()?.block_on(async {
            let server = ApiServer::start(SimConfig::default().port(self.port)).await?;
            server.write_kubeconfig(&self.kubeconfig)?;
            let _workload = server.start_workload(&self.workload.workload())?;
            for forbidden in &self.forbid {
                let (resource, namespace) = match forbidden.split_once('@') {
                    Some((resource, namespace)) => (resource, Some(namespace)),
                    None => (forbidden.as_str(), None),
                };
                let plural = plural_of(&server, resource)?;
                match namespace {
                    Some(namespace) => server.faults().forbid_in(&plural, namespace),
                    None => server.faults().forbid(&plural),
                }
                println!(
                    "forbidden: {plural}{}",
                    namespace.map(|ns| format!(" in {ns}")).unwrap_or_default()
                );
            }
            let kubeconfig = self.kubeconfig.display();
            println!("emulated API server at {}", server.url());
            println!("kubeconfig: {kubeconfig} (try: kubectl --kubeconfig {kubeconfig} get pods -A)");
            println!(
                "faults: curl -X POST {}/sim/faults/close-watches (see /sim/stats)",
                server.url()
            );
            let mut round = 0_u64;
            loop {
                let pause = self
                    .chaos_seconds
                    .map_or(Duration::from_secs(3600), Duration::from_secs);
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => break,
                    () = tokio::time::sleep(pause) => {}
                }
                if self.chaos_seconds.is_some() {
                    round += 1;
                    match round % 3 {
                        1 => server.faults().close_watches(),
                        2 => {
                            server.faults().expire_next_watch();
                            server.faults().close_watches();
                        }
                        _ => server.faults().fail_next_requests(3, 429),
                    }
                    tracing::info!(faults = ?server.faults().counts(), "fault injected");
                }
            }
            Ok(0)
        })
    }
}

/// The plural name of a resource named as `v1/ConfigMap`, `apps/v1/Deployment`
/// or by its plural.
fn plural_of(server: &ApiServer, resource: &str) -> anyhow::Result<String> {
    let defs = server.store().defs();
    let found = defs.iter().find(|def| {
        let group_version = if def.group.is_empty() {
            def.version.clone()
        } else {
            format!("{}/{}", def.group, def.version)
        };
        resource == def.plural || resource == format!("{group_version}/{}", def.kind)
    });
    match found {
        Some(def) => Ok(def.plural.clone()),
        None => anyhow::bail!(
            "--forbid {resource}: the emulation serves no such resource (try v1/ConfigMap or apps/v1/Deployment)"
        ),
    }
}
