//! The HPA controller end to end: hpa-controller, granted exactly its writes,
//! scales an emulated deployment under load (read from the resource metrics
//! API) and back after the stabilization window; without its write grant, in
//! dry-run mode, or without metrics, it changes nothing.
#![allow(clippy::unwrap_used, reason = "helpers of tests fail the test by panicking")]

use std::time::{Duration, Instant};

use apiserver_sim::ApiServer;
use apiserver_sim::store::{Filter, ListOptions, ResourceId};
use apiserver_sim::workload::Workload;
use kinformer::runtime::{Runtime, RuntimeConfig};
use kinformer_tests::runtime::{Logs, cluster, install, plugin_status, until};

/// The manifest the demo ships, with a short sync period and window.
fn granted_manifest() -> String {
    let shipped = include_str!("../../plugins/hpa-controller/manifest.toml");
    shipped.replace(
        "config = \"sync-seconds=5,stabilization-seconds=30\"",
        "config = \"sync-seconds=1,stabilization-seconds=4\"",
    )
}

pub(crate) fn deployments() -> ResourceId {
    ResourceId::new("apps", "v1", "deployments")
}

fn hpas() -> ResourceId {
    ResourceId::new("autoscaling", "v2", "horizontalpodautoscalers")
}

/// The running pods of deployment `app-0` in `ns-0`.
fn pods(server: &ApiServer) -> Vec<serde_json::Value> {
    let filter = Filter {
        namespace: Some("ns-0".into()),
        labels: kinformer::selector::Selector::parse("app=app-0").unwrap(),
        ..Filter::default()
    };
    server
        .store()
        .list(&ResourceId::new("", "v1", "pods"), &filter, &ListOptions::default())
        .unwrap()
        .items
        .iter()
        .filter(|pod| pod.namespace.as_deref() == Some("ns-0"))
        .filter(|pod| pod.value["metadata"]["deletionTimestamp"].is_null())
        .map(|pod| pod.value.clone())
        .collect()
}

/// Sets every pod of `app-0` to use `millicores` of CPU (their request is
/// 200m), as the resource metrics API reports it.
fn set_load(server: &ApiServer, millicores: u32) {
    for pod in pods(server) {
        let name = pod["metadata"]["name"].as_str().unwrap();
        server.metrics().set_pod_cpu("ns-0", name, millicores);
    }
}

/// `spec.replicas` of deployment `app-0`, and its resourceVersion.
pub(crate) fn replicas(server: &ApiServer) -> (i64, u64) {
    let deployment = server.store().get(&deployments(), Some("ns-0"), "app-0").unwrap();
    (
        deployment.value["spec"]["replicas"].as_i64().unwrap(),
        deployment.resource_version,
    )
}

fn hpa_status(server: &ApiServer) -> serde_json::Value {
    server.store().get(&hpas(), Some("ns-0"), "app-0").unwrap().value["status"].clone()
}

pub(crate) fn rescale_events(server: &ApiServer) -> Vec<serde_json::Value> {
    server
        .store()
        .list(
            &ResourceId::new("events.k8s.io", "v1", "events"),
            &Filter::default(),
            &ListOptions::default(),
        )
        .unwrap()
        .items
        .iter()
        .map(|event| event.value.clone())
        .filter(|event| event["reason"] == "SuccessfulRescale")
        .collect()
}

