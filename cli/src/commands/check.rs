//! `kinformer check`: what a plugin registers, and what its grant makes of it.

use std::path::PathBuf;

use kinformer::PluginEngine;

use super::CacheArgs;

/// Load a plugin, run its `init` against an empty cache and print what it
/// registers, or why it cannot load.
#[derive(Debug, clap::Args)]
pub(crate) struct Check {
    /// The plugin component (*.wasm).
    plugin: PathBuf,
    /// The config string passed to `init` (default: the manifest's).
    #[arg(long)]
    config: Option<String>,
    #[command(flatten)]
    cache: CacheArgs,
}

impl Check {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        // The compile cache makes a second check of the same file instant.
        let engine = PluginEngine::with_options(&self.cache.options())?;
        print!(
            "{}",
            kinformer_cli::check::check_with(&engine, &self.plugin, self.config.as_deref())?
        );
        Ok(0)
    }
}
