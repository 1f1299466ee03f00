//! `kinformer push`: a plugin component to an OCI registry.

use std::path::PathBuf;

use anyhow::Context as _;
use kinformer::handlers::oci::{self, Credentials, PullConfig};

/// Push a plugin component to an OCI registry as a Wasm artifact (config
/// `application/vnd.wasm.config.v0+json`, one `application/wasm` layer, as
/// `wkg` and `oras` push them), and print its pinned reference
/// `REGISTRY/REPOSITORY@sha256:...` for a Handler's `spec.module.oci`.
///
/// Credentials come from $KINFORMER_REGISTRY_USERNAME and
/// $KINFORMER_REGISTRY_PASSWORD when set.
#[derive(Debug, clap::Args)]
pub(crate) struct Push {
    /// The component (*.wasm).
    plugin: PathBuf,
    /// Where to push it: REGISTRY/REPOSITORY[:TAG].
    reference: String,
    /// Speak plain HTTP to this registry (HOST:PORT), e.g. one on loopback.
    #[arg(long)]
    insecure_registry: Vec<String>,
}

impl Push {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        let module = std::fs::read(&self.plugin).with_context(|| format!("reading {}", self.plugin.display()))?;
        let credentials = match (
            std::env::var("KINFORMER_REGISTRY_USERNAME"),
            std::env::var("KINFORMER_REGISTRY_PASSWORD"),
        ) {
            (Ok(username), Ok(password)) => Credentials::Basic { username, password },
            _ => Credentials::Anonymous,
        };
        let config = self
            .insecure_registry
            .into_iter()
            .fold(PullConfig::default(), PullConfig::insecure_registry);
        let pinned = super::tokio()?.block_on(oci::push(&module, &self.reference, &credentials, &config))?;
        println!("{pinned}");
        Ok(0)
    }
}
