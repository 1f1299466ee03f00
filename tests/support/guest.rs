//! Plugins in Python and JavaScript, built from source by their SDK's build
//! script, once per test binary, and rebuilt only when their sources changed.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use kinformer::plugin::{EngineOptions, PluginEngine};

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The workspace's target directory, where the SDKs' toolchains, the built
/// components and the compile cache are kept.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// The compile cache the guest plugins' tests share: an 18 MB component is
/// compiled once per machine, not once per test.
pub fn compile_cache() -> PathBuf {
    target_dir().join("guest-plugins").join("compiled")
}

/// A language whose plugins are built by a script of its SDK.
#[derive(Debug, Clone, Copy)]
pub enum Language {
    /// `guest-sdk/python/build`, with componentize-py.
    Python,
    /// `guest-sdk/js/build`, with componentize-js.
    JavaScript,
}

impl Language {
    fn build_script(self) -> PathBuf {
        match self {
            Self::Python => root().join("guest-sdk/python/build"),
            Self::JavaScript => root().join("guest-sdk/js/build"),
        }
    }

    fn sdk(self) -> PathBuf {
        match self {
            Self::Python => root().join("guest-sdk/python"),
            Self::JavaScript => root().join("guest-sdk/js"),
        }
    }
}

/// The WIT world a plugin is built for: the build script's `--world`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    /// `init` and `handle`; reads only.
    Plugin,
    /// `init` and `handle`, and writes.
    Writer,
    /// `init` and `reconcile`, and writes.
    Controller,
}

impl World {
    fn name(self) -> &'static str {
        match self {
            Self::Plugin => "plugin",
            Self::Writer => "writer",
            Self::Controller => "controller",
        }
    }
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
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(PoisonError::into_inner);
    let name = source.file_name().unwrap().to_string_lossy();
    let file = match world {
        World::Plugin => format!("{name}.wasm"),
        other => format!("{name}.{}.wasm", other.name()),
    };
    let out = target_dir().join("guest-plugins").join(file);
    let inputs = [source, &language.sdk(), &root().join("wit")];
    let built = std::fs::metadata(&out).and_then(|meta| meta.modified()).ok();
    if built.is_none_or(|built| inputs.iter().any(|input| newest(input) > built)) {
        build(language, world, source, &out);
    }
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

/// Runs `language`'s build of the plugin in `source` for `world` into `out`.
///
/// # Panics
///
/// When the build fails.
pub fn build(language: Language, world: World, source: &Path, out: &Path) {
    let partial = out.with_extension("wasm.partial");
    let status = Command::new(language.build_script())
        .args(["--world", world.name()])
        .arg(source)
        .arg(&partial)
        .status()
        .unwrap();
    assert!(status.success(), "building {} failed: {status}", source.display());
    std::fs::rename(&partial, out).unwrap();
}

/// The newest modification time of a file, or of the files under a directory
/// (a build's bytecode caches aside).
fn newest(path: &Path) -> SystemTime {
    let meta = std::fs::metadata(path).unwrap();
    if !meta.is_dir() {
        return meta.modified().unwrap();
    }
    std::fs::read_dir(path)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|entry| entry.file_name().is_some_and(|name| name != "__pycache__"))
        .map(|entry| newest(&entry))
        .max()
        .unwrap_or(SystemTime::UNIX_EPOCH)
}
