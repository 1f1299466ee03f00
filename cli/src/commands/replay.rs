//! `kinformer replay`: a plugin run offline on a recording.

use std::path::PathBuf;

use anyhow::Context as _;
use kinformer::PluginEngine;

use super::CacheArgs;

/// Run a plugin or controller offline on a recording: its cache answers
/// from the recorded state as of each delta. Prints its log lines and the
/// writes it would make (none is made); exits 2 when `handle` or
/// `reconcile` returned errors, 3 when it trapped. With `--compare`, runs
/// both versions and prints only the calls whose writes differ; exits 1 on
/// a difference.
#[derive(Debug, clap::Args)]
pub(crate) struct Replay {
    /// The plugin component (*.wasm); the manifest beside it applies.
    plugin: PathBuf,
    /// The recording (from `kinformer record`).
    recording: PathBuf,
    /// The config string passed to `init` (default: the manifest's).
    #[arg(long)]
    config: Option<String>,
    /// Another version of the plugin (its own manifest beside it): compare
    /// the writes of both, call by call.
    #[arg(long, value_name = "OTHER.wasm")]
    compare: Option<PathBuf>,
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
        if let Some(other) = &self.compare {
            let run = |plugin: &PathBuf| {
                kinformer_cli::replay::replay(plugin, &deltas, None, &engine, &mut std::io::sink())
                    .with_context(|| format!("replaying {}", plugin.display()))
            };
            let (first, second) = (run(&self.plugin)?, run(other)?);
            let compared = kinformer_cli::replay::compare(&first, &second);
            for line in compared.lines() {
                println!("{line}");
            }
            eprintln!("{}", compared.summary());
            for (plugin, outcome) in [(&self.plugin, &first), (other, &second)] {
                if outcome.exit_code() != 0 {
                    eprintln!("{}: {}", plugin.display(), outcome.summary(deltas.len()));
                }
            }
            return Ok(compared.exit_code().max(first.exit_code()).max(second.exit_code()));
        }
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
