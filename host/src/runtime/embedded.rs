//! Plugins an embedder hands the runtime, beside (or instead of) a
//! directory's: a component's bytes, or a component already compiled, with
//! the manifest the operator would have written beside the file.

use std::path::PathBuf;

use super::directory::{Fingerprint, PluginFiles};
use crate::manifest::Manifest;
use crate::plugin::{PluginComponent, digest};

/// A plugin given to the runtime in code rather than as a file of the plugin
/// directory (see [`RuntimeConfig::plugin`](super::RuntimeConfig::plugin) and
/// [`Runtime::add_plugin`](super::Runtime::add_plugin)). It runs exactly as a
/// file of the directory with the same manifest would: the same grant, limits,
/// restarts, and hot swap when a next version of it is added.
///
/// # Examples
///
/// ```no_run
/// use kinformer::{EmbeddedPlugin, Manifest};
///
/// let bytes = std::fs::read("delta-logger.wasm").unwrap();
/// let plugin = EmbeddedPlugin::from_bytes("delta-logger", bytes).manifest(Manifest::default());
/// ```
#[derive(Debug, Clone)]
pub struct EmbeddedPlugin {
    name: String,
    source: Source,
    manifest: Manifest,
}

#[derive(Clone)]
enum Source {
    Bytes(Vec<u8>),
    Component(PluginComponent),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes(bytes) => write!(f, "Bytes({} bytes)", bytes.len()),
            Self::Component(component) => f.debug_tuple("Component").field(component).finish(),
        }
    }
}

impl EmbeddedPlugin {
    /// A plugin from a component's bytes (a `.wasm` file's content), compiled
    /// by the runtime when it loads, with the default manifest.
    #[must_use]
    pub fn from_bytes(name: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            name: name.into(),
            source: Source::Bytes(bytes.into()),
            manifest: Manifest::default(),
        }
    }

    /// A plugin from a component compiled by the runtime's engine
    /// ([`Runtime::engine`](super::Runtime::engine)), named as the component
    /// is, with the default manifest.
    #[must_use]
    pub fn from_component(component: PluginComponent) -> Self {
        Self {
            name: component.name().to_owned(),
            source: Source::Component(component),
            manifest: Manifest::default(),
        }
    }

    /// Sets the manifest: what the plugin is granted, its limits and config.
    #[must_use]
    pub fn manifest(mut self, manifest: Manifest) -> Self {
        self.manifest = manifest;
        self
    }

    /// The plugin's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The compiled component, when it was given one.
    pub(super) fn component(&self) -> Option<&PluginComponent> {
        match &self.source {
            Source::Component(component) => Some(component),
            Source::Bytes(_) => None,
        }
    }

    /// The plugin as the supervisor takes a directory's: a version is its
    /// digest and its manifest.
    pub(super) fn files(&self) -> PluginFiles {
        let (bytes, digest, component) = match &self.source {
            Source::Bytes(bytes) => (bytes.clone(), digest(bytes), None),
            Source::Component(component) => (Vec::new(), component.digest().to_owned(), Some(component.clone())),
        };
        PluginFiles {
            file: PathBuf::from(format!("{}.wasm", self.name)),
            bytes: Ok(bytes),
            // A given manifest has no text: its parsed form stands for it.
            fingerprint: Fingerprint {
                digest,
                manifest: Some(format!("{:?}", self.manifest)),
                env: None,
            },
            manifest: Ok(self.manifest.clone()),
            stamp: None,
            component,
        }
    }
}
