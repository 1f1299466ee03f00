//! A compiled and linked plugin component, from which instances are made.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::InstancePre;
use wasmtime::{CallHook, Store, UpdateDeadline};

use super::epoch::{EpochClock, Running};
use super::instance::LiveInstance;
use super::instance::{Exports, Handler};
use super::interfaces::HostState;
use super::v0_1::controller;
use super::{Error, PluginEngine, PluginInstance, PluginOptions, Result};
use crate::caches::Caches;

/// A compiled and linked plugin, ready to instantiate any number of times.
#[derive(Clone)]
pub struct PluginComponent {
    pub(super) name: String,
    pub(super) digest: String,
    pub(super) engine: PluginEngine,
    pub(super) linked: Arc<Linked>,
}

/// A component linked twice: with `wasi:http`, for a plugin granted HTTP,
/// and with `wasi:http`'s functions trapping, for the others.
pub(super) struct Linked {
    pub(super) granted: Pre,
    pub(super) sealed: Pre,
}

/// A component pre-instantiated for the world it implements.
#[derive(Clone)]
pub(super) enum Pre {
    /// `plugin` or `writer`: `init` and `handle`, taking batches in `Layout`.
    Handler(InstancePre<HostState>, Layout),
    /// `controller`: `init` and `reconcile`.
    Controller(controller::ControllerPre<HostState>),
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
        matches!(self.linked.granted, Pre::Controller(_))
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
        let call_timeout = options.limits.call_timeout;
        let state = HostState::new(self.name.clone(), caches, options);
        let pre = if state.http_granted() {
            &self.linked.granted
        } else {
            &self.linked.sealed
        };
        let mut store = Store::new(&self.engine.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.epoch_deadline_callback(at_epoch_tick);
        store.call_hook(|mut store, hook| match hook {
            CallHook::ReturningFromHost => store.data_mut().after_host_call(),
            _ => Ok(()),
        });
        let clock = self.engine.ticker.clock().clone();
        let running = start_call(&mut store, &clock, call_timeout);
        let plugin = match pre {
            Pre::Handler(pre, layout) => Handler::instantiate(&mut store, pre, *layout).map(Exports::Handler),
            Pre::Controller(pre) => pre.instantiate(&mut store).map(Exports::Controller),
        }
        .map_err(|source| {
            let stderr = store.data().log.stderr_tail();
            super::trap::trap(&self.name, "instantiate", source, &stderr)
        })?;
        drop(running);
        Ok(PluginInstance {
            name: self.name.clone(),
            _live: live,
            store,
            plugin,
            call_timeout,
            clock,
            poisoned: false,
        })
    }
}

/// How a plugin's `handle` takes its batch: the world version it was built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// 0.1.0: a list of delta records.
    Records,
    /// 0.2.0: the type once, the texts end to end, old objects on demand.
    Lean,
}

/// Starts a call (or the component's start-up) of at most `timeout`, looked
/// at by [`at_epoch_tick`] from the next tick on: the engine's ticker stays
/// awake until the returned guard is dropped, when the call ends.
pub(super) fn start_call<'c>(
    store: &mut Store<HostState>,
    clock: &'c EpochClock,
    timeout: std::time::Duration,
) -> Running<'c> {
    let running = clock.enter();
    store.data_mut().call.deadline.start_call(timeout);
    store.set_epoch_deadline(1);
    running
}

/// At every epoch tick while the plugin runs: pauses it if its CPU share is
/// spent (the pause is given back to the call), and interrupts the call once
/// its time is up.
fn at_epoch_tick(mut store: wasmtime::StoreContextMut<'_, HostState>) -> wasmtime::Result<UpdateDeadline> {
    let state = store.data_mut();
    if let Some(pause) = state.budget.tick(Instant::now(), thread_cpu_time()) {
        state.budget.sit_out(pause, thread_cpu_time);
        state.call.deadline.waited(pause);
    }
    Ok(if state.call.deadline.remaining().is_zero() {
        UpdateDeadline::Interrupt
    } else {
        UpdateDeadline::Continue(1)
    })
}

/// The CPU time the calling thread has run.
pub(super) fn thread_cpu_time() -> std::time::Duration {
    let time = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    std::time::Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}
