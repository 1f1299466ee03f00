//! The `kinformer` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use apiserver_sim::workload::{Load, Workload};
use apiserver_sim::{ApiServer, SimConfig};
use clap::{Parser, Subcommand};
use kinformer::leader::LeaderElectionConfig;
use kinformer::runtime::{PluginState, Runtime, RuntimeConfig};
use kinformer_cli::demo::{self, DemoConfig};
use kinformer_cli::rbac::RbacOptions;

/// Kubernetes shared informers that deliver every delta to sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "kinformer", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// Log filter, as in RUST_LOG (e.g. `info`, `kinformer=debug`); the HTTP,
    /// TLS and Kubernetes client libraries stay quiet unless named. RUST_LOG,
    /// when set, replaces the whole filter.
    #[arg(long, global = true, env = "KINFORMER_LOG", default_value = "info")]
    log: String,

    /// Log lines as text, or as one JSON object per line for log pipelines.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// What the libraries under kinformer log by default: their errors at most.
/// kinformer says itself what a failure means ("watch failed; backing off");
/// the connection-level lines beneath it (peers closing TLS, connect errors)
/// repeat it in other words.
const QUIET_LIBRARIES: &str = "wasmtime=warn,cranelift=warn,kube_client=off,kube_runtime=error,\
     hyper=error,hyper_util=error,h2=error,rustls=error,tower=error,tower_http=error";

