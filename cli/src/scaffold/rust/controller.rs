//! {{name}}: a kinformer controller that reconciles every object of one
//! resource, logging each.
//!
//! Its config (in {{name}}.toml) is the resource it reconciles, as
//! apiVersion/Kind: `v1/Pod` or `apps/v1/Deployment`.

use kinformer_sdk::controller::{Action, Controller, ControllerRegistration, Request};
use kinformer_sdk::{Error, Gvk, Result, cache, info};

struct Reconciler {
    primary: Gvk,
}

impl Controller for Reconciler {
    fn init(config: &str) -> Result<(Self, ControllerRegistration)> {
        let primary = match config.trim().split('/').collect::<Vec<_>>()[..] {
            [version, kind] => Gvk::new("", version, kind),
            [group, version, kind] => Gvk::new(group, version, kind),
            _ => return Err(Error::msg(format!("bad resource {config:?}: want apiVersion/Kind"))),
        };
        let registration = ControllerRegistration::new("{{name}}", env!("CARGO_PKG_VERSION"), primary.clone());
        Ok((Self { primary }, registration))
    }

    fn reconcile(&mut self, request: Request) -> Result<Action> {
        match cache::get(&self.primary, &request.key)? {
            Some(object) => info!("reconcile {}: {} bytes", request.key, object.len()),
            None => info!("reconcile {}: gone", request.key),
        }
        Ok(Action::done())
    }
}

kinformer_sdk::controller!(Reconciler);
