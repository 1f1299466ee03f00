//! `kinformer status`: a running host at a glance, in a terminal.

use std::net::SocketAddr;

/// Show a running host's plugins (state, version, deltas/s, errors, CPU,
/// Lease, last error), their rollouts and its informers: what its status
/// page (http://ADDRESS/) shows.
#[derive(Debug, clap::Args)]
pub(crate) struct Status {
    /// The host's status address (its --status-addr).
    #[arg(long, default_value = "127.0.0.1:9090")]
    status_addr: SocketAddr,
}

impl Status {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        let overview = super::tokio()?.block_on(kinformer_cli::status::fetch(self.status_addr))?;
        print!("{}", kinformer_cli::status::render(&overview));
        Ok(0)
    }
}
