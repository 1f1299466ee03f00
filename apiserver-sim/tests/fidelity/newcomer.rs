//! What a newcomer's kubectl tries in the first minutes: paging past 500 rows, the health endpoints, the groups Helm charts use, access reviews, rollouts and their history, and the objects every namespace holds.

use std::time::Duration;

use apiserver_sim::store::ResourceId;
use apiserver_sim::workload::Workload;
use apiserver_sim::{ApiServer, SimConfig};
use k8s_openapi::api::authorization::v1::SubjectAccessReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, PostParams};
use serde_json::json;

use crate::support::{api_error, from_json, kubectl, kubectl_run, raw, start};

fn lines(table: &str) -> usize {
    table.lines().filter(|line| !line.trim().is_empty()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_pages_tables_past_500_rows() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default().controllers(false)).await;
    let configmaps = ResourceId::new("", "v1", "configmaps");
    for index in 0..510 {
        server
            .store()
            .create(
                &configmaps,
                Some("default"),
                json!({"metadata": {"name": format!("settings-{index:03}")}}),
            )
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let table = kubectl_run(&server, dir.path(), &["get", "cm", "--no-headers"]).await;
    assert_eq!(lines(&table), 510, "{table}");
    let chunked = kubectl_run(&server, dir.path(), &["get", "cm", "--chunk-size=100", "--no-headers"]).await;
    assert_eq!(lines(&chunked), 510);
    let pdbs = ResourceId::new("policy", "v1", "poddisruptionbudgets");
    let services = ResourceId::new("", "v1", "services");
    for index in 0..505 {
        let name = format!("web-{index:03}");
        let selector = json!({"matchLabels": {"app": name}});
        server
            .store()
            .create(
                &pdbs,
                Some("default"),
                json!({"metadata": {"name": name}, "spec": {"minAvailable": 1, "selector": selector}}),
            )
            .unwrap();
        server
            .store()
            .create(
                &services,
                Some("default"),
                json!({"metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}),
            )
            .unwrap();
    }
    let all = kubectl_run(&server, dir.path(), &["get", "all,pdb", "-A", "--no-headers"]).await;
    // 505 Services, the `kubernetes` Service and 505 budgets.
    assert_eq!(lines(&all), 1011, "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_endpoints_and_metrics_answer_as_kube_apiservers() {
    if kubectl().is_none() {
        return;
    }
    let (server, _client) = start(SimConfig::default().controllers(false)).await;
    let dir = tempfile::tempdir().unwrap();
    for endpoint in ["/healthz", "/livez", "/readyz", "/livez/ping"] {
        assert_eq!(
            kubectl_run(&server, dir.path(), &["get", "--raw", endpoint]).await,
            "ok"
        );
    }
    let verbose = kubectl_run(&server, dir.path(), &["get", "--raw", "/readyz?verbose"]).await;
    assert!(verbose.starts_with("[+]ping ok\n"), "{verbose}");
    assert!(verbose.ends_with("readyz check passed\n"), "{verbose}");
    let metrics = kubectl_run(&server, dir.path(), &["get", "--raw", "/metrics"]).await;
    assert!(
        metrics.contains("apiserver_storage_objects{resource=\"namespaces\"} 4"),
        "{metrics}"
    );
    assert!(metrics.contains("apiserver_request_total{code=\"200\""), "{metrics}");
    let missing = raw(&server, "GET", "/livez/nothing", "application/json", "").await;
    assert_eq!(missing.code, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_helm_charts_use_are_served_and_access_reviews_answer() {
    if kubectl().is_none() {
        return;
    }
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let dir = tempfile::tempdir().unwrap();
    let resources = kubectl_run(&server, dir.path(), &["api-resources", "--no-headers"]).await;
    for resource in [
        "replicationcontrollers",
        "podtemplates",
        "controllerrevisions",
        "poddisruptionbudgets",
        "validatingwebhookconfigurations",
        "mutatingwebhookconfigurations",
        "runtimeclasses",
        "flowschemas",
        "prioritylevelconfigurations",
        "csidrivers",
        "subjectaccessreviews",
        "selfsubjectrulesreviews",
    ] {
        assert!(
            resources.lines().any(|line| line.starts_with(&format!("{resource} "))),
            "{resource} is not served:\n{resources}"
        );
    }
    let hpa = kubectl_run(&server, dir.path(), &["get", "--raw", "/apis/autoscaling"]).await;
    let hpa: serde_json::Value = serde_json::from_str(&hpa).unwrap();
    assert_eq!(hpa["preferredVersion"]["version"], "v2", "{hpa}");
    assert_eq!(hpa["versions"][1]["version"], "v1", "{hpa}");

    let rules = kubectl_run(&server, dir.path(), &["auth", "can-i", "--list"]).await;
    assert!(rules.lines().any(|line| line.starts_with("*.*")), "{rules}");
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let review = |spec: serde_json::Value| -> SubjectAccessReview { from_json(json!({"spec": spec})) };
    let get_pods = json!({"namespace": "default", "verb": "get", "resource": "pods"});
    let jane = review(json!({"user": "jane", "resourceAttributes": get_pods}));
    let answered = reviews.create(&PostParams::default(), &jane).await.unwrap();
    assert!(!answered.status.unwrap().allowed, "no binding names jane");
    let admin = review(json!({"user": "jane", "groups": ["system:masters"], "resourceAttributes": get_pods}));
    let answered = reviews.create(&PostParams::default(), &admin).await.unwrap();
    assert!(answered.status.unwrap().allowed);
}

/// A Ready pod labelled `app: web`, as the kubelet reports one.
async fn ready_pod(server: &ApiServer, name: &str) {
    let pods = ResourceId::new("", "v1", "pods");
    server
        .store()
        .create(
            &pods,
            Some("default"),
            json!({"metadata": {"name": name, "labels": {"app": "web"}},
                   "spec": {"nodeName": "node-0", "containers": [{"name": "app", "image": "app:1"}]}}),
        )
        .expect("the store takes the pod");
    server
        .store()
        .update(
            &pods,
            Some("default"),
            name,
            json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}),
            true,
        )
        .expect("the store takes the pod's status");
}

#[tokio::test]
async fn a_disruption_budget_counts_its_pods_and_refuses_an_eviction_past_it() {
    let (server, client) = start(SimConfig::default()).await;
    ready_pod(&server, "web-a").await;
    ready_pod(&server, "web-b").await;
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client.clone());
    let budget: PodDisruptionBudget = from_json(json!({"metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}));
    budgets.create(&PostParams::default(), &budget).await.unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client);
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let status = budgets.get("web").await.unwrap().status;
            if status.is_some_and(|status| status.disruptions_allowed == Some(1)) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the disruption controller never wrote the budget's status");
    pods.evict("web-a", &EvictParams::default()).await.unwrap();
    // kube-rs retries a 429 for minutes: read the answer off the wire.
    let refused = raw(
        &server,
        "POST",
        "/api/v1/namespaces/default/pods/web-b/eviction",
        "application/json",
        r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-b"}}"#,
    )
    .await;
    assert_eq!(refused.code, 429, "{}", refused.body);
    let refused = refused.json();
    assert_eq!(
        refused["message"],
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    assert_eq!(refused["details"]["causes"][0]["reason"], "DisruptionBudget");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployments_revisions_are_rolled_back_and_its_controllers_write_events() {
    if kubectl().is_none() {
        return;
    }
    let server = ApiServer::start(SimConfig::default().pod_start_delay(Duration::from_millis(20)))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    kubectl_run(
        &server,
        path,
        &["create", "deployment", "web", "--image=app:1", "--replicas=2"],
    )
    .await;
    let wait = ["rollout", "status", "deployment/web", "--timeout=30s"];
    kubectl_run(&server, path, &wait).await;
    kubectl_run(&server, path, &["set", "image", "deployment/web", "app=app:2"]).await;
    kubectl_run(&server, path, &wait).await;
    let history = kubectl_run(&server, path, &["rollout", "history", "deployment/web"]).await;
    let revisions: Vec<&str> = history
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|first| first.parse::<u32>().is_ok())
        .collect();
    assert_eq!(revisions, ["1", "2"], "{history}");
    kubectl_run(&server, path, &["rollout", "undo", "deployment/web", "--to-revision=1"]).await;
    kubectl_run(&server, path, &wait).await;
    let image = kubectl_run(
        &server,
        path,
        &["get", "deployment", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision}"],
    )
    .await;
    assert_eq!(image, "app:1 3");
    let events = kubectl_run(&server, path, &["get", "events", "--no-headers"]).await;
    assert!(events.contains("ScalingReplicaSet"), "{events}");
    assert!(events.contains("SuccessfulCreate"), "{events}");
}

#[tokio::test]
async fn every_namespace_gets_its_service_account_and_ca_bundle_and_nodes_their_leases() {
    let (server, client) = start(SimConfig::default()).await;
    let _churn = server
        .start_workload(&Workload::default().size(1, 1, 1).changes_per_second(0.0))
        .unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "ns-0");
    assert!(accounts.get("default").await.is_ok());
    let bundles: Api<ConfigMap> = Api::namespaced(client.clone(), "ns-0");
    let bundle = bundles.get("kube-root-ca.crt").await.unwrap();
    assert!(bundle.data.unwrap()["ca.crt"].starts_with("-----BEGIN CERTIFICATE-----"));
    let namespaces: Api<Namespace> = Api::all(client.clone());
    // A namespace the controllers see created gets them too, a moment later.
    namespaces
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "team"}})),
        )
        .await
        .unwrap();
    let team: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    tokio::time::timeout(Duration::from_secs(10), async {
        while team.get("default").await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the service account controller never created team/default");
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = leases.get("node-3").await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("node-3"));
    let nodes: Api<Node> = Api::all(client);
    let status = nodes.get("node-3").await.unwrap().status.unwrap();
    let addresses: Vec<String> = status
        .addresses
        .unwrap()
        .into_iter()
        .map(|address| format!("{}={}", address.type_, address.address))
        .collect();
    assert_eq!(addresses, ["InternalIP=192.168.0.13", "Hostname=node-3"]);
    assert_eq!(status.node_info.unwrap().kube_proxy_version, "");
}

#[tokio::test]
async fn a_deleted_namespace_is_terminating_until_its_contents_and_finalizers_are_gone() {
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace: Namespace = from_json(json!({"metadata": {"name": "team", "finalizers": ["example.com/hold"]}}));
    namespaces.create(&PostParams::default(), &namespace).await.unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    configmaps
        .create(&PostParams::default(), &from_json(json!({"metadata": {"name": "x"}})))
        .await
        .unwrap();
    let answer = namespaces.delete("team", &DeleteParams::default()).await.unwrap();
    let terminating = answer.left().expect("a namespace's delete answers the namespace");
    assert_eq!(terminating.status.unwrap().phase.as_deref(), Some("Terminating"));
    assert!(configmaps.list(&ListParams::default()).await.unwrap().items.is_empty());
    let refused = configmaps
        .create(&PostParams::default(), &from_json(json!({"metadata": {"name": "y"}})))
        .await
        .unwrap_err();
    let refused = api_error(refused);
    assert_eq!(refused.code, 403);
    assert!(
        refused.message.contains("because it is being terminated"),
        "{}",
        refused.message
    );
    let held = namespaces.get("team").await.unwrap();
    assert_eq!(
        held.spec.unwrap().finalizers,
        None,
        "the namespace controller finalized it"
    );
    namespaces
        .patch(
            "team",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert_eq!(
        api_error(namespaces.get("team").await.unwrap_err()).code,
        404,
        "the namespace went with its last finalizer"
    );
}
