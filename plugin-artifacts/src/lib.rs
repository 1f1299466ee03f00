//! The example plugins of `plugins/`, built as `wasm32-wasip2` components.
//!
//! The build script compiles every crate under `plugins/`; this crate exposes each
//! component's bytes and path, for the demo and the tests.

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
