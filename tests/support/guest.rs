//! Plugins in Python and JavaScript, built from source by their SDK's build
//! script (see [`plugin_artifacts::guest`]) and compiled once into a cache the
//! tests share.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use kinformer::plugin::{EngineOptions, PluginEngine};
pub use plugin_artifacts::guest::{Language, World, root, target_dir};

/// The compile cache the guest plugins' tests share: an 18 MB component is
/// compiled once per machine, not once per test.
pub fn compile_cache() -> PathBuf {
    plugin_artifacts::guest::guest_plugins_dir().join("compiled")
}

/// The component of example plugin `plugins/NAME`, written in `language`,
/// built for `world`.
///
/// # Panics
///
/// When the build fails: its output is in the test's output.
pub fn example(language: Language, world: World, name: &str) -> Vec<u8> {
    component(language, world, &root().join("plugins").join(name))
}

/// The component of the plugin whose sources are in `source` (a directory of
/// the workspace), written in `language`, built for `world`, and compiled
/// into the [`compile_cache`].
///
/// # Panics
///
/// When the build fails: its output is in the test's output.
pub fn component(language: Language, world: World, source: &Path) -> Vec<u8> {
    // One build and compile at a time: a test that waits then finds both done.
    static LOADING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = LOADING.lock().unwrap_or_else(PoisonError::into_inner);
    let name = source.file_name().unwrap().to_string_lossy();
    let out = plugin_artifacts::guest::built(language, world, source).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    // Compiled once here, into the cache runtimes given `compile_cache()`
    // read, rather than by each test's runtime at the same time.
    let options = EngineOptions {
        cache_dir: Some(compile_cache()),
        ..EngineOptions::default()
    };
    PluginEngine::with_options(&options)
        .unwrap()
        .load_bytes(&name, &bytes)
        .unwrap();
    bytes
}
