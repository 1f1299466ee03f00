//! kubectl's typed `create` commands, which send their object in protobuf: configuration, RBAC, tokens, and the workloads and Services of its generators.

use apiserver_sim::SimConfig;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;

use crate::support::{kubectl, kubectl_run, start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_objects_it_sends_in_protobuf() {
    if kubectl().is_none() {
        return;
    }
    let (server, client) = start(SimConfig::default()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    for command in [
        "create configmap settings --from-literal=mode=fast",
        "create secret generic login --from-literal=password=hunter2",
        "create namespace team",
        "create serviceaccount builder",
        "create role reader --verb=get,list --resource=configmaps",
        "create rolebinding reader --role=reader --serviceaccount=default:builder",
    ] {
        let args: Vec<&str> = command.split(' ').collect();
        let created = kubectl_run(&server, path, &args).await;
        assert!(created.contains("created"), "{command}: {created}");
    }
    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    assert_eq!(configmaps.get("settings").await.unwrap().data.unwrap()["mode"], "fast");
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let login = secrets.get("login").await.unwrap();
    assert_eq!(login.type_.as_deref(), Some("Opaque"));
    assert_eq!(login.data.unwrap()["password"].0, b"hunter2");
    let roles: Api<Role> = Api::default_namespaced(client.clone());
    assert_eq!(
        roles.get("reader").await.unwrap().rules.unwrap()[0].verbs,
        ["get", "list"]
    );
    let bindings: Api<RoleBinding> = Api::default_namespaced(client.clone());
    let subjects = bindings.get("reader").await.unwrap().subjects.unwrap();
    assert_eq!(
        (subjects[0].kind.as_str(), subjects[0].name.as_str()),
        ("ServiceAccount", "builder")
    );

    let token = kubectl_run(&server, path, &["create", "token", "builder"]).await;
    assert_eq!(token.trim().split('.').count(), 3, "{token}");

    // The workloads and Services of kubectl's generators.
    for command in [
        "create deployment web --image=registry.example/web:1.0 --port=8080 --replicas=2",
        "create service clusterip web --tcp=80:8080",
        "create job migrate --image=registry.example/migrate:1.0 -- ./migrate --all",
        "create cronjob nightly --image=registry.example/backup:1.0 --schedule=0_3_*_*_*",
    ] {
        let args: Vec<String> = command.split(' ').map(|arg| arg.replace('_', " ")).collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let created = kubectl_run(&server, path, &args).await;
        assert!(created.contains("created"), "{command}: {created}");
    }
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let web = deployments.get("web").await.unwrap().spec;
    assert_eq!(web.replicas, Some(2));
    let container = &web.template.spec.unwrap().containers[0];
    assert_eq!(container.image.as_deref(), Some("registry.example/web:1.0"));
    assert_eq!(container.ports.as_ref().unwrap()[0].container_port, 8080);
    let services: Api<Service> = Api::default_namespaced(client.clone());
    let port = services.get("web").await.unwrap().spec.unwrap().ports.unwrap()[0].clone();
    assert_eq!((port.name.as_deref(), port.port), (Some("80-8080"), 80));
    assert_eq!(port.target_port, Some(IntOrString::Int(8080)));
    let jobs: Api<Job> = Api::default_namespaced(client);
    let migrate = jobs.get("migrate").await.unwrap().spec.unwrap().template.spec.unwrap();
    assert_eq!(
        migrate.containers[0].command.as_deref(),
        Some(&["./migrate".to_owned(), "--all".to_owned()][..])
    );
    assert_eq!(migrate.restart_policy.as_deref(), Some("Never"));
}
