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
    #[command(flatten)]
    workload: WorkloadArgs,
}

impl Sim {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        super::tokio()?.block_on(async {
            let server = ApiServer::start(SimConfig::default().port(self.port)).await?;
            server.write_kubeconfig(&self.kubeconfig)?;
            let _workload = server.start_workload(&self.workload.workload())?;
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
