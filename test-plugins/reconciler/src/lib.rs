//! A controller that records what it reconciles, so tests can tell which
//! version reconciled which state.
//!
//! Its primary resource is `apps/v1 ReplicaSet`, owning `v1 Pod`. Its config is
//! `LABEL` followed by options separated by commas:
//!
//! - `fail-every=N`: every Nth reconcile returns an error (the key is retried).
//! - `requeue-ms=M`: every reconcile asks to be requeued after M ms.
//!
//! Each reconcile logs `LABEL reconcile KEY STATE`, where STATE is `gone` or
//! `RV/PODS-RV`: the replica set's resourceVersion and the highest
//! resourceVersion among the pods it controls (0 without pods), as the cache
//! holds them.

use std::time::Duration;

use kinformer_sdk::controller::{Action, Controller, ControllerRegistration, Request};
use kinformer_sdk::{Error, Gvk, Result, cache, info};

struct Reconciler {
    label: String,
    fail_every: u64,
    requeue: Option<Duration>,
    reconciles: u64,
}

fn replica_sets() -> Gvk {
    Gvk::new("apps", "v1", "ReplicaSet")
}

fn pods() -> Gvk {
    Gvk::new("", "v1", "Pod")
}

impl Controller for Reconciler {
    fn init(config: &str) -> Result<(Self, ControllerRegistration)> {
        let mut options = config.split(',');
        let label = options.next().unwrap_or_default().to_owned();
        let mut reconciler = Self {
            label,
            fail_every: 0,
            requeue: None,
            reconciles: 0,
        };
        for option in options {
            let number = |value: &str| {
                value
                    .parse::<u64>()
                    .map_err(|_| Error::msg(format!("bad option {option:?}")))
            };
            match option.split_once('=') {
                Some(("fail-every", value)) => reconciler.fail_every = number(value)?,
                Some(("requeue-ms", value)) => reconciler.requeue = Some(Duration::from_millis(number(value)?)),
                _ => return Err(Error::msg(format!("unknown option {option:?}"))),
            }
        }
        let registration =
            ControllerRegistration::new("reconciler", env!("CARGO_PKG_VERSION"), replica_sets()).owns(pods());
        Ok((reconciler, registration))
    }

    fn reconcile(&mut self, request: Request) -> Result<Action> {
        self.reconciles += 1;
        if self.fail_every > 0 && self.reconciles.is_multiple_of(self.fail_every) {
            return Err(Error::msg(format!(
                "failing reconcile {} as configured",
                self.reconciles
            )));
        }
        let state = match cache::get(&replica_sets(), &request.key)? {
            None => "gone".to_owned(),
            Some(replica_set) => {
                let replica_set: serde_json::Value = serde_json::from_str(&replica_set)?;
                let rv = replica_set["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let namespace = request.namespace.clone().unwrap_or_default();
                let listing = cache::list(&pods()).namespace(namespace).fetch()?;
                let newest = listing
                    .objects
                    .iter()
                    .filter_map(|pod| serde_json::from_str::<serde_json::Value>(pod).ok())
                    .filter(|pod| {
                        pod["metadata"]["ownerReferences"]
                            .as_array()
                            .is_some_and(|owners| owners.iter().any(|owner| owner["name"] == request.name.as_str()))
                    })
                    .filter_map(|pod| pod["metadata"]["resourceVersion"].as_str()?.parse::<u64>().ok())
                    .max()
                    .unwrap_or(0);
                format!("{rv}/{newest}")
            }
        };
        info!("{} reconcile {} {state}", self.label, request.key);
        Ok(self.requeue.map_or_else(Action::done, Action::requeue_after))
    }
}

kinformer_sdk::controller!(Reconciler);
