//! Aggregated discovery (`apidiscovery.k8s.io/v2`) beside the legacy documents, and the APIServices of the served groups.

use std::collections::BTreeSet;

use apiserver_sim::SimConfig;
use kube::api::{Api, DynamicObject, GroupVersionKind};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use serde_json::json;

use crate::support::{kubectl, kubectl_run, raw, start};

/// What discovery says of every resource, in a form two runs can be compared in.
fn described(discovery: &Discovery) -> BTreeSet<String> {
    let describe = |resource: &ApiResource, caps: &ApiCapabilities| {
        let scope = if caps.scope == Scope::Namespaced {
            "ns"
        } else {
            "cluster"
        };
        let mut operations = caps.operations.clone();
        operations.sort();
        let mut subresources: Vec<String> = caps
            .subresources
            .iter()
            .map(|(sub, caps)| format!("{}:{}:{}", sub.plural, sub.kind, caps.operations.join("+")))
            .collect();
        subresources.sort();
        format!(
            "{} {} {scope} [{}] [{}]",
            resource.api_version,
            resource.plural,
            operations.join(","),
            subresources.join(",")
        )
    };
    discovery
        .groups()
        .flat_map(|group| {
            group
                .versions()
                .flat_map(|version| group.versioned_resources(version))
                .collect::<Vec<_>>()
        })
        .map(|(resource, caps)| describe(&resource, &caps))
        .collect()
}

const AGGREGATED: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

#[tokio::test]
async fn aggregated_discovery_says_what_the_legacy_documents_say() {
    let (_server, client) = start(SimConfig::default()).await;
    let legacy = Discovery::new(client.clone()).run().await.unwrap();
    let aggregated = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("the server answers aggregated discovery");
    assert_eq!(described(&aggregated), described(&legacy));
    let groups: Vec<&str> = aggregated.groups().map(|group| group.name()).collect();
    for group in ["", "apps", "apiregistration.k8s.io", "metrics.k8s.io"] {
        assert!(groups.contains(&group), "{group:?} missing from {groups:?}");
    }
    let (deployments, caps) = aggregated
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .expect("deployments are discovered");
    assert_eq!(deployments.plural, "deployments");
    let scale = caps
        .subresources
        .iter()
        .find(|(sub, _)| sub.plural == "scale")
        .expect("the scale subresource is listed");
    assert_eq!(scale.0.kind, "Scale");
}

#[tokio::test]
async fn aggregated_discovery_is_labelled_and_shaped_as_the_api_server_sends_it() {
    let (server, _client) = start(SimConfig::default()).await;
    // kubectl asks for protobuf first; the JSON entry after it is answered.
    let accept = format!(
        "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,{AGGREGATED},application/json"
    );
    let core = raw(&server, "GET", "/api", &accept, "").await;
    assert_eq!(core.code, 200);
    assert_eq!(core.header("content-type"), Some(AGGREGATED));
    let core = core.json();
    assert_eq!(core["kind"], "APIGroupDiscoveryList");
    assert_eq!(core["apiVersion"], "apidiscovery.k8s.io/v2");
    let v1 = &core["items"][0]["versions"][0];
    assert_eq!(v1["version"], "v1");
    assert_eq!(v1["freshness"], "Current");
    let pods = v1["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|resource| resource["resource"] == "pods")
        .expect("pods are listed");
    assert_eq!(pods["scope"], "Namespaced");
    assert_eq!(pods["singularResource"], "pod");
    assert_eq!(pods["shortNames"], json!(["po"]));
    assert_eq!(
        pods["responseKind"],
        json!({"group": "", "version": "v1", "kind": "Pod"})
    );
    assert!(
        pods["subresources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|sub| sub["subresource"] == "status"),
        "{pods}"
    );

    // A client that asks for the legacy document still gets it.
    let legacy = raw(&server, "GET", "/apis", "application/json", "").await;
    assert_eq!(legacy.header("content-type"), Some("application/json"));
    assert_eq!(legacy.json()["kind"], "APIGroupList");
    // And an older version of the aggregated form is passed over for it.
    let older = raw(
        &server,
        "GET",
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
        "",
    )
    .await;
    assert_eq!(older.json()["kind"], "APIGroupList");
}

#[tokio::test]
async fn api_services_list_the_served_group_versions() {
    let (_server, client) = start(SimConfig::default()).await;
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService"),
        "apiservices",
    );
    let services: Api<DynamicObject> = Api::all_with(client, &resource);
    let apps = services.get("v1.apps").await.unwrap();
    assert_eq!(apps.data["spec"]["group"], "apps");
    assert_eq!(apps.data["status"]["conditions"][0]["type"], "Available");
    let metrics = services.get("v1beta1.metrics.k8s.io").await.unwrap();
    assert_eq!(metrics.data["spec"]["service"]["name"], "metrics-server");
    let names: Vec<String> = services
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|service| service.metadata.name)
        .collect();
    assert!(names.contains(&"v1.".to_owned()), "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_discovers_every_group_in_two_requests() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let before = server.stats().requests;
    let resources = kubectl_run(&server, dir.path(), &["api-resources", "--no-headers"]).await;
    let requests = server.stats().requests - before;
    // `/api` and `/apis`, and `/version` when kubectl is a dispatcher that
    // picks the kubectl of the server's minor version; without aggregated
    // discovery it would ask each group version too.
    assert!(
        requests <= 3,
        "kubectl needed {requests} requests: aggregated discovery was not used"
    );
    let line = resources
        .lines()
        .find(|line| line.starts_with("apiservices "))
        .unwrap_or_else(|| panic!("no apiservices in:\n{resources}"));
    assert!(
        line.contains("apiregistration.k8s.io/v1") && line.contains("APIService"),
        "{line}"
    );
    assert!(
        resources.lines().any(|line| line.starts_with("deployments ")),
        "{resources}"
    );
}

#[tokio::test]
async fn every_resource_discovery_says_lists_answers_a_list() {
    let (_server, client) = start(SimConfig::default()).await;
    let discovery = Discovery::new(client.clone()).run_aggregated().await.unwrap();
    let mut listed = 0;
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            api.list(&Default::default())
                .await
                .unwrap_or_else(|error| panic!("{} {} is not listed: {error}", resource.api_version, resource.plural));
            listed += 1;
        }
    }
    assert!(listed > 25, "only {listed} resources were discovered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_all_lists_the_resources_of_the_all_category() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default()).await;
    let pods = raw(&server, "GET", "/api", AGGREGATED, "").await.json();
    let categories = pods["items"][0]["versions"][0]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|resource| resource["resource"] == "pods")
        .map(|pods| pods["categories"].clone());
    assert_eq!(categories, Some(json!(["all"])));

    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("job.json");
    let job = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate"},
                     "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "m:1"}]}}}});
    std::fs::write(&manifest, job.to_string()).unwrap();
    kubectl_run(
        &server,
        dir.path(),
        &["create", "--validate=false", "-f", manifest.to_str().unwrap()],
    )
    .await;
    let all = kubectl_run(&server, dir.path(), &["get", "all", "-o", "name"]).await;
    let names: Vec<&str> = all.lines().collect();
    assert_eq!(names, ["service/kubernetes", "job.batch/migrate"], "{all}");
}
