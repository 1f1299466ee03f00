//! `metrics.k8s.io` as metrics-server serves it, read by the real kube-rs client.

use std::time::Duration;

use apiserver_sim::store::{ResourceId, WriteOptions};
use apiserver_sim::{ApiServer, SimConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, PostParams, WatchParams};
use kube::core::Status;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::time::timeout;

const MI: u64 = 1024 * 1024;

async fn start() -> (ApiServer, Client) {
    let server = ApiServer::start(SimConfig::default().pod_start_delay(Duration::from_millis(20)))
        .await
        .expect("the server binds a loopback port");
    let client = Client::try_from(server.client_config()).expect("a client for the server");
    (server, client)
}

fn metrics_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn pod_metrics(client: &Client, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &metrics_resource("PodMetrics", "pods"))
}

fn node_metrics(client: &Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &metrics_resource("NodeMetrics", "nodes"))
}

fn api_error(error: kube::Error) -> Box<Status> {
    match error {
        kube::Error::Api(status) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A pod written as the scheduler and kubelet leave it: on `node`, Running.
fn running_pod(server: &ApiServer, namespace: &str, name: &str, node: &str, app: &str) {
    let pods = ResourceId::new("", "v1", "pods");
    let store = server.store();
    store
        .create(
            &pods,
            Some(namespace),
            json!({"metadata": {"name": name, "labels": {"app": app}},
                   "spec": {"nodeName": node, "containers": [{"name": "app", "image": "app:1"}]}}),
        )
        .expect("the store takes the pod");
    store
        .transaction(WriteOptions::default())
        .update(
            &pods,
            Some(namespace),
            name,
            json!({"status": {"phase": "Running"}}),
            true,
        )
        .expect("the store takes the pod's status");
}

fn node(server: &ApiServer, name: &str, zone: &str) {
    server
        .store()
        .create(
            &ResourceId::new("", "v1", "nodes"),
            None,
            json!({"metadata": {"name": name, "labels": {"zone": zone}}}),
        )
        .expect("the store takes the node");
}

/// The millicores a CPU quantity rounds up to, as `kubectl top` and the HPA
/// controller read it (`MilliValue`).
fn millicores(quantity: &Value) -> u64 {
    let text = quantity.as_str().expect("a quantity string");
    let (number, per_milli) = if let Some(n) = text.strip_suffix('n') {
        (n, 1_000_000)
    } else if let Some(m) = text.strip_suffix('m') {
        (m, 1)
    } else {
        panic!("unexpected cpu quantity {text}");
    };
    number.parse::<u64>().expect("a number").div_ceil(per_milli)
}

#[tokio::test]
async fn pod_metrics_list_by_label_and_get_carry_the_usage_set() {
    let (server, client) = start().await;
    running_pod(&server, "default", "web-a", "node-a", "web");
    running_pod(&server, "default", "web-b", "node-b", "web");
    running_pod(&server, "default", "db-a", "node-a", "db");
    let metrics = server.metrics();
    metrics.set_pod_cpu("default", "web-a", 120);
    metrics.set_pod_cpu("default", "web-b", 80);
    metrics.set_pod_cpu("default", "db-a", 300);
    metrics.set_pod_memory("default", "web-a", 64 * MI + 12 * 1024);

    let api = pod_metrics(&client, "default");
    let web = api.list(&ListParams::default().labels("app=web")).await.unwrap();
    let names: Vec<String> = web.items.iter().map(ResourceExt::name_any).collect();
    assert_eq!(names, ["web-a", "web-b"]);
    let cpu: Vec<u64> = web
        .items
        .iter()
        .map(|item| millicores(&item.data["containers"][0]["usage"]["cpu"]))
        .collect();
    assert_eq!(cpu, [120, 80]);

    let one = api.get("web-a").await.unwrap();
    assert_eq!(one.types.as_ref().unwrap().kind, "PodMetrics");
    assert_eq!(one.labels()["app"], "web");
    assert_eq!(one.namespace().as_deref(), Some("default"));
    assert_eq!(one.data["window"], "15s");
    assert!(one.data["timestamp"].is_string(), "{one:?}");
    let usage = &one.data["containers"][0]["usage"];
    assert_eq!(one.data["containers"][0]["name"], "app");
    assert!(usage["cpu"].as_str().unwrap().ends_with('n'), "nanocores: {usage}");
    assert_eq!(usage["memory"], "65548Ki");

    let everywhere = Api::<DynamicObject>::all_with(client.clone(), &metrics_resource("PodMetrics", "pods"));
    assert_eq!(everywhere.list(&ListParams::default()).await.unwrap().items.len(), 3);
    let named = api
        .list(&ListParams::default().fields("metadata.name=db-a"))
        .await
        .unwrap();
    assert_eq!(named.items.len(), 1);
    assert_eq!(millicores(&named.items[0].data["containers"][0]["usage"]["cpu"]), 300);
}

#[tokio::test]
async fn a_pod_without_usage_or_not_running_has_no_metrics() {
    let (server, client) = start().await;
    running_pod(&server, "default", "measured", "node-a", "web");
    running_pod(&server, "default", "unmeasured", "node-a", "web");
    server.metrics().set_pod_cpu("default", "measured", 50);
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let pending: Pod = serde_json::from_value(
        json!({"metadata": {"name": "pending", "labels": {"app": "web"}}, "spec": {"containers": [{"name": "app"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &pending).await.unwrap();
    server.metrics().set_pod_cpu("default", "pending", 50);

    let api = pod_metrics(&client, "default");
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(names, ["measured"]);
    let unmeasured = api_error(api.get("unmeasured").await.unwrap_err());
    assert_eq!(
        (unmeasured.code, unmeasured.reason.as_str(), unmeasured.message.as_str()),
        (
            404,
            "NotFound",
            r#"podmetrics.metrics.k8s.io "default/unmeasured" not found"#
        )
    );
    assert_eq!(api_error(api.get("pending").await.unwrap_err()).code, 404);
    let missing = api_error(api.get("missing").await.unwrap_err());
    assert_eq!(missing.message, r#"pods "missing" not found"#);
}

#[tokio::test]
async fn node_metrics_add_the_nodes_pods_to_what_it_uses_itself() {
    let (server, client) = start().await;
    node(&server, "node-a", "east");
    node(&server, "node-b", "west");
    running_pod(&server, "default", "web-a", "node-a", "web");
    running_pod(&server, "kube-system", "web-b", "node-a", "web");
    server.metrics().set_pod_cpu("default", "web-a", 120);
    server.metrics().set_pod_cpu("kube-system", "web-b", 80);
    server.metrics().set_pod_memory("default", "web-a", 64 * MI);
    server.metrics().set_pod_memory("kube-system", "web-b", 64 * MI);

    let api = node_metrics(&client);
    let all = api.list(&ListParams::default()).await.unwrap();
    let usage: Vec<(String, u64, Value)> = all
        .items
        .iter()
        .map(|node| {
            (
                node.name_any(),
                millicores(&node.data["usage"]["cpu"]),
                node.data["usage"]["memory"].clone(),
            )
        })
        .collect();
    assert_eq!(
        usage,
        [
            ("node-a".to_owned(), 100 + 120 + 80, json!("640Mi")),
            ("node-b".to_owned(), 100, json!("512Mi")),
        ]
    );
    let west = api.list(&ListParams::default().labels("zone=west")).await.unwrap();
    assert_eq!(west.items.len(), 1);
    assert_eq!(
        west.items[0].data["kind"],
        json!(null),
        "kind is in the types: {west:?}"
    );
    assert_eq!(api.get("node-b").await.unwrap().types.unwrap().kind, "NodeMetrics");
    let missing = api_error(api.get("node-z").await.unwrap_err());
    assert_eq!(
        (missing.code, missing.message.as_str()),
        (404, r#"node "node-z" not found"#)
    );
}

#[tokio::test]
async fn watching_or_writing_metrics_is_refused_with_405() {
    let (_server, client) = start().await;
    let api = pod_metrics(&client, "default");
    let refused = match api.watch(&WatchParams::default(), "0").await {
        Ok(_) => panic!("a metrics watch was accepted"),
        Err(error) => api_error(error),
    };
    assert_eq!(
        (refused.code, refused.reason.as_str(), refused.message.as_str()),
        (
            405,
            "MethodNotAllowed",
            r#"watch is not supported on resources of kind "pods.metrics.k8s.io""#
        )
    );
    let nodes = match node_metrics(&client).watch(&WatchParams::default(), "0").await {
        Ok(_) => panic!("a metrics watch was accepted"),
        Err(error) => api_error(error),
    };
    assert_eq!(nodes.code, 405);

    let write = api
        .delete("web-a", &DeleteParams::default())
        .await
        .map(drop)
        .unwrap_err();
    let write = api_error(write);
    assert_eq!(
        (write.code, write.reason.as_str(), write.message.as_str()),
        (
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource"
        )
    );
    let request = axum::http::Request::post("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods")
        .header("content-type", "application/json")
        .body(br#"{"metadata": {"name": "x"}}"#.to_vec())
        .unwrap();
    let created = client.request_text(request).await.unwrap_err();
    assert_eq!(api_error(created).code, 405);
}

#[tokio::test]
async fn while_metrics_server_is_down_the_group_version_answers_503() {
    let (server, _) = start().await;
    // kube-rs retries a 503 by default, for up to 15 rounds of backoff: a
    // client that reads metrics should not wait that long for an outage.
    let mut config = server.client_config();
    config.default_retry = false;
    let client = Client::try_from(config).unwrap();
    running_pod(&server, "default", "web-a", "node-a", "web");
    server.metrics().set_pod_cpu("default", "web-a", 120);
    let api = pod_metrics(&client, "default");

    server.metrics().set_available(false);
    let down = api_error(api.list(&ListParams::default()).await.unwrap_err());
    assert_eq!(
        (down.code, down.message.as_str()),
        (503, "service unavailable"),
        "the aggregator's plain-text answer"
    );
    assert_eq!(api_error(api.get("web-a").await.unwrap_err()).code, 503);
    let discovery = client.list_api_group_resources("metrics.k8s.io/v1beta1").await;
    assert_eq!(api_error(discovery.unwrap_err()).code, 503);
    let groups = client.list_api_groups().await.unwrap();
    assert!(
        groups.groups.iter().any(|group| group.name == "metrics.k8s.io"),
        "the aggregator lists the group while it is down"
    );

    server.metrics().set_available(true);
    let back = api.get("web-a").await.unwrap();
    assert_eq!(millicores(&back.data["containers"][0]["usage"]["cpu"]), 120);
}

#[tokio::test]
async fn discovery_lists_pod_and_node_metrics_as_get_and_list_only() {
    let (_server, client) = start().await;
    let groups = client.list_api_groups().await.unwrap();
    let metrics = groups
        .groups
        .iter()
        .find(|group| group.name == "metrics.k8s.io")
        .expect("metrics.k8s.io in /apis");
    assert_eq!(
        metrics.preferred_version.as_ref().map(|v| v.group_version.as_str()),
        Some("metrics.k8s.io/v1beta1")
    );
    assert!(
        groups.groups.iter().any(|group| group.name == "apps"),
        "the other groups stay"
    );

    let resources = client.list_api_group_resources("metrics.k8s.io/v1beta1").await.unwrap();
    let entries: Vec<(&str, bool, &str, Vec<&str>)> = resources
        .resources
        .iter()
        .map(|r| {
            (
                r.name.as_str(),
                r.namespaced,
                r.kind.as_str(),
                r.verbs.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        entries,
        [
            ("nodes", false, "NodeMetrics", vec!["get", "list"]),
            ("pods", true, "PodMetrics", vec!["get", "list"]),
        ]
    );
    let discovery = kube::Discovery::new(client).run().await.unwrap();
    assert!(discovery.has_group("metrics.k8s.io") && discovery.has_group("apps"));
}

#[tokio::test]
async fn a_deployments_pods_get_usage_and_a_deleted_pod_loses_it() {
    let (server, client) = start().await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "app", "image": "app:1"}]}}}
    }))
    .unwrap();
    deployments.create(&PostParams::default(), &deployment).await.unwrap();
    let api = pod_metrics(&client, "default");
    let listed = timeout(Duration::from_secs(10), async {
        loop {
            let items = api.list(&ListParams::default().labels("app=web")).await.unwrap().items;
            if items.len() == 2 {
                return items;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the deployment's pods never started or never got usage");
    for item in &listed {
        let set = server.metrics().pod_cpu("default", &item.name_any()).unwrap();
        assert_eq!(millicores(&item.data["containers"][0]["usage"]["cpu"]), u64::from(set));
    }

    let pods: Api<Pod> = Api::default_namespaced(client);
    let gone = listed[0].name_any();
    pods.delete(&gone, &DeleteParams::default()).await.unwrap();
    assert_eq!(
        server.metrics().pod_usage("default", &gone),
        None,
        "usage outlived its pod"
    );
    for pod in pods.list(&ListParams::default()).await.unwrap() {
        assert!(
            pod.annotations()
                .keys()
                .all(|key| !key.starts_with("metrics.kinformer.dev")),
            "{pod:?} carries usage"
        );
    }
}
