//! The example plugins of `plugins/` and the test plugins of `test-plugins/`,
//! built as `wasm32-wasip2` components.
//!
//! The build script compiles every crate under both; this crate exposes each
//! component's bytes and path, for the demo ([`ALL`]: the examples only) and the
//! tests.

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));
