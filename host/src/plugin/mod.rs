//! Plugin components: compiling, instantiating and calling them.
//!
//! A [`PluginEngine`] compiles `.wasm` files into [`PluginComponent`]s; a
//! component is instantiated into a [`PluginInstance`] with its own wasmtime
//! `Store`, bound to the host's [`Caches`](crate::caches::Caches) for its `cache` imports and to a
//! [`crate::apiserver::Writer`] for its `cluster` imports: `interfaces` has
//! one module per interface a plugin imports, each with its part of the
//! store and its linker setup. The contract's bindings are named by version
//! (`v0_1`, `v0_2`); a component of either is served. The instance
//! runs `init` and `handle` under a time limit (epoch deadlines, not counting
//! the time spent waiting for the API server), a share of CPU (paused at an
//! epoch tick once its share of the window is spent, see `budget`) and a
//! memory limit (store limits). After each compile the allocator's free
//! memory is handed back (`memory`), or the compile runs in a short-lived
//! child process and leaves its memory there (`compile`).
//!
//! # Examples
//!
//! ```no_run
//! use kinformer::caches::Caches;
//! use kinformer::plugin::{PluginEngine, PluginOptions};
//!
//! let engine = PluginEngine::new()?;
//! let component = engine.load_file("plugins/delta-logger.wasm".as_ref())?;
//! let mut instance = component.instantiate(Caches::new(), PluginOptions::default())?;
//! let registration = instance.init("v1/Pod")?;
//! println!("{} watches {} resources", registration.name, registration.subscriptions.len());
//! # Ok::<(), kinformer::plugin::Error>(())
//! ```

mod budget;
mod compile;
mod component;
mod deadline;
mod engine;
mod epoch;
pub mod file;
mod inputs;
mod instance;
mod interfaces;
mod limiter;
mod memory;
pub mod registration;
pub mod text;
mod trap;

use std::path::{Path, PathBuf};

use crate::apiserver::Writer;
use crate::grant::Grant;
use crate::limits::Limits;
use crate::outbound::Outbound;

pub use compile::run_compile_process;
pub use component::PluginComponent;
pub use engine::{EngineOptions, PluginEngine};
pub(crate) use inputs::{Answer, http_query};
pub use inputs::{CallInputs, HttpAnswer, RecordedHttp, SharedInputs};
pub use instance::PluginInstance;
pub use interfaces::log::{LOG_TARGET, LogLine, LogSink};

/// The WIT world a plugin built with the SDKs implements, with its version.
/// A component of the `writer` world (the same, importing `cluster` too) is
/// one as well, and so are components of [`WORLD_0_1`].
pub const WORLD: &str = "kinformer:plugin/plugin@0.2.0";
/// The first version of the plugin world, whose batches carry every string of
/// every delta on its own. Its components are served as they are.
pub const WORLD_0_1: &str = "kinformer:plugin/plugin@0.1.0";
/// The WIT world a controller implements, with its version.
pub const CONTROLLER_WORLD: &str = "kinformer:plugin/controller@0.1.0";

/// Version 0.1.0 of the contract: the `writer` world (the `plugin` world's
/// exports, every host interface imported; the linker provides them all, so
/// components of the `plugin` world link too), and the `controller` world.
mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "writer",
    });

    /// The `controller` world, sharing the interfaces bound above.
    pub(crate) mod controller {
        wasmtime::component::bindgen!({
            path: "../wit",
            world: "controller",
            with: {
                "kinformer:plugin/types": super::kinformer::plugin::types,
                "kinformer:plugin/cache": super::kinformer::plugin::cache,
                "kinformer:plugin/log": super::kinformer::plugin::log,
                "kinformer:plugin/cluster": super::kinformer::plugin::cluster,
                "kinformer:plugin/api": super::kinformer::plugin::api,
            },
        });
    }
}

/// Version 0.2.0 of the contract: the `writer` world with the lean batch
/// layout and the `deltas` interface; the interfaces of 0.1.0 are shared.
mod v0_2 {
    wasmtime::component::bindgen!({
        path: ["../wit/kinformer.wit", "../wit/0.2.0/kinformer.wit"],
        world: "kinformer:plugin/writer@0.2.0",
        with: {
            "kinformer:plugin/types@0.1.0": super::v0_1::kinformer::plugin::types,
            "kinformer:plugin/cache@0.1.0": super::v0_1::kinformer::plugin::cache,
            "kinformer:plugin/log@0.1.0": super::v0_1::kinformer::plugin::log,
            "kinformer:plugin/cluster@0.1.0": super::v0_1::kinformer::plugin::cluster,
            "kinformer:plugin/api@0.1.0": super::v0_1::kinformer::plugin::api,
        },
    });
}

