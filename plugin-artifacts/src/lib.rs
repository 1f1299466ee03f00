//! The example plugins of `plugins/` and the test plugins of `test-plugins/`,
//! built as `wasm32-wasip2` components.
//!
//! The build script compiles every crate under both; this crate exposes each
//! component's bytes and path, for the demo ([`ALL`]: the examples only) and the
//! tests. Plugins in Python and JavaScript are built when asked for ([`guest`]).

pub mod guest;

include!(concat!(env!("OUT_DIR"), "/artifacts.rs"));

/// The test plugin `file` (e.g. `hostile.wasm`) of [`TEST_PLUGINS`].
///
/// # Panics
///
/// When there is no such test plugin.
#[must_use]
pub fn test_plugin(file: &str) -> &'static [u8] {
    TEST_PLUGINS
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, bytes)| *bytes)
        .unwrap_or_else(|| panic!("no test plugin {file}"))
}

/// The component with a custom section appended: another file with another
/// digest and the same behaviour, for reload tests and benchmarks.
#[must_use]
pub fn variant(component: &[u8], tag: u8) -> Vec<u8> {
    const NAME: &[u8] = b"kinformer-variant";
    let mut variant = component.to_vec();
    // Section id 0 (custom), its size, then the name and one byte of content.
    variant.extend_from_slice(&[0, (NAME.len() + 2) as u8, NAME.len() as u8]);
    variant.extend_from_slice(NAME);
    variant.push(tag);
    variant
}
