//! `kinformer rollout`: how a plugin's next version fares on a running host.

use std::net::SocketAddr;

/// Show how a plugin's next version (NAME.next.wasm) fares beside the running
/// one, from a running host's status address: the host must serve one
/// (`kinformer run --status-addr 127.0.0.1:9090`).
#[derive(Debug, clap::Args)]
pub(crate) struct Rollout {
    #[command(subcommand)]
    command: RolloutCommand,
}

#[derive(Debug, clap::Subcommand)]
enum RolloutCommand {
    /// Keys compared and how (a shadow's), errors and traps of each version,
    /// the last differences, and a rollback's reason.
    Status {
        /// The running plugin's name.
        name: String,
        /// The host's status address: what its `kinformer run --status-addr` was.
        #[arg(long, default_value = "127.0.0.1:9090")]
        status_addr: SocketAddr,
    },
}

impl Rollout {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        let RolloutCommand::Status { name, status_addr } = self.command;
        let plugins = super::tokio()?.block_on(kinformer_cli::rollout::fetch(status_addr))?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |now| now.as_secs());
        print!("{}", kinformer_cli::rollout::summary(&plugins, &name, now)?);
        Ok(0)
    }
}