/// Holds the load at `millicores` until `done` holds, or fails naming `what`.
pub(crate) async fn under_load(server: &ApiServer, millicores: u32, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        set_load(server, millicores);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A quiet emulated cluster: one namespace, one deployment of two pods with
/// its HPA (target 60% cpu, 1 to 10 replicas), nothing churning.
pub(crate) async fn quiet() -> (ApiServer, kube::Client) {
    let workload = Workload::default().seed(7).size(1, 1, 2).changes_per_second(0.0);
    let (server, churn, client) = cluster(&workload).await;
    churn.abort();
    (server, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hpa_controller_scales_up_under_load_and_down_only_after_the_stabilization_window() {
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(&granted_manifest()));
    let (server, client) = quiet().await;
    let logs = Logs::default();
    let runtime = Runtime::start(client, RuntimeConfig::new(dir.path()).log_sink(logs.sink()))
        .await
        .unwrap();

    // 2 pods at 120% of their request against a 60% target: 4 replicas.
    under_load(&server, 240, "a scale-up whose pods follow", || {
        let (replicas, _) = replicas(&server);
        replicas >= 4 && pods(&server).len() == usize::try_from(replicas).unwrap()
    })
    .await;
    let scaled_to = replicas(&server).0;
    let status = hpa_status(&server);
    assert_eq!(status["desiredReplicas"], scaled_to, "{status:#}");
    assert!(status["lastScaleTime"].is_string(), "{status:#}");
    assert!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|condition| condition["type"] == "ScalingActive"),
        "{status:#}"
    );
    let events = rescale_events(&server);
    assert!(!events.is_empty());
    assert!(events.iter().all(|event| {
        event["reportingController"]
            .as_str()
            .unwrap_or_default()
            .contains("hpa")
    }));

    // At 10% the recommendation is the minimum, 1; the 4 s window holds it back.
    let lowered = Instant::now();
    under_load(&server, 20, "a scale-down", || replicas(&server).0 < scaled_to).await;
    let held = lowered.elapsed();
    assert!(
        held >= Duration::from_millis(2500),
        "scaled down {held:?} after the load fell, inside the 4 s window"
    );
    under_load(&server, 20, "the minimum of 1 replica", || replicas(&server).0 == 1).await;
    let hpa = plugin_status(&runtime, "hpa");
    assert_eq!(hpa.traps, 0, "{hpa:#?}");
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_its_write_grant_the_controller_is_denied_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The read grant of the shipped manifest, none of its writes.
    let manifest = granted_manifest();
    let read_only = &manifest[..manifest.find("[[grant.write]]").unwrap()];
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(read_only));
    let (server, client) = quiet().await;
    set_load(&server, 240);
    let before = replicas(&server);
    let runtime = Runtime::start(client, RuntimeConfig::new(dir.path())).await.unwrap();
    under_load(&server, 240, "denied writes", || {
        let status = plugin_status(&runtime, "hpa");
        status.errors >= 3
            && status
                .last_error
                .as_deref()
                .is_some_and(|error| error.contains("(denied)"))
    })
    .await;
    assert_eq!(replicas(&server), before, "the deployment changed");
    assert!(hpa_status(&server)["desiredReplicas"].is_null() || hpa_status(&server)["desiredReplicas"] == 2);
    assert!(rescale_events(&server).is_empty());
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_dry_run_mode_the_controller_changes_nothing_and_its_intents_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = format!("mode = \"dry-run\"\n{}", granted_manifest());
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(&manifest));
    let (server, client) = quiet().await;
    set_load(&server, 240);
    let before = replicas(&server);
    let runtime = Runtime::start(client, RuntimeConfig::new(dir.path())).await.unwrap();
    under_load(&server, 240, "dry-run intents", || {
        let status = serde_json::to_value(plugin_status(&runtime, "hpa")).unwrap();
        status.to_string().contains("scale") && status["reconciles"].as_u64().unwrap_or_default() >= 3
    })
    .await;
    assert_eq!(replicas(&server), before, "a dry run changed the deployment");
    assert!(rescale_events(&server).is_empty(), "a dry run recorded an Event");
    runtime.shutdown().await;
}

