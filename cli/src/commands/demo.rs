//! `kinformer demo`: the plugins on the embedded API emulation.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use kinformer_cli::demo::{self, DemoConfig};

use super::{EngineArgs, WorkloadArgs};

/// Run the plugins against an embedded Kubernetes API emulation with a
/// synthetic workload; no cluster needed.
///
/// Without --plugins, the example plugins are written to a temporary
/// directory (its path is printed) and loaded from there. The emulated
/// cluster's kubeconfig is written too, for kubectl.
#[derive(Debug, clap::Args)]
pub(crate) struct Demo {
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
}

impl Demo {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        let scratch = std::env::temp_dir().join(format!("kinformer-demo-{}", std::process::id()));
        let plugins = match self.plugins {
            Some(dir) => dir,
            None => {
                let dir = scratch.join("plugins");
                demo::write_plugins(&dir, plugin_artifacts::ALL)?;
                println!("example plugins written to {}", dir.display());
                dir
            }
        };
        let kubeconfig = match self.kubeconfig {
            Some(path) => path,
            None => {
                std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
                scratch.join("kubeconfig")
            }
        };
        println!("emulated cluster kubeconfig: {}", kubeconfig.display());
        let mut config = DemoConfig::new(plugins, kubeconfig).workload(self.workload.workload());
        config.runtime = self.engine.apply(config.runtime);
        config.status_addr = self.engine.status_addr;
        if let Some(seconds) = self.seconds {
            config = config.duration(Duration::from_secs(seconds));
        }
        super::tokio()?.block_on(demo::run(&config))?;
        Ok(0)
    }
}
