//! kinformer against what a Rust user would otherwise pick — a kube-rs
//! `reflector` with the handler compiled in, or a kube-rs `Controller` — on
//! the same work, in the same run, on the emulated API server. Prints a table
//! of ratios.
//!
//! `cargo run --release -p kinformer-bench` runs every row; `--quick` runs them
//! with tiny sizes (what the test suite does to keep this from rotting).

mod child;
mod cluster;
mod consumers;
mod controllers;
mod rows;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::consumers::{Language, Side, Work};

/// Every allocation is counted, so the memory rows can report the live heap
/// beside the resident size (which also holds what the allocator keeps free).
#[global_allocator]
static HEAP: cap::Cap<std::alloc::System> = cap::Cap::new(std::alloc::System, usize::MAX);

/// kinformer against a kube-rs reflector, side by side.
#[derive(Debug, Parser)]
#[command(name = "kinformer-bench")]
struct Cli {
    /// Tiny sizes and one repetition: checks that every row runs.
    #[arg(long)]
    quick: bool,
    /// Repetitions per measurement (medians are reported, with min and max).
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Only these rows (1-14).
    #[arg(long, value_delimiter = ',')]
    rows: Vec<u8>,
    /// The large component row 10 compiles (default: the Python example
    /// plugin, when it has been built).
    #[arg(long)]
    component: Option<PathBuf>,
    #[command(subcommand)]
    child: Option<Child>,
}

/// The modes the benchmark runs itself in as a child process (see [`child`]).
#[derive(Debug, Subcommand)]
enum Child {
    /// (internal) Syncs the pods of a cluster in this process and reports time
    /// and resident memory as JSON.
    #[command(hide = true)]
    Sync {
        #[arg(long, value_enum)]
        side: Side,
        #[arg(long)]
        kubeconfig: PathBuf,
    },
    /// (internal) Consumes churn with one side in this process and reports CPU
    /// time and latencies as JSON.
    #[command(hide = true)]
    Churn {
        #[arg(long, value_enum)]
        side: Side,
        /// The language of kinformer's probe plugins.
        #[arg(long, value_enum, default_value = "rust")]
        language: Language,
        #[arg(long, value_enum)]
        work: Work,
        #[arg(long)]
        plugins: usize,
        #[arg(long)]
        updates: usize,
        #[arg(long)]
        kubeconfig: PathBuf,
    },
    /// (internal) Reconciles every pod with one side's no-op controller in this
    /// process, then the churn until told on stdin that it is written, and
    /// reports CPU time and reconciles as JSON.
    #[command(hide = true)]
    Control {
        #[arg(long, value_enum)]
        side: Side,
        /// The pods to reconcile before the churn starts.
        #[arg(long)]
        pods: u64,
        #[arg(long)]
        kubeconfig: PathBuf,
    },
    /// (internal) Runs kinformer with no-op plugins until each handled every
    /// pod, and reports time and resident memory as JSON.
    #[command(hide = true)]
    Fanout {
        #[arg(long)]
        plugins: usize,
        #[arg(long)]
        pods: u64,
        #[arg(long)]
        kubeconfig: PathBuf,
    },
    /// (internal) Loads a component with a plugin engine caching in a
    /// directory, optionally starts instances of it, and reports time and
    /// resident memory as JSON.
    #[command(hide = true)]
    Load {
        #[arg(long)]
        component: PathBuf,
        #[arg(long)]
        cache: PathBuf,
        /// Compile in this process rather than in a compile process.
        #[arg(long)]
        in_process: bool,
        /// Instances to start, each with `init` and one batch.
        #[arg(long, default_value_t = 0)]
        instances: usize,
        /// The config each instance's `init` gets.
        #[arg(long, default_value = "")]
        config: String,
    },
}

