//! The end-to-end tests, one module per area, in one test binary: the host,
//! the example plugins as real components, the API server emulation and the
//! CLI's library linked once.

mod controller;
mod docs;
mod guest_controllers;
mod guest_http;
mod guests;
mod handlers;
mod hpa;
mod informers;
mod metrics;
mod monitoring;
mod namespaces;
mod outbound;
mod page;
mod plugins;
mod pulls;
mod reload;
mod replay;
mod rollout;
mod runtime;
mod sandbox;
mod scaffold;
mod settings;
mod tenants;
mod writes;
