//! {{name}}: a kinformer plugin that logs every delta it receives.
//!
//! Its config (in {{name}}.toml) is a comma-separated list of resources to
//! watch, as apiVersion/Kind: `v1/Pod,apps/v1/Deployment`.

use kinformer_sdk::{Delta, Error, Gvk, Handler, Registration, Result, info};

struct Plugin;

impl Handler for Plugin {
    fn init(config: &str) -> Result<(Self, Registration)> {
        let mut registration = Registration::new("{{name}}", env!("CARGO_PKG_VERSION"));
        for resource in config.split(',').map(str::trim).filter(|r| !r.is_empty()) {
            let gvk = match resource.split('/').collect::<Vec<_>>()[..] {
                [version, kind] => Gvk::new("", version, kind),
                [group, version, kind] => Gvk::new(group, version, kind),
                _ => return Err(Error::msg(format!("bad resource {resource:?}: want apiVersion/Kind"))),
            };
            registration = registration.watch(gvk);
        }
        Ok((Self, registration))
    }

    fn handle(&mut self, delta: Delta) -> Result<()> {
        // Every start, swap or settings change hands the plugin the whole
        // cache again as `Added`, flagged initial list: rebuild state from
        // it, but act on the outside world (post, page, write) only for
        // what changes after it.
        let initial = if delta.is_initial_list() { " (initial list)" } else { "" };
        info!(
            "{:?} {} {} rv={}{initial}",
            delta.delta_type(),
            delta.gvk().kind,
            delta.key(),
            delta.resource_version()
        );
        Ok(())
    }
}

kinformer_sdk::plugin!(Plugin);
