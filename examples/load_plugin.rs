//! Embedding kinformer's plugin runtime: load a plugin component, start it, and
//! hand it a delta.
//!
//! Run it with any plugin component, for instance an example plugin:
//!
//! ```sh
//! cargo build -p plugin-artifacts   # builds plugins/ into components
//! cargo run -p kinformer-examples --example load_plugin -- target/wasm-plugins/wasm32-wasip2/wasm-plugin/delta_logger.wasm
//! ```

use std::sync::Arc;

use anyhow::Context as _;
use kinformer::caches::Caches;
use kinformer::delta::{Delta, DeltaType};
use kinformer::indexer::indexer;
use kinformer::kube::api::GroupVersionKind;
use kinformer::object::CachedObject;
use kinformer::plugin::{PluginEngine, PluginOptions};

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_target(false).init();
    let path = std::env::args().nth(1).context("usage: load_plugin PLUGIN.wasm")?;

    // 1. One engine per process: it compiles components and enforces deadlines.
    let engine = PluginEngine::new()?;
    // 2. Compile the file; a corrupt file or a component of another world fails here.
    let component = engine.load_file(path.as_ref())?;

    // 3. The caches the plugin may query, by resource type. Here: one pod cache.
    let pods = GroupVersionKind::gvk("", "v1", "Pod");
    let (reader, writer) = indexer();
    let caches = Caches::new();
    caches.insert(pods.clone(), reader);

    // 4. Instantiate it in its own store and ask what it watches.
    let mut instance = component.instantiate(caches, PluginOptions::default())?;
    let registration = instance.init("")?;
    println!("{} {} watches:", registration.name, registration.version);
    for subscription in &registration.subscriptions {
        println!("  {:?}", subscription.gvk);
    }

    // 5. Cache a pod and deliver the delta that announces it.
    let pod = CachedObject::from_json(
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web-0","namespace":"demo","resourceVersion":"1"},
            "spec":{"nodeName":"node-1"}}"#,
    )?;
    let pod = Arc::new(pod);
    writer.apply(Arc::clone(&pod));
    instance.handle(&[Delta::new(DeltaType::Added, Arc::new(pods), pod)])?;

    // 6. What the plugin logged.
    for line in instance.recent_logs() {
        println!("plugin said: {}", line.message);
    }
    Ok(())
}
