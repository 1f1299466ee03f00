//! The health endpoints (`/healthz`, `/livez`, `/readyz`) and `/metrics`, as kube-apiserver serves them.
//!
//! A health endpoint answers `ok` in plain text, or with `?verbose` one line
//! per check (`[+]ping ok`) and the verdict (`livez check passed`); one check
//! alone is at its own path (`/livez/ping`). The emulation has no etcd or
//! informers that could fail, so every check passes while it serves. Probes
//! and `kubectl get --raw='/readyz?verbose'` see what they see on a cluster.
//!
//! `/metrics` is Prometheus' text format with a few of kube-apiserver's own
//! series: `apiserver_request_total` by verb, resource and code,
//! `apiserver_storage_objects` per resource and
//! `apiserver_longrunning_requests` for the open watches.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use crate::status::{ApiError, Result};
use crate::{Shared, lock};

/// The checks of each endpoint, in kube-apiserver's order.
const LIVEZ: &[&str] = &[
    "ping",
    "log",
    "etcd",
    "poststarthook/start-apiserver-admission-initializer",
    "poststarthook/generic-apiserver-start-informers",
    "poststarthook/start-apiextensions-controllers",
    "poststarthook/crd-informer-synced",
    "poststarthook/bootstrap-controller",
    "poststarthook/rbac/bootstrap-roles",
    "poststarthook/apiservice-registration-controller",
];
/// `/readyz` adds these to the `/livez` checks.
const READYZ_ONLY: &[&str] = &["etcd-readiness", "informer-sync", "shutdown"];

/// Which health endpoint a path is, and the check it names, if any:
/// `/readyz/etcd` → (`readyz`, `etcd`).
pub(crate) fn endpoint(path: &str) -> Option<(&'static str, Option<&str>)> {
    let path = path.strip_prefix('/')?;
    let (endpoint, check) = match path.split_once('/') {
        Some((endpoint, check)) => (endpoint, Some(check)),
        None => (path, None),
    };
    let endpoint = match endpoint {
        "healthz" => "healthz",
        "livez" => "livez",
        "readyz" => "readyz",
        _ => return None,
    };
    Some((endpoint, check))
}

/// The body of a health endpoint's answer.
///
/// # Errors
///
/// 404 for a check the endpoint does not have.
pub(crate) fn check(endpoint: &str, check: Option<&str>, verbose: bool) -> Result<String> {
    let checks: Vec<&str> = match endpoint {
        "readyz" => LIVEZ.iter().chain(READYZ_ONLY).copied().collect(),
        _ => LIVEZ.to_vec(),
    };
    if let Some(check) = check {
        if !checks.contains(&check) {
            return Err(ApiError::no_route(&format!("/{endpoint}/{check}")));
        }
        return Ok("ok".to_owned());
    }
    if !verbose {
        return Ok("ok".to_owned());
    }
    let mut body = String::new();
    for check in checks {
        let _ = writeln!(body, "[+]{check} ok");
    }
    let _ = writeln!(body, "{endpoint} check passed");
    Ok(body)
}

/// What `apiserver_request_total` counts a request by.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RequestLabels {
    /// `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`, `DELETE`, ….
    pub(crate) verb: &'static str,
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) code: u16,
}

/// The requests served, by [`RequestLabels`].
#[derive(Debug, Default)]
pub(crate) struct Requests(Mutex<BTreeMap<RequestLabels, u64>>);

impl Requests {
    pub(crate) fn record(&self, labels: RequestLabels) {
        *lock(&self.0).entry(labels).or_default() += 1;
    }
}

/// `/metrics`: the request counts, the stored objects and the open watches.
pub(crate) fn metrics(shared: &Shared) -> String {
    let mut out = String::new();
    out.push_str(
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code.\n\
         # TYPE apiserver_request_total counter\n",
    );
    for (labels, count) in lock(&shared.stats.by_request.0).iter() {
        let _ = writeln!(
            out,
            "apiserver_request_total{{code=\"{}\",component=\"apiserver\",group=\"{}\",resource=\"{}\",subresource=\"{}\",verb=\"{}\",version=\"{}\"}} {count}",
            labels.code, labels.group, labels.resource, labels.subresource, labels.verb, labels.version
        );
    }
    out.push_str(
        "# HELP apiserver_storage_objects [STABLE] Number of stored objects at the time of last check split by kind. In case of a fetching error, the value will be -1.\n\
         # TYPE apiserver_storage_objects gauge\n",
    );
    for def in shared.store.defs() {
        let id = crate::store::ResourceId::new(&def.group, &def.version, &def.plural);
        let resource = crate::stat_name(&id);
        let _ = writeln!(
            out,
            "apiserver_storage_objects{{resource=\"{resource}\"}} {}",
            shared.store.count(&id)
        );
    }
    out.push_str(
        "# HELP apiserver_longrunning_requests [STABLE] Gauge of all active long-running apiserver requests broken out by verb, group, version, resource, scope and component. Not all requests are tracked this way.\n\
         # TYPE apiserver_longrunning_requests gauge\n",
    );
    for (resource, open) in lock(&shared.stats.watches_open).iter() {
        let (resource, group) = resource.split_once('.').unwrap_or((resource, ""));
        let _ = writeln!(
            out,
            "apiserver_longrunning_requests{{component=\"apiserver\",group=\"{group}\",resource=\"{resource}\",verb=\"WATCH\"}} {open}"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verbose_readyz_lists_every_check_and_the_verdict() {
        let body = check("readyz", None, true).unwrap();
        assert!(body.starts_with("[+]ping ok\n"), "{body}");
        assert!(body.contains("[+]informer-sync ok\n"), "{body}");
        assert!(body.ends_with("readyz check passed\n"), "{body}");
        assert_eq!(check("livez", Some("etcd"), false).unwrap(), "ok");
        assert_eq!(check("livez", Some("informer-sync"), false).unwrap_err().code, 404);
    }
}
