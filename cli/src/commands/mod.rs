//! The subcommands, one file each: its arguments and how it runs. What a
//! command does lives in the `kinformer_cli` library, so tests call it
//! directly; these files turn flags into its types.

pub(crate) mod check;
pub(crate) mod crds;
#[cfg(feature = "emulation")]
pub(crate) mod demo;
pub(crate) mod new;
pub(crate) mod push;
pub(crate) mod rbac;
pub(crate) mod record;
pub(crate) mod replay;
pub(crate) mod rollout;
pub(crate) mod run;
#[cfg(feature = "emulation")]
pub(crate) mod sim;
pub(crate) mod status;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use kinformer::RuntimeConfig;
use kinformer::plugin::EngineOptions;

/// The tokio runtime a command runs on.
pub(crate) fn tokio() -> std::io::Result<Tokio> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map(Tokio)
}

/// A tokio runtime that, once its future is done, waits at most a second for
/// its blocking tasks: a plugin compiling in the host's own process when a
/// shutdown comes is abandoned, not waited for.
pub(crate) struct Tokio(tokio::runtime::Runtime);

impl Tokio {
    pub(crate) fn block_on<F: std::future::Future>(self, future: F) -> F::Output {
        let output = self.0.block_on(future);
        self.0.shutdown_timeout(std::time::Duration::from_secs(1));
        output
    }
}

/// How plugins are compiled, and where their status is served.
#[derive(Debug, clap::Args)]
pub(crate) struct EngineArgs {
    /// Serve the status page at http://ADDRESS/ (every plugin and informer
    /// at a glance; `kinformer status` prints it), the plugins' status as
    /// JSON at /plugins, /metrics and the probes, e.g. 127.0.0.1:9090.
    #[arg(long)]
    pub(crate) status_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    pub(crate) cache: CacheArgs,
}

impl EngineArgs {
    pub(crate) fn apply(&self, mut config: RuntimeConfig) -> RuntimeConfig {
        config.engine = self.cache.options();
        config
    }
}

/// Where compiled plugins are kept between runs.
#[derive(Debug, clap::Args)]
pub(crate) struct CacheArgs {
    /// Where compiled plugins are cached (default: ~/.cache/kinformer).
    #[arg(long, env = "KINFORMER_CACHE_DIR")]
    pub(crate) cache_dir: Option<PathBuf>,
    /// Compile every time; keep nothing on disk.
    #[arg(long, conflicts_with = "cache_dir")]
    pub(crate) no_cache: bool,
}

impl CacheArgs {
    /// The engine's options: with a compile cache, each new component is
    /// compiled by this program in a child process (see `main`), which takes
    /// the compiler's memory with it when it exits.
    pub(crate) fn options(&self) -> EngineOptions {
        EngineOptions {
            compile_process: std::env::current_exe().ok(),
            cache_dir: self.cache_dir(),
            ..Default::default()
        }
    }

    /// The compile cache: the flag's, else the user's cache directory.
    fn cache_dir(&self) -> Option<PathBuf> {
        let default = || {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
                .map(|dir| dir.join("kinformer"))
        };
        if self.no_cache {
            None
        } else {
            self.cache_dir.clone().or_else(default)
        }
    }
}

/// The cluster's configuration: from `kubeconfig`, or as kubectl finds it,
/// with the proxy kubectl would take from the environment.
pub(crate) async fn cluster(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Config> {
    let mut config = match kubeconfig {
        Some(path) => {
            let file =
                kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster configured: pass --kubeconfig or set KUBECONFIG")?,
    };
    kinformer::apiserver::proxy::apply_environment(&mut config, |name| std::env::var(name).ok());
    Ok(config)
}

/// A duration as Kubernetes flags write them: `15s`, `500ms`, `1m`.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?}: want a duration such as 15s or 500ms"))?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        _ => return Err(format!("{text:?}: want a duration in ms, s or m")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|error| format!("{text:?}: {error}"))
}

/// The synthetic workload of the emulated cluster.
#[cfg(feature = "emulation")]
#[derive(Debug, clap::Args)]
pub(crate) struct WorkloadArgs {
    /// Seed of the workload's random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Namespaces of the workload.
    #[arg(long, default_value_t = 2)]
    namespaces: usize,
    /// Deployments per namespace.
    #[arg(long, default_value_t = 2)]
    deployments: usize,
    /// Pods per deployment.
    #[arg(long, default_value_t = 3)]
    pods: usize,
    /// Changes per second.
    #[arg(long, default_value_t = 10.0)]
    rate: f64,
    /// Each deployment's CPU load rises and falls over this many seconds, so
    /// hpa-controller scales it up and down; 0 draws pod usage at random.
    #[arg(long, default_value_t = 120)]
    load_period: u64,
    /// About one change in a hundred makes a pod crash-loop (with the
    /// kubelet's Warning Event) until it is replaced; `false` never does.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    crash_loops: bool,
}

#[cfg(feature = "emulation")]
impl WorkloadArgs {
    pub(crate) fn workload(&self) -> apiserver_sim::workload::Workload {
        use apiserver_sim::workload::{Load, Workload};
        Workload::default()
            .seed(self.seed)
            .size(self.namespaces, self.deployments, self.pods)
            .changes_per_second(self.rate)
            .crash_loops(self.crash_loops)
            .load(match self.load_period {
                0 => Load::Random,
                seconds => Load::Phases {
                    period: Duration::from_secs(seconds),
                },
            })
    }
}