/// The log filter: the quiet defaults, then the user's (later directives for
/// the same target win); RUST_LOG, when set, alone.
fn log_filter(log: &str) -> tracing_subscriber::EnvFilter {
    match std::env::var("RUST_LOG") {
        Ok(filter) if !filter.is_empty() => tracing_subscriber::EnvFilter::new(filter),
        _ => tracing_subscriber::EnvFilter::new(format!("{QUIET_LIBRARIES},{log}")),
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the plugins of a directory against a Kubernetes cluster.
    ///
    /// Each NAME.wasm runs with the grant, limits and config of its manifest
    /// NAME.toml, if any (without one: every resource but Secrets, in every
    /// namespace, with default limits). The directory is watched: adding,
    /// replacing or removing a file (or a manifest) loads, swaps or unloads
    /// the plugin without a restart.
    Run {
        /// Directory of plugin components (*.wasm) and their manifests (*.toml).
        #[arg(long)]
        plugins: PathBuf,
        /// The kubeconfig to use (default: $KUBECONFIG, ~/.kube/config, or the
        /// in-cluster service account).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Confine every plugin and informer to this namespace.
        #[arg(long)]
        namespace: Option<String>,
        #[command(flatten)]
        election: ElectionArgs,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Run the plugins against an embedded Kubernetes API emulation with a
    /// synthetic workload; no cluster needed.
    ///
    /// Without --plugins, the example plugins are written to a temporary
    /// directory (its path is printed) and loaded from there. The emulated
    /// cluster's kubeconfig is written too, for kubectl.
    Demo {
        /// Directory of plugin components (*.wasm).
        #[arg(long)]
        plugins: Option<PathBuf>,
        /// Where to write the emulated cluster's kubeconfig.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// Stop after this many seconds (default: run until Ctrl-C).
        #[arg(long)]
        seconds: Option<u64>,
        #[command(flatten)]
        workload: WorkloadArgs,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Run only the embedded Kubernetes API emulation, for experiments with
    /// kubectl and plugins.
    Sim {
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
    },
    /// Print the Role, ClusterRole and bindings that `kinformer run` needs
    /// for the plugins of a directory, as YAML for `kubectl apply -f -`: list
    /// and watch on what their informers cache, each write verb their grants
    /// allow, and Leases for leader election.
    Rbac {
        /// Directory of plugin components (*.wasm) and their manifests (*.toml).
        #[arg(long)]
        plugins: PathBuf,
        /// The namespace `kinformer run --namespace` confines the host to.
        #[arg(long)]
        namespace: Option<String>,
        /// Add what leader election needs (`kinformer run --leader-elect`).
        #[arg(long)]
        leader_elect: bool,
        /// The Lease's namespace (default: the service account's).
        #[arg(long, requires = "leader_elect")]
        lease_namespace: Option<String>,
        /// The ServiceAccount the host runs as.
        #[arg(long, default_value = "kinformer")]
        service_account: String,
        /// Its namespace.
        #[arg(long, default_value = "kinformer")]
        service_account_namespace: String,
        /// Where compiled plugins are cached.
        #[arg(long, env = "KINFORMER_CACHE_DIR")]
        cache_dir: Option<PathBuf>,
    },
    /// Record the initial state, then every delta of some resources, into a
    /// file of JSON lines (one delta per line) that `replay` runs a plugin on.
    Record {
        /// A resource to record, as apiVersion/Kind (e.g. v1/Pod,
        /// apps/v1/Deployment); repeat for more.
        #[arg(long = "resource", required = true, value_parser = parse_resource)]
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
    },
    /// Run a plugin or controller offline on a recording: its cache answers
    /// from the recorded state as of each delta. Prints its log lines and the
    /// writes it would make (none is made); exits 2 when `handle` or
    /// `reconcile` returned errors, 3 when it trapped.
    Replay {
        /// The plugin component (*.wasm); the manifest beside it applies.
        plugin: PathBuf,
        /// The recording (from `kinformer record`).
        recording: PathBuf,
        /// The config string passed to `init` (default: the manifest's).
        #[arg(long)]
        config: Option<String>,
        #[command(flatten)]
        engine: EngineArgs,
    },
    /// Write a new plugin project: a plugin that logs deltas (or a
    /// controller that logs each object it reconciles), its build, a
    /// manifest with a narrow grant, and a README of three commands.
    New {
        /// The plugin's name; also the project's directory (see --dir).
        name: String,
        /// rust, python or js.
        #[arg(long, default_value = "rust")]
        lang: kinformer_cli::scaffold::Language,
        /// plugin (handles deltas) or controller (reconciles keys).
        #[arg(long, default_value = "plugin")]
        world: kinformer_cli::scaffold::World,
        /// Where to write the project (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Load a plugin, run its `init` against an empty cache and print what it
    /// registers, or why it cannot load.
    Check {
        /// The plugin component (*.wasm).
        plugin: PathBuf,
        /// The config string passed to `init` (default: the manifest's).
        #[arg(long)]
        config: Option<String>,
    },
}

/// How plugins are compiled, and where their status is served.
#[derive(Debug, clap::Args)]
struct EngineArgs {
    /// Serve the plugins' status (digests, state, counters) as JSON at
    /// http://ADDRESS/plugins, e.g. 127.0.0.1:9090.
    #[arg(long)]
    status_addr: Option<std::net::SocketAddr>,
    /// Where compiled plugins are cached (default: ~/.cache/kinformer).
    #[arg(long, env = "KINFORMER_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile every time; keep nothing on disk.
    #[arg(long, conflicts_with = "cache_dir")]
    no_cache: bool,
}

impl EngineArgs {
    fn apply(&self, mut config: RuntimeConfig) -> RuntimeConfig {
        config.engine = self.options();
        config
    }

    /// The engine's options: with a compile cache, each new component is
    /// compiled by this program in a child process (see `main`), which takes
    /// the compiler's memory with it when it exits.
    fn options(&self) -> kinformer::plugin::EngineOptions {
        kinformer::plugin::EngineOptions {
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

/// Leader election among replicas, as Kubernetes controllers do it.
#[derive(Debug, clap::Args)]
struct ElectionArgs {
    /// Take part in leader election on a Lease: plugins that can write (a
    /// write grant, or the controller world) run only on the leader; the
    /// others run on every replica. The identity is $POD_NAME, or the host
    /// name and process id.
    #[arg(long)]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(long, default_value = "kinformer", requires = "leader_elect")]
    lease_name: String,
    /// The Lease's namespace (default: $POD_NAMESPACE, --namespace, or
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
        let env = |name| std::env::var(name).ok().filter(|value: &String| !value.is_empty());
        let lease_namespace = self
            .lease_namespace
            .clone()
            .or_else(|| env("POD_NAMESPACE"))
            .or_else(|| namespace.map(str::to_owned))
            .unwrap_or_else(|| "default".to_owned());
        let identity = env("POD_NAME").unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
                .or_else(|| env("HOSTNAME"))
                .unwrap_or_else(|| "kinformer".to_owned());
            format!("{host}_{}", std::process::id())
        });
        Some(
            LeaderElectionConfig::new(&self.lease_name, lease_namespace, identity).durations(
                self.leader_elect_lease_duration,
                self.leader_elect_renew_deadline,
                self.leader_elect_retry_period,
            ),
        )
    }
}

/// A duration as Kubernetes flags write them: `15s`, `500ms`, `1m`.
fn duration(text: &str) -> Result<Duration, String> {
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

fn parse_resource(resource: &str) -> anyhow::Result<kube::api::GroupVersionKind> {
    kinformer_cli::recording::parse_resource(resource)
}

/// A client of the cluster `kubeconfig` names, or the one the environment
/// configures.
async fn client(kubeconfig: Option<&std::path::Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file =
                kube::config::Kubeconfig::read_from(path).with_context(|| format!("reading {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default()).await?
        }
        None => kube::Config::infer()
            .await
            .context("no cluster configured: pass --kubeconfig or set KUBECONFIG")?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// The synthetic workload of the emulated cluster.
#[derive(Debug, clap::Args)]
struct WorkloadArgs {
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
}

impl WorkloadArgs {
    fn workload(&self) -> Workload {
        Workload::default()
            .seed(self.seed)
            .size(self.namespaces, self.deployments, self.pods)
            .changes_per_second(self.rate)
            .load(match self.load_period {
                0 => Load::Random,
                seconds => Load::Phases {
                    period: Duration::from_secs(seconds),
                },
            })
    }
}

fn main() -> ExitCode {
    // This program compiles components for its own engine (`EngineArgs`).
    if let Some(code) = kinformer::plugin::run_compile_process() {
        return code;
    }
    let cli = Cli::parse();
    // Logs go to stderr: stdout is for what a command prints (`rbac`,
    // `check`, and a replayed plugin's lines, which the replay prints itself).
    let mut filter = log_filter(&cli.log);
    if matches!(cli.command, Command::Replay { .. }) {
        for directive in ["kinformer::plugin::log=off", "kinformer::audit=off"] {
            if let Ok(directive) = directive.parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.with_target(false).init(),
        LogFormat::Json => logs.json().with_current_span(true).init(),
    }
    match run(cli.command) {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            eprintln!("error: {}", kinformer::one_line(error.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build()
}

/// Runs the command; its answer is the process's exit code.
fn run(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Run {
            plugins,
            kubeconfig,
            namespace,
            election,
            engine,
        } => runtime()?.block_on(async {
            let client = client(kubeconfig.as_deref()).await?;
            let mut config = engine.apply(RuntimeConfig::new(plugins));
            if let Some(election) = election.config(namespace.as_deref()) {
                config = config.leader_election(election);
            }
            if let Some(namespace) = namespace {
                config = config.namespace(namespace);
            }
            if let Some(address) = engine.status_addr {
                config = config.status_address(address);
            }
            let runtime = Runtime::start(client, config).await?;
            kinformer_cli::serve(&runtime, None).await;
            let status = runtime.shutdown().await;
            if !status.is_empty() && status.iter().all(|status| status.state == PluginState::Failed) {
                anyhow::bail!("no plugin could start");
            }
            Ok(0)
        }),
        Command::Demo {
            plugins,
            kubeconfig,
            seconds,
            workload,
            engine,
        } => {
            let scratch = std::env::temp_dir().join(format!("kinformer-demo-{}", std::process::id()));
            let plugins = match plugins {
                Some(dir) => dir,
                None => {
                    let dir = scratch.join("plugins");
                    demo::write_plugins(&dir, plugin_artifacts::ALL)?;
                    println!("example plugins written to {}", dir.display());
                    dir
                }
            };
            let kubeconfig = match kubeconfig {
                Some(path) => path,
                None => {
                    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
                    scratch.join("kubeconfig")
                }
            };
            println!("emulated cluster kubeconfig: {}", kubeconfig.display());
            let mut config = DemoConfig::new(plugins, kubeconfig).workload(workload.workload());
            config.runtime = engine.apply(config.runtime);
            config.status_addr = engine.status_addr;
            if let Some(seconds) = seconds {
                config = config.duration(Duration::from_secs(seconds));
            }
            runtime()?.block_on(demo::run(&config))?;
            Ok(0)
        }
        Command::Sim {
            port,
            kubeconfig,
            chaos_seconds,
            workload,
        } => runtime()?.block_on(async {
            let server = ApiServer::start(SimConfig::default().port(port)).await?;
            server.write_kubeconfig(&kubeconfig)?;
            let _workload = server.start_workload(&workload.workload())?;
            println!("emulated API server at {}", server.url());
            println!(
                "kubeconfig: {} (try: kubectl --kubeconfig {} get pods -A)",
                kubeconfig.display(),
                kubeconfig.display()
            );
            println!(
                "faults: curl -X POST {}/sim/faults/close-watches (see /sim/stats)",
                server.url()
            );
            let mut round = 0_u64;
            loop {
                let pause = chaos_seconds.map_or(Duration::from_secs(3600), Duration::from_secs);
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => break,
                    () = tokio::time::sleep(pause) => {}
                }
                if chaos_seconds.is_some() {
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
        }),
        Command::Rbac {
            plugins,
            namespace,
            leader_elect,
            lease_namespace,
            service_account,
            service_account_namespace,
            cache_dir,
        } => {
            let options = RbacOptions {
                namespace,
                lease_namespace: leader_elect
                    .then(|| lease_namespace.unwrap_or_else(|| service_account_namespace.clone())),
                service_account,
                service_account_namespace,
                cache_dir,
                ..RbacOptions::default()
            };
            print!("{}", kinformer_cli::rbac::rbac(&plugins, &options)?);
            Ok(0)
        }
        Command::Record {
            resources,
            namespace,
            kubeconfig,
            seconds,
            output,
        } => runtime()?.block_on(async {
            let client = client(kubeconfig.as_deref()).await?;
            let file = std::fs::File::create(&output).with_context(|| format!("creating {}", output.display()))?;
            let stop = async {
                match seconds {
                    Some(seconds) => tokio::time::sleep(Duration::from_secs(seconds)).await,
                    None => {
                        let _ = tokio::signal::ctrl_c().await;
                    }
                }
            };
            let mut out = std::io::BufWriter::new(file);
            let written =
                kinformer_cli::recording::record(client, &resources, namespace.as_deref(), &mut out, stop).await?;
            eprintln!("recorded {written} deltas into {}", output.display());
            Ok(0)
        }),
        Command::Replay {
            plugin,
            recording,
            config,
            engine,
        } => {
            let file = std::fs::File::open(&recording).with_context(|| format!("opening {}", recording.display()))?;
            let deltas = kinformer_cli::recording::read(std::io::BufReader::new(file))
                .with_context(|| format!("reading {}", recording.display()))?;
            let engine = kinformer::plugin::PluginEngine::with_options(&engine.options())?;
            let outcome = kinformer_cli::replay::replay(
                &plugin,
                &deltas,
                config.as_deref(),
                &engine,
                &mut std::io::stdout().lock(),
            )?;
            let reconciles = if outcome.reconciles > 0 {
                format!(", {} reconciles", outcome.reconciles)
            } else {
                String::new()
            };
            eprintln!(
                "replayed {} deltas of {}{reconciles}: {} errors{}",
                outcome.delivered,
                deltas.len(),
                outcome.errors,
                if outcome.trap.is_some() { ", trapped" } else { "" }
            );
            Ok(outcome.exit_code())
        }
        Command::New { name, lang, world, dir } => {
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            let sdk = kinformer_cli::scaffold::SdkSource::detect();
            for file in kinformer_cli::scaffold::new_plugin(&dir, &name, lang, world, &sdk)? {
                println!("wrote {}", file.display());
            }
            println!(
                "build it: cd {} && {}",
                dir.display(),
                kinformer_cli::scaffold::build_line(lang, world, &name)
            );
            Ok(0)
        }
        Command::Check { plugin, config } => {
            print!("{}", kinformer_cli::check::check(&plugin, config.as_deref())?);
            Ok(0)
        }
    }
}