/// Why a plugin could not be loaded or called.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine could not be configured.
    #[error("failed to set up the wasm engine")]
    Engine(#[source] wasmtime::Error),
    /// The file is not a WebAssembly component (or could not be read).
    #[error("{path}: not a loadable WebAssembly component")]
    Compile {
        /// The plugin file.
        path: PathBuf,
        /// What wasmtime reported.
        #[source]
        source: wasmtime::Error,
    },
    /// The component implements neither the plugin world nor the controller world.
    #[error("{plugin}: the component implements none of {WORLD}, {WORLD_0_1} and {CONTROLLER_WORLD}")]
    Link {
        /// The plugin's name.
        plugin: String,
        /// What wasmtime reported: the missing import or export.
        #[source]
        source: wasmtime::Error,
    },
    /// The plugin trapped, ran over its deadline or hit its memory limit. Its
    /// instance must not be called again.
    #[error("{plugin}: trapped in {call}: {summary}")]
    Trap {
        /// The plugin's name.
        plugin: String,
        /// The export that trapped.
        call: &'static str,
        /// The plugin's own account of its failure, when it printed one (a
        /// Python exception, a Rust panic message), then why wasmtime
        /// stopped it: without the guest backtrace.
        summary: String,
        /// The trap as wasmtime reported it, guest backtrace included.
        trap: wasmtime::Error,
    },
    /// The plugin returned an error from `init` or `handle`.
    #[error("{plugin}: {call} returned an error: {message}")]
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// The export that failed.
        call: &'static str,
        /// The plugin's message.
        message: String,
    },
    /// The plugin has as many instances alive as its limit allows.
    #[error("{plugin}: {limit} instances alive already (limits.max-instances)")]
    Instances {
        /// The plugin's name.
        plugin: String,
        /// Its limit.
        limit: usize,
    },
    /// The instance trapped earlier and cannot be called any more.
    #[error("{0}: the instance is poisoned by an earlier trap")]
    Poisoned(String),
}

/// `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Limits and settings of one plugin instance.
#[derive(Clone, Default)]
pub struct PluginOptions {
    /// The call, memory, query and log limits.
    pub limits: Limits,
    /// What the plugin may read from the cache.
    pub grant: Grant,
    /// Where the plugin's log lines go, besides `tracing`.
    pub log_sink: Option<LogSink>,
    /// Where the plugin's writes go (the writer checks them against its own
    /// grant); `None` answers every write `denied`. Its calls block the
    /// thread that calls the plugin, so call a plugin with a writer from a
    /// thread that is not an async task (a worker thread, `spawn_blocking`).
    pub writer: Option<Writer>,
    /// Where the plugin's outbound HTTP goes through its allow-list and limits;
    /// `None` answers every request `HTTP-request-denied`.
    pub outbound: Option<Outbound>,
    /// The plugin's WASI environment variables (its `[env]`, resolved).
    pub env: Vec<(String, String)>,
}

impl std::fmt::Debug for PluginOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginOptions")
            .field("limits", &self.limits)
            .field("grant", &self.grant)
            .field("log_sink", &self.log_sink.is_some())
            .field("writer", &self.writer)
            .field("outbound", &self.outbound)
            .field("env", &self.env.iter().map(|(name, _)| name).collect::<Vec<_>>())
            .finish()
    }
}

impl PluginOptions {
    /// Options with these limits, the default grant and no sink.
    #[must_use]
    pub fn with_limits(limits: Limits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Sets [`Limits::call_timeout`].
    #[must_use]
    pub fn call_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.limits.call_timeout = timeout;
        self
    }

    /// Sets [`Limits::memory_bytes`].
    #[must_use]
    pub fn memory_bytes(mut self, bytes: usize) -> Self {
        self.limits.memory_bytes = bytes;
        self
    }

    /// Sets [`Limits::query_objects`] and [`Limits::query_bytes`].
    #[must_use]
    pub fn query_limits(mut self, objects: usize, bytes: usize) -> Self {
        self.limits.query_objects = objects;
        self.limits.query_bytes = bytes;
        self
    }

    /// Sets [`PluginOptions::grant`].
    #[must_use]
    pub fn grant(mut self, grant: Grant) -> Self {
        self.grant = grant;
        self
    }

    /// Sets [`PluginOptions::log_sink`].
    #[must_use]
    pub fn log_sink(mut self, sink: LogSink) -> Self {
        self.log_sink = Some(sink);
        self
    }

    /// Sets [`PluginOptions::writer`].
    #[must_use]
    pub fn writer(mut self, writer: Writer) -> Self {
        self.writer = Some(writer);
        self
    }

    /// Sets [`PluginOptions::outbound`].
    #[must_use]
    pub fn outbound(mut self, outbound: Outbound) -> Self {
        self.outbound = Some(outbound);
        self
    }

    /// Sets [`PluginOptions::env`].
    #[must_use]
    pub fn env(mut self, env: Vec<(String, String)>) -> Self {
        self.env = env;
        self
    }
}

/// A plugin's name: its file's stem (`shop-policy.wasm` → `shop-policy`).
#[must_use]
pub fn plugin_name(path: &Path) -> String {
    path.file_stem().map_or_else(
        || "plugin".into(),
        |stem| crate::text::sanitize(&stem.to_string_lossy(), 253),
    )
}

/// The SHA-256 digest of a plugin file, in hex.
#[must_use]
pub fn digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    use std::fmt::Write as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .fold(String::with_capacity(64), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}
