//! What the examples share: reading a plugin file with the manifest beside
//! it, as `kinformer run` reads a plugin directory. The examples are the
//! files beside `src/`: `load_plugin.rs` (one plugin, no runtime), `embed.rs`
//! (plugins beside a program's own handler) and `controller.rs` (a plugin as
//! a kube-rs controller's reconcile step).

use std::path::Path;

use anyhow::Context as _;
use kinformer::{EmbeddedPlugin, Manifest};

/// The plugin file at `path` (`NAME.wasm`), named `NAME`, with the manifest
/// `NAME.toml` beside it (the defaults without one).
///
/// # Errors
///
/// When the file cannot be read or its manifest is broken.
pub fn plugin_from_file(path: &Path) -> anyhow::Result<EmbeddedPlugin> {
    let manifest = Manifest::for_plugin(path)?;
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read the plugin", path.display()))?;
    let name = path
        .file_stem()
        .map_or_else(|| "plugin".into(), |stem| stem.to_string_lossy());
    Ok(EmbeddedPlugin::from_bytes(name, bytes).manifest(manifest))
}
