//! `kinformer record`: a recording of some resources' deltas, for `replay`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

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
    /// A plugin (its manifest beside it) whose outbound HTTP to record:
    /// after the deltas, it runs on them as `replay` runs it, its requests
    /// sent for real under its grant, and their answers are kept for
    /// `replay` to answer with.
    #[arg(long, value_name = "PLUGIN.wasm")]
    plugin: Option<PathBuf>,
    /// As replay's --env: values of the plugin's Secret- and
    /// ConfigMap-backed variables.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = super::replay::setting)]
    env: Vec<(String, String)>,
}

impl Record {
    /// Runs `plugin` on the recorded deltas with its requests sent, and
    /// appends their answers; returns how many.
    async fn record_http(&self, plugin: &std::path::Path, server: &http::Uri) -> anyhow::Result<usize> {
        use kinformer_cli::replay::{Http, Setup};
        let output = &self.output;
        let file = std::fs::File::open(output).with_context(|| format!("opening {}", output.display()))?;
        let deltas = kinformer_cli::recording::read(std::io::BufReader::new(file))?;
        let into = std::sync::Arc::new(kinformer::plugin::CallInputs::default());
        // Never the API server, wherever it is.
        let policy = kinformer::outbound::AddressPolicy::new(kinformer::outbound::resolve_url(server));
        let setup = Setup {
            config: None,
            env: self.env.clone(),
            http: Http::Live {
                policy,
                into: std::sync::Arc::clone(&into),
            },
        };
        let engine = kinformer::PluginEngine::new()?;
        let plugin = plugin.to_owned();
        tokio::task::spawn_blocking(move || {
            kinformer_cli::replay::replay_with(&plugin, &deltas, &setup, &engine, &mut std::io::stderr())
        })
        .await??;
        let answers = into.http_answers();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(output)
            .with_context(|| format!("opening {}", output.display()))?;
        kinformer_cli::recording::write_http(&mut file, &answers)?;
        Ok(answers.len())
    }

    pub(crate) fn run(self) -> anyhow::Result<u8> {
        super::tokio()?.block_on(async {
            let cluster = super::cluster(self.kubeconfig.as_deref()).await?;
            let server = cluster.cluster_url.clone();
            let client = kube::Client::try_from(cluster)?;
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
            if let Some(plugin) = &self.plugin {
                std::io::Write::flush(&mut out)?;
                drop(out);
                let answered = self.record_http(plugin, &server).await?;
                eprintln!("recorded {answered} answers to {}'s requests", plugin.display());
            }
            Ok(0)
        })
    }
}
