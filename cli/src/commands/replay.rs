//! `kinformer replay`: a plugin run offline on a recording.

use std::path::PathBuf;

use anyhow::Context as _;
use kinformer::PluginEngine;

use super::CacheArgs;

/// Run a plugin or controller offline on a recording: its cache answers
/// from the recorded state as of each delta. Prints its log lines and the
/// writes it would make (none is made); exits 2 when `handle` or
/// `reconcile` returned errors, 3 when it trapped.
#[derive(Debug, clap::Args)]
pub(crate) struct Replay {
    /// The plugin component (*.wasm); the manifest beside it applies.
    plugin: PathBuf,
    /// The recording (from `kinformer record`).
    recording: PathBuf,
    /// The config string passed to `init` (default: the manifest's).
    #[arg(long)]
    config: Option<String>,
    #[command(flatten)]
    cache: CacheArgs,
}

impl Replay {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        let recording = &self.recording;
        let file = std::fs::File::open(recording).with_context(|| format!("opening {}", recording.display()))?;
        let deltas = kinformer_cli::recording::read(std::io::BufReader::new(file))
            .with_context(|| format!("reading {}", recording.display()))?;
        let engine = PluginEngine::with_options(&self.cache.options())?;
        let outcome = kinformer_cli::replay::replay(
            &self.plugin,
            &deltas,
            self.config.as_deref(),
            &engine,
            &mut std::io::stdout().lock(),
        )?;
        eprintln!("{}", outcome.summary(deltas.len()));
        Ok(outcome.exit_code())
    }
}
