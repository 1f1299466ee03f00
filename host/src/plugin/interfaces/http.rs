//! `wasi:http`: a plugin's outbound HTTP, each request checked against its
//! manifest's `[grant.http]` by [`Outbound`] (the checks in order are in
//! [`crate::outbound`]). A plugin granted no HTTP is linked with functions
//! that trap instead ([`sealed`]), so it makes no host-side HTTP state.

use wasmtime::Engine;
use wasmtime::component::{Component, Linker};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::HostState;
use crate::limits::Limits;
use crate::outbound::{AddressPolicy, HttpGrant, Outbound};

/// The version of `wasi:http` the linker defines (wasmtime-wasi-http's).
const HTTP_VERSION: &str = "0.2.12";
/// The most bytes one set of header fields a plugin builds may hold.
const FIELDS_BYTES: usize = 64 * 1024;

/// A plugin's outbound HTTP: where its requests go, and `wasi:http`'s context.
pub(crate) struct Http {
    ctx: WasiHttpCtx,
    outbound: Outbound,
}

impl Http {
    /// Requests go through `outbound`; without one, every request is
    /// answered `HTTP-request-denied`.
    pub(crate) fn new(name: &str, outbound: Option<Outbound>, limits: &Limits) -> Self {
        let outbound = outbound
            .unwrap_or_else(|| Outbound::new(name, HttpGrant::default(), AddressPolicy::default(), limits, None));
        let mut ctx = WasiHttpCtx::new();
        // Header fields a plugin builds stay well inside its budget, one by one.
        ctx.set_field_size_limit(FIELDS_BYTES);
        Self { ctx, outbound }
    }

    /// True when the plugin's manifest grants outbound HTTP.
    pub(crate) fn granted(&self) -> bool {
        self.outbound.is_granted()
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        // A request sent now may not outlast the call it is sent in.
        (self.http.outbound).set_call(self.call.deadline.remaining(), self.call.inputs.as_ref());
        WasiHttpCtxView {
            hooks: &mut self.http.outbound,
            table: self.wasi.table(),
            ctx: &mut self.http.ctx,
        }
    }
}

/// Adds `wasi:http` to the linker, for the plugins granted HTTP; see
/// [`sealed`] for the others.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_sync(linker)
}

/// `linker` with every `wasi:http` function `component` imports trapping:
/// how a plugin whose manifest grants no HTTP is linked. A component may
/// import `wasi:http` without using it (every JavaScript component does), so
/// the imports are there; none of them does anything, so no plugin makes
/// host-side HTTP state it was not granted.
pub(crate) fn sealed(
    linker: &Linker<HostState>,
    component: &Component,
    engine: &Engine,
) -> wasmtime::Result<Linker<HostState>> {
    use wasmtime::component::types::ComponentItem;
    let mut sealed = linker.clone();
    sealed.allow_shadowing(true);
    for (name, item) in component.component_type().imports(engine) {
        let ComponentItem::ComponentInstance(instance) = item.ty else {
            continue;
        };
        let Some(interface) = name.strip_prefix("wasi:http/") else {
            continue;
        };
        // The linker's own instance, which answers this import by semver.
        let interface = interface.split('@').next().unwrap_or(interface);
        let mut linked = sealed.instance(&format!("wasi:http/{interface}@{HTTP_VERSION}"))?;
        for (function, item) in instance.exports(engine) {
            if let ComponentItem::ComponentFunc(_) = item.ty {
                let said = format!("{name}#{function}");
                linked.func_new(function, move |_, _, _, _| {
                    Err(wasmtime::format_err!(
                        "{said}: outbound HTTP is not granted to this plugin ([grant.http] in its manifest)"
                    ))
                })?;
            }
        }
    }
    sealed.allow_shadowing(false);
    Ok(sealed)
}
