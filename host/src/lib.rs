//! kinformer: Kubernetes shared informers that deliver every delta to sandboxed
//! WebAssembly plugins.
//!
//! The data path follows client-go's: a reflector lists and watches a resource,
//! its changes become [`delta::Delta`]s, the [`indexer`] caches the objects under
//! named indexes, and each delta is handed to the plugins that subscribed to it.
//! Plugins are WebAssembly components ([`plugin`]) implementing the
//! `kinformer:plugin` WIT world; they read the cache through host functions.

pub mod caches;
pub mod cluster;
pub mod delta;
pub mod file;
pub mod grant;
pub mod index;
pub mod indexer;
pub mod informer;
pub mod leader;
pub mod limits;
pub mod manifest;
pub mod object;
pub mod plugin;
pub mod processor;
pub mod rbac;
pub mod reflector;
pub mod registration;
pub mod runtime;
pub mod text;
pub mod workqueue;

/// Kubernetes label selectors.
pub use kinformer_selector as selector;

/// An error and its sources on one line: each source that its parent's message
/// does not already include, joined by `: `, with whitespace (wasmtime's
/// multi-line backtraces) collapsed.
#[must_use]
pub fn one_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !message.contains(&text) {
            message.push_str(": ");
            message.push_str(&text);
        }
        source = cause.source();
    }
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
