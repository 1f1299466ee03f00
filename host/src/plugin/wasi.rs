//! The WASI a plugin gets: clocks and random, no files, sockets or
//! environment, stdout and stderr into its log — and no way to block past its
//! call's deadline.
//!
//! The epoch deadline stops a plugin only while it runs Wasm code; a plugin
//! blocked in a host call (a `std::thread::sleep`, which is a clock pollable
//! and a `poll`) would never be interrupted. Every way to block in WASI goes
//! through `wasi:io/poll`'s `poll` and `pollable.block`; these are replaced by
//! versions that wait at most for what is left of the call's time and then
//! trap, as a loop past its deadline does.

use std::time::Duration;

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::p2::DynPollable;
use wasmtime_wasi_io::bindings::wasi::io::poll::{Host as _, HostPollable as _};

use super::host::HostState;

/// The `wasi:io/poll` instance, at the version the linker defines.
const POLL: &str = "wasi:io/poll@0.2.12";
/// The version of `wasi:http` the linker defines (wasmtime-wasi-http's).
pub(super) const HTTP_VERSION: &str = "0.2.12";

/// Replaces the blocking `wasi:io/poll` functions already in `linker`.
///
/// # Errors
///
/// When the linker has no such functions to replace.
pub(super) fn bound_blocking(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(POLL)?;
    poll.func_wrap(
        "poll",
        |mut store: wasmtime::StoreContextMut<'_, HostState>, (pollables,): (Vec<Resource<DynPollable>>,)| {
            let state = store.data_mut();
            let left = state.deadline.remaining();
            let ready = within(left, state.table().poll(pollables))?;
            Ok((ready?,))
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store: wasmtime::StoreContextMut<'_, HostState>, (pollable,): (Resource<DynPollable>,)| {
            let state = store.data_mut();
            let left = state.deadline.remaining();
            within(left, state.table().block(pollable))??;
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
