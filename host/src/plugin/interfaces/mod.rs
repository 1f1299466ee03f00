//! The host side of the plugin contract: one module per interface a plugin
//! imports, each owning its part of the store's data and its linker setup.
//!
//! | module   | interfaces                                 | its part of the store                     |
//! | -------- | ------------------------------------------ | ----------------------------------------- |
//! | `cache`  | `types`, `cache`                           | the caches, the read grant, query limits  |
//! | `log`    | `log`, and WASI's stdout and stderr        | the plugin's rate-limited log             |
//! | `writes` | `cluster`                                  | the writer                                |
//! | `reads`  | `api`                                      | the writer, for uncached reads            |
//! | `deltas` | `deltas` (0.2.0)                           | the old objects of the batch being handled |
//! | `wasi`   | `wasi:cli`, `wasi:clocks`, `wasi:io`, ...  | the WASI context and the resource table   |
//! | `http`   | `wasi:http`, linked only when granted      | the outbound client and its allow-list    |
//!
//! What every interface may need of the call being made (its deadline, and
//! the inputs it shares with a shadow) is the store's [`Call`]; a host
//! function gets a [`View`] of its own interface's state and the call, and
//! nothing else. The memory budget (`limiter`) and the CPU share (`budget`)
//! are the store's too: they bound every interface alike.
//!
//! Every argument comes from untrusted guest code: lengths, keys, selectors
//! and index names are validated and bounded, and a bad one is an error
//! value for the plugin, never a host panic.

pub(super) mod cache;
pub(super) mod deltas;
pub(super) mod http;
pub(crate) mod log;
pub(super) mod reads;
pub(super) mod wasi;
pub(super) mod writes;

use std::marker::PhantomData;
use std::time::Duration;

use wasmtime::component::HasData;

use super::PluginOptions;
use super::budget::CpuBudget;
use super::deadline::DeadlineCredit;
use super::inputs::{Answer, SharedInputs};
use super::limiter::Limiter;
use super::v0_1::kinformer::plugin::types;
use crate::caches::Caches;

/// The data of one plugin's store.
pub(crate) struct HostState {
    /// The call being made.
    pub(crate) call: Call,
    /// The plugin's share of CPU.
    pub(crate) budget: CpuBudget,
    /// Its memory, against `limits.memory-mib`.
    pub(crate) limiter: Limiter,
    pub(crate) log: log::PluginLog,
    pub(crate) deltas: deltas::Deltas,
    cache: cache::Cache,
    writes: writes::Writes,
    reads: reads::Reads,
    wasi: wasi::Wasi,
    http: http::Http,
}

impl HostState {
    pub(crate) fn new(name: String, caches: Caches, options: PluginOptions) -> Self {
        let PluginOptions {
            limits,
            grant,
            log_sink,
            writer,
            outbound,
            env,
        } = options;
        let log = log::PluginLog::new(&name, limits.log_lines_per_second, log_sink);
        Self {
            call: Call {
                deadline: DeadlineCredit::default(),
                inputs: None,
                call_timeout: limits.call_timeout,
            },
            budget: CpuBudget::new(limits.cpu_millicores),
            limiter: Limiter::new(limits.memory_bytes),
            wasi: wasi::Wasi::new(&log, &env),
            log,
            deltas: deltas::Deltas::default(),
            writes: writes::Writes::new(writer.clone()),
            reads: reads::Reads::new(writer),
            http: http::Http::new(&name, outbound, &limits),
            cache: cache::Cache::new(name, caches, grant, &limits),
        }
    }

    /// True when the plugin's manifest grants outbound HTTP.
    pub(crate) fn http_granted(&self) -> bool {
        self.http.granted()
    }

    /// After every host call: when it may have made resources, measures
    /// them against the memory budget; over it, the call traps.
    pub(crate) fn after_host_call(&mut self) -> wasmtime::Result<()> {
        match self.wasi.touched_table() {
            Some(table) => self.limiter.measure(table),
            None => Ok(()),
        }
    }
}

/// The host's group-version-kind of the contract's.
pub(crate) fn from_wit_gvk(gvk: types::GroupVersionKind) -> kube::api::GroupVersionKind {
    kube::api::GroupVersionKind {
        group: gvk.group,
        version: gvk.version,
        kind: gvk.kind,
    }
}

/// The call being made, as every interface may need it.
#[derive(Debug)]
pub(crate) struct Call {
    /// Its deadline, with the time it waited given back.
    pub(crate) deadline: DeadlineCredit,
    /// Its inputs, when they are shared with a shadow.
    pub(crate) inputs: Option<SharedInputs>,
    /// The longest a shadow waits for the running version's answer.
    call_timeout: Duration,
}

/// What a host function is called on: its interface's part of the store,
/// and the call being made.
pub(crate) struct View<'a, S> {
    pub(crate) state: &'a mut S,
    pub(crate) call: &'a mut Call,
}

/// The [`HasData`] that hands an interface's host functions a [`View`] of
/// `S`: what its `add_to_linker` is instantiated with.
pub(crate) struct Viewed<S>(PhantomData<fn() -> S>);

impl<S: 'static> HasData for Viewed<S> {
    type Data<'a> = View<'a, S>;
}

impl<S> View<'_, S> {
    /// Answers a host call that reads: as `read` does, unless the call's
    /// inputs are shared with a shadow ([`SharedInputs`]): then the running
    /// version records the answer, and the shadow is answered the running
    /// version's for the same query (the wait is given back to its deadline).
    pub(crate) fn shared<T: Clone>(
        &mut self,
        query: String,
        wrap: fn(T) -> Answer,
        unwrap: fn(Answer) -> Option<T>,
        read: impl FnOnce(&mut Self) -> T,
    ) -> T {
        match self.call.inputs.clone() {
            None => read(self),
            Some(SharedInputs::Record(call)) => {
                let answer = read(self);
                call.record(query, wrap(answer.clone()));
                answer
            }
            Some(SharedInputs::Replay(call)) => {
                let started = std::time::Instant::now();
                let found = call.answer(&query, self.call.call_timeout);
                self.call.deadline.waited(started.elapsed());
                found.and_then(unwrap).unwrap_or_else(|| read(self))
            }
        }
    }

    /// Runs `wait`, a call that blocks on the API server, giving the time
    /// it took back to the call's deadline.
    pub(crate) fn blocked<T>(&mut self, wait: impl FnOnce(&S) -> T) -> T {
        let started = std::time::Instant::now();
        let result = wait(self.state);
        self.call.deadline.waited(started.elapsed());
        result
    }
}
