//! Plugins in Python and JavaScript, built from source by their SDK's build script into the target directory, and rebuilt only when their sources, their SDK or the contract changed.
//!
//! Unlike the Rust plugins, these are built when first asked for, not by the
//! build script: a build takes tens of seconds and needs `python3`, `node`
//! and `npm`, which only the tests and the benchmark's language row do.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

/// A language whose plugins are built by a script of its SDK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// `guest-sdk/python/build`, with componentize-py.
    Python,
    /// `guest-sdk/js/build`, with componentize-js.
    JavaScript,
}

impl Language {
    /// The SDK's directory, which holds its build script.
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
    /// The world's name, as the build scripts take it.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Plugin => "plugin",
            Self::Writer => "writer",
            Self::Controller => "controller",
        }
    }
}

/// The workspace root.
#[must_use]
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The workspace's target directory, where the SDKs' toolchains and the built
/// components are kept.
#[must_use]
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Where the components built from source are kept: `target/guest-plugins`.
#[must_use]
pub fn guest_plugins_dir() -> PathBuf {
    target_dir().join("guest-plugins")
}

/// The path of the plugin in `source` (a directory, relative to the
/// workspace root, e.g. `plugins/crashloop-report`) built in `language` for
/// `world` under [`guest_plugins_dir`], named after its directory (`NAME.wasm`
/// for the `plugin` world, `NAME.WORLD.wasm` for another): built now unless a
/// build newer than the sources, the SDK and `wit/` is there. One build at a
/// time in a process.
///
/// # Errors
///
/// When the build script cannot run or fails (its output went to this
/// process's stdout and stderr), or the sources cannot be read.
pub fn built(language: Language, world: World, source: impl AsRef<Path>) -> std::io::Result<PathBuf> {
    static BUILDING: Mutex<()> = Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(PoisonError::into_inner);
    let source = root().join(source);
    let name = source
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{}: no plugin directory", source.display())))?
        .to_string_lossy();
    let file = match world {
        World::Plugin => format!("{name}.wasm"),
        other => format!("{name}.{}.wasm", other.name()),
    };
    let out = guest_plugins_dir().join(file);
    let inputs = [
        source.as_path(),
        &language.sdk(),
        &root().join("guest-sdk/wasi"),
        &root().join("wit"),
    ];
    let built = std::fs::metadata(&out).and_then(|meta| meta.modified()).ok();
    let mut newest_input = SystemTime::UNIX_EPOCH;
    for input in inputs {
        newest_input = newest_input.max(newest(input)?);
    }
    if built.is_none_or(|built| newest_input > built) {
        build(language, world, &source, &out)?;
    }
    Ok(out)
}

/// Runs `language`'s build of the plugin in `source` for `world` into `out`,
/// through a partial file so that `out` is whole or absent.
fn build(language: Language, world: World, source: &Path, out: &Path) -> std::io::Result<()> {
    let partial = out.with_extension("wasm.partial");
    let status = Command::new(language.sdk().join("build"))
        .args(["--world", world.name()])
        .arg(source)
        .arg(&partial)
        .status()?;
    if !status.success() {
        return Err(std::io::Error::other(format!(
            "building {} failed: {status}",
            source.display()
        )));
    }
    std::fs::rename(&partial, out)
}

/// The newest modification time of a file, or of the files under a directory
/// (a build's bytecode caches aside).
fn newest(path: &Path) -> std::io::Result<SystemTime> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_dir() {
        return meta.modified();
    }
    let mut newest = SystemTime::UNIX_EPOCH;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?.path();
        if entry.file_name().is_some_and(|name| name != "__pycache__") {
            newest = newest.max(self::newest(&entry)?);
        }
    }
    Ok(newest)
}
