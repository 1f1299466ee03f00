//! The plugin directory: which files are plugins, what one plugin's files hold
//! (read once: bytes, digest, manifest), and the debounced watch that triggers
//! a rescan after each burst of changes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::Error;
use crate::file::{FileError, read_regular};
use crate::limits::Limits;
use crate::manifest::{self, Manifest};
use crate::plugin::{PluginComponent, digest, plugin_name};

/// What identifies a version of a plugin in the directory: the digest of its
/// file, the text of its manifest, and what its `[env]` takes from Secrets
/// and ConfigMaps. A version is tried once; it is not tried again until the
/// directory (or a value its `[env]` takes from the cluster) holds another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fingerprint {
    /// The SHA-256 digest of the `.wasm` file, in hex.
    pub(super) digest: String,
    /// The manifest's text, `None` without one.
    pub(super) manifest: Option<String>,
    /// A digest of the values (or failures) its `[env]` takes from the
    /// cluster, `None` when its
    /// manifest takes none from the cluster.
    pub(super) env: Option<String>,
}

/// What the directory holds for one plugin, read once per scan.
pub(super) struct PluginFiles {
    /// The `.wasm` file.
    pub(super) file: PathBuf,
    /// Its bytes, or why they were not read (not a regular file, over the
    /// manifest's `module-mib`).
    pub(super) bytes: Result<Vec<u8>, FileError>,
    /// Its identity.
    pub(super) fingerprint: Fingerprint,
    /// Its manifest, parsed (the defaults without one).
    pub(super) manifest: Result<Manifest, manifest::Error>,
    /// Its size and modification time when read; `None` for an embedder's
    /// plugin.
    pub(super) stamp: Option<Stamp>,
    /// The compiled component, when an embedder gave one.
    pub(super) component: Option<PluginComponent>,
}

/// A file's size and modification time: a file whose stamp moved while it was
/// read is still being written.
pub(super) type Stamp = (u64, SystemTime);

/// The size and modification time of `path`, if it can be read.
pub(super) fn stamp(path: &Path) -> Option<Stamp> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.len(), metadata.modified().ok()?))
}

/// The plugin files of `dir`: `*.wasm`, sorted, without hidden and temporary
/// files (editors' and `kubectl cp`'s scratch files, ConfigMap mounts' `..data`).
///
/// # Errors
///
/// When the directory cannot be read.
pub fn plugin_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Directory {
        path: dir.to_owned(),
        source,
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "wasm"))
        .filter(|path| {
            let name = path.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
            !name.starts_with('.') && !name.starts_with('#') && !name.starts_with('~')
        })
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// The plugins of a directory, as one scan read them.
#[derive(Default)]
pub(super) struct Scanned {
    /// Every plugin read whole, by name.
    pub(super) plugins: BTreeMap<String, PluginFiles>,
    /// Plugins whose file vanished or changed while it was read (a file
    /// replaced by a rename, as `kubectl cp` and ConfigMap mounts do): left
    /// for the next scan, and not gone.
    pub(super) changing: BTreeSet<String>,
}

/// Reads every plugin of `dir`, by name; a file that vanished or changed while
/// being read is left for the next scan.
///
/// # Errors
///
/// When the directory cannot be read.
pub(super) fn scan(dir: &Path) -> Result<Scanned, Error> {
    let mut scanned = Scanned::default();
    let plugins = &mut scanned.plugins;
    for file in plugin_files(dir)? {
        let before = stamp(&file);
        let manifest_path = Manifest::path_for(&file);
        let (text, manifest) = match Manifest::read(&manifest_path) {
            Ok(Some(text)) => {
                let manifest = Manifest::parse(&manifest_path, &text);
                (Some(text), manifest)
            }
            Ok(None) => (None, Ok(Manifest::default())),
            Err(error) => (Some(format!("unreadable: {error}")), Err(error)),
        };
        // The manifest's limit, or the default one when it is broken (the
        // plugin is refused for its manifest anyway).
        let limit = manifest
            .as_ref()
            .map_or(Limits::default().module_bytes, |manifest| manifest.limits.module_bytes);
        let bytes = match read_regular(&file, limit) {
            Ok(bytes) => Ok(bytes),
            Err(error) if error.is_not_found() => {
                scanned.changing.insert(plugin_name(&file));
                continue;
            }
            Err(error) => Err(error),
        };
        let after = stamp(&file);
        if before != after {
            scanned.changing.insert(plugin_name(&file));
            continue;
        }
        let digest = match &bytes {
            Ok(bytes) => digest(bytes),
            // Not read: the file's size and time stand for its content.
            Err(_) => format!("unread-{after:?}"),
        };
        plugins.insert(
            plugin_name(&file),
            PluginFiles {
                file,
                bytes,
                fingerprint: Fingerprint {
                    digest,
                    manifest: text,
                    env: None,
                },
                manifest,
                stamp: after,
                component: None,
            },
        );
    }
    Ok(scanned)
}

/// Watches `dir` and calls `rescan` after each burst of changes: once the
/// directory was quiet for `quiet`, or at the latest `max_wait` after the first
/// change, so a file written continuously cannot starve reloading. The watch
/// ends when `rescan` returns false or the task is aborted.
///
/// # Errors
///
/// When the directory cannot be watched.
pub(super) fn watch<F, Fut>(
    dir: &Path,
    quiet: Duration,
    max_wait: Duration,
    mut rescan: F,
) -> Result<tokio::task::JoinHandle<()>, Error>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    use notify::Watcher as _;
    let (changed, mut changes) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // Any change in the directory, hidden entries included (a ConfigMap
        // mount swaps its `..data` link), leads to a scan; the scan decides.
        if event.is_ok() {
            let _ = changed.send(());
        }
    })
    .and_then(|mut watcher| {
        watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
        Ok(watcher)
    })
    .map_err(|error| Error::Directory {
        path: dir.to_owned(),
        source: std::io::Error::other(error),
    })?;
    Ok(tokio::spawn(async move {
        // The watch lasts as long as this task.
        let _watcher = watcher;
        while changes.recv().await.is_some() {
            let first = tokio::time::Instant::now();
            loop {
                let left = max_wait.saturating_sub(first.elapsed());
                if left.is_zero() {
                    break;
                }
                match tokio::time::timeout(quiet.min(left), changes.recv()).await {
                    Ok(Some(())) => {}
                    Ok(None) => return,
                    Err(_) => break,
                }
            }
            if !rescan().await {
                return;
            }
        }
    }))
}
