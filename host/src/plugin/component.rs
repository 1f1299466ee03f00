//! A compiled and linked plugin component, from which instances are made.

use wasmtime::{Store, StoreLimits, StoreLimitsBuilder, UpdateDeadline};

use super::engine::{EPOCH_TICK, ticks};
use super::host::HostState;
use super::instance::Exports;
use super::instance::LiveInstance;
use super::log::PluginLog;
use super::{Error, PluginEngine, PluginInstance, PluginOptions, Result, bindings, controller_bindings};
use crate::caches::Caches;

/// A compiled and linked plugin, ready to instantiate any number of times.
#[derive(Clone)]
pub struct PluginComponent {
    pub(super) name: String,
    pub(super) digest: String,
    pub(super) engine: PluginEngine,
    pub(super) pre: Pre,
}

/// A component pre-instantiated for the world it implements.
#[derive(Clone)]
pub(super) enum Pre {
    /// `plugin` or `writer`: `init` and `handle`.
    Handler(bindings::WriterPre<HostState>),
    /// `controller`: `init` and `reconcile`.
    Controller(controller_bindings::ControllerPre<HostState>),
}

impl std::fmt::Debug for PluginComponent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginComponent")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

impl PluginComponent {
    /// The plugin's name (from its file name).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The SHA-256 digest of the component's bytes, in hex.
    #[must_use]
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// True for a controller (the `controller` world).
    #[must_use]
    pub fn is_controller(&self) -> bool {
        matches!(self.pre, Pre::Controller(_))
    }

    /// Creates a fresh instance in its own store, reading from `caches`.
    ///
    /// # Errors
    ///
    /// [`Error::Trap`] when the component's start-up code traps or breaks a
    /// limit, [`Error::Instances`] when the plugin has `max-instances` alive.
    pub fn instantiate(&self, caches: Caches, options: PluginOptions) -> Result<PluginInstance> {
        let limit = options.limits.max_instances;
        let live = LiveInstance::new(
            &self.engine.live_instances,
            self.engine.plugin_instances(&self.name),
            limit,
        )
        .ok_or_else(|| Error::Instances {
            plugin: self.name.clone(),
            limit,
        })?;
        let store_limits: StoreLimits = StoreLimitsBuilder::new()
            .memory_size(options.limits.memory_bytes)
            .instances(16)
            .tables(16)
            .memories(4)
            .trap_on_grow_failure(true)
            .build();
        let log = PluginLog::new(&self.name, options.limits.log_lines_per_second, options.log_sink);
        let state = HostState::new(
            self.name.clone(),
            caches,
            options.grant,
            options.limits,
            log,
            options.writer,
            store_limits,
        );
        let mut store = Store::new(&self.engine.engine, state);
        store.limiter(|state| &mut state.store_limits);
        let deadline_ticks = ticks(options.limits.call_timeout);
        store.set_epoch_deadline(deadline_ticks);
        // At the deadline, the time the call spent waiting in the host (for
        // the API server) is given back; with none left, the call is over.
        store.epoch_deadline_callback(|mut store| {
            Ok(match store.data_mut().deadline.take_ticks(EPOCH_TICK) {
                0 => UpdateDeadline::Interrupt,
                credit => UpdateDeadline::Continue(credit),
            })
        });
        let plugin = match &self.pre {
            Pre::Handler(pre) => pre.instantiate(&mut store).map(Exports::Handler),
            Pre::Controller(pre) => pre.instantiate(&mut store).map(Exports::Controller),
        }
        .map_err(|source| Error::Trap {
            plugin: self.name.clone(),
            call: "instantiate",
            source,
        })?;
        Ok(PluginInstance {
            name: self.name.clone(),
            _live: live,
            store,
            plugin,
            deadline_ticks,
            poisoned: false,
        })
    }
}
