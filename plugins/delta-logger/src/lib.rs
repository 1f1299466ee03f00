//! A kinformer plugin that logs every delta it receives.
//!
//! Its config is a comma-separated list of `apiVersion/Kind` to watch, e.g.
//! `v1/Pod,apps/v1/Deployment`; without one it watches pods.

use kinformer_sdk::{Delta, Error, Gvk, Handler, Registration, Result};

struct DeltaLogger;

impl Handler for DeltaLogger {
    fn init(config: &str) -> Result<(Self, Registration)> {
        let config = if config.trim().is_empty() { "v1/Pod" } else { config };
        let mut registration = Registration::new("delta-logger", env!("CARGO_PKG_VERSION"));
        for resource in config.split(',').map(str::trim) {
            registration = registration.watch(parse_resource(resource)?);
        }
        Ok((Self, registration))
    }

    fn handle(&mut self, delta: Delta) -> Result<()> {
        let initial = if delta.is_initial_list() { " (initial list)" } else { "" };
        // An update's previous state, fetched from the host only when read.
        let previous = delta
            .old_object::<serde_json::Value>()
            .ok()
            .flatten()
            .and_then(|old| {
                old["metadata"]["resourceVersion"]
                    .as_str()
                    .map(|rv| format!(" (was rv={rv})"))
            })
            .unwrap_or_default();
        kinformer_sdk::info!(
            "{:?} {} {} rv={}{previous}{initial}",
            delta.delta_type(),
            delta.gvk().kind,
            delta.key(),
            delta.resource_version()
        );
        Ok(())
    }
}

/// `v1/Pod` or `apps/v1/Deployment` into a [`Gvk`].
fn parse_resource(resource: &str) -> Result<Gvk> {
    match resource.split('/').collect::<Vec<_>>()[..] {
        [version, kind] if !version.is_empty() && !kind.is_empty() => Ok(Gvk::new("", version, kind)),
        [group, version, kind] if [group, version, kind].iter().all(|part| !part.is_empty()) => {
            Ok(Gvk::new(group, version, kind))
        }
        _ => Err(Error::msg(format!(
            "bad resource {resource:?} in config: want apiVersion/Kind, e.g. v1/Pod or apps/v1/Deployment"
        ))),
    }
}

kinformer_sdk::plugin!(DeltaLogger);
