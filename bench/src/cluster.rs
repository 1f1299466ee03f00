//! The emulated cluster every row runs against: realistic pods, and a writer that stamps each change with its time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apiserver_sim::store::{Filter, PatchType, ResourceId, Store, StoredObject};
use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use kube::api::GroupVersionKind;

pub(crate) fn pods_id() -> ResourceId {
    ResourceId::new("", "v1", "pods")
}

pub(crate) fn pods_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "Pod")
}

/// An emulated cluster holding about `pods` realistic pods (~10 KB with
/// managedFields), in deployments of 100 pods, and nothing changing: the
/// emulation's own controllers (deployments, replica sets, kubelet) are off,
/// so only the benchmark writes.
pub(crate) async fn quiet_cluster(pods: usize) -> anyhow::Result<ApiServer> {
    let server = ApiServer::start(SimConfig::default().controllers(false)).await?;
    tokio::task::block_in_place(|| populate(server.store(), pods))?;
    // The population's event history is not needed: watches start from lists.
    server.store().compact();
    Ok(server)
}

/// Once per process, runs a churn of `updates` changes to `pods` pods with no
/// one watching, and frees it. The emulated server keeps every change it
/// logs, so the first churn in a fresh process grows the heap by about a
/// gigabyte: page faults took a quarter of the server's CPU in a profile,
/// the server fell behind the stream, and the first consumer measured saw
/// latencies of a second that no later run saw. Later churns reuse the
/// memory.
pub(crate) async fn warm_up(pods: usize, updates: usize) -> anyhow::Result<()> {
    static DONE: AtomicBool = AtomicBool::new(false);
    if DONE.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    eprintln!("warming up: {updates} changes with no one watching");
    let server = quiet_cluster(pods).await?;
    write_paced(&server, updates, f64::INFINITY).await?;
    server.close().await;
    Ok(())
}

/// Fills `store` with about `pods` realistic pods in deployments of 100.
fn populate(store: &Store, pods: usize) -> anyhow::Result<()> {
    let deployments = pods.div_ceil(100).max(1);
    let per_deployment = pods.div_ceil(deployments);
    let workload = Workload::default()
        .size(1, deployments, per_deployment)
        .realistic_pods(true);
    workload
        .populate(store)
        .map(drop)
        .map_err(|error| anyhow::anyhow!("populating the cluster: {error}"))
}

/// About `pods` realistic pods as a quiet cluster holds them, with no server.
pub(crate) fn realistic_pods(pods: usize) -> anyhow::Result<Vec<Arc<StoredObject>>> {
    let store = Store::new(apiserver_sim::resources::built_in(), 1000);
    populate(&store, pods)?;
    pods_in(&store)
}

/// `pods` realistic pods as kinformer's cache holds them: parsed, and
/// transformed as the cache's default transform does.
pub(crate) fn cached_realistic_pods(pods: usize) -> anyhow::Result<Vec<Arc<kinformer::object::CachedObject>>> {
    let transform = kinformer::object::Transform::default();
    realistic_pods(pods)?
        .iter()
        .take(pods)
        .map(|pod| {
            let json = std::str::from_utf8(&pod.json)?;
            let object = kinformer::object::CachedObject::from_json(json)?.transformed(&transform)?;
            Ok(Arc::new(object))
        })
        .collect()
}

/// The pods as the server holds them, with the JSON it serves.
pub(crate) fn served_pods(server: &ApiServer) -> anyhow::Result<Vec<Arc<StoredObject>>> {
    pods_in(server.store())
}

fn pods_in(store: &Store) -> anyhow::Result<Vec<Arc<StoredObject>>> {
    let (pods, _) = store
        .snapshot(&pods_id(), &Filter::default())
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok(pods)
}

/// A kubeconfig file for a cluster, removed on drop: how a child process
/// finds the cluster.
#[derive(Debug)]
pub(crate) struct KubeconfigFile {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl KubeconfigFile {
    pub(crate) fn new(server: &ApiServer) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("kubeconfig");
        server.write_kubeconfig(&path)?;
        Ok(Self { path, _dir: dir })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// A client for the cluster of a kubeconfig file.
pub(crate) async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

/// The annotation each written change carries: when it was written, in
/// milliseconds since the epoch, with a fraction.
pub(crate) const SENT: &str = "bench/sent";

/// [`SENT`] as it starts inside an object's JSON.
const SENT_IN_JSON: &str = "\"bench/sent\":\"";

/// Milliseconds since the epoch, with a fraction: the stamp writers put on
/// objects and handlers compare with.
pub(crate) fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
        * 1000.0
}

/// The stamp in an object's JSON, if it has one.
pub(crate) fn sent_in_json(json: &str) -> Option<f64> {
    let start = json.find(SENT_IN_JSON)? + SENT_IN_JSON.len();
    json[start..].split('"').next()?.parse().ok()
}

/// Writes `updates` stamped changes at `rate` a second, round the pods.
pub(crate) async fn write_paced(server: &ApiServer, updates: usize, rate: f64) -> anyhow::Result<()> {
    let store = server.store();
    let keys: Vec<(String, String)> = served_pods(server)?
        .iter()
        .map(|pod| (pod.namespace.clone().unwrap_or_default(), pod.name.clone()))
        .collect();
    let started = Instant::now();
    tokio::task::block_in_place(|| {
        for i in 0..updates {
            let due = started + Duration::from_secs_f64(i as f64 / rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let (namespace, name) = &keys[i % keys.len()];
            let patch = serde_json::json!({"metadata": {"annotations": {SENT: format!("{:.3}", now_ms())}}});
            store
                .patch(&pods_id(), Some(namespace), name, PatchType::Merge, patch, false)
                .map_err(|error| anyhow::anyhow!("{error}"))?;
        }
        anyhow::Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_stamp_reads_back_from_the_json() {
        let pod = serde_json::json!({"metadata": {"name": "a", "annotations": {SENT: "1700000000000.125"}}});
        assert_eq!(sent_in_json(&pod.to_string()), Some(1_700_000_000_000.125));
        assert_eq!(sent_in_json(r#"{"metadata":{"name":"a"}}"#), None);
    }
}