impl Child {
    /// This executable, with the arguments that parse back into `self`.
    fn command(&self) -> std::io::Result<std::process::Command> {
        let mut command = std::process::Command::new(std::env::current_exe()?);
        match self {
            Self::Sync { side, kubeconfig } => {
                command
                    .args(["sync", "--side", &arg_name(side)])
                    .arg("--kubeconfig")
                    .arg(kubeconfig);
            }
            Self::Churn {
                side,
                language,
                work,
                plugins,
                updates,
                kubeconfig,
            } => {
                command
                    .args(["churn", "--side", &arg_name(side), "--language", &arg_name(language)])
                    .args(["--work", &arg_name(work)])
                    .args(["--plugins", &plugins.to_string(), "--updates", &updates.to_string()])
                    .arg("--kubeconfig")
                    .arg(kubeconfig);
            }
            Self::Control { side, pods, kubeconfig } => {
                command
                    .args(["control", "--side", &arg_name(side), "--pods", &pods.to_string()])
                    .arg("--kubeconfig")
                    .arg(kubeconfig);
            }
            Self::Fanout {
                plugins,
                pods,
                kubeconfig,
            } => {
                command
                    .args(["fanout", "--plugins", &plugins.to_string(), "--pods", &pods.to_string()])
                    .arg("--kubeconfig")
                    .arg(kubeconfig);
            }
            Self::Load {
                component,
                cache,
                in_process,
                instances,
                config,
            } => {
                command
                    .arg("load")
                    .arg("--component")
                    .arg(component)
                    .arg("--cache")
                    .arg(cache)
                    .args(["--instances", &instances.to_string(), "--config", config]);
                if *in_process {
                    command.arg("--in-process");
                }
            }
        }
        Ok(command)
    }
}

/// How a value is spelled on the command line.
fn arg_name(value: &impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default()
}

fn main() -> anyhow::Result<ExitCode> {
    // A load child's engine compiles in this program run as a compile process.
    if let Some(code) = kinformer::plugin::run_compile_process() {
        return Ok(code);
    }
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let ran = match cli.child {
        Some(Child::Sync { side, kubeconfig }) => runtime.block_on(child::sync(side, &kubeconfig)),
        Some(Child::Churn {
            side,
            language,
            work,
            plugins,
            updates,
            kubeconfig,
        }) => runtime.block_on(child::churn(side, language, work, plugins, updates, &kubeconfig)),
        Some(Child::Control { side, pods, kubeconfig }) => runtime.block_on(child::control(side, pods, &kubeconfig)),
        Some(Child::Fanout {
            plugins,
            pods,
            kubeconfig,
        }) => runtime.block_on(child::fanout(plugins, pods, &kubeconfig)),
        Some(Child::Load {
            component,
            cache,
            in_process,
            instances,
            config,
        }) => child::load(&component, &cache, in_process, instances, &config),
        None => {
            let repeat = if cli.quick { 1 } else { cli.repeat.max(1) };
            let sizes = rows::Sizes::new(cli.quick);
            let table = runtime.block_on(rows::run(&cli.rows, &sizes, repeat, cli.component.as_deref()))?;
            table.print();
            Ok(())
        }
    };
    ran.map(|()| ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parent spells a child's arguments by hand; they must parse back.
    #[test]
    fn a_child_command_parses_back_into_the_same_child() {
        for child in [
            Child::Sync {
                side: Side::KubeDynamic,
                kubeconfig: "/tmp/k".into(),
            },
            Child::Churn {
                side: Side::KubePod,
                language: Language::JavaScript,
                work: Work::Sum,
                plugins: 10,
                updates: 300,
                kubeconfig: "/tmp/k".into(),
            },
            Child::Control {
                side: Side::Kinformer,
                pods: 50,
                kubeconfig: "/tmp/k".into(),
            },
            Child::Fanout {
                plugins: 10,
                pods: 150_000,
                kubeconfig: "/tmp/k".into(),
            },
            Child::Load {
                component: "/tmp/c.wasm".into(),
                cache: "/tmp/cache".into(),
                in_process: true,
                instances: 8,
                config: "noop".into(),
            },
        ] {
            let command = child.command().unwrap();
            let args = std::iter::once(command.get_program()).chain(command.get_args());
            let parsed = Cli::try_parse_from(args).unwrap().child.unwrap();
            assert_eq!(format!("{parsed:?}"), format!("{child:?}"));
        }
    }
}
