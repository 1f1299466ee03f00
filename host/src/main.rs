//! The `kinformer` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kinformer::caches::Caches;
use kinformer::demo::{self, DemoConfig};
use kinformer::plugin::{PluginEngine, PluginOptions};

/// Kubernetes shared informers that deliver every delta to sandboxed WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "kinformer", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,

    /// Log filter, as in RUST_LOG (e.g. `info`, `kinformer=debug`).
    #[arg(long, global = true, env = "KINFORMER_LOG", default_value = "info")]
    log: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Play a built-in workload through the plugins; no cluster needed.
    ///
    /// Without --plugins, the example plugins are written to a temporary
    /// directory (its path is printed) and loaded from there.
    Demo {
        /// Directory of plugin components (*.wasm).
        #[arg(long)]
        plugins: Option<PathBuf>,
        /// Pause between two steps of the workload, in milliseconds.
        #[arg(long, default_value_t = 300)]
        step_delay_ms: u64,
    },
    /// Load a plugin, run its `init` against an empty cache and print what it
    /// registers, or why it cannot load.
    Check {
        /// The plugin component (*.wasm).
        plugin: PathBuf,
        /// The config string passed to `init`.
        #[arg(long, default_value = "")]
        config: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(format!(
            "wasmtime=warn,cranelift=warn,{}",
            cli.log
        )))
        .with_target(false)
        .init();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Demo { plugins, step_delay_ms } => {
            let plugins = match plugins {
                Some(dir) => dir,
                None => {
                    let dir = std::env::temp_dir().join(format!("kinformer-demo-{}", std::process::id()));
                    demo::write_plugins(&dir, plugin_artifacts::ALL)?;
                    println!("example plugins written to {}", dir.display());
                    dir
                }
            };
            let config = DemoConfig::new(plugins).step_delay(Duration::from_millis(step_delay_ms));
            demo::run(&config)?;
            Ok(())
        }
        Command::Check { plugin, config } => {
            let engine = PluginEngine::new()?;
            let component = engine.load_file(&plugin)?;
            let mut instance = component.instantiate(Caches::new(), PluginOptions::default())?;
            let registration = instance
                .init(&config)
                .with_context(|| format!("{} refused to start", plugin.display()))?;
            println!("{}: {} {}", plugin.display(), registration.name, registration.version);
            for subscription in &registration.subscriptions {
                let gvk = &subscription.gvk;
                let mode = if subscription.deliver { "watch" } else { "cache" };
                print!("  {mode} {}/{} {}", gvk.group, gvk.version, gvk.kind);
                if let Some(namespace) = &subscription.namespace {
                    print!(" in namespace {namespace}");
                }
                if let Some(selector) = &subscription.label_selector {
                    print!(" selecting {selector}");
                }
                println!();
            }
            for index in &registration.indexes {
                let gvk = &index.gvk;
                println!(
                    "  index {} on {}/{} {} by {}",
                    index.name, gvk.group, gvk.version, gvk.kind, index.field_path
                );
            }
            Ok(())
        }
    }
}
