//! Built-in objects defaulted as kube-apiserver defaults them, so clients whose models require those fields read them back.

use apiserver_sim::SimConfig;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::{from_json, kubectl, kubectl_run, pod_on, start};

#[tokio::test]
async fn pods_deployments_services_and_namespaces_read_back_defaulted() {
    let (_server, client) = start(SimConfig::default().controllers(false)).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pod_on(&pods, "web", None).await;
    let spec = pods.get("web").await.unwrap().spec.unwrap();
    assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
    assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
    assert_eq!(spec.termination_grace_period_seconds, Some(30));
    assert_eq!(spec.service_account_name.as_deref(), Some("default"));
    assert!(spec.security_context.is_some());
    assert_eq!(spec.tolerations.unwrap().len(), 2);
    let container = &spec.containers[0];
    assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(
        container.termination_message_path.as_deref(),
        Some("/dev/termination-log")
    );

    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let deployment: Deployment = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "app"}]}}}
    }));
    let created = deployments.create(&PostParams::default(), &deployment).await.unwrap();
    let spec = created.spec;
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    assert_eq!(spec.progress_deadline_seconds, Some(600));
    assert_eq!(spec.strategy.unwrap().type_.as_deref(), Some("RollingUpdate"));
    let template = spec.template.spec.unwrap();
    assert_eq!(template.containers[0].image_pull_policy.as_deref(), Some("Always"));
    assert_eq!(
        template.service_account_name, None,
        "only Pods get the admission's service account"
    );

    let services: Api<Service> = Api::default_namespaced(client.clone());
    let service: Service = from_json(json!({"metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}));
    let created = services.create(&PostParams::default(), &service).await.unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(
        spec.cluster_ip.as_deref(),
        Some("10.96.0.2"),
        "the first free address after the API server's"
    );
    let port = &spec.ports.unwrap()[0];
    assert_eq!(port.protocol.as_deref(), Some("TCP"));
    assert_eq!(
        port.target_port,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(80))
    );
    assert!(created.status.unwrap().load_balancer.is_some());

    let namespaces: Api<Namespace> = Api::all(client);
    let created = namespaces
        .create(
            &PostParams::default(),
            &from_json(json!({"metadata": {"name": "team"}})),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.labels.unwrap()["kubernetes.io/metadata.name"], "team");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_debug_adds_an_ephemeral_container_to_a_defaulted_pod() {
    if kubectl().is_none() {
        return;
    }
    let (server, client) = start(SimConfig::default().controllers(false)).await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pod_on(&pods, "web", Some("node-0")).await;
    let dir = tempfile::tempdir().unwrap();
    let debugged = kubectl_run(
        &server,
        dir.path(),
        &[
            "debug",
            "web",
            "--image=busybox",
            "--container=debugger",
            "--attach=false",
        ],
    )
    .await;
    assert!(debugged.is_empty() || debugged.contains("debugger"), "{debugged}");
    let spec = pods.get("web").await.unwrap().spec.unwrap();
    let ephemeral = spec.ephemeral_containers.expect("the ephemeral container was added");
    assert_eq!(ephemeral[0].name, "debugger");
    assert_eq!(ephemeral[0].image_pull_policy.as_deref(), Some("Always"));
}
