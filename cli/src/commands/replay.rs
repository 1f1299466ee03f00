//! `kinformer replay`: a plugin run offline on a recording.

use std::path::PathBuf;

use anyhow::Context as _;
use kinformer::PluginEngine;
use kinformer_cli::replay::{Http, Setup};

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
    /// A value for a variable the manifest's [env] takes from a Secret or
    /// ConfigMap (a replay reads no cluster); repeat for more.
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = setting)]
    env: Vec<(String, String)>,
    /// A file of NAME=VALUE lines, as --env (blank lines and # comments
    /// skipped).
    #[arg(long, value_name = "FILE")]
    env_from: Option<PathBuf>,
    #[command(flatten)]
    cache: CacheArgs,
}

/// `NAME=VALUE`.
pub(crate) fn setting(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .filter(|(name, _)| !name.is_empty())
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .ok_or_else(|| format!("{text:?}: want NAME=VALUE"))
}

impl Replay {
    /// The settings given with --env-from, then --env.
    fn settings(&self) -> anyhow::Result<Vec<(String, String)>> {
        let mut env = Vec::new();
        if let Some(path) = &self.env_from {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            for (number, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                env.push(
                    setting(line)
                        .map_err(anyhow::Error::msg)
                        .with_context(|| format!("{}: line {}", path.display(), number + 1))?,
                );
            }
        }
        env.extend(self.env.iter().cloned());
        Ok(env)
    }

    pub(crate) fn run(self) -> anyhow::Result<u8> {
        let recording = &self.recording;
        let file = std::fs::File::open(recording).with_context(|| format!("opening {}", recording.display()))?;
        let recorded = kinformer_cli::recording::read_recording(std::io::BufReader::new(file))
            .with_context(|| format!("reading {}", recording.display()))?;
        let deltas = recorded.deltas;
        let engine = PluginEngine::with_options(&self.cache.options())?;
        let env = self.settings()?;
        let setup = |config: Option<&str>| Setup {
            config: config.map(str::to_owned),
            env: env.clone(),
            http: Http::Recorded(recorded.http.clone()),
        };
        if let Some(other) = &self.compare {
            let run = |plugin: &PathBuf| {
                kinformer_cli::replay::replay_with(plugin, &deltas, &setup(None), &engine, &mut std::io::sink())
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
        let outcome = kinformer_cli::replay::replay_with(
            &self.plugin,
            &deltas,
            &setup(self.config.as_deref()),
            &engine,
            &mut std::io::stdout().lock(),
        )?;
        eprintln!("{}", outcome.summary(deltas.len()));
        Ok(outcome.exit_code())
    }
}