/// The HPA's `ScalingActive` condition.
fn scaling_active(server: &ApiServer) -> serde_json::Value {
    hpa_status(server)["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|condition| condition["type"] == "ScalingActive")
        .cloned()
        .unwrap_or_default()
}

fn warnings(server: &ApiServer, reason: &str) -> Vec<serde_json::Value> {
    server
        .store()
        .list(
            &ResourceId::new("events.k8s.io", "v1", "events"),
            &Filter::default(),
            &ListOptions::default(),
        )
        .unwrap()
        .items
        .iter()
        .map(|event| event.value.clone())
        .filter(|event| event["reason"] == reason && event["type"] == "Warning")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_metrics_the_controller_says_so_in_the_hpa_and_scales_nothing() {
    // metrics-server down: the metrics API answers 503.
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(&granted_manifest()));
    let (server, client) = quiet().await;
    set_load(&server, 240);
    server.metrics().set_available(false);
    let before = replicas(&server);
    let runtime = Runtime::start(client.clone(), RuntimeConfig::new(dir.path()))
        .await
        .unwrap();
    under_load(&server, 240, "ScalingActive False", || {
        scaling_active(&server)["status"] == "False"
    })
    .await;
    let condition = scaling_active(&server);
    assert_eq!(condition["reason"], "FailedGetResourceMetric", "{condition:#}");
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("unable to get metrics for resource cpu"),
        "{condition:#}"
    );
    assert_eq!(
        warnings(&server, "FailedGetResourceMetric").len(),
        1,
        "one Event per failure, not per sync"
    );
    assert_eq!(replicas(&server).0, before.0, "scaled without metrics");
    assert_eq!(hpa_status(&server)["desiredReplicas"], before.0);

    // metrics-server back: the same controller scales.
    server.metrics().set_available(true);
    // The scale and the HPA's status are two writes: the condition may
    // follow the scale a moment later.
    under_load(
        &server,
        240,
        "a scale-up and ScalingActive True once metrics are back",
        || replicas(&server).0 >= 4 && scaling_active(&server)["status"] == "True",
    )
    .await;
    runtime.shutdown().await;

    // Without the read grant, the metrics are denied by the host: the same report.
    let dir = tempfile::tempdir().unwrap();
    let manifest = granted_manifest().replace(
        "[[grant.read]]\nresources = [\"metrics.k8s.io/v1beta1/PodMetrics\"]\n",
        "",
    );
    assert!(!manifest.contains("grant.read"));
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(&manifest));
    let (server, client) = quiet().await;
    let before = replicas(&server);
    let runtime = Runtime::start(client, RuntimeConfig::new(dir.path())).await.unwrap();
    under_load(&server, 240, "ScalingActive False without a read grant", || {
        scaling_active(&server)["status"] == "False"
    })
    .await;
    let message = scaling_active(&server)["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains("not granted") || message.contains("grant"),
        "{message}"
    );
    assert_eq!(replicas(&server).0, before.0);
    runtime.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_metrics_name_no_ready_pod_the_controller_says_so_as_kube_controller_manager_does() {
    // The metrics API answers, but for none of the deployment's pods.
    let dir = tempfile::tempdir().unwrap();
    install(dir.path(), "hpa", "hpa-controller.wasm", Some(&granted_manifest()));
    let (server, client) = quiet().await;
    set_load(&server, 100);
    let runtime = Runtime::start(client, RuntimeConfig::new(dir.path())).await.unwrap();
    under_load(&server, 100, "ScalingActive True with metrics", || {
        scaling_active(&server)["reason"] == "ValidMetricFound"
    })
    .await;
    let before = replicas(&server);
    for pod in pods(&server) {
        server
            .metrics()
            .forget_pod("ns-0", pod["metadata"]["name"].as_str().unwrap());
    }
    until("ScalingActive False", Duration::from_secs(60), || {
        scaling_active(&server)["status"] == "False"
    })
    .await;
    let condition = scaling_active(&server);
    assert_eq!(condition["reason"], "FailedGetResourceMetric", "{condition:#}");
    assert_eq!(
        condition["message"],
        "the HPA was unable to compute the replica count: failed to get cpu utilization: \
         did not receive metrics for any ready pods",
        "{condition:#}"
    );
    assert!(
        hpa_status(&server)["currentMetrics"].is_null(),
        "{:#}",
        hpa_status(&server)
    );
    assert_eq!(warnings(&server, "FailedGetResourceMetric").len(), 1);
    assert_eq!(replicas(&server).0, before.0, "scaled without metrics");
    runtime.shutdown().await;
}
