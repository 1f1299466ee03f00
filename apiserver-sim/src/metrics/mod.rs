//! The pods' resource usage that metrics-server would report, and whether its API is up.
//!
//! In a cluster, usage is no part of any object: the kubelet measures it and
//! metrics-server keeps the last figures in memory, serving them as
//! `metrics.k8s.io/v1beta1` `PodMetrics` and `NodeMetrics`. The
//! emulation does the same: [`Metrics`] is a table of each pod's CPU and
//! memory usage beside the store's objects. The synthetic workload and the
//! ReplicaSet controller set the usage of the pods they run, tests and
//! embedders set it with [`Metrics::set_pod_cpu`], and a pod's deletion drops
//! its usage in the same write (the store holds the table for that reason: see
//! [`Store::metrics`](crate::store::Store::metrics)).
//!
//! [`Metrics::set_available`] takes the API down as a metrics-server that has
//! stopped does: the aggregator answers `503 Service Unavailable` for every
//! request to the group version, and an autoscaler has nothing to go on.
//!
//! # What is served
//!
//! - Only a pod that runs on a node (`spec.nodeName`, phase `Running`) and has
//!   usage in the table has metrics: it is absent from lists, and a get answers
//!   404 `podmetrics.metrics.k8s.io "ns/name" not found`. Every Node object has
//!   metrics: what it uses itself ([`NODE_SYSTEM_USAGE`]) plus its pods' usage.
//! - Lists take a `labelSelector` (the pods' and nodes' own labels) and a
//!   `fieldSelector` on `metadata.name` and `metadata.namespace`.
//! - CPU is written in nanocores (`119994113n`), a little under the millicores
//!   set, so that clients that round up, as `kubectl top` and the HPA
//!   controller do, read back exactly the millicores set; memory in binary
//!   units (`61440Ki`); the `window` is `15s`.
//! - The API is read-only, as metrics-server's: a watch is `405
//!   MethodNotAllowed` (`watch is not supported on resources of kind
//!   "pods.metrics.k8s.io"`), and so is any write.
//! - The aggregator's 503 is plain text, not a `Status`. kube-rs retries a 503
//!   by default (`Config::default_retry`), with backoff, for minutes: a
//!   client that must notice an outage soon turns that off.
//!
//! # Examples
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use apiserver_sim::{ApiServer, SimConfig};
//!
//! let server = ApiServer::start(SimConfig::default()).await?;
//! // ... create a Deployment, wait for its pods ...
//! server.metrics().set_pod_cpu("default", "web-x7k2p", 120);
//! assert_eq!(server.metrics().pod_cpu("default", "web-x7k2p"), Some(120));
//! // metrics-server goes down: metrics.k8s.io answers 503.
//! server.metrics().set_available(false);
//! # Ok(()) }
//! ```

pub(crate) mod api;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// What a node uses itself (its system daemons and kubelet), before its pods.
pub const NODE_SYSTEM_USAGE: Usage = Usage {
    cpu_millicores: 100,
    memory_bytes: 512 * MI,
};

const KI: u64 = 1024;
const MI: u64 = 1024 * KI;

/// A pod's or node's resource usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU, in millicores (`kubectl top` prints `120m`).
    pub cpu_millicores: u32,
    /// Memory (the working set), in bytes.
    pub memory_bytes: u64,
}

/// The pods' usage, by namespace and name, and whether the metrics API is up.
///
/// Readers see the latest figures; a real metrics-server's are up to one
/// scrape (15 s) old.
#[derive(Debug)]
pub struct Metrics {
    pods: Mutex<BTreeMap<(String, String), Usage>>,
    available: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            pods: Mutex::default(),
            available: AtomicBool::new(true),
        }
    }
}

