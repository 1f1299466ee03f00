//! Why the runtime could not start ([`Error`]), and why one version of a
//! plugin could not load ([`LoadError`]).
//!
//! The two are apart because they end differently: a start-up error is
//! returned to the embedder and nothing runs; a load error is reported once,
//! in the log and the plugin's status, and every other plugin (and a running
//! version of the same plugin) goes on.

use std::path::PathBuf;
use std::time::Duration;

use super::env::EnvError;
use super::prepare::PrepareError;

/// Why the runtime could not start, or refused an embedder's plugin: what
/// [`Runtime::start`](super::Runtime::start) and its siblings return. A
/// plugin that fails to load is not one: it shows as
/// [`PluginState::Failed`](super::PluginState::Failed) in the status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The plugin directory could not be read or watched.
    #[error("{path}: cannot read the plugin directory")]
    Directory {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The status endpoint's address could not be bound.
    #[error("cannot serve the status at {address}")]
    Status {
        /// The address.
        address: std::net::SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The leader election settings cannot work.
    #[error("leader election: {0}")]
    LeaderElection(#[from] crate::leader::ConfigError),
    /// The engine could not be set up with the runtime's
    /// [`EngineOptions`](crate::plugin::EngineOptions).
    #[error(transparent)]
    Engine(crate::plugin::Error),
    /// An embedder's plugin was compiled by another engine than the
    /// runtime's ([`Runtime::engine`](super::Runtime::engine)).
    #[error("{plugin}: the component was compiled by another engine than the runtime's")]
    ForeignComponent {
        /// The plugin's name.
        plugin: String,
    },
}

/// Why one version of a plugin could not load. The supervisor reports it
/// once, in the log and the plugin's status; a running version of the plugin
/// keeps serving, and the version is not tried again until it changes.
#[derive(Debug, thiserror::Error)]
pub(crate) enum LoadError {
    /// The plugin file is not a regular file, or too large.
    #[error("{path}: cannot read the plugin")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::file::FileError,
    },
    /// The plugin's manifest is broken.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::Error),
    /// The plugin file is not a component the engine can compile.
    #[error(transparent)]
    Compile(crate::plugin::Error),
    /// The component could not be instantiated, or its `init` failed.
    #[error(transparent)]
    Init(crate::plugin::Error),
    /// What the plugin registered cannot be served: over its limits, an
    /// index it cannot have, a primary resource it is not granted.
    #[error("{plugin}: {source}")]
    Registration {
        /// The plugin's name.
        plugin: String,
        /// What is wrong.
        #[source]
        source: PrepareError,
    },
    /// An informer the plugin needs could not start.
    #[error("{plugin}: {source}")]
    Informer {
        /// The plugin's name.
        plugin: String,
        /// Why.
        #[source]
        source: Box<crate::informer::Error>,
    },
    /// A variable of its `[env]` could not be read from the cluster.
    #[error("{plugin}: {source}")]
    Env {
        /// The plugin's name.
        plugin: String,
        /// Which, and why.
        #[source]
        source: Box<EnvError>,
    },
    /// A step of loading the plugin took longer than its limit.
    #[error("{plugin}: {step} took longer than {} ms ({key}){detail}", limit.as_millis())]
    Timeout {
        /// The plugin's name.
        plugin: String,
        /// `compiling the plugin file`, `syncing its caches`.
        step: &'static str,
        /// The limit.
        limit: Duration,
        /// The manifest key of the limit.
        key: &'static str,
        /// What is known of why, starting with `: `; empty when nothing is.
        detail: String,
    },
    /// The thread pool the workers run on could not be started.
    #[error("{plugin}: cannot start the plugins' worker threads")]
    Thread {
        /// The plugin's name.
        plugin: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// An error as the log and the status show it: on one line, its plugin-chosen
/// parts (messages, backtrace names) sanitised and its length capped.
pub(crate) fn error_text(error: &(dyn std::error::Error + 'static)) -> String {
    crate::text::sanitize(&crate::one_line(error), crate::text::MAX_ERROR_LEN)
}
