//! The WASI a plugin gets: clocks and random, the environment its manifest
//! gives, no files or sockets, stdout and stderr into its log — and no way to
//! block past its call's deadline. Its resource table (streams, pollables,
//! and `wasi:http`'s requests and responses) is measured against the memory
//! budget after each host call that was handed it.
//!
//! The epoch deadline stops a plugin only while it runs Wasm code; a plugin
//! blocked in a host call (a `std::thread::sleep`, which is a clock pollable
//! and a `poll`) would never be interrupted. Every way to block in WASI goes
//! through `wasi:io/poll`'s `poll` and `pollable.block`; these are replaced by
//! versions that wait at most for what is left of the call's time and then
//! trap, as a loop past its deadline does.

use std::time::Duration;

use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_io::bindings::wasi::io::poll::{Host as _, HostPollable as _};

use super::HostState;
use super::log::PluginLog;
use crate::plugin::limiter::MAX_RESOURCES;

/// The `wasi:io/poll` instance, at the version the linker defines.
const POLL: &str = "wasi:io/poll@0.2.12";

/// A plugin's WASI context and the resource table WASI and `wasi:http` share.
pub(crate) struct Wasi {
    ctx: WasiCtx,
    table: ResourceTable,
    /// Set when a host function was handed the table: what it holds is
    /// measured when the call returns.
    touched: bool,
}

impl Wasi {
    /// Clocks and random, the environment `env`; no files or sockets; what
    /// the plugin prints goes to `log`.
    pub(crate) fn new(log: &PluginLog, env: &[(String, String)]) -> Self {
        let ctx = WasiCtxBuilder::new()
            .stdout(log.output(tracing::Level::INFO))
            .stderr(log.output(tracing::Level::WARN))
            .envs(env)
            .build();
        let mut table = ResourceTable::new();
        table.set_max_capacity(MAX_RESOURCES);
        Self {
            ctx,
            table,
            touched: false,
        }
    }

    /// The resource table, for a host function that may add to it.
    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        self.touched = true;
        &mut self.table
    }

    /// The table, when a host function was handed it since last asked.
    pub(crate) fn touched_table(&mut self) -> Option<&mut ResourceTable> {
        std::mem::take(&mut self.touched).then_some(&mut self.table)
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        self.wasi.touched = true;
        WasiCtxView {
            ctx: &mut self.wasi.ctx,
            table: &mut self.wasi.table,
        }
    }
}

/// Adds WASI to the linker, its blocking functions bounded by the call's
/// deadline.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_sync(linker)?;
    bound_blocking(linker)
}

/// Replaces the blocking `wasi:io/poll` functions already in `linker`.
///
/// # Errors
///
/// When the linker has no such functions to replace.
fn bound_blocking(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(POLL)?;
    poll.func_wrap(
        "poll",
        |mut store: wasmtime::StoreContextMut<'_, HostState>, (pollables,): (Vec<Resource<DynPollable>>,)| {
            let state = store.data_mut();
            let left = state.call.deadline.remaining();
            let ready = within(left, state.wasi.table().poll(pollables))?;
            Ok((ready?,))
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store: wasmtime::StoreContextMut<'_, HostState>, (pollable,): (Resource<DynPollable>,)| {
            let state = store.data_mut();
            let left = state.call.deadline.remaining();
            within(left, state.wasi.table().block(pollable))??;
            Ok(())
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Runs `future` for at most `left`; past it, the call traps. A wait that
/// blocks (a sleep, an HTTP response not yet in) first gives the plugins' pool
/// notice, so the other plugins go on on another thread meanwhile.
fn within<T>(left: Duration, future: impl std::future::Future<Output = T>) -> wasmtime::Result<T> {
    wasmtime_wasi::runtime::in_tokio(async {
        let mut waiting = std::pin::pin!(tokio::time::timeout(left, future));
        if let std::task::Poll::Ready(done) = futures::poll!(waiting.as_mut()) {
            return done;
        }
        crate::runtime::pool::leave();
        waiting.await
    })
    .map_err(|_| wasmtime::format_err!("blocked in a WASI call past the call's deadline"))
}
