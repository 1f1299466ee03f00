//! `kinformer new`: a new plugin project.

use std::path::PathBuf;

use kinformer_cli::scaffold::{self, Language, SdkSource, World};

/// Write a new plugin project: a plugin that logs deltas (or a
/// controller that logs each object it reconciles), its build, a
/// manifest granting it pods in every namespace (narrow it to the plugin's
/// namespaces before deploying), and a README of three commands.
#[derive(Debug, clap::Args)]
pub(crate) struct New {
    /// The plugin's name; also the project's directory (see --dir).
    name: String,
    /// rust, python or js.
    #[arg(long, default_value = "rust")]
    lang: Language,
    /// plugin (handles deltas) or controller (reconciles keys).
    #[arg(long, default_value = "plugin")]
    world: World,
    /// Where to write the project (default: ./NAME).
    #[arg(long)]
    dir: Option<PathBuf>,
}

impl New {
    pub(crate) fn run(self) -> anyhow::Result<u8> {
        let dir = self.dir.unwrap_or_else(|| PathBuf::from(&self.name));
        let sdk = SdkSource::detect();
        for file in scaffold::new_plugin(&dir, &self.name, self.lang, self.world, &sdk)? {
            println!("wrote {}", file.display());
        }
        println!(
            "build it: cd {} && {}",
            dir.display(),
            scaffold::build_line(self.lang, self.world, &self.name)
        );
        Ok(0)
    }
}
