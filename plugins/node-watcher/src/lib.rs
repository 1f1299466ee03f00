//! The README's example plugin: on each pod delta, count the pods on the same node
//! through a field index the plugin declares.

#[cfg(test)]
mod tests;

use kinformer_sdk::{Delta, Gvk, Handler, Registration, Result, cache, info};

struct NodeWatcher;

impl Handler for NodeWatcher {
    fn init(_config: &str) -> Result<(Self, Registration)> {
        let pods = Gvk::new("", "v1", "Pod");
        let registration =
            Registration::new("node-watcher", "0.1.0")
                .watch(pods.clone())
                .index(pods, "node", "spec.nodeName");
        Ok((Self, registration))
    }

    fn handle(&mut self, delta: Delta) -> Result<()> {
        let node: Option<String> = delta.value()?["spec"]["nodeName"].as_str().map(str::to_owned);
        let Some(node) = node else { return Ok(()) };
        let neighbours = cache::by_index(delta.gvk(), "node", &node, 0)?;
        info!(
            "{:?} {}: {} pods on {node}",
            delta.delta_type(),
            delta.key(),
            neighbours.objects.len()
        );
        Ok(())
    }
}

kinformer_sdk::plugin!(NodeWatcher);
