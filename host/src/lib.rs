//! kinformer: Kubernetes shared informers that deliver every delta to sandboxed
//! WebAssembly plugins.
//!
//! The data path follows client-go's: a reflector lists and watches a resource,
//! its changes become [`delta::Delta`]s, the [`indexer`] caches the objects under
//! named indexes, and each delta is handed to the plugins that subscribed to it.
//! Plugins are WebAssembly components ([`plugin`]) implementing the
//! `kinformer:plugin` WIT world; they read the cache through host functions,
//! and write to the cluster only as their [`Manifest`]'s grant allows.
//!
//! # Where to start
//!
//! - [`Runtime`] runs plugins: from a directory it follows for hot reload
//!   ([`RuntimeConfig::new`]), or given in code ([`EmbeddedPlugin`]), or both.
//!   It serves their status, metrics and probes, and takes part in leader
//!   election.
//! - [`SharedInformerFactory`] is the informers the plugins read from. Build
//!   one from your [`kube::Client`], watch through it yourself, and hand it to
//!   [`Runtime::start_with`]: your handlers and the plugins share each list and
//!   watch.
//! - [`Runtime::register_metrics`] adds the runtime's metrics to your
//!   [`prometheus_client`] registry.
//! - [`PluginEngine`] compiles and runs one plugin without a runtime, for
//!   tools and tests.
//!
//! The crate re-exports the libraries its API speaks in ([`kube`],
//! [`k8s_openapi`], [`wasmtime`], [`prometheus_client`], [`http`]), so an
//! embedder's versions match; `docs/embedding.md` says which versions those
//! are.
//!
//! # Examples
//!
//! A kube-rs program that runs one plugin beside its own handler, on one
//! shared watch (`examples/embed.rs` is the whole program):
//!
//! ```no_run
//! use kinformer::{EmbeddedPlugin, Runtime, RuntimeConfig, SharedInformerFactory};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = kinformer::kube::Client::try_default().await?;
//! let factory = SharedInformerFactory::new(client);
//! let plugin = EmbeddedPlugin::from_bytes("delta-logger", std::fs::read("delta-logger.wasm")?);
//! let runtime = Runtime::start_with(factory, RuntimeConfig::default().plugin(plugin)).await?;
//! let mut registry = kinformer::prometheus_client::registry::Registry::default();
//! runtime.register_metrics(&mut registry);
//! // ... serve the registry, run your own controller ...
//! runtime.shutdown().await;
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub use http;
pub use k8s_openapi;
pub use kube;
pub use prometheus_client;
pub use wasmtime;

pub use delta::Delta;
pub use grant::Grant;
pub use informer::{InformerKey, SharedIndexInformer, SharedInformerFactory};
pub use manifest::Manifest;
pub use plugin::{PluginComponent, PluginEngine};
pub use processor::ListenerOptions;
pub use runtime::{EmbeddedPlugin, Error, PluginState, PluginStatus, Runtime, RuntimeConfig};

/// The embedding guide (`docs/embedding.md`), whose Rust blocks are compiled
/// as this crate's doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/embedding.md")]
pub struct EmbeddingGuide;

pub mod apiserver;
pub mod grant;
pub mod handlers;
pub mod manifest;
pub mod outbound;
pub mod plugin;
pub mod rollout;
pub mod runtime;

pub use grant::rbac;
pub use manifest::limits;
pub use plugin::{file, registration, text};

/// The informers, client-go's `tools/cache` (the crate `kinformer-informers`).
pub use kinformer_informers as informers;
pub use kinformer_informers::{
    caches, delta, index, indexer, informer, leader, object, one_line, processor, rate, reflector, retry, scope,
    selector, workqueue,
};