impl Metrics {
    fn pods(&self) -> MutexGuard<'_, BTreeMap<(String, String), Usage>> {
        self.pods.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the pod's CPU usage. A pod without usage yet gets a memory usage
    /// of its own too (56 to 72 MiB, fixed by its namespace and name).
    ///
    /// The usage is served while the pod is running on a node; it is dropped
    /// when a pod of this name is deleted.
    pub fn set_pod_cpu(&self, namespace: &str, name: &str, millicores: u32) {
        self.pods()
            .entry((namespace.to_owned(), name.to_owned()))
            .or_insert_with(|| Usage {
                cpu_millicores: 0,
                memory_bytes: default_memory(namespace, name),
            })
            .cpu_millicores = millicores;
    }

    /// Sets the pod's memory usage, in bytes; a pod without usage yet uses no CPU.
    pub fn set_pod_memory(&self, namespace: &str, name: &str, bytes: u64) {
        self.pods()
            .entry((namespace.to_owned(), name.to_owned()))
            .or_default()
            .memory_bytes = bytes;
    }

    /// The pod's CPU usage in millicores, if it has any.
    #[must_use]
    pub fn pod_cpu(&self, namespace: &str, name: &str) -> Option<u32> {
        self.pod_usage(namespace, name).map(|usage| usage.cpu_millicores)
    }

    /// The pod's usage, if it has any.
    #[must_use]
    pub fn pod_usage(&self, namespace: &str, name: &str) -> Option<Usage> {
        self.pods().get(&(namespace.to_owned(), name.to_owned())).copied()
    }

    /// Takes the metrics API down (`false`), as a stopped metrics-server, or
    /// brings it back. Usage set meanwhile is kept.
    pub fn set_available(&self, available: bool) {
        self.available.store(available, Ordering::Relaxed);
    }

    /// Whether the metrics API answers (it does unless
    /// [`Metrics::set_available`] took it down).
    #[must_use]
    pub fn is_available(&self) -> bool {
        self.available.load(Ordering::Relaxed)
    }

    /// Drops a pod's usage, as metrics-server does for a deleted pod, or for
    /// one its kubelet stopped reporting: the API answers without it.
    pub fn forget_pod(&self, namespace: &str, name: &str) {
        self.pods().remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// The usage of these pods (namespace, name), in their order; `None` for
    /// a pod without.
    pub(crate) fn pod_usages<'a>(&self, pods: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<Option<Usage>> {
        let table = self.pods();
        pods.map(|(namespace, name)| table.get(&(namespace.to_owned(), name.to_owned())).copied())
            .collect()
    }
}

/// A plausible working set: 56 to 72 MiB in whole 4 KiB pages, fixed by the
/// pod's namespace and name.
fn default_memory(namespace: &str, name: &str) -> u64 {
    56 * MI + (fingerprint(&[namespace, name]) % 4096) * 4 * KI
}

/// A stable hash (FNV-1a) of some strings, for figures that look measured but
/// stay the same from one request to the next.
pub(crate) fn fingerprint(parts: &[&str]) -> u64 {
    parts
        .iter()
        .fold(kinformer_contract::StableHasher::default(), |hash, part| {
            hash.write(part.as_bytes()).write(&[0])
        })
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_set_by_cpu_gets_a_plausible_memory_usage_that_stays() {
        let metrics = Metrics::default();
        metrics.set_pod_cpu("shop", "web-1", 120);
        let usage = metrics.pod_usage("shop", "web-1").unwrap();
        assert_eq!(usage.cpu_millicores, 120);
        assert!((56 * MI..72 * MI).contains(&usage.memory_bytes), "{usage:?}");
        assert_eq!(usage.memory_bytes % (4 * KI), 0);
        metrics.set_pod_cpu("shop", "web-1", 300);
        assert_eq!(
            metrics.pod_usage("shop", "web-1"),
            Some(Usage {
                cpu_millicores: 300,
                ..usage
            })
        );
    }

    #[test]
    fn a_forgotten_pod_has_no_usage() {
        let metrics = Metrics::default();
        metrics.set_pod_memory("shop", "web-1", 64 * MI);
        assert_eq!(metrics.pod_cpu("shop", "web-1"), Some(0));
        metrics.forget_pod("shop", "web-1");
        assert_eq!(metrics.pod_usage("shop", "web-1"), None);
    }
}
