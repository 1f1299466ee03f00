//! The `kinformer` command line: parses the arguments, sets up the logs and
//! runs the subcommand (`commands/`, one file each).

mod commands;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
/// kinformer says itself what a failure means ("list ConfigMap: forbidden (403): …");
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
    Run(commands::run::Run),
    #[cfg(feature = "emulation")]
    Demo(commands::demo::Demo),
    #[cfg(feature = "emulation")]
    Sim(commands::sim::Sim),
    Rbac(commands::rbac::Rbac),
    Record(commands::record::Record),
    Replay(commands::replay::Replay),
    Rollout(commands::rollout::Rollout),
    Status(commands::status::Status),
    New(commands::new::New),
    Check(commands::check::Check),
    Crds(commands::crds::Crds),
    Push(commands::push::Push),
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
        let plugin_lines = format!("{}=off", kinformer::plugin::LOG_TARGET);
        for directive in [plugin_lines.as_str(), "kinformer::audit=off"] {
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

/// Runs the command; its answer is the process's exit code.
fn run(command: Command) -> anyhow::Result<u8> {
    match command {
        Command::Run(command) => command.run(),
        #[cfg(feature = "emulation")]
        Command::Demo(command) => command.run(),
        #[cfg(feature = "emulation")]
        Command::Sim(command) => command.run(),
        Command::Rbac(command) => command.run(),
        Command::Record(command) => command.run(),
        Command::Replay(command) => command.run(),
        Command::Rollout(command) => command.run(),
        Command::Status(command) => command.run(),
        Command::New(command) => command.run(),
        Command::Check(command) => command.run(),
        Command::Crds(command) => command.run(),
        Command::Push(command) => command.run(),
    }
}
