//! `kinformer record`: a recording of some resources' deltas, for `replay`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use super::client;

/// Record the initial state, then every delta of some resources, into a
/// file of JSON lines (one delta per line) that `replay` runs a plugin on.
#[derive(Debug, clap::Args)]
pub(crate) struct Record {
    /// A resource to record, as apiVersion/Kind (e.g. v1/Pod,
    /// apps/v1/Deployment); repeat for more.
    #[arg(long = "resource", required = true, value_parser = kinformer_cli::recording::parse_resource)]
    resources: Vec<kube::api::GroupVersionKind>,
    /// Only this namespace.
    #[arg(long)]
    namespace: Option<String>,
    /// The kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the
    /// in-cluster service account).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Stop after this many seconds (default: at Ctrl-C).
    #[arg(long)]
    seconds: Option<u64>,
    /// The file to write.
    #[arg(short, long)]
    output: PathBuf,
}

impl Record {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        super::tokio()?.block_on(async {
            let client = client(self.kubeconfig.as_deref()).await?;
            let output = &self.output;
            let file = std::fs::File::create(output).with_context(|| format!("creating {}", output.display()))?;
            let stop = async {
                match self.seconds {
                    Some(seconds) => tokio::time::sleep(Duration::from_secs(seconds)).await,
                    None => {
                        let _ = tokio::signal::ctrl_c().await;
                    }
                }
            };
            let mut out = std::io::BufWriter::new(file);
            let written =
                kinformer_cli::recording::record(client, &self.resources, self.namespace.as_deref(), &mut out, stop)
                    .await?;
            eprintln!("recorded {written} deltas into {}", output.display());
            Ok(0)
        })
    }
}
