//! Helpers shared by the end-to-end tests.

use std::sync::{Arc, OnceLock};

pub mod browser;
pub mod guest;
pub mod http;
pub mod runtime;

use kinformer::object::CachedObject;
use kinformer::plugin::{PluginComponent, PluginEngine, PluginInstance};

/// One engine for the whole test binary.
pub fn engine() -> &'static PluginEngine {
    static ENGINE: OnceLock<PluginEngine> = OnceLock::new();
    ENGINE.get_or_init(|| PluginEngine::new().expect("the wasm engine starts"))
}

/// The example plugin `name` (a file of `plugin_artifacts::ALL`), compiled once
/// per test binary.
pub fn example(name: &str) -> PluginComponent {
    static COMPILED: OnceLock<std::sync::Mutex<Vec<PluginComponent>>> = OnceLock::new();
    let compiled = COMPILED.get_or_init(Default::default);
    let mut compiled = compiled.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(component) = compiled.iter().find(|component| component.name() == name) {
        return component.clone();
    }
    let (_, bytes) = plugin_artifacts::ALL
        .iter()
        .find(|(file, _)| file.strip_suffix(".wasm") == Some(name))
        .unwrap_or_else(|| panic!("no example plugin {name}"));
    let component = engine().load_bytes(name, bytes).expect("example plugins load");
    compiled.push(component.clone());
    component
}

/// An object from JSON.
///
/// # Panics
///
/// When the JSON has no `metadata.name`.
pub fn object(value: serde_json::Value) -> Arc<CachedObject> {
    Arc::new(CachedObject::from_value(&value).expect("test objects are valid"))
}

/// The messages of the plugin's recent log lines.
pub fn messages(instance: &PluginInstance) -> Vec<String> {
    instance.recent_logs().into_iter().map(|line| line.message).collect()
}
