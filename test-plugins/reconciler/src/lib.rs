//! A controller that records what it reconciles, so tests can tell which
//! version reconciled which state; with `noop`, the no-op controller of the
//! benchmark's row 8.
//!
//! Its primary resource is `apps/v1 ReplicaSet` unless `primary=` says
//! otherwise, and it owns `v1 Pod` (unless pods are its primary). Its config is
//! `LABEL` followed by options separated by commas:
//!
//! - `primary=API_VERSION/KIND`: the primary resource (`v1/Pod`, `apps/v1/Deployment`).
//! - `fail-every=N`: every Nth reconcile returns an error (the key is retried).
//! - `requeue-ms=M`: every reconcile asks to be requeued after M ms.
//! - `noop`: reconcile returns `Action::done()` at once: no cache reads, no log
//!   line, and `fail-every` and `requeue-ms` are ignored.
//!
//! Otherwise each reconcile logs `LABEL reconcile KEY STATE`, where STATE is
//! `gone` or `RV/PODS-RV`: the primary object's resourceVersion and the highest
//! resourceVersion among the pods it controls (0 without pods, and always 0
//! when pods are the primary), as the cache holds them.

use std::time::Duration;

use kinformer_sdk::controller::{Action, Controller, ControllerRegistration, Request};
use kinformer_sdk::{Error, Gvk, Result, cache, info};

struct Reconciler {
    label: String,
    primary: Gvk,
    fail_every: u64,
    requeue: Option<Duration>,
    noop: bool,
    reconciles: u64,
}

fn replica_sets() -> Gvk {
    Gvk::new("apps", "v1", "ReplicaSet")
}

fn pods() -> Gvk {
    Gvk::new("", "v1", "Pod")
}

/// A resource type spelled `apiVersion/Kind`: `v1/Pod`, `apps/v1/ReplicaSet`.
fn resource(value: &str) -> Result<Gvk> {
    let bad = || {
        Error::msg(format!(
            "bad primary {value:?}: expected apiVersion/Kind, as in apps/v1/ReplicaSet"
        ))
    };
    let (api_version, kind) = value.rsplit_once('/').ok_or_else(bad)?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    if version.is_empty() || version.contains('/') || kind.is_empty() {
        return Err(bad());
    }
    Ok(Gvk::new(group, version, kind))
}

impl Controller for Reconciler {
    fn init(config: &str) -> Result<(Self, ControllerRegistration)> {
        let mut options = config.split(',');
        let label = options.next().unwrap_or_default().to_owned();
        let mut reconciler = Self {
            label,
            primary: replica_sets(),
            fail_every: 0,
            requeue: None,
            noop: false,
            reconciles: 0,
        };
        for option in options {
            let number = |value: &str| {
                value
                    .parse::<u64>()
                    .map_err(|_| Error::msg(format!("bad option {option:?}")))
            };
            match option.split_once('=') {
                Some(("primary", value)) => reconciler.primary = resource(value)?,
                Some(("fail-every", value)) => reconciler.fail_every = number(value)?,
                Some(("requeue-ms", value)) => reconciler.requeue = Some(Duration::from_millis(number(value)?)),
                None if option == "noop" => reconciler.noop = true,
                _ => return Err(Error::msg(format!("unknown option {option:?}"))),
            }
        }
        let mut registration =
            ControllerRegistration::new("reconciler", env!("CARGO_PKG_VERSION"), reconciler.primary.clone());
        if reconciler.primary != pods() {
            registration = registration.owns(pods());
        }
        Ok((reconciler, registration))
    }

    fn reconcile(&mut self, request: Request) -> Result<Action> {
        if self.noop {
            return Ok(Action::done());
        }
        self.reconciles += 1;
        if self.fail_every > 0 && self.reconciles.is_multiple_of(self.fail_every) {
            return Err(Error::msg(format!(
                "failing reconcile {} as configured",
                self.reconciles
            )));
        }
        let state = match cache::get(&self.primary, &request.key)? {
            None => "gone".to_owned(),
            Some(primary) => {
                let primary: serde_json::Value = serde_json::from_str(&primary)?;
                let rv = primary["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let newest = if self.primary == pods() {
                    0
                } else {
                    self.newest_pod(&request)?
                };
                format!("{rv}/{newest}")
            }
        };
        info!("{} reconcile {} {state}", self.label, request.key);
        Ok(self.requeue.map_or_else(Action::done, Action::requeue_after))
    }
}

impl Reconciler {
    /// The highest resourceVersion among the pods the requested object
    /// controls, 0 without pods.
    fn newest_pod(&self, request: &Request) -> Result<u64> {
        let namespace = request.namespace.clone().unwrap_or_default();
        let listing = cache::list(&pods()).namespace(namespace).fetch()?;
        Ok(listing
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
            .unwrap_or(0))
    }
}

kinformer_sdk::controller!(Reconciler);
